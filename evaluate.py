"""evaluate.py: the paper's section 3 evaluations in miniature — code, math, science (GPQA), deep-search QA,
alignment (Arena-Hard) and tool use (BFCL) — on each benchmark's own public file format, for one or more
checkpoints or an OpenAI-compatible endpoint, with per-item reports, a summary table and a chart.

    python evaluate.py --suite all                                  # the toy chain: every runs/toy/{sft,point,pair,
                                                                    #   code1,code2,agent} that exists, every shipped
                                                                    #   sample -> runs/eval/toy_chain/{summary.md,chart.png}
    python evaluate.py --suite code --ckpt runs/toy/sft --ckpt runs/toy/code2 --n-samples 4   # pass@1 and pass@4
    python evaluate.py --suite math --data /path/matharena/aime_2025 --endpoint http://127.0.0.1:8000/v1 --model M
    python evaluate.py --suite tool --data /path/bfcl_eval/data/BFCL_v4_simple.json --ckpt /path/Nanbeige4.1-3B
    python -m pytest tests/test_evaluate.py

Suites, their file formats and metrics: see nanbeige41/benchmarks.py (loaders and scoring rules) and the README's
"Evaluation" section. Generation goes through nanbeige41.generate (in-process, batched) or
agent_policies.EndpointPolicy (any OpenAI-compatible server; its reply is put back into the family's text layout).
Code verdicts come from code_judge.py (sandboxed; LiveCodeBench's comparison rules), deep-search answers from
search_agent.py's agent loop and scorers, preference wins from reward_models.py's pair-wise RM (both orders).

Writes OUT/<model>/report.json (OUT/<suite>/<model>/ with --suite all; per item: id, each sample's response, parsed
answer, score, failure reason; the sampling settings), .../cache.jsonl (finished items by id: a rerun resumes), OUT/summary.md and
OUT/chart.png (SVG without matplotlib). Deterministic for a seed: items are generated in fixed chunks, chunk c with
seed (seed, c), so a resumed run regenerates exactly what a fresh one would. Every failure (generation, judge, tool
loop) is scored 0 with its reason; nothing is dropped.

Not covered: LCB-Pro / HLE / Multi-Challenge / Tau2 / LeetCode submission; BFCL multi-turn; Arena-Hard's style
control and bootstrap intervals (we report the plain win rate with ties as half).
"""
import argparse
import hashlib
import json
import os
import random
import re
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import torch

import code_judge
import reward_models
import search_agent
from nanbeige41 import agent_policies, openai_api, search_tools
from nanbeige41 import benchmarks as B
from nanbeige41 import paths
from nanbeige41.benchmarks import pass_at_k
from nanbeige41.generate import generate
from nanbeige41.model import Transformer
from nanbeige41.plot import bar_chart
from nanbeige41.tokenizer import Tokenizer, toy_tokenizer_path
from reward_models import split_response

ROOT = os.path.dirname(os.path.abspath(__file__))
SUITES = ("code", "math", "gpqa", "qa", "pref", "tool")
SAMPLES = os.path.join(ROOT, "data", "eval")
DEFAULT_DATA = {"code": os.path.join(SAMPLES, "code", "code_generation_lite.jsonl"),
                "math": os.path.join(SAMPLES, "math", "problems.jsonl"),
                "gpqa": os.path.join(SAMPLES, "gpqa", "gpqa_sample.jsonl"),
                "qa": os.path.join(SAMPLES, "qa", "toy_world_qa.jsonl"),
                "pref": os.path.join(SAMPLES, "pref"),
                "tool": os.path.join(SAMPLES, "tool")}
DEFAULT_RM = os.path.join(ROOT, "runs", "toy", "rm_pair")
CHAIN = ("sft", "point", "pair", "code1", "code2", "agent")  # runs/toy/<stage>, in training order
MAX_NEW_TOKENS = {"code": 512, "math": 384, "gpqa": 256, "qa": 256, "pref": 256, "tool": 256}
HEADLINE = {"code": "pass@1", "math": "accuracy", "gpqa": "accuracy", "qa": "gaia", "pref": "win_rate",
            "tool": "accuracy"}
