"""Measured peak memory of training steps on CPU, for the planner's validation (tests/test_scale_out.py,
bench/bench_scale_out.py). Plain `python` (one process) or under torchrun (FSDP2 over the ranks, fp32):

    memory_worker.py CONFIG_JSON SEQ_LEN ROWS CKPT(0|1) CP OUT_JSON

Peak = the process's peak resident memory (VmHWM, reset through /proc/self/clear_refs after the batch is built)
minus the resident memory at that moment: model, gradients, AdamW state and everything a step allocates, over 3
steps (AdamW's moments exist from the first step on). Run it with MALLOC_MMAP_THRESHOLD_=65536 so that freed large
tensors go back to the OS (glibc otherwise keeps them on its heap and the resident size overstates what is live).
Rank 0 writes {"peak_bytes": ..., "per_rank": [...], "step_seconds": ...}."""
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from nanbeige41 import distributed as D  # noqa: E402
from nanbeige41.context_parallel import setup as cp_setup  # noqa: E402
from nanbeige41.losses import chunked_cross_entropy  # noqa: E402
from nanbeige41.model import ModelConfig, Transformer  # noqa: E402


def status(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(field)


def main(config_json, seq_len, rows, ckpt, cp, out):
    world = D.setup("cpu")
    config = ModelConfig(**json.loads(config_json))
    g = torch.Generator().manual_seed(0)
    batch = dict(input_ids=torch.randint(0, config.vocab_size, (rows, seq_len), generator=g),
                 position_ids=torch.arange(seq_len).expand(rows, seq_len).contiguous(),
                 targets=torch.randint(0, config.vocab_size, (rows, seq_len), generator=g),
                 loss_mask=torch.ones(rows, seq_len, dtype=torch.long))
    with torch.device("meta"):
        model = Transformer(config)
    D.parallelize(model, activation_checkpointing=bool(ckpt))
    ulysses, _, _ = cp_setup(config, cp)
    if ulysses is not None:
        ulysses.apply(model)
        batch = ulysses.shard(batch)
    D.all_reduce_sum(0)
    baseline = status("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the current resident size
    model.to_empty(device="cpu")
    model.init_weights()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=False)
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        loss = model(batch["input_ids"], batch["position_ids"],
                     head_fn=lambda h, w: chunked_cross_entropy(h, w, batch["targets"], batch["loss_mask"], 1024)[0])
        (loss / batch["loss_mask"].numel()).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - t0)
    peak = status("VmHWM") - baseline
    per_rank = [None] * world.world_size
    if D.is_sharded(model):
        torch.distributed.all_gather_object(per_rank, peak)
    else:
        per_rank = [peak]
    if world.is_main:
        with open(out, "w") as f:
            json.dump(dict(peak_bytes=max(per_rank), per_rank=per_rank, step_seconds=min(times[1:])), f)
    del model, optimizer


main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6])
D.cleanup()
