"""Supervised fine-tuning: packed conversations, assistant-only chunked loss, length curriculum, domain mixture.

Paper section 2.1.1: SFT of Nanbeige4-3B-Base on a mixture of code, deep search, STEM, tool use and general data, with a
context curriculum 32k -> 64k -> 256k whose final stage mixes code 27%, deep search 26%, STEM 23%, tool use 13%,
general 10%. This script is that recipe, readable top to bottom:

    python train_sft.py --config toy --out runs/toy/sft                     # the shipped toy corpus, CPU, minutes
    torchrun --nproc_per_node 2 train_sft.py --config toy --out runs/toy/sft  # the same on 2 processes (gloo)
    torchrun --nproc_per_node 8 train_sft.py --config 3b --init PATH/Nanbeige4-3B-Base \\
        --data code:code.jsonl:27 search:search.jsonl:26 stem:stem.jsonl:23 tool:tool.jsonl:13 general:general.jsonl:10 \\
        --out runs/3b/sft --activation-checkpointing                        # the real run (GPUs, FSDP2, bf16)

What it does, per optimizer step: draw `batch_tokens / seq_len` packed rows from the stage's mixture stream (the same
global batch on every rank; each rank trains on its slice), run them in micro-batches, sum the token losses of the
assistant tokens and divide by the *global* count of assistant tokens in the step (all micro-batches, all ranks), so the
gradient does not depend on micro-batch size, accumulation or world size; clip, AdamW, warm-up + cosine learning rate.
The loss is computed in chunks of the output projection from the final hidden states (nanbeige41/losses.py), so the
[T, V] logits never exist at once.

Writes to OUT: metrics.jsonl (one JSON object per step; eval_loss every --eval-every steps), checkpoints/step_N/
(HF weights + tokenizer + optimizer + data order + RNG, written atomically, newest --keep-checkpoints kept), and at the
end the final model + tokenizer in OUT itself (so `--init OUT` and `python -m nanbeige41.generate --ckpt OUT` work).
`--resume` continues from the newest complete checkpoint, exactly: the losses after a SIGKILL and resume equal those of
an uninterrupted run (tests/test_sft.py).

Departures from the paper: the toy curriculum is the paper's shape scaled down (256 -> 512 -> 1024 tokens); the paper
gives neither the step budget of each stage nor the mixtures of the first two, so those are our choice (DEFAULTS below).
The earlier-stage toy mixtures leave out deep search (its toy trajectories are ~600 tokens, longer than the first
stage's rows) and weight code up, since the toy GRPO code stages start from this model. Mixture ratios are read as
shares of tokens (`--mixture-unit docs` for shares of documents); the realised shares of both are logged.
"""

import argparse
import json
import math
import os
import sys
import time

import torch

from nanbeige41 import checkpoint as ckpt
from nanbeige41 import context_parallel
from nanbeige41 import paths
from nanbeige41 import data as sftdata
from nanbeige41 import distributed as D
from nanbeige41 import plan
from nanbeige41.cli import non_negative_float, non_negative_int, positive_float, positive_int
from nanbeige41.losses import chunked_cross_entropy
from nanbeige41.model import ModelConfig, Transformer
from nanbeige41.tokenizer import Tokenizer, toy_tokenizer_path

PAPER_FINAL_MIXTURE = dict(code=27, search=26, stem=23, tool=13, general=10)  # paper 2.1.1, 256k stage