MATH_PROMPT = "{problem}\n\nPut the final answer in \\boxed{{}}."
GPQA_PROMPT = "{question}\n\n{choices}\n\nAnswer with the letter of the correct choice, as 'The answer is (X)'."
CODE_STDIN = "Write a Python program that reads standard input and prints the answer."  # = the toy SFT/RL prompt
CODE_STARTER = ("Complete the following starter code in Python and return the whole solution in one "
                "```python block.\n```python\n{starter}\n```")


class EvalError(Exception):
    """Bad input or setup: printed as `evaluate: error: ...`, exit status 2."""


# -----------------------------------------------------------------------------
# Generation: a checkpoint in-process, or an endpoint

class Generator:
    """(messages, tools) requests -> [{text, finish_reason}], text in the family's layout
    ("reasoning\\n</think>\\n\\ncontent<tool_call>...</tool_call>")."""

    def __init__(self, args, ckpt=None):
        self.args, self.ckpt = args, ckpt
        tok_dir = ckpt if ckpt and os.path.isfile(os.path.join(ckpt, "tokenizer.json")) else toy_tokenizer_path()
        self.tok = Tokenizer.from_pretrained(tok_dir)
        self.model = self.endpoint = None
        if ckpt:
            if not os.path.isfile(os.path.join(ckpt, "config.json")):
                raise EvalError(f"{ckpt}: not a checkpoint directory (no config.json)")
            device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
            self.model = Transformer.from_pretrained(ckpt, device=device,
                                                     dtype=torch.bfloat16 if device == "cuda" else None).eval()
        else:
            self.endpoint = agent_policies.EndpointPolicy(args.endpoint, args.model, self.tok,
                                                        temperature=args.temperature, retries=args.retries)

    def __call__(self, requests, max_new_tokens, seed):
        if self.endpoint is not None:  # tools=None rather than [] when there are none: servers reject an empty list
            outs = self.endpoint.generate([{"messages": m, "tools": t or None} for m, t in requests], max_new_tokens)
        else:
            prompts = [self.tok.encode(self.tok.render(m, tools=t, add_generation_prompt=True)) for m, t in requests]
            outs = generate(self.model, prompts, max_new_tokens, temperature=self.args.temperature,
                            top_p=self.args.top_p, eos_ids=[self.tok.im_end_id], seed=seed)
        return [{"text": self.tok.decode(o["tokens"]), "finish_reason": o["finish_reason"]} for o in outs]

    def policy(self, seed):
        """A search_agent policy for the qa suite's tool loop."""
        if self.endpoint is not None:
            return self.endpoint
        return agent_policies.ModelPolicy(self.model, self.tok, self.args.temperature, self.args.top_p, seed=seed)


# -----------------------------------------------------------------------------
# Suites: load items, build prompts, score a chunk of generations

def load_items(suite, path, args):
    if suite == "code":
        try:
            problems = code_judge.load_problems(path)
        except code_judge.ProblemError as e:
            raise B.FormatError(f"{e} (expected LiveCodeBench code_generation_lite rows: question_id, "
                                "question_content, public_test_cases, private_test_cases, metadata, starter_code)")
        return [dict(p, id=p["question_id"]) for p in problems]
    if suite == "math":
        return B.load_math(path)
    if suite == "gpqa":
        return B.load_gpqa(path)
    if suite == "qa":
        return B.load_qa(path)
    if suite == "pref":
        return B.load_arena(path, args.baseline)
    return B.load_bfcl(path)


