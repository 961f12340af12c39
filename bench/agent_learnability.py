"""Can the toy model learn the search agent's task? Issue 13's chain to a toy agent, its probes and evaluations.

    python bench/agent_learnability.py --out runs/toy/agent_chain --variant search     # base -> 3 SFT stages -> eval
    python bench/agent_learnability.py --out runs/toy/agent_chain --variant nosearch   # first SFT stage's budget, no search
    python bench/agent_learnability.py --out x --probe-only CKPT --probe-n 32          # probes + held-out eval only
    python bench/agent_learnability.py --out x --probe-only CKPT --long-horizon --max-hops 0   # context-policy run
    python bench/agent_learnability.py --out x --probe-only CKPT --wide --eval-n 0   # 600 questions, 4 unseen worlds

The chain (build_chain) runs the project's own train_sft.py: a toy base model on fresh worlds' text, then SFT
stages with pretraining-text replay and search trajectories over fresh worlds (SFT_STAGES). Checkpoints are built
only when missing. A checkpoint is scored with search_agent.evaluate_agent, greedy, on held-out questions: by
default the test split (<= 2 hops, 70 questions) of fresh world 4242, the agent stage's held-out set under
`train_grpo.py --stage agent --agent-world-seed 4242 --agent-max-hops 2` (`--world-seed 0`: the shipped world's
62). It prints accuracy by hops, turns, terminations, the critic's fail rate, and how often the first search
query contains the question's head entity (copied from the question), one JSON line per evaluation. `--wide`:
unseen_worlds_eval, 150 questions of <= 2 hops from each of 4 worlds no stage trains on (issue 13's results 1
and 3, where world 4242's 65 questions leave one question at 1.5 points).
"""
import argparse
import json
import os
import subprocess
import sys
import time
from collections import Counter

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
import torch  # noqa: E402

import search_agent as sa  # noqa: E402
from nanbeige41 import data, paths, search_tools, toy_world  # noqa: E402
from nanbeige41.model import Transformer  # noqa: E402
from nanbeige41.tokenizer import Tokenizer  # noqa: E402


def sh(args, log):
    t = time.time()
    with open(log, "w") as f:
        subprocess.run([sys.executable] + args, check=True, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT)
    return time.time() - t


def copy_probe(model, tok, world, questions):
    """Teacher-forced: feed the scripted expert's trajectory of each question up to its first search query and
    ask whether the model's greedy next tokens reproduce the head entity's name there. Returns the share of
    questions whose first name token / every name token is predicted (one forward pass per question)."""
    first = every = n = 0
    for q in questions:
        recs = sa.sft_trajectories(world, [q], max_chars=10**9, critic=sa._PassAll())
        if not recs:
            continue
        messages = recs[0]["messages"][:3]  # system, question, first assistant turn (the search call)
        ids, mask = tok.encode_chat(messages, tools=recs[0]["tools"])
        text_ids = ids
        name = tok.encode(q["head_title"])
        # the name inside the query: the last occurrence of the name's tokens in the assistant part
        starts = [i for i in range(len(ids) - len(name)) if ids[i:i + len(name)] == name and mask[i]]
        if not starts:
            name = tok.encode(" " + q["head_title"])
            starts = [i for i in range(len(ids) - len(name)) if ids[i:i + len(name)] == name and mask[i]]
        if not starts:
            continue
        start = starts[-1]
        with torch.no_grad():
            x = torch.tensor([text_ids], device=model.lm_head.weight.device)
            logits = model(x, torch.arange(len(text_ids), device=x.device)[None])
        pred = logits[0, start - 1:start - 1 + len(name)].argmax(-1).tolist()
        first += pred[0] == name[0]
        every += pred == name
        n += 1
    return {"copy_probe_n": n, "first_name_token": first / max(n, 1), "whole_name": every / max(n, 1)}