# Per-config defaults of the flags left at None (measured on 2 CPU cores for toy; the 3b values are our choice, the
# paper gives no step budget or learning rate), and the length curriculum: per stage its name, seq_len, share of the
# step budget and domain mixture (None = the data's own proportions). --mixture or weights in --data replace the
# last stage's mixture: the paper's 27/26/23/13/10 is the 256k stage's; it does not give the earlier stages'.
_TOY_CURRICULUM = [
    dict(name="256", seq_len=256, share=0.4, mixture=dict(code=50, stem=20, general=20, tool=10)),
    dict(name="512", seq_len=512, share=0.35, mixture=dict(code=50, stem=15, general=10, tool=25)),
    dict(name="1024", seq_len=1024, share=0.25, mixture=PAPER_FINAL_MIXTURE),
]
DEFAULTS = {
    "toy": dict(max_steps=500, batch_tokens=2048, lr=2e-3, warmup_steps=10, eval_every=100, save_every=100,
                curriculum=_TOY_CURRICULUM),
    "small": dict(max_steps=400, batch_tokens=8192, lr=1e-3, warmup_steps=20, eval_every=100, save_every=100,
                  curriculum=_TOY_CURRICULUM),
    "3b": dict(max_steps=4000, batch_tokens=2 * 2**20, lr=1e-5, warmup_steps=100, eval_every=200, save_every=200,
               curriculum=[dict(name="32k", seq_len=32768, share=0.5, mixture=None),
                           dict(name="64k", seq_len=65536, share=0.3, mixture=None),
                           dict(name="256k", seq_len=262144, share=0.2, mixture=PAPER_FINAL_MIXTURE)]),
}
TOY_DATA = paths.TOY_SFT_DATA

# -----------------------------------------------------------------------------
p = argparse.ArgumentParser(description="Packed SFT (paper 2.1.1)", formatter_class=argparse.ArgumentDefaultsHelpFormatter)
# Model
p.add_argument("--config", default="toy", choices=sorted(DEFAULTS), help="model preset (ignored for the model when --init)")
p.add_argument("--init", default=None, help="HF-format checkpoint directory to start from")
p.add_argument("--tokenizer", default=None, help="tokenizer directory (default: --init's, else the toy tokenizer)")
p.add_argument("--hidden-size", type=positive_int, default=None, help="override the preset (fresh init only)")
p.add_argument("--intermediate-size", type=positive_int, default=None)
p.add_argument("--num-layers", type=positive_int, default=None)
p.add_argument("--num-heads", type=positive_int, default=None)
p.add_argument("--num-kv-heads", type=positive_int, default=None)
p.add_argument("--tie-embeddings", action="store_true",
               help="share the input embedding with the output projection (fresh init only; the release does not)")
p.add_argument("--activation-checkpointing", action="store_true", help="recompute each block in backward")
p.add_argument("--cp", type=positive_int, default=1,
               help="context-parallel degree: consecutive ranks that split each row (Ulysses all-to-all)")
# Data
p.add_argument("--data", nargs="+", default=None,
               help="JSONL paths or name:path:weight entries (default: the shipped toy corpus)")
p.add_argument("--eval-data", nargs="*", default=None, help="held-out JSONL (default: the toy eval.jsonl)")
p.add_argument("--mixture", default=None, help="domain=weight,... for the last (longest) stage (default: its own)")
p.add_argument("--mixture-unit", default="tokens", choices=["tokens", "docs"], help="what the mixture ratios count")
p.add_argument("--seq-len", type=positive_int, default=None, help="one stage of this length instead of the curriculum")
p.add_argument("--overflow", default="truncate", choices=["truncate", "drop"], help="documents longer than seq_len")
p.add_argument("--pack-pool-rows", type=positive_int, default=64, help="rows packed together by best-fit-decreasing")
p.add_argument("--strict", action="store_true", help="a bad conversation is an error instead of skipped")
# Optimisation
p.add_argument("--max-steps", type=positive_int, default=None)
p.add_argument("--stop-after", type=positive_int, default=None,
               help="stop (and save) after this step of the --max-steps schedule (the toy agent's base model: "
                    "step 300 of 600 copied names better than a 300-step schedule)")