def prompt_of(suite, item, seed):
    """(messages, tools) for one item."""
    if suite == "code":
        tail = CODE_STARTER.format(starter=item["starter_code"].rstrip()) if item["starter_code"].strip() else CODE_STDIN
        return [{"role": "user", "content": f"{item['question_content']}\n{tail}"}], None
    if suite == "math":
        return [{"role": "user", "content": MATH_PROMPT.format(problem=item["problem"])}], None
    if suite == "gpqa":
        order = shuffled_choices(item, seed)
        choices = "\n".join(f"({B.LETTERS[k]}) {item['choices'][j]}" for k, j in enumerate(order))
        return [{"role": "user", "content": GPQA_PROMPT.format(question=item["question"], choices=choices)}], None
    if suite == "pref":
        return [{"role": "user", "content": item["prompt"]}], None
    return item["messages"], B.bfcl_tools(item["functions"])


def shuffled_choices(item, seed):
    """The choice order shown for an item: a permutation drawn from (seed, item id) alone."""
    rng = random.Random(f"{seed}:{item['id']}")
    order = list(range(len(item["choices"])))
    rng.shuffle(order)
    return order


def sample_record(gen, parsed, correct, failure, **extra):
    return {"response": gen["text"], "finish_reason": gen["finish_reason"], "parsed": parsed,
            "correct": bool(correct), "failure": "" if correct else failure, **extra}


def score_chunk(suite, items, gens, args, ctx):
    """gens[i]: the n_samples generations of items[i]. Returns one list of sample records per item."""
    tok = ctx["tok"]
    if suite == "code":
        return score_code(items, gens, args, tok)
    if suite == "pref":
        return score_pref(items, gens, args, ctx)
    out = []
    for item, samples in zip(items, gens):
        recs = []
        for g in samples:
            msg = tok.parse_assistant(g["text"])
            content = msg["content"] if msg["reasoning"] is not None else g["text"]
            cut = " (cut at the token limit)" if g["finish_reason"] == "length" else ""
            if suite == "math":
                answer, where = B.extract_math_answer(content)
                ok = B.math_equal(answer, item["answer"])
                recs.append(sample_record(g, answer, ok, ("no answer found" if answer is None else
                                                          f"wrong answer, expected {item['answer']}") + cut,
                                          parsed_from=where))
            elif suite == "gpqa":
                order = shuffled_choices(item, args.seed)
                letter = B.extract_choice(content, len(order))
                gold = B.LETTERS[order.index(item["answer_index"])]
                recs.append(sample_record(g, letter, letter == gold, ("no letter found" if letter is None else
                                                                      f"chose {letter}, expected {gold}") + cut))
            else:  # tool
                calls = [{"name": c["name"], "arguments": c["arguments"]} for c in msg["tool_calls"]]
                ok, why = B.bfcl_check(item, calls)
                if msg["errors"] and not ok:
                    why = f"{why}; unparsed output: {'; '.join(msg['errors'])}"
                recs.append(sample_record(g, calls, ok, why + cut))
        out.append(recs)
    return out


def score_code(items, gens, args, tok):
    """Each sample's program through the code judge (LiveCodeBench rules: a sample passes when every public and
    private test is AC); passing samples of problems labelled with optimal_complexity also get the complexity
    judge (code_judge.cached_complexity, fast setting)."""
    limits = code_judge.Limits(time_s=args.test_time_s, stop_after_tle=True)

    def one(job):
        item, g = job
        msg = tok.parse_assistant(g["text"])
        content = msg["content"] if msg["reasoning"] is not None else g["text"]
        cut = g["finish_reason"] == "length"
        code = code_judge.extract_code(content) if "```" in content else None  # LCB reads fenced code only
        if not code or not code.strip():
            return sample_record(g, None, False, "no ```python block" + (" (cut at the token limit)" if cut else ""),
                                 truncated=cut, verdicts=[], meets_optimal=None)
        try:
            r = code_judge.judge(item, code, limits=limits)
        except Exception as e:  # noqa: BLE001 — a judge failure is this sample's failure, with the reason
            return sample_record(g, code, False, f"judge failed: {type(e).__name__}: {e}", truncated=cut,
                                 verdicts=[], meets_optimal=None)
        ok = r["passed"] == r["total"]
        meets = None
        if ok and item.get("optimal_complexity") and item.get("input_generator") and not args.no_complexity:
            try:
                meets = bool(code_judge.cached_complexity(item, code, fast=True)["meets_optimal"])
            except Exception as e:  # noqa: BLE001
                meets = False
                print(f"evaluate: complexity judge failed on {item['id']}: {e}", file=sys.stderr)
        first_bad = next((f"test {k}: {v}" for k, v in enumerate(r["verdicts"]) if v != "AC"), "")
        return sample_record(g, code, ok, f"{r['passed']}/{r['total']} tests passed; first failure {first_bad}",
                             truncated=cut, verdicts=r["verdicts"], meets_optimal=meets)

    jobs = [(item, g) for item, samples in zip(items, gens) for g in samples]
    with ThreadPoolExecutor(args.judge_workers) as pool:
        flat = list(pool.map(one, jobs))
    k = args.n_samples
    return [flat[i * k:(i + 1) * k] for i in range(len(items))]