def induction_probe(model, tok, world_seed=999, n_pages=150):
    """Language-model level: on the pages of a world never trained on, the mean loss of an entity name's tokens
    where the page names it for the first time vs. again (the title line, then every sentence): a model that
    copies from its context predicts the repeats far better than the first mention. (A fresh world, its own first
    names included, since 2026-11-24; the README's rows before that date used generate_world(999), listed names.)"""
    world = toy_world.fresh_world(world_seed)
    first, again = [], []
    for e in world["entities"][:n_pages]:
        text = f"{e['title']}\n{e['article']}"
        enc = tok._tokenizer.encode(text, add_special_tokens=False)
        ids = enc.ids
        with torch.no_grad():
            x = torch.tensor([ids], device=model.lm_head.weight.device)
            logp = model(x)[0].float().log_softmax(-1)
        starts = [i for i in range(len(text)) if text.startswith(e["title"], i)]
        for k, c in enumerate(starts):
            toks = [j for j, (a, b) in enumerate(enc.offsets) if a < c + len(e["title"]) and b > c and j > 0]
            loss = -sum(float(logp[j - 1, ids[j]]) for j in toks) / max(len(toks), 1)
            (first if k == 0 else again).append(loss)
    return {"name_loss_first_mention": sum(first[1:]) / max(len(first) - 1, 1) if first else None,
            "name_loss_repeat": sum(again) / max(len(again), 1)}


def question_copy_probe(model, tok, questions, max_new_tokens=40):
    """Language-model level, in the plain text of search_agent.trajectory_text: after "Question: <q>\nThought:",
    does the model's greedy thought name the question's head entity exactly? The skill the agent's first query
    needs (README, "The agent stage"). Returns the share of `questions` and a few examples."""
    hits, examples = 0, []
    for q in questions:
        ids = tok.encode(f"Question: {q['question']}\nThought:")
        start = len(ids)
        with torch.no_grad():
            for _ in range(max_new_tokens):
                x = torch.tensor([ids], device=model.lm_head.weight.device)
                ids.append(int(model(x)[0, -1].argmax()))
                if "\n" in tok.decode(ids[-1:]):
                    break
        thought = tok.decode(ids[start:]).strip()
        hits += q["head_title"] in thought
        if len(examples) < 3:
            examples.append([q["question"], thought])
    return {"head_named": hits / max(len(questions), 1), "n": len(questions), "examples": examples}


def held_out_questions(max_hops=0, world_seed=0):
    """The test split (never trained on) of the shipped world's questions, or with `world_seed` of a freshly
    generated world's (as train_grpo --agent-world-seed builds them), optionally only questions of <= max_hops
    hops (the agent stage's held-out set under --agent-max-hops)."""
    if world_seed:
        questions = [q for q in toy_world.synthesize_questions(toy_world.fresh_world(world_seed), seed=world_seed)
                     if q["split"] == "test"]
    else:
        questions = toy_world.load_questions(paths.TOY_QUESTIONS, "test")
    return [q for q in questions if not max_hops or q["hops"] <= max_hops]


def toolbox_for(world_seed=0):
    if not world_seed:
        return search_tools.make_toolbox("local")
    wiki = search_tools.LocalWiki(toy_world.fresh_world(world_seed))
    return search_tools.Toolbox(wiki, wiki, search_tools.sandboxed_python())


def long_horizon(ckpt, n, max_hops=0, world_seed=0, max_turns=60, keep_last_k=2, rewrite_slack=1, context=2048):
    """The trained agent through the context policy with room for long episodes (issue 13, result 4): greedy,
    up to `max_turns` turns, only the last `keep_last_k` tool results verbatim (a rewrite once k + slack have
    accumulated). Reports the turns it sustains before answering and how often the keep-last-K view rewrite
    happens (turns whose prompt was re-rendered with older results replaced by the placeholder)."""
    model = Transformer.from_pretrained(ckpt).eval()
    tok = Tokenizer.from_pretrained(ckpt)
    config = sa.AgentConfig(max_turns=max_turns, max_new_tokens=128, max_context_tokens=context,
                            keep_last_k=keep_last_k, rewrite_slack=rewrite_slack)
    ev = sa.evaluate_agent(model, tok, held_out_questions(max_hops, world_seed)[:n], toolbox_for(world_seed), config,
                           batch=n)
    recs = ev.pop("records")
    turns = [t for r in recs for t in r["turns"]]
    new_views = [t for t in turns if not t["view"]["appended"] and t["index"] > 0]
    answered = [len(r["turns"]) for r in recs if r["termination"] == "answer"]
    return {"ckpt": ckpt, "max_turns": max_turns, "keep_last_k": keep_last_k, "rewrite_slack": rewrite_slack, **ev,
            "max_turns_in_episode": max(len(r["turns"]) for r in recs),
            "turns_before_answer_mean": sum(answered) / max(len(answered), 1),
            "turns_with_placeholder_view": sum(t["view"]["verbatim_from"] > 0 for t in turns) / max(len(turns), 1),
            "rewrites_per_episode": len(new_views) / max(len(recs), 1),
            "segments_per_episode": sum(len(r["segments"]) for r in recs) / max(len(recs), 1),
            "turns_with_dropped_history": sum(t["view"]["dropped"] > 0 for t in turns) / max(len(turns), 1)}


