"""The paper's claims in miniature (issue 18): one command builds the toy chain, measures every claim over three
seeds and writes the figures.

    python tests/reproduce.py                  # build what is missing in runs/repro, then results.json + figures
    python tests/reproduce.py --claims 4 5     # only what claims 4 and 5 need
    python -m pytest -m repro                  # the same chain, each claim asserted (tests/test_repro.py)

Every run is one of the project's own commands (train_sft.py, reward_models.py, train_grpo.py, evaluate.py, this
file's --measure), listed once in jobs() with the runs it starts from. A run is built only when its output is
missing, so each claim's test reuses the checkpoints that earlier claims built; two runs go at a time, one thread
each (on 2 cores this is ~2x the throughput of one 2-thread run; the toy models are too small for 2 threads to
help). Logs: runs/repro/<job>.log. The README's "Reproduction" section is this file's output.

| # | claim (paper) | runs |
|---|---|---|
| 1 | SFT over the length curriculum teaches the formats | sft_s{0,1,2}; format-valid rate of random init vs SFT |
| 2 | point-wise RL cuts repetition and truncation (2.1.2) | rm_point; point_s* with --overlong none (the RM alone) |
| 3 | pair-wise RL raises the win rate; swap-consistency | rm_pair_s*, rm_pair_noswap_s* (position bias); pair_s* |
| 4 | code stage 1 raises correctness (2.3) | code1_s* from sft_s0 |
| 5 | code stage 2 raises R_time, correctness holds (Fig 4) | code2_s* from code1_s* |
| 6 | the k in [1, 5] of 8 filter helps sample efficiency | code1_s* vs code1nf_s* at the same number of rollouts |
| 7 | search trajectories in SFT help deep search (Tab 3) | the shipped toy base -> sft_search vs sft_nosearch |
| 8 | agent RL; turn-level supervision helps (2.2) | agent_q16_s*; agent_{penalty,none}_s*, agent_q16{,none}_s* |
"""
import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))
OUT = os.path.join(ROOT, "runs", "repro")
SEEDS = (0, 1, 2)
AGENT_WORLD = 4242  # the agent stage's fresh world; its <= 2-hop test split (65 questions) is held out
PRETRAIN_WORLDS = range(1, 61)  # the toy base's text (pages, walks, worked chains)
SFT_WORLDS = range(1000, 1100)  # the search SFT's expert trajectories
# The toy base model the agent chain starts from (issue 13; the recipe's analogue of Nanbeige4-3B-Base), shipped in
# bf16: the jobs agent_pretrain -> agent_midtrain build it (57 min at one thread, more than the suite's budget) and
# `python tests/reproduce.py --ship-base` writes their output here.
BASE = os.path.join(ROOT, "data", "toy", "agent_base")
# The agent stage: AGENT_STEPS steps of G = 8 rollouts x 4 questions, lr 1e-4, sampled at T = 0.7 (the code stages'
# temperature: at 1.0 a group of 8 rarely holds a correct answer), turn penalty 0.1 (at the default 0.5 the penalty
# outweighs the answer and the agent learns to answer after one search; README, "The agent stage").
AGENT_STEPS = 24
AGENT_COMMON = ("--eval-every", "0", "--agent-max-hops", "2", "--lr", "1e-4", "--temperature", "0.7", "--turn-penalty",
                "0.1")
AGENT_ARGS = ("--agent-world-seed", str(AGENT_WORLD), *AGENT_COMMON)
# Result 1's runs (`agent_q16_s*`): the same stage with 16 questions a step for 12 steps (~2,200 rollouts against the
# 24-step runs' ~1,150). On the wide held-out set the 4-question runs move nothing beyond noise; a step of 16
# questions holds ~4x the right answers, and these runs gain in every seed, by less than the seeds' spread (README,
# "Issue 13's four results").
Q16_ARGS = ("--max-steps", "12", "--prompts-per-step", "16", *AGENT_ARGS)
# The same 16 a step over many worlds: the questions of 50 fresh worlds, each searched in its own world, instead of
# world 4242's 276 (`agent_mw_s*`, 12 steps; no better than one world), and their two-hop questions only
# (`agent_mw2_s*`, 12 steps; `agent_mw2long_s*`, 24: result 1 beyond seed noise). A one-hop question is answered
# after one search, so a mix of one- and two-hop questions rewards stopping one hop early (README, "Issue 13's four
# results").
AGENT_WORLDS = range(5000, 5050)
MW_ARGS = ("--prompts-per-step", "16", "--agent-world-seed", str(AGENT_WORLDS.start), "--agent-worlds",
           str(len(AGENT_WORLDS)), *AGENT_COMMON)
# The agent-stage runs, agent_{run}_s{seed}: 4 questions a step with turn credit (penalty) and without (none, at
# equal rollouts), 16 a step with it (q16) and without (q16none, at q16's rollouts), and 16 a step over many
# worlds (mw; two-hop questions only: mw2, mw2long).
CREDITS = ("penalty", "none", "q16", "q16none", "mw", "mw2", "mw2long")


def R(*parts):
    return os.path.join(OUT, *parts)


FILTER_STEPS = 10  # claim 6 compares code1's first 10 steps (its lr is constant after warmup: a 10-step run)


def final_rollouts(run, step=None):
    """The rollouts a GRPO run had drawn by `step` (default: its end), for an equal-rollout comparison."""
    rows = [r for r in read_metrics(R(run)) if "rollouts" in r and (step is None or r["step"] <= step)]
    return str(rows[-1]["rollouts"])