def score_pref(items, gens, args, ctx):
    """Win against the baseline answer: the pair-wise RM's P(response beats baseline), asked in both orders and
    averaged (reward_models.pair_win_probs); a win when > 0.5, a tie at exactly 0.5. Or an LLM judge (both
    orders, Arena-Hard's [[A>B]] labels) when --judge-endpoint is given."""
    flat = [(item, g) for item, samples in zip(items, gens) for g in samples]
    if args.judge_endpoint:
        probs = [arena_judge(ctx["judge_chat"], item["prompt"], g["text"], item["baseline"]) for item, g in flat]
    else:
        prm, rm_tok = ctx["rm"]
        probs = reward_models.pair_win_probs(prm, rm_tok, [[{"role": "user", "content": it["prompt"]}] for it, _ in flat],
                                             [g["text"] for _, g in flat], [it["baseline"] for it, _ in flat])
    recs = [sample_record(g, round(p, 4), p > 0.5, "tie with the baseline" if p == 0.5 else "lost to the baseline",
                          win_score=1.0 if p > 0.5 else 0.5 if p == 0.5 else 0.0)
            for (item, g), p in zip(flat, probs)]
    k = args.n_samples
    return [recs[i * k:(i + 1) * k] for i in range(len(items))]


ARENA_PROMPT = """Compare two answers to the user's prompt. Prompt:
{prompt}

[Answer A]
{a}

[Answer B]
{b}

Reply with one verdict label: [[A>>B]], [[A>B]], [[A=B]], [[B>A]] or [[B>>A]]."""
ARENA_SCORE = {"A>>B": 1.0, "A>B": 1.0, "A=B": 0.5, "B>A": 0.0, "B>>A": 0.0}


def arena_judge(chat, prompt, response, baseline):
    """The response's mean score over both orders (1 win, 0.5 tie, 0 loss); an unreadable verdict is a loss."""
    answer = split_response(response)[1]
    scores = []
    for a, b, mine in ((answer, baseline, "A"), (baseline, answer, "B")):
        reply = chat([{"role": "user", "content": ARENA_PROMPT.format(prompt=prompt, a=a, b=b)}]) or ""
        found = re.findall(r"\[\[(A>>B|A>B|A=B|B>A|B>>A)\]\]", reply)
        if not found:
            scores.append(0.0)
            continue
        score_a = ARENA_SCORE[found[-1]]
        scores.append(score_a if mine == "A" else 1.0 - score_a)
    return sum(scores) / 2


