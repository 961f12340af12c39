"""Benchmarks of the scale-out issue (17), on CPU processes. Run from the repository root:

    python bench/bench_scale_out.py                 # all three, ~5 min on 2 cores
    python bench/bench_scale_out.py --only planner  # or: fsdp, ulysses

1. planner: measured peak memory (tests/memory_worker.py: VmHWM above the resident size before the model exists, fp32,
   AdamW, 3 steps) of small configs in one process vs `nanbeige41.plan.memory` for the same layout. Goal: within
   +-25%.
2. fsdp: per-rank peak memory of the `small` preset (56M parameters) at 1 process vs 2 FSDP2 ranks (gloo), the same
   rows per rank; weights + gradients + AdamW state should roughly halve, and the planner's 2-rank estimate is printed
   beside it.
3. ulysses: step time (forward + backward + AdamW, the fastest of steps 2-3) of one 4096-token row of the toy model in
   one process vs split over 2 ranks (--cp 2: Ulysses all-to-all, FSDP over the same ranks). The ratio is the
   context-parallel step time over the unsplit one; with two free cores the ideal is 0.5.
Each measurement is its own process (peak memory is per process), with OMP_NUM_THREADS=1 and
MALLOC_MMAP_THRESHOLD_=65536 (freed large tensors go back to the OS, so the resident size follows live memory).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
from nanbeige41.model import PRESETS, ModelConfig  # noqa: E402
from nanbeige41.plan import Layout, memory  # noqa: E402

MIB = 2**20


def measure(config, seq_len, rows, checkpointing, world=1, cp=1):
    """Run tests/memory_worker.py; returns its JSON (peak_bytes, per_rank, step_seconds)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MALLOC_MMAP_THRESHOLD_="65536")
    env = {k: v for k, v in env.items() if not k.startswith(("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_"))}
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "m.json")
        worker = [os.path.join(REPO, "tests", "memory_worker.py"), json.dumps(config), str(seq_len), str(rows),
                  str(int(checkpointing)), str(cp), out]
        launcher = [sys.executable] if world == 1 else [sys.executable, "-m", "torch.distributed.run", "--standalone",
                                                         "--nproc_per_node", str(world)]
        r = subprocess.run(launcher + worker, env=env, capture_output=True, text=True, cwd=REPO, timeout=900)
        if r.returncode:
            raise RuntimeError(r.stderr[-3000:])
        with open(out) as f:
            return json.load(f)


def planned(config, seq_len, rows, checkpointing, world=1, cp=1):
    lay = Layout(world=world, cp=cp, seq_len=seq_len, micro_rows=rows, checkpointing=checkpointing, compute_bytes=4,
                 sharded=world > 1)
    return memory(ModelConfig(**config), lay)


def bench_planner():
    toy = dict(PRESETS["toy"])
    wide = dict(toy, hidden_size=512, intermediate_size=1408, num_attention_heads=8, head_dim=64)
    cases = [("toy", toy, 1024, 2, False), ("toy", toy, 1024, 2, True), ("toy", toy, 2048, 2, False),
             ("toy", toy, 2048, 2, True), ("toy h512", wide, 1024, 2, False), ("toy h512", wide, 1024, 2, True)]
    print("planner vs measured peak (1 process, fp32, AdamW)")
    for name, cfg, T, rows, ckpt in cases:
        got = measure(cfg, T, rows, ckpt)["peak_bytes"]
        plan = planned(cfg, T, rows, ckpt)["total"]
        print(f"  {name:9s} {rows} x {T:5d} tokens, checkpointing {'on ' if ckpt else 'off'}: measured "
              f"{got / MIB:7.1f} MiB, planned {plan / MIB:7.1f} MiB, planned/measured {plan / got:.2f}")


def bench_fsdp():
    small = dict(PRESETS["small"])
    print("per-rank peak memory, small preset (56M params), 1 row x 512 tokens per rank, fp32 + AdamW")
    for world in (1, 2):
        got = measure(small, 512, 1, False, world=world)
        plan = planned(small, 512, 1, False, world=world)
        state = (plan["weights"] + plan["grads"] + plan["optimizer"]) / MIB
        print(f"  {world} process(es): measured {[round(p / MIB, 1) for p in got['per_rank']]} MiB per rank; planned "
              f"{plan['total'] / MIB:.1f} MiB (weights + grads + AdamW {state:.1f}, FSDP working copies "
              f"{plan['gathered'] / MIB:.1f})")


def bench_ulysses():
    toy = dict(PRESETS["toy"])
    one = measure(toy, 4096, 1, False)
    two = measure(toy, 4096, 1, False, world=2, cp=2)
    print(f"one 4096-token row of the toy model, step time: 1 process {one['step_seconds']:.2f} s, 2 ranks with "
          f"Ulysses cp=2 {two['step_seconds']:.2f} s: ratio {two['step_seconds'] / one['step_seconds']:.2f}; peak "
          f"memory per rank {one['peak_bytes'] / MIB:.0f} -> {[round(p / MIB) for p in two['per_rank']]} MiB")


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--only", choices=["planner", "fsdp", "ulysses"])
    only = p.parse_args().only
    print(f"machine: {os.cpu_count()} CPU cores visible, torch {__import__('torch').__version__}")
    for name, fn in (("planner", bench_planner), ("fsdp", bench_fsdp), ("ulysses", bench_ulysses)):
        if only in (None, name):
            fn()