def _grpo(stage, init, out, seed, *extra):
    return ["train_grpo.py", "--stage", stage, "--init", R(init), "--out", R(out), "--seed", str(seed), *extra]


def _trajectory_only(name, paired, seed, args, steps):
    """Result 3's comparison: the agent run `paired` (`args`, `steps` steps, turn credit on) with `--turn-credit
    none`, allowed twice the steps and stopped at the step where it has drawn as many rollouts as `paired` (dynamic
    sampling drops more of its groups). A job spec whose argv is built once `paired` exists."""
    return (lambda: _grpo("agent", "sft_search", name, seed, *args, "--turn-credit", "none", "--max-steps",
                          str(2 * steps), "--max-rollouts", final_rollouts(paired)),
            ["sft_search", paired], "model.safetensors")


def _agent_sft(name, search, seed=0, steps=400):
    """The agent's SFT from the shipped toy base: `steps` x 2k tokens at seq 1024 with 25% replay of the base's
    mid-training text, with or without the fresh-world search trajectories (45%; without them that share goes to
    the other domains)."""
    mixture = "code=5,general=10,stem=5,tool=10,pretrain=25" + (",search=45" if search else "")
    files = [R("midtrain.jsonl")] + [os.path.join(ROOT, "data", "toy", "sft", f"{d}.jsonl")
                                     for d in ("code", "general", "stem", "tool")]
    if search:
        files.append(R("search_trajectories.jsonl"))
    return ["train_sft.py", "--config", "toy", "--init", BASE, "--seq-len", "1024", "--data", *files,
            "--mixture", mixture, "--max-steps", str(steps), "--eval-data", "--out", R(name), "--seed", str(seed),
            "--quiet"]


def jobs():
    """name -> (argv for `python ROOT/argv[0] ...` (a callable is evaluated when its inputs exist), the jobs it
    needs, the file whose existence means done)."""
    J = {}
    for s in SEEDS:
        J[f"sft_s{s}"] = (["train_sft.py", "--config", "toy", "--seed", str(s), "--eval-every", "25",
                           "--out", R(f"sft_s{s}"), "--quiet"], [], "model.safetensors")
        J[f"format_sft_s{s}"] = (["tests/reproduce.py", "--measure", "format", f"sft_s{s}"], [f"sft_s{s}"], None)
        J[f"format_init_s{s}"] = (["tests/reproduce.py", "--measure", "format", f"init_s{s}"], ["sft_s0"], None)
        for swap in ("", "_noswap"):
            J[f"rm_pair{swap}_s{s}"] = (["reward_models.py", "train", "--kind", "pair", "--init", R("sft_s0"),
                                         "--seed", str(s), "--out", R(f"rm_pair{swap}_s{s}")]
                                        + (["--swap-weight", "0"] if swap else []), ["sft_s0"], "reward_head.json")
        J[f"point_s{s}"] = (_grpo("point", "sft_s0", f"point_s{s}", s, "--reward-model", R("rm_point"),
                                  "--overlong", "none", "--max-steps", "15", "--eval-every", "10"),
                            ["sft_s0", "rm_point"], "model.safetensors")
        J[f"pair_s{s}"] = (_grpo("pair", "sft_s0", f"pair_s{s}", s, "--reward-model", R("rm_pair_s0"),
                                 "--max-steps", "15", "--eval-every", "10"), ["sft_s0", "rm_pair_s0"],
                           "model.safetensors")
        J[f"code1_s{s}"] = (_grpo("code1", "sft_s0", f"code1_s{s}", s, "--max-steps", "20", "--eval-every", "10"),
                            ["sft_s0"], "model.safetensors")
        J[f"code2_s{s}"] = (_grpo("code2", f"code1_s{s}", f"code2_s{s}", s, "--max-steps", "10", "--eval-every", "10"),
                            [f"code1_s{s}"], "model.safetensors")
        J[f"code1nf_s{s}"] = (lambda s=s: _grpo("code1", "sft_s0", f"code1nf_s{s}", s, "--no-difficulty-filter",
                                                "--max-steps", "200", "--eval-every", "10",
                                                "--max-rollouts", final_rollouts(f"code1_s{s}", FILTER_STEPS)),
                              ["sft_s0", f"code1_s{s}"], "model.safetensors")
        agent = ("--max-steps", str(AGENT_STEPS), *AGENT_ARGS)
        J[f"agent_penalty_s{s}"] = (_grpo("agent", "sft_search", f"agent_penalty_s{s}", s, *agent,
                                          "--turn-credit", "penalty"), ["sft_search"], "model.safetensors")
        J[f"agent_none_s{s}"] = _trajectory_only(f"agent_none_s{s}", f"agent_penalty_s{s}", s, agent, AGENT_STEPS)
        J[f"agent_q16_s{s}"] = (_grpo("agent", "sft_search", f"agent_q16_s{s}", s, *Q16_ARGS,
                                      "--turn-credit", "penalty"), ["sft_search"], "model.safetensors")
        J[f"agent_q16none_s{s}"] = _trajectory_only(f"agent_q16none_s{s}", f"agent_q16_s{s}", s, Q16_ARGS, 12)
        J[f"agent_mw_s{s}"] = (_grpo("agent", "sft_search", f"agent_mw_s{s}", s, *MW_ARGS, "--max-steps", "12",
                                     "--turn-credit", "penalty"), ["sft_search"], "model.safetensors")
        for run, steps in (("mw2", 12), ("mw2long", 24)):  # two-hop questions only, 12 or 24 steps
            J[f"agent_{run}_s{s}"] = (_grpo("agent", "sft_search", f"agent_{run}_s{s}", s, *MW_ARGS, "--max-steps",
                                            str(steps), "--agent-min-hops", "2", "--turn-credit", "penalty"),
                                      ["sft_search"], "model.safetensors")
        for credit in CREDITS:
            J[f"agent_eval_{credit}_s{s}"] = (["tests/reproduce.py", "--measure", "agent", f"agent_{credit}_s{s}"],
                                              [f"agent_{credit}_s{s}"], None)
            J[f"agent_wide_{credit}_s{s}"] = (["tests/reproduce.py", "--measure", "wide", f"agent_{credit}_s{s}"],
                                              [f"agent_{credit}_s{s}"], None)
    J["rm_point"] = (["reward_models.py", "train", "--kind", "point", "--init", R("sft_s0"), "--out", R("rm_point")],
                     ["sft_s0"], "reward_head.json")
    J["eval_code"] = (["evaluate.py", "--suite", "code", "--ckpt", R("sft_s0"), "--ckpt", R("code1_s0"), "--ckpt",
                       R("code2_s0"), "--out", R("eval_code")], ["sft_s0", "code1_s0", "code2_s0"], None)
    # evaluate.py's table over one checkpoint per stage of this run (the README's evaluation table)
    chain = ["sft_s0", "point_s0", "pair_s0", "code1_s0", "code2_s0", "agent_penalty_s0"]
    J["eval_all"] = (["evaluate.py", "--suite", "all", *[a for c in chain for a in ("--ckpt", R(c))], "--rm",
                      R("rm_pair_s0"), "--out", R("eval_all")], chain + ["rm_pair_s0"], None)
    # claims 7-8: the toy base model (built by these two jobs, shipped as BASE) and the agent's SFT from it
    J["agent_pretrain"] = (["train_sft.py", "--config", "toy", "--data", R("pretrain.jsonl"), "--mixture", "pretrain=1",
                            "--seq-len", "512", "--batch-tokens", "4096", "--max-steps", "1500", "--eval-data",
                            "--out", R("agent_pretrain"), "--seed", "0", "--quiet"], [], "model.safetensors")
    J["agent_midtrain"] = (["train_sft.py", "--config", "toy", "--init", R("agent_pretrain"), "--data", R("midtrain.jsonl"),
                            "--mixture", "pretrain=1", "--seq-len", "512", "--batch-tokens", "4096", "--max-steps", "400",
                            "--lr", "1e-3", "--eval-data", "--out", R("agent_midtrain"), "--seed", "0", "--quiet"],
                           ["agent_pretrain"], "model.safetensors")
    for s, suffix in zip(SEEDS, ("", "_s1", "_s2")):  # claim 7's SFT seeds (data order)
        for variant, search in (("search", True), ("nosearch", False)):
            name = f"sft_{variant}{suffix}"
            J[name] = (_agent_sft(name, search, seed=s), [], "model.safetensors")
            J[f"agent_eval_{name}"] = (["tests/reproduce.py", "--measure", "agent", name], [name], None)
        J[f"agent_wide_sft_search{suffix}"] = (["tests/reproduce.py", "--measure", "wide", f"sft_search{suffix}"],
                                               [f"sft_search{suffix}"], None)
    J["long_horizon"] = (["tests/reproduce.py", "--measure", "long_horizon", "agent_penalty_s0"],
                         ["agent_penalty_s0"], None)
    return J


