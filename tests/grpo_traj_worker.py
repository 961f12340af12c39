"""Worker for tests/test_scale_out.py::test_grpo_fsdp_trajectory_equals_one_process: 4 GRPO optimizer steps (AdamW,
clipped surrogate + k3 KL to a frozen reference model) on a fixed sequence of minibatches, at world size 1 (plain
python) or 2 (torchrun: policy AND reference sharded with FSDP2, each rank half of every minibatch).
Writes OUT (JSON) on rank 0: per step the global loss, KL sum and gradient norm, and the final parameters' checksum."""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nanbeige41.distributed import all_reduce_sum, cleanup, full_state_dict, parallelize, setup  # noqa: E402
from nanbeige41.model import ModelConfig, Transformer  # noqa: E402
from test_grpo import TINY, _args, _samples  # noqa: E402
from train_grpo import policy_update  # noqa: E402


def main(out):
    world = setup("cpu")
    torch.manual_seed(0)
    model, ref = Transformer(ModelConfig(**TINY)), Transformer(ModelConfig(**TINY))
    ref.eval().requires_grad_(False)
    parallelize(model)
    parallelize(ref)  # the frozen reference is sharded too: no full replica per rank
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    args = _args(loss_agg="token-mean", micro_batch_tokens=16, kl_coef=0.1, grad_clip=1.0)
    steps = []
    for step in range(1, 5):
        samples = _samples(seed=step, n=8)[world.rank::world.world_size]
        stats, grad_norm = policy_update(model, ref, optimizer, samples, args, world)
        steps.append(dict(loss=all_reduce_sum(stats["loss"]), kl=all_reduce_sum(stats["kl"]), grad_norm=grad_norm))
    state = full_state_dict(model)
    if world.is_main:
        with open(out, "w") as f:
            json.dump(dict(steps=steps, params=[float(v.double().sum()) for v in state.values()]), f)


main(sys.argv[1])
cleanup()
