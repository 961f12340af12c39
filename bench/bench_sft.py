"""Benchmarks of the SFT issue (a script, not a timed test). Run from the repository root:

    python bench/bench_sft.py                 # all three
    python bench/bench_sft.py --only packing  # or: memory, speed

1. packing: efficiency = real tokens / (rows x seq_len) of best-fit-decreasing packing on the shipped toy corpus, vs
   naive padding (one conversation per row, padded to the longest), at the toy curriculum's lengths.
2. memory: peak RSS of the chunked loss vs the naive one (full [T, V] logits + F.cross_entropy), forward + backward, at
   the real vocabulary and width (V = 166144, H = 2560, fp32, CPU) for T = 1024 and 4096. Each case runs in its own
   subprocess (peak RSS is per process); a base case holds only what both share (the output matrix, its gradient, the
   hidden states), and the ratio printed is of the memory above that base. Goal: chunked <= 1/10 of naive, flat in T.
3. speed: SFT tokens/s (real tokens, forward + backward + AdamW) of the `small` config through train_sft's path
   (packed rows, chunked loss) vs transformers.LlamaForCausalLM of the same shape trained on the same conversations
   with padding (batches in corpus order, padded to the longest, labels -100 off the assistant tokens). One run each,
   same thread count; the ratio is printed. Goal: >= 1.3 thanks to packing.
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
TOY_SFT = os.path.join(REPO, "data", "toy", "sft")
DOMAINS = ["code", "general", "search", "stem", "tool"]


def toy_docs():
    from nanbeige41 import data
    from nanbeige41.tokenizer import Tokenizer, toy_tokenizer_path
    tok = Tokenizer.from_pretrained(toy_tokenizer_path())
    records, _ = data.load_conversations([os.path.join(TOY_SFT, d + ".jsonl") for d in DOMAINS], log=lambda *a: None)
    return data.tokenize(records, tok), tok


# -----------------------------------------------------------------------------
def bench_packing():
    from nanbeige41 import data
    docs, _ = toy_docs()
    print("packing efficiency on the shipped toy corpus (best-fit decreasing vs one conversation per row)")
    for seq_len in (256, 512, 1024):
        fitting = [d for d in docs if len(d["ids"]) <= seq_len]
        rows, stats = data.pack(fitting, seq_len)
        n, row_len, naive = data.naive_rows(fitting, seq_len)
        print(f"  seq_len {seq_len:5d}: {len(fitting):5d} conversations -> {stats['rows']:4d} packed rows, "
              f"efficiency {stats['efficiency']:.4f}; naive {n} rows of {row_len}: {naive:.4f}")


# -----------------------------------------------------------------------------
MEMORY_CASE = r"""
import resource, sys, torch, torch.nn.functional as F
sys.path.insert(0, {repo!r})
from nanbeige41.losses import chunked_cross_entropy
torch.manual_seed(0)
V, H, T, kind = 166144, 2560, {T}, {kind!r}
weight = (torch.randn(V, H) * 0.02).requires_grad_()   # 1.7 GB, its gradient another 1.7 GB
hidden = torch.randn(T, H).requires_grad_()
targets = torch.randint(0, V, (T,))
if kind == "base":      # what both losses need anyway: the matrix, its gradient, the hidden states and theirs
    weight.grad = torch.zeros_like(weight); hidden.grad = torch.zeros_like(hidden)
elif kind == "naive":   # [T, V] logits, log-softmax and their gradients
    F.cross_entropy(hidden @ weight.t(), targets).backward()