CLAIM_JOBS = {
    1: [f"format_{m}_s{s}" for m in ("init", "sft") for s in SEEDS],
    2: [f"point_s{s}" for s in SEEDS],
    3: [f"rm_pair{w}_s{s}" for w in ("", "_noswap") for s in SEEDS] + [f"pair_s{s}" for s in SEEDS],
    4: [f"code1_s{s}" for s in SEEDS] + ["eval_code"],
    5: [f"code2_s{s}" for s in SEEDS] + ["eval_code"],
    6: [f"code1nf_s{s}" for s in SEEDS],
    7: [f"agent_eval_sft_{v}{s}" for s in ("", "_s1", "_s2") for v in ("search", "nosearch")],
    8: [f"agent_{e}_{c}_s{s}" for e in ("eval", "wide") for c in CREDITS for s in SEEDS]
       + ["agent_eval_sft_search", "long_horizon"] + [f"agent_wide_sft_search{s}" for s in ("", "_s1", "_s2")],
}


def done(name, spec):
    marker = spec[2]
    if marker is None:  # a measurement: its JSON
        return os.path.isfile(R(name + ".json")) or os.path.isfile(R(name, "summary.md"))  # evaluate.py's
    return os.path.isfile(R(name, marker))


def prepare_inputs():
    """The data files the agent chain trains on, written once (each a few seconds), all from fresh worlds, never the
    held-out world 4242: the base's pretraining text (60 worlds' pages, relation walks and worked chains), its
    mid-training text (the same pages and walks, and the expert's search trajectories over those worlds in plain
    text), and the expert's chat-format search trajectories over 100 other worlds (the SFT's search share)."""
    from nanbeige41 import data, toy_world
    import search_agent as sa
    os.makedirs(OUT, exist_ok=True)
    if not os.path.isfile(R("pretrain.jsonl")):
        data.write_jsonl(R("pretrain.jsonl"), toy_world.pretraining_docs(PRETRAIN_WORLDS, chains_per_world=500))
    if not os.path.isfile(R("midtrain.jsonl")):
        data.write_jsonl(R("midtrain.jsonl"), toy_world.pretraining_docs(PRETRAIN_WORLDS)
                         + sa.worked_search_docs(PRETRAIN_WORLDS, 300))
    if not os.path.isfile(R("search_trajectories.jsonl")):
        data.write_jsonl(R("search_trajectories.jsonl"), sa.fresh_world_trajectories(
            SFT_WORLDS, 60, {1: 2, 2: 3, 3: 2, 4: 1}))