def run_qa_chunk(items, gen, args, seed, ctx):
    """The deep-search agent (search_agent.rollout_groups) on a chunk: n_samples episodes per question."""
    config = search_agent.AgentConfig(max_turns=args.max_turns, max_new_tokens=args.max_new_tokens or MAX_NEW_TOKENS["qa"],
                                      max_context_tokens=args.max_context)
    groups = search_agent.rollout_groups(gen.policy(seed), [{"question": it["question"], "answer": it["answer"]}
                                                            for it in items], args.n_samples, gen.tok, ctx["toolbox"],
                                         config, score_method="llm" if args.judge_endpoint else "gaia",
                                         judge_chat=ctx.get("judge_chat"))
    out = []
    for item, records in zip(items, groups):
        recs = []
        for rec in records:
            last = rec["turns"][-1] if rec["turns"] else None
            text = agent_policies.assistant_text(gen.tok, last["message"]) if last else ""
            s = rec["scores"]
            why = {"answer": f"wrong answer, expected {item['answer']}"}.get(rec["termination"],
                                                                               f"ended by {rec['termination']}")
            if rec.get("error"):
                why += f" ({rec['error']})"
            recs.append(sample_record({"text": text, "finish_reason": last["finish_reason"] if last else "error"},
                                      rec["final_answer"], bool(s["correct"]), why, em=s["em"], f1=s["f1"],
                                      gaia=bool(s["gaia"]), turns=len(rec["turns"]), termination=rec["termination"],
                                      tool_calls=[c for t in rec["turns"] for c in t["tool_calls"]]))
        out.append(recs)
    return out


# -----------------------------------------------------------------------------
# Metrics

def summarize(suite, records, n_samples):
    samples = [s for r in records for s in r["samples"]]
    mean = lambda xs: sum(xs) / len(xs) if xs else 0.0  # noqa: E731
    acc = mean([float(s["correct"]) for s in samples])
    m = {"items": len(records), "samples": len(samples)}
    if suite == "code":
        for k in sorted({1, n_samples}):
            m[f"pass@{k}"] = mean([pass_at_k(len(r["samples"]), sum(s["correct"] for s in r["samples"]), k)
                                   for r in records])
        labelled = [s for r in records if r.get("labelled") for s in r["samples"]]
        m["optimal_share"] = mean([float(bool(s["correct"] and s["meets_optimal"])) for s in labelled]) if labelled else None
        m["truncated"] = mean([float(s["finish_reason"] == "length") for s in samples])
    elif suite == "qa":
        m.update(gaia=acc, em=mean([s["em"] for s in samples]), f1=mean([s["f1"] for s in samples]),
                 turns=mean([s["turns"] for s in samples]),
                 answered=mean([float(s["termination"] == "answer") for s in samples]),
                 terminations=" ".join(f"{k}:{v}" for k, v in sorted(Counter(s["termination"] for s in samples).items())))
    elif suite == "pref":
        m.update(win_rate=mean([s["win_score"] for s in samples]), mean_win_prob=mean([float(s["parsed"]) for s in samples]))
    else:
        m["accuracy"] = acc
        if suite == "math":
            m["boxed"] = mean([float(s["parsed_from"] == "boxed") for s in samples])
        if suite == "tool":
            for cat in sorted({r["category"] for r in records}):
                m[f"acc_{cat}"] = mean([float(s["correct"]) for r in records if r["category"] == cat for s in r["samples"]])
    return m


# -----------------------------------------------------------------------------
# One suite on one model: chunks, cache, progress

