"""What each GRPO stage trains on and how it is scored: the prompt sets and reward functions of the
cascaded RL stages (paper 2.4), behind one small record so train_grpo.py reads the same for all five.

| stage | items                                   | reward                                                   |
|-------|-----------------------------------------|----------------------------------------------------------|
| point | general prompts (data/toy/rl_prompts)    | point-wise RM score (reward_models.point_rewards)        |
| pair  | general prompts + a reference answer     | 1 if the rollout beats the reference (pair_rewards)      |
| code1 | code problems (LCB layout)               | w_f R_format + w_c R_correctness (code_judge)             |
| code2 | code problems with optimal complexity    | + w_t R_time, only when every test passes (code_judge)    |
| agent | multi-hop questions over the toy world   | answer score; turn verdicts from the critic (search_agent)|

A reward function never takes the run down: an exception while scoring one sample gives that sample
reward 0 and is logged with its item id (a code-judge timeout is already a normal zero).
"""

import os
import subprocess
import sys
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOY_CODE = os.path.join(ROOT, "data", "toy", "code_problems.jsonl")
TOY_RL_PROMPTS = os.path.join(ROOT, "data", "toy", "rl_prompts.jsonl")
TOY_QUESTIONS = os.path.join(ROOT, "data", "toy", "search_questions.jsonl")


@dataclass
class Env:
    name: str
    items: list                     # training items (prompts / problems / questions)
    eval_items: list                # held out, scored greedily every --eval-every steps
    item_id: Callable               # item -> str
    prompt_ids: Callable = None     # item -> token ids of the rendered prompt (single-turn stages)
    reward: Callable = None         # (items, texts, truncated) -> [dict(total=..., components...)]
    success: Callable = None        # reward dict -> bool, the difficulty filter's criterion (code stages)
    rollout: Callable = None        # multi-turn stages: (model, tok, items, args, seed) -> [Sample]
    log_keys: tuple = ()            # reward-dict keys averaged into metrics.jsonl


def safe_rewards(score_one, items, texts, truncated, item_id, log, workers=1):
    """score_one(item, text, truncated) -> dict with 'total'; exceptions become reward 0 + a log line."""
    def run(args):
        item, text, cut = args
        try:
            return score_one(item, text, cut)
        except Exception as e:  # noqa: BLE001 — one bad sample must not end the run
            log(f"reward error on {item_id(item)}: {type(e).__name__}: {e}\n{traceback.format_exc(limit=2)}")
            return {"total": 0.0, "error": f"{type(e).__name__}: {e}"}
    jobs = list(zip(items, texts, truncated))
    if workers <= 1:
        return [run(j) for j in jobs]
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(run, jobs))


def chat_prompt_ids(tokenizer, messages, tools=None):
    return tokenizer.encode(tokenizer.render(messages, tools=tools, add_generation_prompt=True))


# -----------------------------------------------------------------------------
# code1 / code2 (section 2.3)

def code_env(stage, args, tokenizer, log):
    import code_judge
    from nanbeige41.toy_code import code_prompt
    problems = code_judge.load_problems(args.data or TOY_CODE)
    train = [p for p in problems if p.get("split", "train") == "train"]
    held_out = [p for p in problems if p.get("split") == "test"]
    with_time = stage == "code2"
    # a rollout stuck in a loop is scored TLE on its remaining tests without running them, so one
    # endless program costs time_s, not time_s per test (measured: 45 s steps -> ~5 s)
    limits = code_judge.Limits(time_s=args.test_time_s, stop_after_tle=True)

    def score_one(problem, text, truncated):
        r = code_judge.reward_components(problem, text, truncated=truncated, with_time=with_time,
                                         w_format=args.w_format, w_correctness=args.w_correctness,
                                         w_time=args.w_time, fast=True, limits=limits)
        rw = r["reward"]
        return {"total": rw["total"], "r_format": rw["format"], "r_correctness": rw["correctness"],
                "r_time": rw["time"], "pass_rate": float(r["pass_rate"] == 1.0),
                "meets_optimal": float(bool(r.get("meets_optimal")))}

    def reward(items, texts, truncated):
        return safe_rewards(score_one, items, texts, truncated, lambda p: p["question_id"], log,
                            workers=args.judge_workers)

    def success(r):  # section 2.3.2: stage 1 counts full passes, stage 2 optimal-complexity solutions
        return r.get("meets_optimal", 0.0) == 1.0 if with_time else r.get("pass_rate", 0.0) == 1.0

    return Env(stage, train, held_out, item_id=lambda p: p["question_id"],
               prompt_ids=lambda p: chat_prompt_ids(tokenizer, [{"role": "user", "content": code_prompt(p)}]),
               reward=reward, success=success,
               log_keys=("r_format", "r_correctness", "r_time", "pass_rate", "meets_optimal"))


# -----------------------------------------------------------------------------
# point / pair (sections 2.1.2, 2.1.3)

def ensure_reward_model(kind, path, log):
    """The toy RM checkpoint, trained first (reward_models.py train) when it is missing."""
    if os.path.isfile(os.path.join(path, "reward_head.json")):
        return path
    log(f"reward model {path} missing: training it first (python reward_models.py train --kind {kind})")
    subprocess.run([sys.executable, os.path.join(ROOT, "reward_models.py"), "train", "--kind", kind, "--out", path],
                   check=True, env=_plain_env())
    return path


def _plain_env():
    """The environment without torchrun's variables, so a child script runs as one plain process."""
    drop = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
            "GROUP_RANK", "ROLE_RANK", "ROLE_WORLD_SIZE", "TORCHELASTIC_RUN_ID", "GROUP_WORLD_SIZE"}
    return {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("TORCHELASTIC")}