# Minutes a job took on the project's 2-core machine at one thread, two jobs at a time (2026-11-23 run; the agent
# chain's from 2026-11-25; first matching prefix wins). Only the build order uses them: the job with the longest
# chain of work still behind it starts first (list scheduling), so a long run with nothing waiting on it is not
# left for last.
MINUTES = (("agent_eval_sft_nosearch", 2.1), ("agent_eval", 0.6), ("agent_wide", 3.5), ("agent_pretrain", 45.4),
           ("agent_midtrain", 12.0), ("agent_penalty", 12.0), ("agent_none", 10.0), ("agent_q16none", 18.0),
           ("agent_q16", 15.0), ("agent_mw2long", 50.0), ("agent_mw", 20.0),
           ("sft_search", 8.0), ("sft_nosearch", 7.5), ("sft_s", 5.5),
           ("code1nf", 3.6), ("code1", 4.2), ("code2", 2.5),
           ("pair", 1.8), ("rm_", 1.0), ("point", 0.9), ("eval_all", 1.0), ("format", 0.2), ("eval_code", 0.3),
           ("", 0.5))


def minutes(name):
    return next(m for prefix, m in MINUTES if name.startswith(prefix))


def build_order(todo, J):
    """`todo` (dependencies before dependents) sorted by the longest chain of work each job starts: its minutes plus
    the longest chain of todo jobs waiting on it."""
    chain = {}
    for n in reversed(todo):
        chain[n] = minutes(n) + max([chain[m] for m in todo if n in J[m][1] and m in chain], default=0.0)
    return sorted(todo, key=lambda n: -chain[n])


def build(names, workers=2, log=print):
    """Build `names` and everything they need, missing ones only, `workers` at a time. Raises on a failed run."""
    J = jobs()
    todo = []  # dependencies first

    def add(n):
        if n not in todo and not done(n, J[n]):
            for d in J[n][1]:
                add(d)
            todo.append(n)
    for n in names:
        add(n)
    if not todo:
        return
    todo = build_order(todo, J)  # a ready job starts in this order
    prepare_inputs()
    running, t0 = {}, time.time()
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONHASHSEED="0")
    while todo or running:
        for n in [n for n in todo if all(d not in todo and d not in running for d in J[n][1])]:
            if len(running) >= workers:
                break
            todo.remove(n)
            if done(n, J[n]):  # another build (a second `reproduce.py`) finished it meanwhile
                continue
            argv = J[n][0]() if callable(J[n][0]) else J[n][0]
            log(f"[repro {time.time() - t0:6.0f}s] start {n}: python {' '.join(argv)}")
            f = open(R(n + ".log"), "w")
            running[n] = (subprocess.Popen([sys.executable, os.path.join(ROOT, argv[0]), *argv[1:]], cwd=ROOT,
                                           env=env, stdout=f, stderr=subprocess.STDOUT), f, time.time())
        time.sleep(1)
        for n, (proc, f, t) in list(running.items()):
            if proc.poll() is None:
                continue
            f.close()
            del running[n]
            if proc.returncode != 0:
                for p, _, _ in running.values():
                    p.kill()
                raise RuntimeError(f"repro job {n} failed (exit {proc.returncode}): see {R(n + '.log')}")
            log(f"[repro {time.time() - t0:6.0f}s] done {n} ({(time.time() - t) / 60:.1f} min)")


# -----------------------------------------------------------------------------
# Measurements (each run as `python tests/reproduce.py --measure KIND NAME`, one thread, cached as runs/repro/*.json)

def read_metrics(run_dir):
    from nanbeige41 import data
    return data.read_jsonl(os.path.join(run_dir, "metrics.jsonl"))  # a damaged line is named by file:line


def reply_ok(tok, text, finish_reason, reference, tool_names, domain):
    """Is a generated reply well-formed in the family's format? A closed <think> block (may be empty, as in the toy
    chat data), nothing cut off,
    no parse errors; a code reply holds exactly one ```python block; where the reference turn calls tools, the
    reply calls tools that exist, with JSON-object arguments; elsewhere it answers in plain text."""
    import code_judge
    parsed = tok.parse_assistant(text)
    good = (finish_reason != "length" and not parsed["errors"] and parsed["reasoning"] is not None
            and text.lstrip("\n").startswith("<think>"))
    if reference.get("tool_calls"):
        return good and bool(parsed["tool_calls"]) and all(
            c["name"] in tool_names and isinstance(c["arguments"], dict) for c in parsed["tool_calls"])
    if domain == "code":
        return good and code_judge.format_ok(text)
    return good and not parsed["tool_calls"] and bool(parsed["content"].strip())


def held_out_turns(per_domain=12):
    """(domain, prompt messages, tools, reference assistant turn) for the first `per_domain` held-out SFT
    conversations of each domain (data/toy/sft/eval.jsonl): their first assistant turn that calls tools, or else
    their last assistant turn."""
    from nanbeige41 import data, paths
    by_domain = {}
    for r in data.read_jsonl(os.path.join(paths.TOY_SFT_DATA, "eval.jsonl")):
        by_domain.setdefault(r["domain"], []).append(r)
    out = []
    for domain, recs in sorted(by_domain.items()):
        for r in recs[:per_domain]:
            turns = [i for i, m in enumerate(r["messages"]) if m["role"] == "assistant"]
            k = next((i for i in turns if r["messages"][i].get("tool_calls")), turns[-1])
            out.append((domain, r["messages"][:k], r.get("tools"), r["messages"][k]))
    return out