def evaluate(suite, items, gen, args, out_dir, ctx):
    os.makedirs(out_dir, exist_ok=True)
    n_new = args.max_new_tokens or MAX_NEW_TOKENS[suite]
    settings = {"suite": suite, "data": ctx["data"], "model": gen.ckpt or f"{args.endpoint} {args.model}",
                "n_samples": args.n_samples, "temperature": args.temperature, "top_p": args.top_p,
                "max_new_tokens": n_new, "seed": args.seed, "chunk": args.batch_size,
                "items_sha": hashlib.sha256(json.dumps([it["id"] for it in items]).encode()).hexdigest()[:16]}
    ids = [it["id"] for it in items]
    if len(set(ids)) != len(ids):
        raise EvalError(f"{ctx['data']}: duplicate item ids (the cache keys on them)")
    cache_path = os.path.join(out_dir, "cache.jsonl")
    done = {}
    if os.path.isfile(cache_path):
        lines, cut = [], 0
        for line in open(cache_path, encoding="utf-8"):
            try:
                lines.append(json.loads(line))
            except json.JSONDecodeError:  # a line cut by a crash: that item is done again
                cut += 1
        if cut:
            print(f"evaluate: {cache_path}: {cut} unreadable line(s) (cut by a crash?): those items run again",
                  file=sys.stderr)
        wanted = set(ids)
        if lines and lines[0].get("settings") == settings:
            done = {r["id"]: r for r in lines[1:] if r.get("id") in wanted}
        else:
            print(f"evaluate: {cache_path} was written with other settings: starting over", file=sys.stderr)
    if not done:
        with open(cache_path, "w", encoding="utf-8") as f:
            f.write(json.dumps({"settings": settings}) + "\n")
    start, n_todo, n_done = time.monotonic(), sum(i not in done for i in ids), 0
    label = f"{suite} {os.path.basename(os.path.normpath(gen.ckpt)) if gen.ckpt else args.model}"
    for c in range(0, len(items), args.batch_size):
        chunk = items[c:c + args.batch_size]
        todo = [it for it in chunk if it["id"] not in done]
        if not todo:
            continue
        seed = args.seed * 1_000_003 + c // args.batch_size  # the chunk's seed: fixed by its position alone
        try:
            if suite == "qa":
                scored = run_qa_chunk(chunk, gen, args, seed, ctx)
            else:
                # the whole chunk is generated (same batch, same seed: the same samples as a fresh run); only
                # its unfinished items are scored
                reqs = [prompt_of(suite, it, args.seed) for it in chunk for _ in range(args.n_samples)]
                flat, k = gen(reqs, n_new, seed), args.n_samples
                keep = [i for i, it in enumerate(chunk) if it["id"] not in done]
                scored = score_chunk(suite, [chunk[i] for i in keep], [flat[i * k:(i + 1) * k] for i in keep], args, ctx)
                scored = dict(zip(keep, scored))
                scored = [scored.get(i) for i in range(len(chunk))]
        except EvalError:
            raise
        except Exception as e:  # noqa: BLE001 — generation or scoring failed: every item of the chunk scores 0
            reason = f"{'generation' if suite != 'qa' else 'agent loop'} failed: {type(e).__name__}: {e}"
            scored = [[sample_record({"text": "", "finish_reason": "error"}, None, False, reason)
                       for _ in range(args.n_samples)] for _ in chunk]
        with open(cache_path, "a", encoding="utf-8") as f:
            for it, samples in zip(chunk, scored):
                if it["id"] in done:
                    continue
                rec = {"id": it["id"], "score": sum(s["correct"] for s in samples) / len(samples), "samples": samples}
                if suite == "tool":
                    rec["category"] = it["category"]
                if suite == "code":
                    rec["labelled"] = bool(it.get("optimal_complexity") and it.get("input_generator"))
                done[it["id"]] = rec
                f.write(json.dumps(rec, ensure_ascii=False) + "\n")
        n_done += len(todo)
        rate = n_done / max(time.monotonic() - start, 1e-9)
        print(f"\r[{label}] {sum(i in done for i in ids)}/{len(ids)} items  {rate:.2f} items/s  "
              f"ETA {(n_todo - n_done) / rate:.0f} s ", end="", file=sys.stderr, flush=True)
    if n_todo:
        print(file=sys.stderr)
    records = [done[i] for i in ids]
    metrics = summarize(suite, records, args.n_samples)
    with open(os.path.join(out_dir, "report.json"), "w", encoding="utf-8") as f:
        json.dump({"settings": settings, "metrics": metrics, "items": records}, f, ensure_ascii=False, indent=1)
    return metrics


# -----------------------------------------------------------------------------
# Tables and the chart