# The held-out episodes as the agent stage runs them: 8 turns, 128 new tokens per turn, a 2048-token window.
EVAL_CONFIG = sa.AgentConfig(max_turns=8, max_new_tokens=128, max_context_tokens=2048)


def held_out_eval(ckpt, n=62, max_hops=2, world_seed=0):
    """Greedy held-out episodes of a checkpoint, as the agent stage runs them (8 turns, 128 new tokens per turn,
    a 2048-token window): search_agent.evaluate_agent's figures, without the records, plus the rate of turns
    (final answers included) the strict critic fails: RuleCritic(strict=True) also fails made-up names and guesses."""
    model = Transformer.from_pretrained(ckpt).eval()
    tok = Tokenizer.from_pretrained(ckpt)
    questions = held_out_questions(max_hops, world_seed)[:n]
    ev = sa.evaluate_agent(model, tok, questions, toolbox_for(world_seed), EVAL_CONFIG, batch=len(questions))
    strict = sa.RuleCritic(strict=True)
    judged = [v for r in ev.pop("records") for v in strict.judge(r["question"], r["turns"]) if v is not None]
    ev["strict_turn_fail_rate"] = sum(not v["pass"] for v in judged) / max(len(judged), 1)
    return {"ckpt": ckpt, "max_hops": max_hops, "world_seed": world_seed, **ev}


# Worlds no stage of the toy agent's chain trains on (the base: worlds 1-60; the search SFT: 1000-1099; the agent stage:
# 4242), so every question in them is held out: the wide held-out set of issue 13's results 1 and 3.
UNSEEN_WORLDS = (9001, 9002, 9003, 9004)


def unseen_worlds_eval(ckpt, worlds=UNSEEN_WORLDS, per_world=150, max_hops=2):
    """held_out_eval's episodes on `per_world` questions of <= `max_hops` hops from each of `worlds`, all splits
    (no stage trains on these worlds): 600 questions by default, where world 4242's 65 leave one question at 1.5
    points. Returns the totals and each world's correct count."""
    model = Transformer.from_pretrained(ckpt).eval()
    tok = Tokenizer.from_pretrained(ckpt)
    per, by_hops, records = {}, Counter(), []
    for w in worlds:
        questions = [q for q in toy_world.synthesize_questions(toy_world.fresh_world(w), seed=w)
                     if q["hops"] <= max_hops][:per_world]
        if len(questions) < per_world:
            raise ValueError(f"world {w} has {len(questions)} questions of <= {max_hops} hops, fewer than {per_world}")
        ev = sa.evaluate_agent(model, tok, questions, toolbox_for(w), EVAL_CONFIG, batch=len(questions))
        per[str(w)] = round(ev["accuracy"] * ev["n"])
        records += ev["records"]
        by_hops.update(str(r["hops"]) for r in ev["records"] if r["score"])
    verdicts = [v for r in records for v in r["verdicts"] if v is not None]
    n = len(records)
    return {"ckpt": ckpt, "worlds": list(worlds), "max_hops": max_hops, "n": n, "correct": sum(per.values()),
            "accuracy": sum(per.values()) / n, "correct_by_world": per,
            "correct_by_hops": dict(sorted(by_hops.items())),
            "questions_by_hops": dict(sorted(Counter(str(r["hops"]) for r in records).items())),
            "turns": sum(len(r["turns"]) for r in records) / n,
            "terminations": dict(Counter(r["termination"] for r in records)),
            "turn_fail_rate": sum(not v["pass"] for v in verdicts) / max(len(verdicts), 1)}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True, help="the chain's directory (checkpoints built when missing)")
    p.add_argument("--variant", default="search", choices=["search", "nosearch"],
                   help="SFT with or without the fresh-world search trajectories")
    p.add_argument("--eval-n", type=int, default=70)
    p.add_argument("--max-hops", type=int, default=2, help="held-out questions of <= this many hops (0: all)")
    p.add_argument("--probe-n", type=int, default=0, help="also print the copy and induction probes")
    p.add_argument("--world-seed", type=int, default=4242, help="held out from a fresh world (0: the shipped one)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--probe-only", default=None, help="a checkpoint: probes and evaluation only, train nothing")
    p.add_argument("--long-horizon", action="store_true", help="with --probe-only: the context-policy run instead")
    p.add_argument("--wide", action="store_true", help="also the 600-question held-out set of UNSEEN_WORLDS")
    args = p.parse_args()
    if args.probe_only and args.long_horizon:
        print(json.dumps(long_horizon(args.probe_only, args.eval_n, args.max_hops, args.world_seed)))
        return
    ckpt = args.probe_only or build_chain(args.out, args.variant == "search", args.seed)
    if args.probe_n:
        model = Transformer.from_pretrained(ckpt).eval()
        tok = Tokenizer.from_pretrained(ckpt)
        print(json.dumps({"ckpt": ckpt, **induction_probe(model, tok), **copy_probe(
            model, tok, toy_world.load_world(paths.TOY_WORLD), held_out_questions(0)[:args.probe_n])}), flush=True)
    if args.eval_n:
        print(json.dumps(held_out_eval(ckpt, args.eval_n, args.max_hops, args.world_seed)))
    if args.wide:
        print(json.dumps(unseen_worlds_eval(ckpt)))