def format_valid(model, tok, per_domain=12, max_new_tokens=192):
    """Claim 1's figure: the share of greedy replies to held_out_turns that reply_ok accepts, per domain too."""
    from nanbeige41.generate import generate
    turns = held_out_turns(per_domain)
    prompts = [tok.encode(tok.render(msgs, tools=tools, add_generation_prompt=True)) for _, msgs, tools, _ in turns]
    outs = []
    for i in range(0, len(prompts), 16):
        outs += generate(model, prompts[i:i + 16], max_new_tokens, temperature=0.0, eos_ids=[tok.im_end_id])
    rows = {}
    for (domain, _, tools, ref), o in zip(turns, outs):
        text = tok.decode(o["tokens"], skip_special_tokens=True)
        ok = reply_ok(tok, text, o["finish_reason"], ref, {t["function"]["name"] for t in tools or []}, domain)
        row = rows.setdefault(domain, {"valid": 0, "n": 0})
        row["valid"] += ok
        row["n"] += 1
    valid, n = sum(r["valid"] for r in rows.values()), sum(r["n"] for r in rows.values())
    return {"format_valid": valid / n, "n": n, "by_domain": rows}


def measure(kind, name):
    import torch
    from agent_learnability import held_out_eval, long_horizon, unseen_worlds_eval
    from nanbeige41.model import Transformer
    from nanbeige41.tokenizer import Tokenizer
    torch.set_num_threads(1)
    if kind == "format":
        if name.startswith("init_s"):  # before SFT: the toy preset at random init, seeded
            torch.manual_seed(int(name[len("init_s"):]))
            model = Transformer(Transformer.from_pretrained(R("sft_s0")).config).eval()
            tok = Tokenizer.from_pretrained(R("sft_s0"))
        else:
            model, tok = Transformer.from_pretrained(R(name)).eval(), Tokenizer.from_pretrained(R(name))
        result = format_valid(model, tok)
        out = f"format_{name}"
    elif kind == "agent":
        result = held_out_eval(R(name), n=65, max_hops=2, world_seed=AGENT_WORLD)
        out = "agent_eval_" + name.replace("agent_", "")
    elif kind == "wide":  # result 1 and 3's wide held-out set: 600 questions of 4 worlds no stage trains on
        result = unseen_worlds_eval(R(name))
        out = "agent_wide_" + name.replace("agent_", "")
    else:
        result = long_horizon(R(name), n=65, max_hops=0, world_seed=AGENT_WORLD)
        out = "long_horizon"
    with open(R(out + ".json.tmp"), "w") as f:
        json.dump(result, f, indent=1)
    os.replace(R(out + ".json.tmp"), R(out + ".json"))


def ship_base():
    """The toy base for the agent chain: agent_midtrain's weights in bf16 (10 MB), with its tokenizer, as BASE."""
    import torch
    from nanbeige41.checkpoint import save_hf
    from nanbeige41.model import Transformer
    from nanbeige41.tokenizer import Tokenizer
    src = R("agent_midtrain")
    os.makedirs(BASE, exist_ok=True)
    save_hf(Transformer.from_pretrained(src), Tokenizer.from_pretrained(src), BASE, dtype=torch.bfloat16)
    print(f"shipped {src} -> {BASE}")


def load(name):
    return json.load(open(R(name + ".json")))


# -----------------------------------------------------------------------------
# The claims' figures, from the runs (before = the start of a run, after = its end; means over the steps named)

def window(rows, key, first=True, k=5):
    vals = [r[key] for r in rows if "reward_mean" in r and r.get(key) is not None]
    part = vals[:k] if first else vals[-k:]
    return sum(part) / len(part)


def step0_and_last(rows, key):
    evals = [r for r in rows if key in r]
    return evals[0][key], evals[-1][key]