p.add_argument("--batch-tokens", type=positive_int, default=None, help="global tokens per optimizer step")
p.add_argument("--micro-batch-tokens", type=positive_int, default=None, help="tokens per rank per micro-step (default: no accumulation)")
p.add_argument("--lr", type=positive_float, default=None)
p.add_argument("--min-lr-ratio", type=non_negative_float, default=0.1, help="cosine decays to lr * this")
p.add_argument("--warmup-steps", type=non_negative_int, default=None)
p.add_argument("--weight-decay", type=non_negative_float, default=0.1)
p.add_argument("--beta1", type=non_negative_float, default=0.9)
p.add_argument("--beta2", type=non_negative_float, default=0.95)
p.add_argument("--grad-clip", type=positive_float, default=1.0)
p.add_argument("--loss-chunk", type=positive_int, default=1024, help="tokens per chunk of the output projection")
p.add_argument("--max-bad-steps", type=positive_int, default=5, help="abort after this many consecutive NaN/inf steps")
p.add_argument("--seed", type=int, default=0)
p.add_argument("--device", default=None, choices=["cpu", "cuda"], help="default: cuda when available")
# Logging and checkpoints
p.add_argument("--out", required=True, help="run directory")
p.add_argument("--resume", action="store_true", help="continue from the newest complete checkpoint in --out")
p.add_argument("--save-every", type=positive_int, default=None)
p.add_argument("--keep-checkpoints", type=non_negative_int, default=2)
p.add_argument("--sharded-checkpoints", action="store_true",
               help="checkpoints through torch.distributed.checkpoint (every rank writes its shards; resumable at any "
                    "world size) instead of gathered HF weights + optimizer.pt")
p.add_argument("--eval-every", type=non_negative_int, default=None)
p.add_argument("--quiet", action="store_true", help="no per-step progress line (metrics.jsonl is still written)")
args = p.parse_args()
for k, v in DEFAULTS[args.config].items():
    if k != "curriculum" and getattr(args, k) is None:
        setattr(args, k, v)

dist_info = D.setup(args.device)
device, rank, world = dist_info.device, dist_info.rank, dist_info.world_size
print0 = D.print0
on_gpu = device.type == "cuda"
os.makedirs(args.out, exist_ok=True)

# -----------------------------------------------------------------------------
# tokenizer and data

# the tokenizer is --tokenizer's, else --init's (a checkpoint without one is an error, not the toy tokenizer), else
# the toy one
tok_dir = args.tokenizer or args.init or str(toy_tokenizer_path())
if args.tokenizer and not os.path.isfile(os.path.join(tok_dir, "tokenizer.json")):
    sys.exit(f"train_sft: --tokenizer {tok_dir}: no tokenizer.json")
if args.init:  # a bad --init is one line naming the directory and what is wrong, before any data is read
    try:
        init_config, tokenizer = ckpt.check_hf_checkpoint(args.init, tokenizer_dir=tok_dir)
    except ckpt.CheckpointError as e:
        sys.exit(f"train_sft: --init {e}")
else:
    if not os.path.isfile(os.path.join(tok_dir, "tokenizer.json")):
        if args.config == "3b":
            sys.exit("train_sft: --config 3b needs --init or --tokenizer")
        if rank == 0:  # the toy tokenizer is committed; rebuild it (with the corpus) if a checkout lacks it
            paths.build_missing(os.path.dirname(tok_dir), "tokenizer/tokenizer.json", ["data_synth.py", "toy"], print0)
        D.broadcast_object(None)  # wait for rank 0
    tokenizer = Tokenizer.from_pretrained(tok_dir)

if args.data is None:
    if args.config == "3b":
        sys.exit("train_sft: --config 3b needs --data")
    args.data = [os.path.join(TOY_DATA, f) for f in sorted(os.listdir(TOY_DATA)) if f != "eval.jsonl"]
    if args.eval_data is None:
        args.eval_data = [os.path.join(TOY_DATA, "eval.jsonl")]
try:  # bad data is a one-line error naming file:line, not a traceback
    specs = [sftdata.parse_data_spec(s) for s in args.data]
    sources = [(name, path) if name else path for name, path, _ in specs]
    records, skipped = sftdata.load_conversations(sources, strict=args.strict, log=print0)
    docs = sftdata.tokenize(records, tokenizer, strict=args.strict, log=print0)
    eval_docs = []
    if args.eval_data:
        eval_records, _ = sftdata.load_conversations(args.eval_data, strict=args.strict, log=print0)
        eval_docs = sftdata.tokenize(eval_records, tokenizer, strict=args.strict, log=print0)
