"""Benchmark of search_agent.py (paper section 2.2): agent-loop turns per second and BM25 query latency.

    python bench/bench_search_agent.py                 # ~15 s on 2 CPU cores
    python bench/bench_search_agent.py --turns 600 --max-context-tokens 32768

1. Loop overhead: a scripted policy (no model) drives --turns search/visit turns against the offline wiki
   with the default context policy, so the figure is everything except generation: tool calls, rendering,
   tokenising, context rewrites, the record. Reported with the share spent inside the tools.
2. rollout_group: G scripted-expert rollouts of toy questions in lockstep (what the GRPO agent stage runs,
   minus the model), in turns per second.
3. BM25: latency of `LocalWiki.search` (scores + top-k + snippet) and of the bare `BM25.scores` over the
   shipped world, for the queries of the shipped SFT trajectories; median and p95.
"""
import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import search_agent as sa  # noqa: E402
from nanbeige41 import agent_policies, paths, search_tools  # noqa: E402
from nanbeige41 import toy_world  # noqa: E402
from nanbeige41.tokenizer import Tokenizer, toy_tokenizer_path  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("--turns", type=int, default=600)
p.add_argument("--max-context-tokens", type=int, default=sa.AgentConfig.max_context_tokens)
p.add_argument("--group-size", type=int, default=8)
p.add_argument("--questions", type=int, default=8)
args = p.parse_args()

tok = Tokenizer.from_pretrained(toy_tokenizer_path())
world = toy_world.load_world(paths.TOY_WORLD)
wiki = search_tools.LocalWiki(world)
toolbox = search_tools.Toolbox(wiki, wiki)
tool_seconds = [0.0]
raw_call = toolbox.call


def timed_call(name, arguments):
    t0 = time.perf_counter()
    try:
        return raw_call(name, arguments)
    finally:
        tool_seconds[0] += time.perf_counter() - t0


toolbox.call = timed_call
entities = world["entities"]


def script(messages, turn):
    e = entities[(7 * turn) % len(entities)]
    if turn % 3 == 2:
        tool_call = {"name": "visit", "arguments": {"url": e["url"], "goal": "founded"}}
    else:
        tool_call = {"name": "search", "arguments": {"query": e["title"] + " founded"}}
    return {"role": "assistant", "reasoning_content": f"Look at {e['title']}.", "content": "",
            "tool_calls": [{"type": "function", "function": tool_call}]}


# 1. loop turns/s
config = sa.AgentConfig(max_turns=args.turns, max_context_tokens=args.max_context_tokens)
t0 = time.perf_counter()
rec = sa.run_agent(agent_policies.ScriptedPolicy(script, tok), "Which company was founded first?", tok, toolbox, config)
loop_s = time.perf_counter() - t0
turns = len(rec["turns"])
print(f"loop: {turns} turns in {loop_s:.2f} s = {turns / loop_s:.0f} turns/s "
      f"(tools {100 * tool_seconds[0] / loop_s:.0f}% of it; {len(rec['segments'])} segments; "
      f"window {args.max_context_tokens} tokens; termination {rec['termination']})")

# 2. rollout_group with the scripted expert
questions = [q for q in toy_world.load_questions(paths.TOY_QUESTIONS) if q["split"] == "test"][:args.questions]
n_turns, t0 = 0, time.perf_counter()
for q in questions:
    recs = sa.rollout_group(agent_policies.ScriptedPolicy(sa.expert_script(q, world), tok), q, args.group_size, tok, toolbox)
    n_turns += sum(len(r["turns"]) for r in recs)
group_s = time.perf_counter() - t0
print(f"rollout_group: {len(questions)} questions x G={args.group_size}: {n_turns} turns in {group_s:.2f} s = "
      f"{n_turns / group_s:.0f} turns/s (critic and scoring included)")

# 3. BM25 latency
queries = []
with open(os.path.join(os.path.dirname(paths.TOY_WORLD), "search_sft.jsonl"), encoding="utf-8") as f:
    for line in f:
        for m in json.loads(line)["messages"]:
            for c in m.get("tool_calls") or []:
                if c["function"]["name"] == "search":
                    queries.append(c["function"]["arguments"]["query"])
for name, fn in [("LocalWiki.search (top 3 + snippets)", lambda q: wiki.search(q, 3)),
                 ("BM25.scores", wiki.index.scores)]:
    lat = []
    for q in queries:
        t0 = time.perf_counter()
        fn(q)
        lat.append(time.perf_counter() - t0)
    lat = np.array(lat) * 1e6
    print(f"{name}: {len(queries)} queries over {len(entities)} pages, median {np.median(lat):.0f} us, "
          f"p95 {np.percentile(lat, 95):.0f} us")