def claim_results(claim):
    per_seed = {}
    if claim == 1:
        for s in SEEDS:
            rows = read_metrics(R(f"sft_s{s}"))
            stages = {}
            for r in rows:
                if "eval_loss" in r:
                    stages.setdefault(r["stage"], []).append(r["eval_loss"])
            per_seed[s] = {"format_valid_before": load(f"format_init_s{s}")["format_valid"],
                           "format_valid_after": load(f"format_sft_s{s}")["format_valid"],
                           "by_domain": load(f"format_sft_s{s}")["by_domain"],
                           "eval_loss_per_stage": {k: [v[0], v[-1]] for k, v in stages.items()}}
    elif claim == 2:
        for s in SEEDS:
            rows = read_metrics(R(f"point_s{s}"))
            per_seed[s] = {m: [window(rows, k), window(rows, k, first=False)]
                           for m, k in (("rm_score", "rm_score"), ("repetitive", "repetitive"),
                                        ("cut_at_limit", "overlong_frac"), ("overlong_text", "overlong_text"))}
            per_seed[s]["eval_rm_score"] = list(step0_and_last(rows, "eval_rm_score"))
    elif claim == 3:
        for s in SEEDS:
            rows = read_metrics(R(f"pair_s{s}"))
            held = {w: json.load(open(R(f"rm_pair{w}_s{s}", "reward_head.json")))["held_out"]
                    for w in ("", "_noswap")}
            # the pair reward is 1 when the rollout beats the reference (both-order P > 0.5): its mean is a win rate
            per_seed[s] = {"win_rate": [window(rows, "rm_score"), window(rows, "rm_score", first=False)],
                           "eval_win_rate": list(step0_and_last(rows, "eval_rm_score")),
                           "position_bias_swap": held[""]["position_bias"],
                           "position_bias_noswap": held["_noswap"]["position_bias"],
                           "rm_accuracy_swap": held[""], "rm_accuracy_noswap": held["_noswap"]}
    elif claim in (4, 5):
        stage = "code1" if claim == 4 else "code2"
        for s in SEEDS:
            rows = read_metrics(R(f"{stage}_s{s}"))
            per_seed[s] = {k: list(step0_and_last(rows, "eval_" + k))
                           for k in ("pass_rate", "r_correctness", "r_time", "meets_optimal")}
            per_seed[s]["optimal_among_correct"] = [m / max(p, 1e-9) for m, p in
                                                    zip(per_seed[s]["meets_optimal"], per_seed[s]["pass_rate"])]
            per_seed[s]["train_reward"] = [window(rows, "reward_mean"), window(rows, "reward_mean", first=False)]
            per_seed[s]["train_r_time"] = [window(rows, "r_time"), window(rows, "r_time", first=False)]
    elif claim == 6:
        for s in SEEDS:
            runs = {"filter": [r for r in read_metrics(R(f"code1_s{s}")) if r["step"] <= FILTER_STEPS],
                    "no_filter": read_metrics(R(f"code1nf_s{s}"))}
            per_seed[s] = {}
            for label, rows in runs.items():
                train = [r for r in rows if "reward_mean" in r]
                used = sum(r["samples"] for r in train)  # rollouts in groups that carried a gradient
                per_seed[s][label] = {
                    "rollouts": train[-1]["rollouts"], "steps": len(train), "rollouts_in_updates": used,
                    "useful_share": used / train[-1]["rollouts"],
                    "dropped_groups": sum(r["filtered_groups"] for r in train),
                    "eval_pass_rate": list(step0_and_last(rows, "eval_pass_rate")),
                    "train_reward_last5": window(rows, "reward_mean", first=False)}
    elif claim == 7:
        for s, suffix in zip(SEEDS, ("", "_s1", "_s2")):
            per_seed[s] = {"with_search": load(f"agent_eval_sft_search{suffix}"),
                           "without_search": load(f"agent_eval_sft_nosearch{suffix}")}
    elif claim == 8:
        before = load("agent_eval_sft_search")
        for s in SEEDS:
            per_seed[s] = {}
            for c in CREDITS:
                ev, rows = load(f"agent_eval_{c}_s{s}"), read_metrics(R(f"agent_{c}_s{s}"))
                per_seed[s][c] = {"accuracy": ev["accuracy"], "correct": round(ev["accuracy"] * ev["n"]),
                                  "turn_fail_rate": ev["turn_fail_rate"], "turns": ev["turns"],
                                  "strict_turn_fail_rate": ev.get("strict_turn_fail_rate"),
                                  "terminations": ev["terminations"], "rollouts": rows[-1]["rollouts"],
                                  "steps": len(rows), "wide": load(f"agent_wide_{c}_s{s}")}
        return {"before": before, "per_seed": per_seed, "long_horizon": load("long_horizon"),
                "wide_before": [load(f"agent_wide_sft_search{s}") for s in ("", "_s1", "_s2")]}
    return {"per_seed": per_seed}


def eval_code_report():
    """evaluate.py's code-suite metrics for sft_s0 / code1_s0 / code2_s0 (the comparison the README prints)."""
    out = {}
    for name in ("sft_s0", "code1_s0", "code2_s0"):
        path = R("eval_code", name, "report.json")
        if os.path.isfile(path):
            out[name] = json.load(open(path))["metrics"]
    return out


def figures(results):
    """One before/after bar chart per claim and the training curves (PNG with matplotlib, else SVG)."""
    from nanbeige41 import plot
    fig_dir = R("figures")
    os.makedirs(fig_dir, exist_ok=True)
    written = []
    bars = {
        1: ("format-valid rate, random init vs SFT", "format_valid_before", "format_valid_after"),
        2: ("point: share cut at the length limit (RM alone)", "cut_at_limit", None),
        3: ("pair: win rate vs the reference (training batch)", "win_rate", None),
        4: ("code1: held-out pass rate", "pass_rate", None),
        5: ("code2: held-out R_time", "r_time", None),
    }
    for claim, (title, key, key2) in bars.items():
        if claim not in results:
            continue
        groups = {}
        for s, r in results[claim]["per_seed"].items():
            before, after = (r[key], r[key2]) if key2 else r[key]
            groups[f"seed {s}"] = {"before": before, "after": after}
        written.append(plot.bar_chart(groups, os.path.join(fig_dir, f"claim{claim}.png"), title))
    if 6 in results:
        groups = {f"seed {s}": {k: r[k]["useful_share"] for k in ("filter", "no_filter")}
                  for s, r in results[6]["per_seed"].items()}
        written.append(plot.bar_chart(groups, os.path.join(fig_dir, "claim6.png"),
                                      "code1: share of rollouts that reach the update (equal rollouts)"))
    if 7 in results:
        groups = {f"seed {s} {label.split('_')[0]}": {
            "accuracy": r["accuracy"], "answered": r["terminations"].get("answer", 0) / r["n"],
            "critic fails": r["turn_fail_rate"]} for s, runs in results[7]["per_seed"].items()
            for label, r in runs.items()}
        written.append(plot.bar_chart(groups, os.path.join(fig_dir, "claim7.png"), "SFT with vs. without search"))
    if 8 in results:
        groups = {f"seed {s} {c}": {"accuracy": r[c]["accuracy"], "critic fails": r[c]["turn_fail_rate"]}
                  for s, r in results[8]["per_seed"].items() for c in ("penalty", "none")}
        written.append(plot.bar_chart(groups, os.path.join(fig_dir, "claim8.png"),
                                      "agent: turn + trajectory (penalty) vs trajectory only (none)"))
        groups = {f"SFT s{s}": {"accuracy": w["accuracy"]}
                  for s, w in zip(SEEDS, results[8]["wide_before"])}
        groups.update({f"{label} s{s}": {"accuracy": r[c]["wide"]["accuracy"]}
                       for c, label in (("mw2long", "16q 2-hop x24"), ("mw2", "16q 2-hop"), ("mw", "16q 50 worlds"),
                                        ("q16", "16q"),
                                        ("q16none", "16q none"), ("penalty", "4q"))
                       for s, r in results[8]["per_seed"].items()})
        title = "600 questions of 4 unseen worlds: SFT seeds; agent stage from SFT s0 (runs: README, claim 8)"
        written.append(plot.bar_chart(groups, os.path.join(fig_dir, "claim8_wide.png"), title))
    for runs, name in ((["code1_s0", "code2_s0"], "figure4_code1_code2"), (["point_s0"], "curves_point"),
                       (["pair_s0"], "curves_pair"), (["agent_penalty_s0"], "curves_agent")):
        if all(os.path.isfile(R(r, "metrics.jsonl")) for r in runs):
            written.append(plot.main([R(r) for r in runs] + ["--out", os.path.join(fig_dir, name + ".png")]))
    return written