else:
    s, n = chunked_cross_entropy(hidden, weight, targets, torch.ones(T), chunk_size={chunk})
    (s / n).backward()
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
"""


def peak_rss(kind, T, chunk):
    code = MEMORY_CASE.format(repo=REPO, T=T, kind=kind, chunk=chunk)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(r.stderr[-2000:])
    return int(r.stdout.strip().splitlines()[-1])


def bench_memory(chunk, lengths):
    print(f"peak RSS, loss forward + backward at V=166144, H=2560, fp32 CPU, chunks of {chunk} tokens "
          "(each case in its own process)")
    for T in lengths:
        base, naive, chunked = (peak_rss(k, T, chunk) for k in ("base", "naive", "chunked"))
        over_n, over_c = naive - base, chunked - base
        print(f"  T={T:5d}: base {base / 2**30:5.2f} GiB | naive {naive / 2**30:5.2f} GiB | chunked "
              f"{chunked / 2**30:5.2f} GiB | above base: naive {over_n / 2**30:5.2f} GiB, chunked "
              f"{over_c / 2**30:5.2f} GiB, ratio chunked/naive {over_c / over_n:.3f}")


# -----------------------------------------------------------------------------
def bench_speed(n_docs, seq_len, rows_per_step, hf_batch, seed=0):
    import random

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from nanbeige41 import data
    from nanbeige41.losses import chunked_cross_entropy
    from nanbeige41.model import ModelConfig, Transformer

    docs, tok = toy_docs()
    random.Random(seed).shuffle(docs)
    docs = [d for d in docs if len(d["ids"]) <= seq_len][:n_docs]
    real = sum(len(d["ids"]) for d in docs)
    config = ModelConfig.preset("small")
    print(f"SFT tokens/s, `small` config ({config.num_params() / 1e6:.0f}M parameters), {len(docs)} toy conversations "
          f"({real} tokens), {torch.get_num_threads()} threads")

    # ours: packed rows of seq_len, chunked loss over the assistant tokens, AdamW
    torch.manual_seed(0)
    model = Transformer(config)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    rows, stats = data.pack(docs, seq_len, pad_id=tok.pad_id)
    t0 = time.time()
    for i in range(0, len(rows), rows_per_step):
        b = {k: torch.tensor([r[k] for r in rows[i:i + rows_per_step]]) for k in
             ("input_ids", "position_ids", "targets", "loss_mask")}
        hidden = model(b["input_ids"], b["position_ids"], return_hidden=True)
        s, n = chunked_cross_entropy(hidden, model.lm_head.weight, b["targets"], b["loss_mask"])
        (s / n).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    ours = real / (time.time() - t0)
    print(f"  nanbeige41 packed: {len(rows)} rows x {seq_len} (efficiency {stats['efficiency']:.3f}): {ours:8.0f} tok/s")
    del model, opt

    # transformers: the same conversations, batches of hf_batch padded to the longest
    hf_config = LlamaConfig(vocab_size=config.vocab_size, hidden_size=config.hidden_size,
                            intermediate_size=config.intermediate_size, num_hidden_layers=config.num_hidden_layers,
                            num_attention_heads=config.num_attention_heads,
                            num_key_value_heads=config.num_key_value_heads, head_dim=config.head_dim,
                            rope_theta=config.rope_theta, max_position_embeddings=config.max_position_embeddings,
                            rms_norm_eps=config.rms_norm_eps, tie_word_embeddings=False, attn_implementation="sdpa")
    torch.manual_seed(0)
    hf = LlamaForCausalLM(hf_config)
    opt = torch.optim.AdamW(hf.parameters(), lr=1e-4)
    padded = 0
    t0 = time.time()
    for i in range(0, len(docs), hf_batch):
        batch = docs[i:i + hf_batch]
        L = max(len(d["ids"]) for d in batch)
        padded += L * len(batch)
        ids = torch.tensor([d["ids"] + [tok.pad_id] * (L - len(d["ids"])) for d in batch])
        attn = torch.tensor([[1] * len(d["ids"]) + [0] * (L - len(d["ids"])) for d in batch])
        labels = torch.tensor([[t if m else -100 for t, m in zip(d["ids"], d["mask"])] + [-100] * (L - len(d["ids"]))
                               for d in batch])
        hf(input_ids=ids, attention_mask=attn, labels=labels).loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    theirs = real / (time.time() - t0)
    print(f"  transformers padded: batches of {hf_batch} (efficiency {real / padded:.3f}): {theirs:8.0f} tok/s")
    print(f"  ratio nanbeige41 / transformers: {ours / theirs:.2f}")


def main():
    p = argparse.ArgumentParser(description="SFT benchmarks: packing, loss memory, tokens/s")
    p.add_argument("--only", choices=["packing", "memory", "speed"], default=None)
    p.add_argument("--chunk", type=int, default=256, help="loss chunk size in the memory benchmark")
    p.add_argument("--lengths", type=int, nargs="+", default=[1024, 4096], help="T values of the memory benchmark")
    p.add_argument("--speed-docs", type=int, default=64, help="conversations in the tokens/s comparison")
    p.add_argument("--speed-seq-len", type=int, default=1024)
    p.add_argument("--speed-rows", type=int, default=2, help="packed rows per step (ours)")
    p.add_argument("--speed-hf-batch", type=int, default=8, help="conversations per padded batch (transformers)")
    args = p.parse_args()
    if args.only in (None, "packing"):
        bench_packing()
    if args.only in (None, "memory"):
        bench_memory(args.chunk, args.lengths)
    if args.only in (None, "speed"):
        bench_speed(args.speed_docs, args.speed_seq_len, args.speed_rows, args.speed_hf_batch)


if __name__ == "__main__":
    main()
