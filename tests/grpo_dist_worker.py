"""Worker for test_update_invariant_to_world_size: each of 2 ranks updates on half the samples of
the same minibatch through FSDP2 (gloo); rank 0 saves the resulting full parameters."""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nanbeige41.distributed import cleanup, full_state_dict, parallelize, setup  # noqa: E402
from nanbeige41.model import ModelConfig, Transformer  # noqa: E402
from test_grpo import TINY, _args, _samples  # noqa: E402
from train_grpo import policy_update  # noqa: E402


def main(out, agg):
    world = setup("cpu")
    torch.manual_seed(0)  # same construction order as test_grpo._update
    model = Transformer(ModelConfig(**TINY))
    ref = Transformer(ModelConfig(**TINY))
    parallelize(model)
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    samples = _samples()[world.rank::world.world_size]
    policy_update(model, ref, opt, samples, _args(loss_agg=agg, micro_batch_tokens=16, kl_coef=0.1), world)
    state = full_state_dict(model)
    if world.rank == 0:
        names = [n for n, _ in Transformer(ModelConfig(**TINY)).named_parameters()]
        torch.save(torch.cat([state[n].flatten() for n in names]), out)


# In a function, so the sharded model (which holds the process group) is freed before cleanup and
# not during interpreter shutdown, where gloo's threads can abort the process.
main(sys.argv[1], sys.argv[2])
cleanup()