# The SFT stages of the toy agent (issue 13), each from the previous checkpoint, one 1024-token stage at the toy
# lr 2e-3 with 25% pretraining-text replay (keeps the base's copying): (name, steps, mixture, search trajectories
# as fresh_world_trajectories(world seeds, questions per world, hop weights)). "nosearch" is Table 3's ablation:
# the first stage's budget without the search trajectories.
SFT_STAGES = [
    ("sft_search", 400, "code=5,general=10,stem=5,tool=10,search=45,pretrain=25",
     (range(1000, 1100), 60, {1: 2, 2: 3, 3: 2, 4: 1})),
    ("sft_search2", 600, "code=5,general=5,tool=5,search=60,pretrain=25", (range(2000, 2200), 30, {1: 1, 2: 2})),
    ("sft_search3", 600, "general=5,search=70,pretrain=25", (range(3000, 3300), 20, {1: 1, 2: 1})),
]
NOSEARCH = ("sft_nosearch", 400, "code=5,general=10,stem=5,tool=10,pretrain=25", None)


def build_chain(out, with_search=True, seed=0, log=print):
    """The toy agent's checkpoints in OUT, each built only when missing (the repro tests reuse them):
    base/          the toy base model: 30 fresh worlds' text (pretraining_docs), step 300 of a 600-step schedule x
                   4k tokens at seq 512 (6 min on one core);
    sft_search*/   SFT_STAGES from the base (5.7 + ~9 + ~9 min here); sft_nosearch/ with_search=False.
    Returns the last checkpoint."""
    os.makedirs(out, exist_ok=True)
    pre = os.path.join(out, "pretrain.jsonl")
    if not os.path.isfile(pre):
        data.write_jsonl(pre, toy_world.pretraining_docs(range(1, 31)))
    prev = os.path.join(out, "base")
    if not os.path.isfile(os.path.join(prev, "model.safetensors")):
        log(f"building {prev}: " + str(sh(["train_sft.py", "--config", "toy", "--data", pre, "--mixture", "pretrain=1",
                                           "--seq-len", "512", "--batch-tokens", "4096", "--max-steps", "600",
                                           "--stop-after", "300", "--eval-data", "--out", prev, "--seed", str(seed),
                                           "--quiet"], prev + ".log")))
    for name, steps, mixture, search in SFT_STAGES if with_search else [NOSEARCH]:
        ckpt = os.path.join(out, name)
        if not os.path.isfile(os.path.join(ckpt, "model.safetensors")):
            files = [pre] + [os.path.join(ROOT, "data", "toy", "sft", f"{d.split('=')[0]}.jsonl")
                             for d in mixture.split(",") if d.split("=")[0] not in ("search", "pretrain")]
            if search:
                files.append(os.path.join(out, name + "_trajectories.jsonl"))
                data.write_jsonl(files[-1], sa.fresh_world_trajectories(search[0], search[1], search[2]))
            log(f"building {ckpt}: " + str(sh(["train_sft.py", "--config", "toy", "--init", prev, "--seq-len", "1024",
                                               "--data", *files, "--mixture", mixture, "--max-steps", str(steps),
                                               "--eval-data", "--out", ckpt, "--seed", str(seed), "--quiet"],
                                              ckpt + ".log")))
        prev = ckpt
    return prev

if __name__ == "__main__":
    main()
