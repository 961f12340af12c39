"""GRPO trainer benchmark: this project's train_grpo.py vs Hugging Face TRL's GRPOTrainer, same shape.

    python bench/bench_grpo.py                     # both sides when `trl` is importable, else ours only
    python bench/bench_grpo.py --steps 6 --threads 2

Same model (a ~5M-parameter Llama: hidden 256, 4 layers, GQA 4:2, the toy tokenizer's 4096-token
vocabulary, identical initial weights), group size 8, 32 rollouts per optimizer step (4 prompts x 8),
64 new tokens, KL off, one optimizer step per batch of rollouts, the same synthetic reward (fraction
of vowels in the completion), the same thread count, in one run on the CPU. Reported: the median
seconds per optimizer step (rollouts + rewards + update) after a warm-up step, rollouts/s, and the
ratio TRL seconds / ours (> 1: ours is faster). TRL is not a dependency of this project: install
it (e.g. in a venv with --system-site-packages) to get the comparison.
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
import train_grpo  # noqa: E402
from nanbeige41.distributed import Dist  # noqa: E402
from nanbeige41.model import ModelConfig, Transformer  # noqa: E402
from nanbeige41.tokenizer import Tokenizer, toy_tokenizer_path  # noqa: E402

PROMPTS = [f"Write a short line about the number {i}." for i in range(64)]


def vowel_fraction(text):
    return sum(c in "aeiou" for c in text) / max(1, len(text))


def make_init(path):
    tok = Tokenizer.from_pretrained(toy_tokenizer_path())
    cfg = ModelConfig(vocab_size=tok.vocab_size, hidden_size=256, intermediate_size=704, num_hidden_layers=4,
                      num_attention_heads=4, num_key_value_heads=2, rope_theta=1e5, max_position_embeddings=512,
                      bos_token_id=tok.im_start_id, eos_token_id=tok.im_end_id, pad_token_id=tok.pad_id)
    torch.manual_seed(0)
    Transformer(cfg).save_pretrained(path)
    tok.save_pretrained(path)
    return tok, cfg


def bench_ours(init, tok, args, out):
    items = [{"id": f"p{i}", "ids": tok.encode(p)} for i, p in enumerate(PROMPTS)]

    def reward(batch, texts, truncated):
        return [{"total": vowel_fraction(t)} for t in texts]
    env = train_grpo.Env("bench", items, [], item_id=lambda it: it["id"], prompt_ids=lambda it: it["ids"], reward=reward)
    run_args = train_grpo.parse_args([
        "--stage", "code1", "--init", init, "--out", out, "--max-steps", str(args.steps + 1),
        "--group-size", "8", "--prompts-per-step", "4", "--max-new-tokens", "64", "--kl-coef", "0",
        "--minibatches", "1", "--epochs", "1", "--no-dynamic-sampling", "--no-difficulty-filter",
        "--eval-every", "0", "--save-every", "1000", "--lr", "1e-5", "--overlong", "none",
        "--rollout-batch", "32"])
    train_grpo.run(run_args, Dist(), env=env)
    rows = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
    rows = [r for r in rows if "step_s" in r][1:]  # drop the warm-up step
    print(f"ours, median per step: rollouts + rewards {statistics.median(r['rollout_s'] for r in rows):.2f} s, "
          f"policy update {statistics.median(r['update_s'] for r in rows):.2f} s")
    return [r["step_s"] for r in rows]


def bench_trl(init, args, out):
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer
    tok = AutoTokenizer.from_pretrained(init)
    model = AutoModelForCausalLM.from_pretrained(init)
    times, last = [], [None]

    class Timer(TrainerCallback):
        def on_step_begin(self, a, state, control, **kw):
            last[0] = time.perf_counter()

        def on_step_end(self, a, state, control, **kw):
            times.append(time.perf_counter() - last[0])

    def reward(completions, **kw):
        return [vowel_fraction(c) for c in completions]
    cfg = GRPOConfig(output_dir=out, per_device_train_batch_size=32, num_generations=8, max_completion_length=64,
                     beta=0.0, learning_rate=1e-5, max_steps=args.steps + 1, logging_steps=1000, use_cpu=True,
                     report_to=[], save_strategy="no", temperature=1.0, bf16=False, seed=0)
    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=cfg, processing_class=tok,
                          train_dataset=Dataset.from_list([{"prompt": p} for p in PROMPTS]), callbacks=[Timer()])
    trainer.train()
    return times[1:]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=5, help="timed optimizer steps per side (after one warm-up)")
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        init = os.path.join(tmp, "init")
        tok, cfg = make_init(init)
        print(f"model {cfg.num_params() / 1e6:.1f}M params, G=8, 32 rollouts/step, 64 new tokens, "
              f"KL off, threads {args.threads}")
        ours = statistics.median(bench_ours(init, tok, args, os.path.join(tmp, "ours")))
        print(f"ours: {ours:.2f} s/step  {32 / ours:.1f} rollouts/s")
        try:
            import trl
        except ImportError:
            print("trl is not installed: TRL side skipped (pip install trl to compare)")
            return
        theirs = statistics.median(bench_trl(init, args, os.path.join(tmp, "trl")))
        print(f"TRL {trl.__version__} GRPOTrainer: {theirs:.2f} s/step  {32 / theirs:.1f} rollouts/s")
        print(f"ratio (TRL s/step / ours): {theirs / ours:.2f}")


if __name__ == "__main__":
    main()