def _pct(x):
    return f"{100 * x:.1f}%"


def _arrow(pair, fmt=lambda x: f"{x:.3f}"):
    return f"{fmt(pair[0])} -> {fmt(pair[1])}"


def _vs(a, b, fmt=lambda x: f"{x:.3f}"):
    return f"{fmt(a)} vs {fmt(b)}"


def table(results):
    """The README's reproduction table (markdown): one row per claim, the figure per seed as `s0 / s1 / s2`."""
    def seeds(fn, claim):
        return " / ".join(fn(r) for _, r in sorted(results[claim]["per_seed"].items()))
    rows = []
    if 1 in results:
        rows.append((1, "format-valid replies (60 held-out turns), random init -> SFT",
                     seeds(lambda r: _arrow((r["format_valid_before"], r["format_valid_after"]), _pct), 1)))
    if 2 in results:
        rows.append((2, "point, RM alone (`--overlong none`): cut at the length limit, first 5 steps -> last 5",
                     seeds(lambda r: _arrow(r["cut_at_limit"], _pct), 2)))
        rows.append((2, "point: repetitive rollouts", seeds(lambda r: _arrow(r["repetitive"], _pct), 2)))
        rows.append((2, "point: RM score", seeds(lambda r: _arrow(r["rm_score"], lambda x: f"{x:.2f}"), 2)))
        rows.append((2, "point: held-out greedy RM score (12 prompts), step 0 -> end",
                     seeds(lambda r: _arrow(r["eval_rm_score"], lambda x: f"{x:.2f}"), 2)))
    if 3 in results:
        rows.append((3, "pair RM position bias mean abs(d(A,B) + d(B,A)): with swap-consistency vs without",
                     seeds(lambda r: f"{r['position_bias_swap']:.3f} vs {r['position_bias_noswap']:.3f}", 3)))
        rows.append((3, "pair: win rate against the reference, training first 5 steps -> last 5",
                     seeds(lambda r: _arrow(r["win_rate"]), 3)))
        rows.append((3, "pair: held-out greedy win rate (12 prompts), step 0 -> end",
                     seeds(lambda r: _arrow(r["eval_win_rate"]), 3)))
    for claim, stage in ((4, "code1"), (5, "code2")):
        if claim in results:
            rows.append((claim, f"{stage}: held-out pass rate (38 problems), step 0 -> end",
                         seeds(lambda r: _arrow(r["pass_rate"]), claim)))
    if 5 in results:
        rows.append((5, "code2: held-out R_time, step 0 -> end", seeds(lambda r: _arrow(r["r_time"]), 5)))
        rows.append((5, "code2: share of held-out correct solutions in the optimal class, step 0 -> end",
                     seeds(lambda r: _arrow(r["optimal_among_correct"], _pct), 5)))
        rows.append((5, "code2: training-batch R_time, first 5 steps -> last 5",
                     seeds(lambda r: _arrow(r["train_r_time"]), 5)))
    if 6 in results:
        rows.append((6, "code1 at equal rollouts, filter vs none: share of rollouts reaching the update",
                     seeds(lambda r: _vs(r["filter"]["useful_share"], r["no_filter"]["useful_share"], _pct), 6)))
        rows.append((6, "code1 at equal rollouts, filter vs none: held-out pass rate at the end",
                     seeds(lambda r: _vs(r["filter"]["eval_pass_rate"][1], r["no_filter"]["eval_pass_rate"][1]), 6)))
    if 7 in results:
        def acc(ev):
            return f"{round(ev['accuracy'] * ev['n'])}/{ev['n']}"
        rows.append((7, "SFT with vs without search trajectories: held-out accuracy (world 4242, <= 2 hops)",
                     seeds(lambda r: f"{acc(r['with_search'])} vs {acc(r['without_search'])}", 7)))
        rows.append((7, "... episodes ending with an answer",
                     seeds(lambda r: f"{r['with_search']['terminations'].get('answer', 0)} vs "
                                     f"{r['without_search']['terminations'].get('answer', 0)}", 7)))
        rows.append((7, "... turns the critic fails", seeds(
            lambda r: _vs(r["with_search"]["turn_fail_rate"], r["without_search"]["turn_fail_rate"], _pct), 7)))
        rows.append((7, "... turns the strict critic fails (made-up names, guessed answers)", seeds(
            lambda r: _vs(r["with_search"]["strict_turn_fail_rate"], r["without_search"]["strict_turn_fail_rate"],
                          _pct), 7)))
    if 8 in results:
        b = results[8]["before"]
        wb = " / ".join(str(w["correct"]) for w in results[8]["wide_before"])
        rows.append((8, f"agent stage, 16 questions a step x 12 (`agent_q16_s*`, result 1): held-out accuracy on 600 "
                        f"questions of 4 worlds never trained on (before: sft_search, SFT seeds 0 / 1 / 2: {wb}) and "
                        f"world 4242's 65 (before: {round(b['accuracy'] * b['n'])})",
                     seeds(lambda r: f"{r['q16']['wide']['correct']} and {r['q16']['correct']}", 8)))
        rows.append((8, "agent stage, 16 questions a step x 12 over 50 fresh worlds (`agent_mw_s*`) and over their "
                        "two-hop questions only (`agent_mw2_s*`): held-out accuracy on the 600, and world 4242's 65",
                     seeds(lambda r: f"{r['mw']['wide']['correct']} vs {r['mw2']['wide']['correct']} and "
                                     f"{r['mw']['correct']} vs {r['mw2']['correct']}", 8)))
        rows.append((8, "... two-hop questions only, 24 steps (`agent_mw2long_s*`): held-out accuracy on the 600 and "
                        "world 4242's 65", seeds(lambda r: f"{r['mw2long']['wide']['correct']} and "
                                                           f"{r['mw2long']['correct']}", 8)))
        rows.append((8, "... turns per episode on the 600 (before: "
                        f"{results[8]['wide_before'][0]['turns']:.2f})",
                     seeds(lambda r: _vs(r["mw"]["wide"]["turns"], r["mw2"]["wide"]["turns"], lambda x: f"{x:.2f}"),
                           8)))
        rows.append((8, "agent stage, 4 questions a step x 24, at equal rollouts, turn + trajectory vs trajectory "
                        f"only: held-out accuracy, world 4242 (before: {round(b['accuracy'] * b['n'])}/{b['n']})",
                     seeds(lambda r: f"{r['penalty']['correct']} vs {r['none']['correct']}", 8)))
        rows.append((8, f"... on 600 questions of 4 worlds never trained on (`agent_wide_*`; before: sft_search, SFT "
                        f"seeds 0 / 1 / 2: {wb})",
                     seeds(lambda r: f"{r['penalty']['wide']['correct']} vs {r['none']['wide']['correct']}", 8)))
        rows.append((8, "agent stage, 16 questions a step, at equal rollouts, turn + trajectory (`agent_q16_s*`) vs "
                        "trajectory only (`agent_q16none_s*`): held-out accuracy on the 600 and world 4242's 65",
                     seeds(lambda r: f"{r['q16']['wide']['correct']} vs {r['q16none']['wide']['correct']} and "
                                     f"{r['q16']['correct']} vs {r['q16none']['correct']}", 8)))
        rows.append((8, "... rollouts drawn",
                     seeds(lambda r: _vs(r["q16"]["rollouts"], r["q16none"]["rollouts"], str), 8)))
        rows.append((8, "4 questions a step: turns the critic fails, world 4242 "
                        f"(before: {_pct(b['turn_fail_rate'])})", seeds(
            lambda r: f"{_pct(r['penalty']['turn_fail_rate'])} vs {_pct(r['none']['turn_fail_rate'])}", 8)))
        rows.append((8, f"... turns per episode (before: {b['turns']:.2f})", seeds(
            lambda r: f"{r['penalty']['turns']:.2f} vs {r['none']['turns']:.2f}", 8)))
        rows.append((8, "... rollouts drawn",
                     seeds(lambda r: _vs(r["penalty"]["rollouts"], r["none"]["rollouts"], str), 8)))
    lines = ["| # | measured (seeds 0 / 1 / 2) | figure |", "|---|---|---|"]
    lines += [f"| {c} | {what} | {fig} |" for c, what, fig in rows]
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--claims", type=int, nargs="*", default=sorted(CLAIM_JOBS))
    p.add_argument("--workers", type=int, default=2, help="runs at a time (one thread each)")
    p.add_argument("--jobs", nargs="*", default=None,
                   help="build only these jobs() (and what they need), e.g. agent_midtrain")
    p.add_argument("--ship-base", action="store_true",
                   help="write agent_midtrain's weights to data/toy/agent_base in bf16 (the shipped toy base)")
    p.add_argument("--measure", nargs=2, metavar=("KIND", "NAME"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.measure:
        measure(*args.measure)
        return
    if args.ship_base:
        ship_base()
        return
    t0 = time.time()
    if args.jobs is not None:
        build(args.jobs, workers=args.workers)
        return
    # the agent chain is the longest: its runs go first
    build([j for c in sorted(args.claims, reverse=True) for j in CLAIM_JOBS[c]]
          + (["eval_all"] if args.claims == sorted(CLAIM_JOBS) else []), workers=args.workers)
    results = {c: claim_results(c) for c in args.claims}
    results["eval_code"] = eval_code_report()
    with open(R("results.json"), "w") as f:
        json.dump(results, f, indent=1)
    with open(R("table.md"), "w") as f:
        f.write(table(results))
    print(table(results))
    for path in figures(results):
        print("wrote", path)
    print(f"results: {R('results.json')} ({(time.time() - t0) / 60:.1f} min)")


if __name__ == "__main__":
    main()