except (ValueError, OSError) as e:
    sys.exit(f"train_sft: {e}")
domains_present = sorted({d["domain"] for d in docs})
print0(f"data: {len(docs)} conversations, {sum(len(d['ids']) for d in docs)} tokens, domains {domains_present}; "
       f"eval {len(eval_docs)}")

# The curriculum. The last stage's mixture: --mixture, else weights given in --data, else its own.
stages = [dict(s) for s in DEFAULTS[args.config]["curriculum"]]
if args.seq_len is not None:
    stages = [dict(stages[-1], name=str(args.seq_len), seq_len=args.seq_len, share=1.0)]
override = None
if args.mixture:
    override = {k: float(v) for k, v in (kv.split("=") for kv in args.mixture.split(","))}
elif any(w is not None for _, _, w in specs):
    override = {name: w for name, _, w in specs if w is not None}
for s in stages:
    if override is not None and s is stages[-1]:  # asked for: a missing domain is an error (MixtureStream raises)
        s["mixture"] = override
    elif s["mixture"] is None:  # "the data's own proportions": weight by token (or document) count
        s["mixture"] = {d: sum(len(doc["ids"]) if args.mixture_unit == "tokens" else 1
                               for doc in docs if doc["domain"] == d) for d in domains_present}
    else:  # a built-in stage mixture: use the domains the data has, and say which are missing
        missing = sorted(set(s["mixture"]) - set(domains_present))
        if missing:
            print0(f"stage {s['name']}: no data for {missing}; mixing the other domains in their stage ratios")
        s["mixture"] = {d: w for d, w in s["mixture"].items() if d in domains_present}
    try:
        sftdata.normalise_mixture(s["mixture"], domains_present)
    except ValueError as e:
        sys.exit(f"train_sft: stage {s['name']}: {e}")
# step budget per stage from the shares; the last stage takes the rounding remainder
ends, total = [], 0
for i, s in enumerate(stages):
    total = args.max_steps if i == len(stages) - 1 else total + round(args.max_steps * s["share"])
    ends.append(total)
if world % args.cp:
    sys.exit(f"train_sft: --cp {args.cp} does not divide the {world} ranks")
