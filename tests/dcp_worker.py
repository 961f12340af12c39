"""Worker for tests/test_scale_out.py::test_dcp_*: plain `python` (1 process) or `torchrun --nproc_per_node 2`.

    dcp_worker.py run OUT      steps 1-4 of a tiny packed-SFT model (AdamW), a sharded (DCP) checkpoint after step 2,
                               a bf16 HF export at the end; OUT/losses.json
    dcp_worker.py resume OUT   load the newest checkpoint of OUT (written at any world size), steps 3-4;
                               OUT/resume_losses_{world}.json, and weights-only_losses_{world}.json: the same from
                               the weights alone with a fresh optimizer (the control)

Each step trains on the same global batch of 4 packed rows at any world size (each rank takes its rows; the loss is
divided by the global count of loss tokens), as train_sft.py does."""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from nanbeige41 import checkpoint as ckpt  # noqa: E402
from nanbeige41 import distributed as D  # noqa: E402
from nanbeige41.losses import chunked_cross_entropy  # noqa: E402
from nanbeige41.model import ModelConfig, Transformer  # noqa: E402

CONFIG = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, rope_theta=1e4, max_position_embeddings=64)
ROWS, T = 4, 32


def global_batch(step):
    g = torch.Generator().manual_seed(step)
    docs = [[12, 20], [32], [5, 9, 18], [16, 16]]
    positions = torch.tensor([[p for n in row for p in range(n)] for row in docs])
    return dict(input_ids=torch.randint(0, 64, (ROWS, T), generator=g), position_ids=positions,
                targets=torch.randint(0, 64, (ROWS, T), generator=g),
                loss_mask=(torch.rand(ROWS, T, generator=g) < 0.6).long())


def train_step(model, optimizer, step, world):
    batch = global_batch(step)
    per = ROWS // world.world_size
    mine = {k: v[world.rank * per:(world.rank + 1) * per] for k, v in batch.items()}
    n_global = int(batch["loss_mask"].sum())
    hidden = model(mine["input_ids"], mine["position_ids"], return_hidden=True)
    loss, _ = chunked_cross_entropy(hidden, model.lm_head.weight, mine["targets"], mine["loss_mask"], 16)
    (loss / n_global).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return D.all_reduce_sum(float(loss.detach())) / n_global


def build(world):
    config = ModelConfig(**CONFIG)
    with torch.device("meta"):
        model = Transformer(config)
    D.parallelize(model)
    model.to_empty(device="cpu")
    full = {}
    if world.rank == 0:
        torch.manual_seed(0)
        full = Transformer(config).state_dict()
    D.load_full_state_dict(model, full)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    return model, optimizer


def main(mode, out):
    world = D.setup("cpu")
    model, optimizer = build(world)
    if mode == "run":
        losses = [train_step(model, optimizer, s, world) for s in (1, 2)]
        ckpt.save_checkpoint(out, 2, model, optimizer, trainer_state=dict(world_size=world.world_size), sharded=True)
        losses += [train_step(model, optimizer, s, world) for s in (3, 4)]
        ckpt.save_hf(model, None, os.path.join(out, "hf_bf16"), dtype=torch.bfloat16)
        ckpt.save_hf(model, None, os.path.join(out, "hf_fp32"))
        results = {"losses.json": losses}
    else:
        state = ckpt.load_checkpoint(ckpt.latest_checkpoint(out), model, optimizer)
        assert state["step"] == 2, state
        results = {f"resume_losses_{world.world_size}.json": [train_step(model, optimizer, s, world) for s in (3, 4)]}
        # the control: weights alone, a fresh AdamW (its state is what step 4's loss depends on)
        model, optimizer = build(world)
        ckpt.load_checkpoint(ckpt.latest_checkpoint(out), model, None)
        results[f"weights-only_losses_{world.world_size}.json"] = [train_step(model, optimizer, s, world)
                                                                   for s in (3, 4)]
    for name, losses in results.items():
        if world.is_main:
            with open(os.path.join(out, name), "w") as f:
                json.dump(dict(world_size=world.world_size, losses=losses), f)
        D.print0(f"{mode} at world {world.world_size}: {name} {losses}")


main(sys.argv[1], sys.argv[2])
D.cleanup()
