"""Can the toy model learn the search agent's task? The diagnostic behind issue 13's toy base model.

    python bench/agent_learnability.py --out runs/diag --variant base      # pretrain -> SFT -> search SFT -> eval
    python bench/agent_learnability.py --out runs/diag --variant nobase    # SFT -> search SFT -> eval
    python bench/agent_learnability.py --out x --probe-only CKPT --probe-n 64 --eval-n 32   # probes + eval only

Each variant runs the project's own scripts (train_sft.py) and scores the result with
search_agent.evaluate_agent on held-out questions of the shipped world: accuracy by hops, turns,
terminations, and the cheapest signal of all, how often the first search query contains the question's
head entity (copied from the question). Prints one JSON line per variant and writes OUT/VARIANT/eval.json.
"""
import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def sh(args, log):
    t = time.time()
    with open(log, "w") as f:
        subprocess.run([sys.executable] + args, check=True, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT)
    return time.time() - t


def copy_probe(model, tok, world, questions):
    """Teacher-forced: feed the scripted expert's trajectory of each question up to its first search query and
    ask whether the model's greedy next tokens reproduce the head entity's name there. Returns the share of
    questions whose first name token / every name token is predicted (one forward pass per question)."""
    import torch
    import search_agent as sa
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
    copies from its context predicts the repeats far better than the first mention."""
    import torch
    from nanbeige41 import toy_world
    world = toy_world.generate_world(world_seed)
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


def held_out_questions(max_hops=0):
    """The test split of the shipped world (never trained on), optionally only questions of <= max_hops hops
    (the agent stage's held-out set under --agent-max-hops)."""
    from nanbeige41 import toy_world
    import search_agent as sa
    questions = toy_world.load_questions(sa.QUESTIONS_PATH, "test")
    return [q for q in questions if not max_hops or q["hops"] <= max_hops]


def long_horizon(ckpt, n, max_hops=0, max_turns=60, keep_last_k=2, rewrite_slack=1, context=2048):
    """The trained agent through the context policy with room for long episodes (issue 13, result 4): greedy,
    up to `max_turns` turns, only the last `keep_last_k` tool results verbatim (a rewrite once k + slack have
    accumulated). Reports the turns it sustains before answering and how often the keep-last-K view rewrite
    happens (turns whose prompt was re-rendered with older results replaced by the placeholder)."""
    import search_agent as sa
    from nanbeige41.model import Transformer
    from nanbeige41.tokenizer import Tokenizer
    model = Transformer.from_pretrained(ckpt).eval()
    tok = Tokenizer.from_pretrained(ckpt)
    config = sa.AgentConfig(max_turns=max_turns, max_new_tokens=128, max_context_tokens=context,
                            keep_last_k=keep_last_k, rewrite_slack=rewrite_slack)
    ev = sa.evaluate_agent(model, tok, held_out_questions(max_hops)[:n], sa.make_toolbox("local"), config,
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


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--variant", default="base", choices=["base", "nobase"])
    p.add_argument("--worlds", type=int, default=20, help="fresh worlds in the pretraining text")
    p.add_argument("--pretrain-steps", type=int, default=1000)
    p.add_argument("--pretrain-batch", type=int, default=8192)
    p.add_argument("--sft-steps", type=int, default=500)
    p.add_argument("--search-steps", type=int, default=300)
    p.add_argument("--search-batch", type=int, default=4096)
    p.add_argument("--eval-n", type=int, default=64)
    p.add_argument("--probe-n", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--probe-only", default=None, help="a checkpoint: print the probes, train nothing")
    p.add_argument("--max-hops", type=int, default=0, help="held-out questions of <= this many hops (0: all)")
    p.add_argument("--long-horizon", action="store_true", help="with --probe-only: the context-policy run instead")
    args = p.parse_args()
    if args.probe_only and args.long_horizon:
        print(json.dumps(long_horizon(args.probe_only, args.eval_n, args.max_hops)))
        return
    if args.probe_only:
        from nanbeige41 import toy_world
        from nanbeige41.model import Transformer
        from nanbeige41.tokenizer import Tokenizer
        import search_agent as sa
        model = Transformer.from_pretrained(args.probe_only).eval()
        tok = Tokenizer.from_pretrained(args.probe_only)
        questions = held_out_questions(args.max_hops)
        if args.probe_n:
            print(json.dumps({"ckpt": args.probe_only, **induction_probe(model, tok), **copy_probe(
                model, tok, toy_world.load_world(sa.WORLD_PATH), questions[:args.probe_n])}), flush=True)
        if args.eval_n:  # greedy held-out episodes: 8 turns, 128 new tokens per turn, a 2048-token window
            config = sa.AgentConfig(max_turns=8, max_new_tokens=128, max_context_tokens=2048)
            ev = sa.evaluate_agent(model, tok, questions[:args.eval_n], sa.make_toolbox("local"), config,
                                   batch=args.eval_n)
            ev.pop("records")
            print(json.dumps({"ckpt": args.probe_only, "max_hops": args.max_hops, **ev}))
        return
    out = os.path.join(args.out, args.variant)
    os.makedirs(out, exist_ok=True)
    from nanbeige41 import data, toy_world
    times = {}
    init = []
    if args.variant == "base":
        pre = os.path.join(out, "pretrain.jsonl")
        data.write_jsonl(pre, toy_world.pretraining_docs(range(1, args.worlds + 1)))
        times["pretrain"] = sh(["train_sft.py", "--config", "toy", "--data", pre, "--mixture", "pretrain=1",
                                "--seq-len", "512", "--batch-tokens", str(args.pretrain_batch), "--max-steps",
                                str(args.pretrain_steps), "--eval-data", "--out", os.path.join(out, "base"),
                                "--seed", str(args.seed), "--quiet"], os.path.join(out, "pretrain.log"))
        init = ["--init", os.path.join(out, "base")]
    times["sft"] = sh(["train_sft.py", "--config", "toy", *init, "--max-steps", str(args.sft_steps),
                       "--out", os.path.join(out, "sft"), "--seed", str(args.seed), "--quiet"],
                      os.path.join(out, "sft.log"))
    search = os.path.join(ROOT, "data", "toy", "sft", "search.jsonl")
    if args.search_steps:
        times["search"] = sh(["train_sft.py", "--config", "toy", "--init", os.path.join(out, "sft"), "--data", search,
                              "--mixture", "search=1", "--seq-len", "1024", "--batch-tokens", str(args.search_batch),
                              "--max-steps", str(args.search_steps), "--lr", "1e-3", "--eval-data",
                              "--out", os.path.join(out, "search"), "--seed", str(args.seed), "--quiet"],
                             os.path.join(out, "search.log"))
    import search_agent as sa
    from nanbeige41.model import Transformer
    from nanbeige41.tokenizer import Tokenizer
    ckpt = os.path.join(out, "search" if args.search_steps else "sft")
    model = Transformer.from_pretrained(ckpt).eval()
    import torch
    if torch.cuda.is_available():
        model = model.cuda()
    tok = Tokenizer.from_pretrained(ckpt)
    probe = copy_probe(model, tok, toy_world.load_world(sa.WORLD_PATH),
                       toy_world.load_questions(sa.QUESTIONS_PATH, "test")[:args.probe_n])
    print(json.dumps(probe), flush=True)
    questions = toy_world.load_questions(sa.QUESTIONS_PATH, "test")[:args.eval_n]
    toolbox = sa.make_toolbox("local")
    config = sa.AgentConfig(max_turns=8, max_new_tokens=128, max_context_tokens=2048)
    t = time.time()
    ev = sa.evaluate_agent(model, tok, questions, toolbox, config, batch=64)
    times["eval"] = time.time() - t
    recs = ev.pop("records")
    first_queries = [next((c["arguments"] for tt in r["turns"] for c in tt["tool_calls"]), None) for r in recs[:6]]
    result = {"variant": args.variant, **probe, **ev, "times": times, "examples": [
        {"q": q["question"], "first_call": fq, "answer": r["final_answer"], "gold": q["answer"]}
        for q, r, fq in zip(questions, recs, first_queries)]}
    with open(os.path.join(out, "eval.json"), "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