dp_world = world // args.cp  # data-parallel ranks: each group of --cp ranks shares its rows, split by token
for s, end in zip(stages, ends):
    s["end"] = end
    s["rows"] = max(1, args.batch_tokens // s["seq_len"])  # global rows per optimizer step
    per_rank = s["rows"] // dp_world
    micro = max(1, (args.micro_batch_tokens or per_rank * s["seq_len"]) // s["seq_len"])
    if s["rows"] % dp_world or per_rank % micro:
        sys.exit(f"train_sft: stage {s['name']}: {s['rows']} rows per step do not split into {dp_world} ranks x "
                 f"micro-batches of {micro} rows; adjust --batch-tokens / --micro-batch-tokens")
    if s["seq_len"] % (2 * args.cp):
        sys.exit(f"train_sft: stage {s['name']}: seq_len {s['seq_len']} is not divisible by 2 x --cp {args.cp}")
    s["micro_rows"], s["accum"] = micro, per_rank // micro


def stage_at(step):
    """Index of the stage that trains optimizer step `step` (1-based)."""
    return next(i for i, s in enumerate(stages) if step <= s["end"])


def make_stream(i):
    s = stages[i]
    return sftdata.MixtureStream(docs, s["mixture"], s["seq_len"], seed=args.seed * 1000 + i,
                                 pool_rows=args.pack_pool_rows, overflow=args.overflow, pad_id=tokenizer.pad_id,
                                 unit=args.mixture_unit)


def lr_at(step):
    """Linear warm-up to lr over warmup_steps, then cosine decay to lr * min_lr_ratio at max_steps."""
    if step <= args.warmup_steps:
        return args.lr * step / args.warmup_steps
    progress = (step - args.warmup_steps) / max(1, args.max_steps - args.warmup_steps)
    return args.lr * (args.min_lr_ratio + (1 - args.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


# -----------------------------------------------------------------------------
# model: built on the meta device, sharded, then materialised and loaded from rank 0's full state dict

if args.init:
    config = init_config
else:
    overrides = dict(hidden_size=args.hidden_size, intermediate_size=args.intermediate_size,
                     num_hidden_layers=args.num_layers, num_attention_heads=args.num_heads,
                     num_key_value_heads=args.num_kv_heads, tie_word_embeddings=args.tie_embeddings or None)
    overrides = {k: v for k, v in overrides.items() if v is not None}
    if "hidden_size" in overrides or "num_attention_heads" in overrides:
        overrides.setdefault("head_dim", None)  # re-derive hidden // heads
    config = ModelConfig.preset(args.config, **overrides)
if tokenizer.vocab_size > config.vocab_size:
    sys.exit(f"train_sft: tokenizer has {tokenizer.vocab_size} tokens, the model's vocab_size is {config.vocab_size}")
with torch.device("meta"):
    model = Transformer(config)
D.parallelize(model, activation_checkpointing=args.activation_checkpointing,
              mp_policy=D.mixed_precision_policy(device))  # bf16 compute, fp32 reduce + master weights on GPU
try:  # --cp: each row split over a group of ranks (the all-to-all over heads needs a degree the heads allow)
    ulysses, dp_rank, _ = context_parallel.setup(config, args.cp)
except ValueError as e:
    sys.exit(f"train_sft: --cp {args.cp}: {e}")
if ulysses is not None:
    ulysses.apply(model)
model.to_empty(device=device)
full_state = {}
if rank == 0:
    if args.init:
        full_state = Transformer.from_pretrained(args.init).state_dict()
    else:
        torch.manual_seed(args.seed)
        full_state = Transformer(config).state_dict()  # the same initial weights for any world size
D.load_full_state_dict(model, full_state)
del full_state
print0(f"model: {config.num_params() / 1e6:.1f}M parameters, {config.num_hidden_layers} layers, hidden "
       f"{config.hidden_size}, vocab {config.vocab_size}; world {world} on {device}"
       + (" (FSDP2)" if D.is_sharded(model) else ""))

# weight decay on matrices only (not norms), as usual for Llama-family training
decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
optimizer = torch.optim.AdamW([dict(params=decay, weight_decay=args.weight_decay),
                               dict(params=no_decay, weight_decay=0.0)],
                              lr=args.lr, betas=(args.beta1, args.beta2), eps=1e-8,
                              fused=not D.is_sharded(model))  # fused: ~4x the per-tensor loop on CPU

# -----------------------------------------------------------------------------
# resume

step, tokens_seen, stream, stream_index = 0, 0, None, -1
metrics_path = os.path.join(args.out, "metrics.jsonl")
if args.resume:
    # a newer checkpoint that is damaged (truncated, files missing) is skipped with a warning naming it
    path = ckpt.latest_checkpoint(args.out, warn=lambda line: print0(line, file=sys.stderr))
    if path is None:
        print0(f"resume: no complete checkpoint in {args.out}; starting from scratch")
    else:
        state = ckpt.load_checkpoint(path, model, optimizer)
        step, tokens_seen = state["step"], state["tokens_seen"]
        stream_index = state["stage"]
        stream = make_stream(stream_index)
        stream.skip(state["rows_served"])  # the data order is a pure function of (seed, stage, rows served)
        print0(f"resume: {path} (step {step}, stage {stages[stream_index]['name']}, "
               f"{state['rows_served']} rows into it)")
        if rank == 0:  # drop lines of steps the killed run did after the checkpoint
            ckpt.truncate_metrics(metrics_path, step)
if rank == 0 and not args.resume and os.path.isfile(metrics_path):
    os.remove(metrics_path)  # a fresh run in an old directory starts a fresh log
metrics_file = open(metrics_path, "a") if rank == 0 else None


def to_batch(rows):
    """list of packed rows -> dict of (B, T) long tensors on the device"""
    keys = ("input_ids", "position_ids", "targets", "loss_mask")
    batch = {k: torch.tensor([r[k] for r in rows], dtype=torch.long, device=device) for k in keys}
    return ulysses.shard(batch) if ulysses is not None else batch  # --cp: this rank's tokens of each row


def autocast():
    return torch.autocast("cuda", dtype=torch.bfloat16) if on_gpu else torch.autocast("cpu", enabled=False)


@torch.no_grad()
def evaluate(stage):
    """Mean token loss on the held-out conversations, packed at the current stage's length (longer ones are
    truncated, so the eval loss of a short stage covers only the beginnings of long conversations)."""
    seq_len, micro = stage["seq_len"], stage["micro_rows"]
    rows, _ = sftdata.pack(eval_docs, seq_len, overflow="truncate", pad_id=tokenizer.pad_id)
    while len(rows) % dp_world:  # every rank must run the same number of forwards (FSDP all-gathers)
        rows.append(dict(rows[0], loss_mask=[0] * seq_len))
    mine = rows[dp_rank * len(rows) // dp_world:(dp_rank + 1) * len(rows) // dp_world]
    model.eval()
    loss_sum, n_tokens = 0.0, 0
    for i in range(0, len(mine), micro):
        b = to_batch(mine[i:i + micro])
        with autocast():
            hidden = model(b["input_ids"], b["position_ids"], return_hidden=True)
        s, n = chunked_cross_entropy(hidden, model.lm_head.weight, b["targets"], b["loss_mask"], args.loss_chunk)
        loss_sum, n_tokens = loss_sum + s.item(), n_tokens + n
    model.train()
    return D.all_reduce_sum(loss_sum) / max(1, D.all_reduce_sum(n_tokens))


def save(step):
    ckpt.save_checkpoint(args.out, step, model, optimizer, tokenizer, keep=args.keep_checkpoints,
                         sharded=args.sharded_checkpoints, trainer_state=dict(
        stage=stream_index, rows_served=stream.rows_served, tokens_seen=tokens_seen, seed=args.seed,
        world_size=world, schedule=dict(kind="warmup_cosine", lr=args.lr, warmup_steps=args.warmup_steps,
                                        max_steps=args.max_steps, min_lr_ratio=args.min_lr_ratio),
        args=vars(args)))


# -----------------------------------------------------------------------------
# training loop

for s in stages:
    print0(f"stage {s['name']}: seq_len {s['seq_len']}, steps to {s['end']}, {s['rows']} rows/step "
           f"({s['accum']} micro-steps of {s['micro_rows']} rows per rank), mixture {s['mixture']}")
model.train()
bad_steps, t_start, steps_timed = 0, time.time(), 0
while step < min(args.stop_after or args.max_steps, args.max_steps):
    step += 1
    t0 = time.time()
    i = stage_at(step)
    if i != stream_index:
        stream_index, stream = i, make_stream(i)
    stage = stages[i]
    rows = [stream.next_row() for _ in range(stage["rows"])]  # the global batch, identical on every rank
    per_rank = stage["rows"] // dp_world
    mine = rows[dp_rank * per_rank:(dp_rank + 1) * per_rank]
    # normaliser: assistant tokens of the whole global batch (all micro-steps, all ranks; the --cp ranks of a
    # group hold the same rows)
    n_global = D.all_reduce_sum(sum(sum(r["loss_mask"]) for r in mine)) // args.cp
    lr = lr_at(step)
    for group in optimizer.param_groups:
        group["lr"] = lr

    loss_sum = 0.0
    for m in range(stage["accum"]):
        b = to_batch(mine[m * stage["micro_rows"]:(m + 1) * stage["micro_rows"]])
        if D.is_sharded(model):  # reduce-scatter gradients only after the last micro-step
            model.set_requires_gradient_sync(m == stage["accum"] - 1)
        with autocast():
            hidden = model(b["input_ids"], b["position_ids"], return_hidden=True)  # (B, T, H)
        # sum of -log p over assistant tokens; dividing by the global count makes the accumulated gradient the
        # gradient of the global mean (and FSDP sums, not averages, over ranks: see distributed.parallelize)
        s_loss, _ = chunked_cross_entropy(hidden, model.lm_head.weight, b["targets"], b["loss_mask"], args.loss_chunk)
        (s_loss / max(1, n_global)).backward()
        loss_sum += s_loss.item()
    loss = D.all_reduce_sum(loss_sum) / max(1, n_global)
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
    grad_norm = float(grad_norm.full_tensor() if hasattr(grad_norm, "full_tensor") else grad_norm)
    finite = D.all_reduce_max(int(not (math.isfinite(loss) and math.isfinite(grad_norm)))) == 0
    if finite:
        optimizer.step()
        bad_steps = 0
    else:
        bad_steps += 1
    optimizer.zero_grad(set_to_none=True)

    real = sum(r["real_tokens"] for r in rows)
    tokens_seen += real
    dt = time.time() - t0
    steps_timed += 1
    eta = (time.time() - t_start) / steps_timed * (args.max_steps - step)
    record = dict(step=step, stage=stage["name"], seq_len=stage["seq_len"], loss=loss, lr=lr, grad_norm=grad_norm,
                  tokens=tokens_seen, step_tokens=real, loss_tokens=n_global, tok_per_s=real / dt,
                  peak_mem_gib=(plan.peak_memory_bytes(device) or 0) / 2**30,  # this rank's (rank 0's in the log)
                  packing_efficiency=real / (len(rows) * stage["seq_len"]),
                  mixture={d: round(v[0], 4) for d, v in stream.realised().items()}, time=time.time())
    if on_gpu:  # an estimate: attention FLOPs as if each row were one document (nanbeige41/plan.py)
        record["mfu"] = plan.mfu(config, stage["seq_len"], real / dt / world)
    if not finite:
        record["skipped"] = True
        print0(f"step {step}: non-finite loss {loss} / grad norm {grad_norm}: step skipped "
               f"({bad_steps} in a row, abort at {args.max_bad_steps})")
    if args.eval_every and eval_docs and (step % args.eval_every == 0 or step == args.max_steps):
        record["eval_loss"] = evaluate(stage)
    if metrics_file:
        metrics_file.write(json.dumps(record) + "\n")
        metrics_file.flush()
    if not args.quiet:
        print0(f"step {step:5d}/{args.max_steps} [{stage['name']}] loss {loss:.4f} lr {lr:.2e} gnorm {grad_norm:.2f} "
               f"| {real / dt:7.0f} tok/s | pack {record['packing_efficiency']:.3f} | eta {eta / 60:4.1f}m"
               + (f" | eval {record['eval_loss']:.4f}" if "eval_loss" in record else ""))
    if bad_steps >= args.max_bad_steps:
        print0(f"train_sft: {bad_steps} consecutive non-finite steps; aborting. The last good checkpoint is kept "
               f"as it was: {ckpt.latest_checkpoint(args.out)}")
        D.cleanup()
        sys.exit(1)
    if bad_steps == 0 and (step % args.save_every == 0 or step in (args.max_steps, args.stop_after)):
        save(step)

# -----------------------------------------------------------------------------
# final model + tokenizer in OUT itself; realised mixture of the last stage

ckpt.save_hf(model, tokenizer, args.out)
mix = ", ".join(f"{d} {v[0]:.1%} docs / {v[1]:.1%} tokens" for d, v in stream.realised().items())
print0(f"done: {step} steps, {tokens_seen} tokens in {(time.time() - t_start) / 60:.1f} min; final stage realised "
       f"mixture: {mix}; truncated {stream.truncated}, dropped {stream.dropped} documents; model in {args.out}")
if metrics_file:
    metrics_file.close()
del model, optimizer  # the sharded model holds the process group: free it now, not during interpreter shutdown
D.cleanup()
