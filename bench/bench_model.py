"""Model benchmark: this project's Transformer vs transformers.LlamaForCausalLM, same weights.

    python bench/bench_model.py                 # small preset, 2 threads
    python bench/bench_model.py --config toy --steps 5

Two figures, both sides measured in the same run with the same thread count, reported as
medians and as the ratio ours / transformers (> 1 means we are faster):
1. training step (forward + backward + AdamW) tokens/s on a (batch, seq) block of random ids;
   ours uses the chunked loss from the final hidden states (nanbeige41/losses.py), transformers
   its standard `labels=` loss over full logits;
2. generation tokens/s: batched greedy decoding of `--new` tokens from `--batch` prompts,
   ours through nanbeige41.generate (preallocated KV cache), transformers through `generate()`.
"""

import argparse
import os
import statistics
import sys
import time

import torch
import transformers

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # run from anywhere
from nanbeige41.generate import generate
from nanbeige41.losses import chunked_cross_entropy
from nanbeige41.model import ModelConfig, Transformer


def hf_config(c):
    return transformers.LlamaConfig(
        vocab_size=c.vocab_size, hidden_size=c.hidden_size, intermediate_size=c.intermediate_size,
        num_hidden_layers=c.num_hidden_layers, num_attention_heads=c.num_attention_heads,
        num_key_value_heads=c.num_key_value_heads, head_dim=c.head_dim, rope_theta=c.rope_theta,
        rms_norm_eps=c.rms_norm_eps, max_position_embeddings=c.max_position_embeddings,
        tie_word_embeddings=False, attn_implementation="sdpa")


def time_pair(step_a, step_b, n, warmup=1):
    """Median seconds of each step, the two interleaved (a, b, a, b, ...) so that load from
    other processes on a shared machine hits both sides alike."""
    for _ in range(warmup):
        step_a(), step_b()
    ta, tb = [], []
    for _ in range(n):
        for step, times in ((step_a, ta), (step_b, tb)):
            t0 = time.perf_counter()
            step()
            times.append(time.perf_counter() - t0)
    return statistics.median(ta), statistics.median(tb)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--config", default="small")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--gen-batch", type=int, default=8)
    p.add_argument("--prompt-len", type=int, default=32)
    p.add_argument("--new", type=int, default=64)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    cfg = ModelConfig.preset(args.config)
    ours = Transformer(cfg)
    hf = transformers.LlamaForCausalLM(hf_config(cfg))
    hf.load_state_dict(ours.state_dict())  # identical weights (same parameter names)
    print(f"config={args.config} params={cfg.num_params() / 1e6:.1f}M threads={args.threads} "
          f"torch={torch.__version__} transformers={transformers.__version__}")

    # 1. training step
    ids = torch.randint(0, cfg.vocab_size, (args.batch, args.seq))
    targets = ids.roll(-1, dims=1)
    mask = torch.ones_like(ids)
    mask[:, -1] = 0
    opt_ours = torch.optim.AdamW(ours.parameters(), lr=1e-4)
    opt_hf = torch.optim.AdamW(hf.parameters(), lr=1e-4)

    def step_ours():
        hidden = ours(ids, return_hidden=True)
        loss, n = chunked_cross_entropy(hidden, ours.lm_head.weight, targets, mask)
        (loss / n).backward()
        opt_ours.step()
        opt_ours.zero_grad(set_to_none=True)

    def step_hf():
        hf(input_ids=ids, labels=ids).loss.backward()
        opt_hf.step()
        opt_hf.zero_grad(set_to_none=True)

    ours.train(), hf.train()
    tokens = args.batch * args.seq
    t_ours, t_hf = time_pair(step_ours, step_hf, args.steps)
    print(f"train step  ours {tokens / t_ours:9.0f} tok/s   transformers {tokens / t_hf:9.0f} tok/s   "
          f"ratio {t_hf / t_ours:.2f}")

    # 2. generation
    ours.eval(), hf.eval()
    prompts = torch.randint(3, cfg.vocab_size, (args.gen_batch, args.prompt_len))

    def gen_ours():
        generate(ours, prompts.tolist(), max_new_tokens=args.new, temperature=0, eos_ids=[-1])

    def gen_hf():
        with torch.no_grad():
            hf.generate(prompts, attention_mask=torch.ones_like(prompts), max_new_tokens=args.new,
                        min_new_tokens=args.new, do_sample=False, pad_token_id=0, eos_token_id=None)

    new_tokens = args.gen_batch * args.new
    g_ours, g_hf = time_pair(gen_ours, gen_hf, max(3, args.steps // 2))
    print(f"generation  ours {new_tokens / g_ours:9.0f} tok/s   transformers {new_tokens / g_hf:9.0f} tok/s   "
          f"ratio {g_hf / g_ours:.2f}")


if __name__ == "__main__":
    main()