def fmt(v):
    return "-" if v is None else f"{v:.3f}" if isinstance(v, float) else str(v)


def write_summary(results, out_dir, title):
    """results: {model: {suite: metrics}}. summary.md (one table per suite + the headline table) and the chart."""
    models = list(results)
    suites = [s for s in SUITES if any(s in results[m] for m in models)]
    lines = [f"# {title}", "", "| model | " + " | ".join(f"{s} {HEADLINE[s]}" for s in suites) + " |",
             "|---|" + "---|" * len(suites)]
    for m in models:
        lines.append(f"| {m} | " + " | ".join(fmt(results[m].get(s, {}).get(HEADLINE[s])) for s in suites) + " |")
    for s in suites:
        keys = [k for k in next(results[m][s] for m in models if s in results[m]) if k not in ("items", "samples")]
        lines += ["", f"## {s}", "", "| model | items | " + " | ".join(keys) + " |", "|---|---|" + "---|" * len(keys)]
        for m in models:
            if s in results[m]:
                lines.append(f"| {m} | {results[m][s]['items']} | " + " | ".join(fmt(results[m][s].get(k)) for k in keys) + " |")
    with open(os.path.join(out_dir, "summary.md"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    shown = [(s, HEADLINE[s]) for s in suites] + [("code", "optimal_share")] * ("code" in suites)
    groups = {f"{s}\n{key}": {m: results[m][s][key] for m in models if s in results[m]} for s, key in shown}
    chart = bar_chart(groups, os.path.join(out_dir, "chart.png"), title)
    return os.path.join(out_dir, "summary.md"), chart


# -----------------------------------------------------------------------------
# Command line

def main(argv=None):
    p = argparse.ArgumentParser(description="Evaluate checkpoints or an endpoint on benchmark files (paper section 3).")
    p.add_argument("--suite", required=True, choices=SUITES + ("all",), help="all: every suite on its shipped sample")
    p.add_argument("--data", help="benchmark file or folder (default: the shipped sample under data/eval/)")
    # Model
    p.add_argument("--ckpt", action="append", default=[], help="HF-format checkpoint directory (repeatable)")
    p.add_argument("--endpoint", help="OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1")
    p.add_argument("--model", default="default", help="model name sent to --endpoint")
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    # Sampling
    p.add_argument("--n-samples", type=int, default=1, help="samples per item (pass@k for k = 1 and n)")
    p.add_argument("--temperature", type=float, default=None, help="default 0 for one sample, else 0.7")
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--max-new-tokens", type=int, default=None, help="default per suite: %s" % MAX_NEW_TOKENS)
    p.add_argument("--batch-size", type=int, default=8, help="items per generation chunk")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--retries", type=int, default=3, help="endpoint retries per request")
    # Suite options
    p.add_argument("--baseline", help="pref: the baseline answers JSONL (default: DATA/model_answer/*.jsonl)")
    p.add_argument("--rm", default=DEFAULT_RM, help="pref: pair-wise RM checkpoint")
    p.add_argument("--judge-endpoint", help="LLM judge for pref (Arena-Hard labels) and qa (correct: yes/no)")
    p.add_argument("--judge-model", default="default")
    p.add_argument("--test-time-s", type=float, default=6.0, help="code: wall clock per test (LCB: 6 s)")
    p.add_argument("--judge-workers", type=int, default=2, help="code: candidates judged in parallel")
    p.add_argument("--no-complexity", action="store_true", help="code: skip the optimal-complexity judge")
    p.add_argument("--max-turns", type=int, default=16, help="qa: tool-call turns per episode")
    p.add_argument("--max-context", type=int, default=4096, help="qa: the agent's context window in tokens")
    p.add_argument("--backend", choices=["local", "web"], default="local", help="qa: toy wiki or web search")
    # Output
    p.add_argument("--out", default=None, help="output folder (default runs/eval/<suite>, or runs/eval/toy_chain)")
    args = p.parse_args(argv)
    if args.temperature is None:
        args.temperature = 0.0 if args.n_samples == 1 else 0.7
    try:
        return run(args)
    except EvalError as e:
        print(f"evaluate: error: {e}", file=sys.stderr)
        return 2
    except ValueError as e:  # FormatError and read_jsonl's file:line errors
        print(f"evaluate: error: {e}", file=sys.stderr)
        return 2


def run(args):
    if args.n_samples < 1 or args.batch_size < 1:
        raise EvalError("--n-samples and --batch-size must be >= 1")
    if args.n_samples > 1 and args.temperature == 0:
        raise EvalError("--n-samples > 1 with --temperature 0 repeats one greedy sample: pass@k would be meaningless")
    suites = SUITES if args.suite == "all" else (args.suite,)
    if args.suite == "all" and args.data:
        raise EvalError("--suite all runs the shipped samples; give --data with one suite")
    ckpts = list(args.ckpt)
    if args.endpoint and ckpts:
        raise EvalError("give --ckpt or --endpoint, not both")
    if not ckpts and not args.endpoint:
        if args.suite != "all":
            raise EvalError("give --ckpt DIR (repeatable) or --endpoint URL --model NAME")
        ckpts = [os.path.join(ROOT, "runs", "toy", s) for s in CHAIN
                 if os.path.isfile(os.path.join(ROOT, "runs", "toy", s, "config.json"))]
        if not ckpts:
            raise EvalError("no toy checkpoint under runs/toy/ (make one: python train_sft.py --config toy --out "
                            "runs/toy/sft, then train_grpo.py --stage point|pair|code1|code2|agent)")
    out = args.out or os.path.join(ROOT, "runs", "eval", "toy_chain" if args.suite == "all" else args.suite)
    items_by_suite = {}
    for s in suites:  # all files are read (and checked) before any model runs
        data = args.data or DEFAULT_DATA[s]
        if not os.path.exists(data):
            raise EvalError(f"{data}: no such file or folder")
        items = load_items(s, data, args)
        if not items:
            raise EvalError(f"{data}: empty data set (no items)")
        items_by_suite[s] = (data, items)
    names = [os.path.basename(os.path.normpath(c)) for c in ckpts] or [args.model]
    if len(set(names)) != len(names):
        names = [c.strip("/").replace("/", "_") for c in ckpts]
    results = {n: {} for n in names}
    shared = {}
    if "qa" in suites:
        shared["toolbox"] = search_tools.make_toolbox(args.backend)
    if args.judge_endpoint:
        shared["judge_chat"] = openai_api.endpoint_chat(args.judge_endpoint, args.judge_model)
    if "pref" in suites and not args.judge_endpoint:
        if args.suite == "all" and not args.ckpt and args.rm == DEFAULT_RM:
            paths.build_missing(args.rm, "reward_head.json", ["reward_models.py", "train", "--kind", "pair",
                                                              "--out", args.rm], print)
        if not os.path.isfile(os.path.join(args.rm, "reward_head.json")):
            raise EvalError(f"{args.rm}: no pair-wise RM (train one: python reward_models.py train --kind pair), "
                            "or judge with --judge-endpoint URL")
        shared["rm"] = (reward_models.load_reward_model(args.rm), Tokenizer.from_pretrained(args.rm))
    for name, ckpt in zip(names, ckpts or [None]):
        gen = Generator(args, ckpt)
        for s in suites:
            data, items = items_by_suite[s]
            ctx = dict(shared, tok=gen.tok, data=data)
            results[name][s] = evaluate(s, items, gen, args, os.path.join(out, s if len(suites) > 1 else "", name), ctx)
            print(f"{name} {s}: " + "  ".join(f"{k}={fmt(v)}" for k, v in results[name][s].items()))
    title = "toy chain" if args.suite == "all" and not args.ckpt else f"{args.suite} evaluation"
    summary, chart = write_summary(results, out, title)
    print(f"wrote {summary} and {chart}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