def general_env(stage, args, tokenizer, log, device):
    import reward_models
    from nanbeige41.data import read_jsonl
    from nanbeige41.toy_chat import is_overlong, is_repetitive
    records = [r for r in read_jsonl(args.data or TOY_RL_PROMPTS) if r.get("stage", stage) == stage]
    n_eval = max(1, len(records) // 10)
    kind = "point" if stage == "point" else "pair"
    default_rm = os.path.join(ROOT, "runs", "toy", f"rm_{kind}")
    rm_path = args.reward_model or ensure_reward_model(kind, default_rm, log)
    rm = reward_models.load_reward_model(rm_path, device=device)
    rm_tok = tokenizer.__class__.from_pretrained(rm_path)

    def reward(items, texts, truncated):
        prompts = [r["messages"] for r in items]
        try:
            if stage == "point":
                scores = reward_models.point_rewards(rm, rm_tok, prompts, texts)
            else:
                scores = reward_models.pair_rewards(rm, rm_tok, prompts, texts, [r["reference"] for r in items])
        except Exception as e:  # noqa: BLE001 — fall back to one sample at a time to isolate the bad one
            log(f"batched RM scoring failed ({type(e).__name__}: {e}); scoring one by one")
            fn = reward_models.point_rewards if stage == "point" else reward_models.pair_rewards

            def one(item, text, _):
                extra = [] if stage == "point" else [[item["reference"]]]
                return {"total": fn(rm, rm_tok, [item["messages"]], [text], *extra)[0]}
            scores = [r["total"] for r in safe_rewards(one, items, texts, truncated, lambda r: r["id"], log)]
        # defect rates the point-wise stage is meant to push down (section 2.1.2)
        answers = [reward_models.split_response(t)[1] for t in texts]
        return [{"total": float(s), "rm_score": float(s), "repetitive": float(is_repetitive(a)),
                 "overlong_text": float(is_overlong(a))} for s, a in zip(scores, answers)]

    return Env(stage, records[n_eval:], records[:n_eval], item_id=lambda r: r["id"],
               prompt_ids=lambda r: chat_prompt_ids(tokenizer, r["messages"]), reward=reward,
               log_keys=("rm_score", "repetitive", "overlong_text"))


# -----------------------------------------------------------------------------
# agent (sections 2.2, 2.4)

def agent_env(args, tokenizer, log):
    import search_agent
    from nanbeige41 import toy_world
    from nanbeige41.data import read_jsonl
    world_seed = getattr(args, "agent_world_seed", 0)
    if world_seed:  # a freshly generated world (toy_world.generate_world), its questions split 80/20 as the shipped one's
        world = toy_world.generate_world(world_seed)
        rows = toy_world.synthesize_questions(world, seed=world_seed)
        wiki = search_agent.LocalWiki(world)
        toolbox = search_agent.Toolbox(wiki, wiki, search_agent.python_runner_from_code_judge())
    else:
        rows = read_jsonl(args.data or TOY_QUESTIONS)
        toolbox = search_agent.make_toolbox("local")  # the SFT trajectories offer search, visit and python
    train = [r for r in rows if r.get("split", "train") == "train"]
    held_out = [r for r in rows if r.get("split") == "test"]
    if args.agent_max_hops:  # an easier curriculum: train (and evaluate) on questions of at most this many hops
        train = [r for r in train if r.get("hops", 1) <= args.agent_max_hops]
        held_out = [r for r in held_out if r.get("hops", 1) <= args.agent_max_hops]
    config = search_agent.AgentConfig(max_turns=args.agent_max_turns, max_new_tokens=args.max_new_tokens,
                                      max_context_tokens=args.agent_context)
    critic = search_agent.RuleCritic()

    def rollout(model, tok, items, a, seed):
        from train_grpo import Sample  # the trainer's record; imported here to keep one definition
        policy = search_agent.ModelPolicy(model, tok, temperature=a.temperature, top_p=a.top_p, top_k=a.top_k,
                                          seed=seed)
        samples = []
        groups = search_agent.rollout_groups(policy, items, a.group_size, tok, toolbox, config, critic)
        for g, (row, trajs) in enumerate(zip(items, groups)):  # all episodes advance in lockstep
            for k, traj in enumerate(trajs):
                score = float(traj["score"] or 0.0)
                passed = [v is None or v["pass"] for v in traj["verdicts"]]
                for seg_index, seg in enumerate(traj["segments"]):
                    bad = [traj["turns"][t]["span"] for t in seg["turns"] if not passed[t]]
                    cut = any(traj["turns"][t]["finish_reason"] == "length" for t in seg["turns"])
                    samples.append(Sample(item_id=row["id"], group=g, prompt=seg["prompt_ids"],
                                          response=seg["completion_ids"], old_logprobs=seg["logprobs"],
                                          loss_mask=list(seg["loss_mask"]), traj=k, reward=score, overlong=cut,
                                          bad_spans=bad,
                                          info={"total": score, "answer_score": score,
                                                "turns": float(len(traj["turns"])),
                                                "turn_pass": sum(passed) / max(1, len(passed)),
                                                "answered": float(traj["termination"] == "answer")}))
        return samples

    # no difficulty filter here: the paper's k-in-[1, 5] filter belongs to the code stages (2.3.2)
    return Env("agent", train, held_out, item_id=lambda r: r["id"], rollout=rollout,
               log_keys=("answer_score", "turns", "turn_pass", "answered"))


def make_env(stage, args, tokenizer, log, device="cpu"):
    if stage in ("code1", "code2"):
        return code_env(stage, args, tokenizer, log)
    if stage in ("point", "pair"):
        return general_env(stage, args, tokenizer, log, device)
    if stage == "agent":
        return agent_env(args, tokenizer, log)
    raise ValueError(f"unknown --stage {stage!r}")
