"""GRPO: the cascaded RL stages of Nanbeige4.1-3B (paper sections 2.1.2, 2.1.3, 2.2, 2.3.2-2.3.4, 2.4).

Toy, on a CPU, from a fresh clone (missing prerequisite checkpoints — toy SFT, then code1 — are
built first by running the earlier stage, and the log says so):
    torchrun --standalone --nproc_per_node 1 train_grpo.py --stage code2
    python train_grpo.py --stage point --max-steps 20          # plain single process works too
Real run (GPUs, FSDP2 over the ranks; --init is the previous stage's HF-format output; the 3b DEFAULTS
below give every stage the paper's settings where it states them, published GRPO practice elsewhere):
    torchrun --nproc_per_node 8 train_grpo.py --config 3b --stage point --init runs/3b/sft \\
        --data general_prompts.jsonl --reward-model runs/3b/rm_point --activation-checkpointing
    torchrun --nproc_per_node 8 train_grpo.py --config 3b --stage code1 --init runs/3b/pair \\
        --data lcb_problems.jsonl --activation-checkpointing          # writes runs/3b/code1

| --stage | reward                                                              | paper      |
|---------|---------------------------------------------------------------------|------------|
| point   | point-wise reward model score                                       | 2.1.2      |
| pair    | 1 if the rollout beats the reference answer under the pair-wise RM   | 2.1.3      |
| code1   | R_format + R_correctness (fraction of tests passed)                 | 2.3.3 (1)  |
| code2   | + R_time, only when all tests pass (gated time-complexity reward)   | 2.3.3 (2)  |
| agent   | answer correct (trajectory) + turn-level critic rewards              | 2.2, 2.4   |

The objective. The paper says GRPO (DeepSeekMath) and no more; the defaults here are the DAPO variant of it, which
the toy runs were measured with and which published long-CoT GRPO runs use: clip-higher (0.2 / 0.28), token-mean
loss, no KL term and no reference model, dynamic sampling, and a length penalty on rollouts cut at
--max-new-tokens (--overlong penalty 0.5). DeepSeekMath's GRPO is `--clip-high 0.2 --loss-agg seq-mean-token-mean
--kl-coef 0.04 --no-dynamic-sampling --overlong none`. One step:
  1. take P prompts; sample G rollouts each with the current policy (KV-cache generation), keeping
     the sampled tokens and their log-probs (token in, token out: nothing is re-tokenised);
  2. score every rollout with the stage's reward; group-relative advantage
         A_i = (r_i - mean(r_group)) / (std(r_group) + eps)      (--no-std: r_i - mean, Dr. GRPO)
     broadcast to every generated token of rollout i (agent stage: plus turn-level terms, below);
  3. groups in which no trained token has a nonzero advantage carry no signal (all rewards equal and, in
     the agent stage, no turn penalised): drop them and draw more prompts (dynamic sampling), counting
     them in `filtered_groups`;
  4. for --epochs passes over --minibatches minibatches, with rho_t = pi_theta(y_t) / pi_old(y_t):
         loss_t = -min(rho_t A, clip(rho_t, 1 - clip_low, 1 + clip_high) A) + beta * k3_t
         k3_t   = pi_ref/pi_theta - log(pi_ref/pi_theta) - 1            (KL estimator, >= 0)
     aggregated by --loss-agg over the whole minibatch *on all ranks* (the denominators are
     all-reduced before the backward), so the gradient does not depend on the micro-batch size,
     the accumulation steps or the world size.
Code stages first keep the problems the policy solves k in [1, 5] times out of n = 8 (section
2.3.2: stage 1 counts rollouts passing all tests, stage 2 rollouts meeting the optimal complexity).

Writes OUT/metrics.jsonl (one line per step), OUT/checkpoints/step_N (HF weights + optimizer + RNG,
atomic), and the final policy as an HF checkpoint in OUT itself (the next stage's --init);
`python -m nanbeige41.plot OUT` draws the curves.

Not covered here: rollouts through an inference engine (vLLM/SGLang) — generation runs through the
policy itself, which on a real cluster is the slow part; asynchronous or off-policy rollout buffers.
Departure on the toy config: the code stages start from the toy SFT checkpoint instead of the
general-RL output, to keep the fresh-clone chain short.
"""

import argparse
import json
import math
import os
import random
import sys
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.distributed as dist

import code_judge
import reward_models
import search_agent
from nanbeige41 import agent_policies, paths, search_tools, toy_world
from nanbeige41.checkpoint import (CheckpointError, check_hf_checkpoint, latest_checkpoint, load_checkpoint,
                                   save_checkpoint, save_hf, truncate_metrics)
from nanbeige41.cli import finite_float, non_negative_float, non_negative_int, positive_float, positive_int
from nanbeige41.data import read_jsonl
from nanbeige41.distributed import (all_gather_list, all_reduce_max, all_reduce_sum, cleanup, is_sharded,
                                    mixed_precision_policy, parallelize, print0, setup, sync_rollout_model)
from nanbeige41.generate import generate
from nanbeige41.losses import packed_logprobs
from nanbeige41.model import Transformer
from nanbeige41.tokenizer import Tokenizer
from nanbeige41.toy_chat import is_overlong, is_repetitive
from nanbeige41.toy_code import code_prompt

STAGES = ("point", "pair", "code1", "code2", "agent")
# Toy chain: which toy checkpoint each stage starts from (the 3b run passes --init explicitly).
TOY_PREREQ = {"point": "sft", "pair": "point", "code1": "sft", "code2": "code1", "agent": "sft"}


# -----------------------------------------------------------------------------
# The GRPO objective, term by term (each one unit-tested in tests/test_grpo.py)

def group_advantages(rewards, group_size, scale_by_std=True, eps=1e-4):
    """rewards (N,) laid out group by group -> advantages (N,): r - mean over the group, divided by
    the group's (unbiased) std unless scale_by_std is False (Dr. GRPO)."""
    r = rewards.view(-1, group_size)
    adv = r - r.mean(dim=1, keepdim=True)
    if scale_by_std:
        adv = adv / (r.std(dim=1, keepdim=True) + eps)
    return adv.reshape(-1)


def k3_kl(logp, ref_logp):
    """Per-token k3 estimator of KL(pi_theta || pi_ref) (Schulman 2020), unbiased and >= 0:
    with log_ratio = ref_logp - logp, k3 = exp(log_ratio) - log_ratio - 1."""
    log_ratio = ref_logp - logp
    return torch.exp(log_ratio) - log_ratio - 1


def clipped_surrogate(logp, old_logp, advantages, clip_low, clip_high):
    """Per-token -min(rho A, clip(rho, 1-clip_low, 1+clip_high) A) and where the clip was active.
    clip_high > clip_low is DAPO's clip-higher: more room for raising unlikely tokens."""
    ratio = torch.exp(logp - old_logp)
    unclipped = ratio * advantages
    clipped = ratio.clamp(1 - clip_low, 1 + clip_high) * advantages
    return -torch.min(unclipped, clipped), (clipped < unclipped)


def token_weights(seq_lens, loss_agg, n_tokens, n_seqs, max_new_tokens, traj_lens=None):
    """Weight of each token of each sample so that sum(w * loss_t) is the aggregate over the global
    minibatch (n_tokens, n_seqs: totals over all ranks and micro-batches; a "sequence" is a trajectory,
    which in the agent stage is several samples, one per context window: traj_lens[i] is the token
    count of sample i's whole trajectory, default seq_lens[i]):
      token-mean           sum_t loss_t / n_tokens                   (DAPO)
      seq-mean-token-mean  mean over trajectories of mean over tokens (original GRPO)
      seq-mean-token-sum   sum_t loss_t / (n_seqs * max_new_tokens)   (Dr. GRPO's constant)"""
    traj_lens = seq_lens if traj_lens is None else traj_lens
    if loss_agg == "token-mean":
        return [torch.full((n,), 1.0 / n_tokens) for n in seq_lens]
    if loss_agg == "seq-mean-token-mean":
        return [torch.full((n,), 1.0 / (max(t, 1) * n_seqs)) for n, t in zip(seq_lens, traj_lens)]
    if loss_agg == "seq-mean-token-sum":
        return [torch.full((n,), 1.0 / (n_seqs * max_new_tokens)) for n in seq_lens]
    raise ValueError(f"unknown --loss-agg {loss_agg!r}")


def keep_by_difficulty(success_counts, lo=1, hi=5):
    """Section 2.3.2: indices of problems solved k times with lo <= k <= hi (of n = 8 rollouts)."""
    return [i for i, k in enumerate(success_counts) if lo <= k <= hi]


# -----------------------------------------------------------------------------
# Samples and the packed log-prob pass

@dataclass
class Sample:
    """One trainable sequence: the prompt the policy saw and what it generated. For the agent stage
    each turn is its own Sample (its prompt holds the context as the policy saw it)."""
    item_id: str
    group: int
    prompt: list
    response: list
    old_logprobs: list
    loss_mask: list          # per response token: 1 = generated by the policy and trained on
    traj: int = 0            # trajectory index within the group (several samples per trajectory: agent)
    reward: float = 0.0      # the environment's reward of the trajectory (every segment carries it)
    traj_reward: float = None  # after the overlong penalty, once per trajectory (assign_advantages)
    advantage: float = 0.0
    overlong: bool = False
    bad_spans: list = field(default_factory=list)  # [start, end) response spans of turns the critic failed
    token_adv: list = None   # per response token advantage, set by assign_advantages
    info: dict = field(default_factory=dict)


def micro_batches(samples, max_tokens):
    """Greedy split into micro-batches of at most max_tokens tokens (a longer sample goes alone)."""
    batches, current, size = [], [], 0
    for s in samples:
        n = len(s.prompt) + len(s.response)
        if current and size + n > max_tokens:
            batches.append(current)
            current, size = [], 0
        current.append(s)
        size += n
    if current:
        batches.append(current)
    return batches


def policy_update(model, ref_model, optimizer, samples, args, world):
    """One optimizer step on one minibatch (this rank's share of it). Returns logging sums."""
    seq_lens = [int(sum(s.loss_mask)) for s in samples]
    # sequences are trajectories, not segments: an agent trajectory cut into k context windows counts
    # once (minibatches split by group, so a trajectory's segments are all in this rank's minibatch)
    traj_tokens = {}
    for s, n in zip(samples, seq_lens):
        traj_tokens[(s.group, s.traj)] = traj_tokens.get((s.group, s.traj), 0) + n
    n_tokens = all_reduce_sum(float(sum(seq_lens)))
    n_seqs = all_reduce_sum(float(sum(1 for n in traj_tokens.values() if n > 0)))
    stats = dict(loss=0.0, kl=0.0, entropy=0.0, clip=0.0, tokens=0.0)
    if n_tokens == 0:  # every rank sees the same global count, so all skip together
        return stats, 0.0
    weights = token_weights(seq_lens, args.loss_agg, n_tokens, max(n_seqs, 1.0), args.max_new_tokens,
                            traj_lens=[traj_tokens[(s.group, s.traj)] for s in samples])
    w_of = {id(s): w for s, w in zip(samples, weights)}
    batches = micro_batches(samples, args.micro_batch_tokens)
    # Under FSDP every rank must run the same number of forward/backward passes (each one all-gathers
    # the blocks' weights): pad with empty micro-batches whose loss is an exact zero.
    n_batches = all_reduce_max(len(batches))
    while len(batches) < n_batches:
        batches.append([Sample("pad", -1, [0], [0], [0.0], [0])])
    for mb in batches:
        logps, ents = packed_logprobs(model, mb, args.temperature, args.loss_chunk, with_entropy=True)
        ref_logps = None
        if ref_model is not None:
            with torch.no_grad():
                ref_logps, _ = packed_logprobs(ref_model, mb, args.temperature, args.loss_chunk)
        total = 0.0 * sum(lp.sum() for lp in logps)  # keeps the graph whole even when nothing is masked in
        for j, s in enumerate(mb):
            mask = torch.tensor(s.loss_mask, dtype=torch.bool, device=logps[j].device)
            if not mask.any():
                continue
            lp = logps[j][mask]
            old = torch.tensor(s.old_logprobs, device=lp.device)[mask]
            adv = torch.tensor(s.token_adv, device=lp.device)[mask]
            per_token, was_clipped = clipped_surrogate(lp, old, adv, args.clip_low, args.clip_high)
            if ref_logps is not None:
                kl = k3_kl(lp, ref_logps[j][mask])
                per_token = per_token + args.kl_coef * kl
                stats["kl"] += float(kl.detach().sum())
            total = total + (w_of[id(s)].to(lp.device) * per_token).sum()
            stats["clip"] += float(was_clipped.sum())
            stats["entropy"] += float(ents[j][mask].sum())
            stats["tokens"] += float(mask.sum())
        total.backward()
        stats["loss"] += float(total.detach())
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
    grad_norm = float(grad_norm.full_tensor() if hasattr(grad_norm, "full_tensor") else grad_norm)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return stats, grad_norm


# -----------------------------------------------------------------------------
# Rollouts

def rollout_groups(model, tokenizer, env, items, args, seed):
    """G rollouts for each item -> Samples (group i = items[i]) with rewards. Single-turn stages
    generate here; the agent stage hands over to its environment's multi-turn rollout."""
    if env.rollout is not None:
        return env.rollout(model, tokenizer, items, args, seed)
    prompts, owners = [], []
    for g, item in enumerate(items):
        ids = env.prompt_ids(item)
        prompts += [ids] * args.group_size
        owners += [g] * args.group_size
    outs = []
    for i in range(0, len(prompts), args.rollout_batch):
        outs += generate(model, prompts[i:i + args.rollout_batch], args.max_new_tokens, args.temperature,
                         args.top_p, args.top_k, eos_ids=[tokenizer.im_end_id], seed=seed + i)
    texts = [tokenizer.decode(o["tokens"], skip_special_tokens=True) for o in outs]
    truncated = [o["finish_reason"] == "length" for o in outs]
    rewards = env.reward([items[g] for g in owners], texts, truncated)
    samples = []
    for k, (p, g, o, r, cut) in enumerate(zip(prompts, owners, outs, rewards, truncated)):
        samples.append(Sample(item_id=env.item_id(items[g]), group=g, prompt=p, response=o["tokens"],
                              old_logprobs=o["logprobs"], loss_mask=[1] * len(o["tokens"]), traj=k,
                              reward=r["total"], overlong=cut, info=r))
    return samples


def trajectories(samples):
    """{(group, traj): [its samples in order]}. A single-turn rollout is one sample; an agent trajectory is
    one sample per context window (segment), all carrying the trajectory's reward."""
    out = {}
    for s in samples:
        out.setdefault((s.group, s.traj), []).append(s)
    return out


def assign_advantages(samples, args):
    """Advantages in place, per trajectory, then broadcast to its segments (section 2.4 GRPO):
    1. one reward per trajectory: the environment's reward, minus --overlong-penalty once when any of its
       segments was cut at --max-new-tokens (`penalty`); `mask` removes the whole trajectory from the loss
       (DAPO's overlong filtering). Either way it does not depend on how many segments there are or
       their order;
    2. A_traj = (r - mean) / std over the G trajectories of the group (not over segments);
    3. every token of every segment of the trajectory gets A_traj, plus the turn-level term of its turn
       (section 2.2.1, "any turn that fails ... does not participate in model training or provide a
       negative reward"): for a turn the critic failed,
          --turn-credit penalty:  A_turn = A_traj - turn_penalty
          --turn-credit mask:     the turn's tokens leave the loss;
          --turn-credit none:     nothing (trajectory-level reward only: the ablation);
          --turn-credit reward:   no per-turn term; instead step 1 adds turn_penalty x (the share of the trajectory's
                                  turns the critic passed) to its reward, so a trajectory of sound turns beats one
                                  of failed turns even when both answer wrong (a departure: the paper only
                                  penalises; issue 13 measures it with --critic strict).
    Safe to call once per group as soon as the group is rolled out (dynamic sampling needs the result)."""
    trajs = trajectories(samples)
    for segs in trajs.values():
        cut = any(s.overlong for s in segs)
        r = segs[0].reward - (args.overlong_penalty if cut and args.overlong == "penalty" else 0.0)
        if args.turn_credit == "reward":
            r += args.turn_penalty * segs[0].info.get("turn_pass", 1.0)
        for s in segs:
            s.traj_reward = r
    groups = {}
    for g, t in trajs:
        groups.setdefault(g, []).append(t)
    for g, ts in groups.items():
        ts = sorted(ts)
        rewards = torch.tensor([trajs[(g, t)][0].traj_reward for t in ts], dtype=torch.float64)
        adv = group_advantages(rewards, len(ts), not args.no_std).tolist() if len(ts) > 1 else [0.0]
        for t, a in zip(ts, adv):
            segs = trajs[(g, t)]
            cut = any(s.overlong for s in segs)
            for s in segs:
                s.advantage = a
                s.token_adv = [a] * len(s.response)
                for start, end in (s.bad_spans if args.turn_credit in ("penalty", "mask") else []):
                    for i in range(start, end):
                        if args.turn_credit == "mask":
                            s.loss_mask[i] = 0
                        else:
                            s.token_adv[i] -= args.turn_penalty
                if cut and args.overlong == "mask":
                    s.loss_mask = [0] * len(s.loss_mask)
    return samples


def has_signal(samples):
    """Dynamic sampling's test, on a group whose advantages are assigned: False when no trained token has a
    nonzero advantage. Turn-level credit counts: a group whose trajectories all got the same reward still
    teaches something when some turn was penalised by the critic."""
    return any(abs(a) > 1e-9 for s in samples for a, m in zip(s.token_adv, s.loss_mask) if m)


def trajectory_stats(samples, log_keys):
    """Sums over this rank's trajectories (not segments) for the metrics line: count, reward (after the
    overlong penalty), reward squared, response tokens (agent: all its segments), overlong, logged keys."""
    trajs = trajectories(samples).values()
    rewards = [segs[0].traj_reward if segs[0].traj_reward is not None else segs[0].reward for segs in trajs]
    out = {"n": float(len(rewards)), "reward": float(sum(rewards)), "reward_sq": float(sum(r * r for r in rewards)),
           "response_len": float(sum(len(s.response) for segs in trajs for s in segs)),
           "overlong": float(sum(any(s.overlong for s in segs) for segs in trajs))}
    for k in log_keys:
        out[k] = float(sum(float(segs[0].info.get(k, 0.0)) for segs in trajs))
    return out


# -----------------------------------------------------------------------------
# Difficulty filter, evaluation, weight sync

def difficulty_filter(model, tokenizer, env, items, args, world, log):
    """Section 2.3.2 on-policy filter: n rollouts per item, keep items with lo <= successes <= hi."""
    filter_args = argparse.Namespace(**{**vars(args), "group_size": args.filter_n})
    mine = items[world.rank::world.world_size]
    per_call = max(1, args.rollout_batch // args.filter_n)
    counts = []
    n_calls = math.ceil(len(items) / world.world_size / per_call)  # equal on every rank
    for c in range(n_calls):
        chunk = mine[c * per_call:(c + 1) * per_call]
        if not chunk:
            continue
        samples = rollout_groups(model, tokenizer, env, chunk, filter_args, seed=args.seed * 7919 + c)
        for g, item in enumerate(chunk):
            k = sum(env.success(s.info) for s in samples if s.group == g)
            counts.append((env.item_id(item), k))
    counts = dict(all_gather_list(counts))
    ks = [counts[env.item_id(it)] for it in items]
    kept = [items[i] for i in keep_by_difficulty(ks, args.filter_lo, args.filter_hi)]
    hist = {k: ks.count(k) for k in range(args.filter_n + 1)}
    log(f"difficulty filter: kept {len(kept)}/{len(items)} items with k in [{args.filter_lo}, {args.filter_hi}] "
        f"of n={args.filter_n}; histogram of k: {hist}")
    return kept, {"counts": counts, "histogram": hist}


def evaluate_policy(model, tokenizer, env, args, world):
    """Greedy single rollout on the held-out items; mean of every logged reward key (all ranks)."""
    items = env.eval_items[:args.eval_items]
    if not items:
        return {}
    eval_args = argparse.Namespace(**{**vars(args), "group_size": 1, "temperature": 0.0})
    mine = items[world.rank::world.world_size]
    samples = rollout_groups(model, tokenizer, env, mine, eval_args, seed=0) if mine else []
    keys = ("total",) + tuple(env.log_keys)
    sums = {k: all_reduce_sum(v) for k, v in trajectory_stats(samples, keys).items()}  # per item, not segment
    return {f"eval_{k}": sums[k] / max(sums["n"], 1.0) for k in keys}


def ensure_toy_init(stage, log, world):
    """The toy checkpoint this stage starts from; built first (earlier stage) when missing."""
    prev = TOY_PREREQ[stage]
    path = paths.toy_run(prev)
    if world.is_main:
        script = ["train_sft.py", "--config", "toy"] if prev == "sft" else ["train_grpo.py", "--stage", prev]
        paths.build_missing(path, "config.json", script + ["--out", path], log)
    if dist.is_initialized():
        dist.barrier()
    return path


# -----------------------------------------------------------------------------
# What each stage trains on and how it is scored (paper 2.4; the table at the top): the prompt sets and reward
# functions of the five stages behind one small record, so the loop below reads the same for all of them. A reward
# function never takes the run down: an exception while scoring one sample gives it reward 0 and a log line.

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
    problems = code_judge.load_problems(args.data or paths.TOY_CODE)
    train = [p for p in problems if p.get("split", "train") == "train"]
    held_out = [p for p in problems if p.get("split") == "test"]
    with_time = stage == "code2"
    # a rollout stuck in a loop is scored TLE on its remaining tests without running them, so one
    # endless program costs time_s, not time_s per test (measured: 45 s steps -> ~5 s)
    limits = code_judge.Limits(time_s=args.test_time_s, stop_after_tle=True)

    def score_one(problem, text, truncated):
        r = code_judge.code_reward(problem, text, stage=stage, truncated=truncated, w_format=args.w_format,
                                   w_correctness=args.w_correctness, w_time=args.w_time, fast=True, limits=limits)
        return {"total": r["total"], "r_format": r["format"], "r_correctness": r["correctness"],
                "r_time": r["time"], "pass_rate": float(r["pass_rate"] == 1.0),
                "meets_optimal": float(bool(r["meets_optimal"]))}

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

def general_env(stage, args, tokenizer, log, device):
    records = [r for r in read_jsonl(args.data or paths.TOY_RL_PROMPTS) if r.get("stage", stage) == stage]
    n_eval = max(1, len(records) // 10)
    kind = "point" if stage == "point" else "pair"
    rm_path = args.reward_model or paths.build_missing(  # the toy RM, trained first when it is missing
        paths.toy_run(f"rm_{kind}"), "reward_head.json",
        ["reward_models.py", "train", "--kind", kind, "--out", paths.toy_run(f"rm_{kind}")], log)
    rm = reward_models.load_reward_model(rm_path, device=device)
    rm_tok = tokenizer.__class__.from_pretrained(rm_path)

    def reward(items, texts, truncated):
        scores = reward_models.score_rollouts(rm, rm_tok, stage, items, texts, log)
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
    if args.agent_world_seed:  # freshly generated worlds, each one's questions split 80/20 as the shipped one's
        python = search_tools.sandboxed_python()
        rows, toolboxes = [], {}
        for seed in range(args.agent_world_seed, args.agent_world_seed + args.agent_worlds):
            world = toy_world.fresh_world(seed)
            wiki = search_tools.LocalWiki(world)
            toolboxes[seed] = search_tools.Toolbox(wiki, wiki, python)  # a question searches its own world
            rows += [dict(r, id=f"w{seed}-{r['id']}", world=seed)
                     for r in toy_world.synthesize_questions(world, seed=seed)]

        def toolbox(row):
            return toolboxes[row["world"]]
    else:
        rows = read_jsonl(args.data or paths.TOY_QUESTIONS)
        toolbox = search_tools.make_toolbox("local")  # the SFT trajectories offer search, visit and python
    train = [r for r in rows if r.get("split", "train") == "train"]
    held_out = [r for r in rows if r.get("split") == "test"]
    # a curriculum: train (and evaluate) on questions of at least / at most this many hops (0: no bound)
    hops_ok = (lambda r: r.get("hops", 1) >= args.agent_min_hops
               and (not args.agent_max_hops or r.get("hops", 1) <= args.agent_max_hops))
    train, held_out = [r for r in train if hops_ok(r)], [r for r in held_out if hops_ok(r)]
    config = search_agent.AgentConfig(max_turns=args.agent_max_turns, max_new_tokens=args.max_new_tokens,
                                      max_context_tokens=args.agent_context)
    critic = search_agent.RuleCritic(strict=args.critic == "strict")

    def rollout(model, tok, items, a, seed):
        policy = agent_policies.ModelPolicy(model, tok, temperature=a.temperature, top_p=a.top_p, top_k=a.top_k,
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


# -----------------------------------------------------------------------------
# Command line

# Per-config, per-stage defaults of the flags left unset (None below). toy: measured on 2 CPU cores (README; the code
# stages sample at T = 0.7, where the toy SFT model solves enough prompts for groups of 8 to carry signal, and code2
# overfit its ~25 filtered problems at lr 2e-4). 3b: the paper where it says (G = 8, the k in [1, 5] of 8 filter on
# every problem, 256k context and hundreds of agent turns); elsewhere published GRPO practice (DeepSeekMath, DAPO,
# DeepScaleR, Skywork-OR1): lr 1e-6, 128 prompts x 8 rollouts, T = 1.0, 16k-32k responses, LiveCodeBench's 6 s per
# test; step counts are ours. rollout_batch 16: its KV cache fits an 80 GiB GPU, 64 does not (nanbeige41.plan).
_TOY = dict(max_steps=20, prompts_per_step=8, max_new_tokens=96, lr=2e-5, warmup_steps=2, temperature=1.0,
            filter_max_items=0, eval_items=64, test_time_s=2.0, agent_max_turns=8, agent_context=2048, rollout_batch=64)
_3B = dict(max_steps=500, prompts_per_step=128, max_new_tokens=16384, lr=1e-6, warmup_steps=10, temperature=1.0,
           filter_max_items=0, eval_items=256, test_time_s=6.0, agent_max_turns=600, agent_context=262144,
           rollout_batch=16)
DEFAULTS = {
    "toy": {
        "point": dict(_TOY),
        "pair": dict(_TOY),
        "code1": dict(_TOY, max_steps=30, max_new_tokens=160, lr=2e-4, temperature=0.7, filter_max_items=96),
        "code2": dict(_TOY, max_steps=30, max_new_tokens=160, lr=5e-5, temperature=0.7, filter_max_items=96),
        "agent": dict(_TOY, max_steps=10, prompts_per_step=4, max_new_tokens=128, lr=1e-5, eval_items=16),
    },
    "3b": {
        "point": dict(_3B),
        "pair": dict(_3B),
        "code1": dict(_3B, max_steps=300, max_new_tokens=32768),
        "code2": dict(_3B, max_steps=300, max_new_tokens=32768),
        "agent": dict(_3B, max_steps=200, prompts_per_step=32, max_new_tokens=8192, eval_items=64),
    },
}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    # Stage and data
    p.add_argument("--stage", required=True, choices=STAGES)
    p.add_argument("--config", default="toy", choices=sorted(DEFAULTS), help="which DEFAULTS: toy (chained, CPU) | 3b")
    p.add_argument("--init", default=None, help="HF-format policy checkpoint (toy: the previous toy stage's output)")
    p.add_argument("--data", default=None, help="items JSONL (toy: data/toy/code_problems.jsonl, rl_prompts.jsonl, search_questions.jsonl)")
    p.add_argument("--reward-model", default=None, help="point/pair: RM checkpoint dir (toy: runs/toy/rm_point|rm_pair, trained if missing)")
    p.add_argument("--out", default=None, help="run directory (default runs/<config>/<stage>)")
    p.add_argument("--resume", action="store_true", help="continue from the newest checkpoint in --out")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default=None, help="cpu | cuda (default: cuda when available)")
    # Rollouts
    p.add_argument("--max-steps", type=non_negative_int, default=None)
    p.add_argument("--group-size", type=positive_int, default=8, help="G rollouts per prompt (paper: 8)")
    p.add_argument("--prompts-per-step", type=positive_int, default=None, help="prompts per optimizer step, all ranks together")
    p.add_argument("--max-new-tokens", type=positive_int, default=None)
    p.add_argument("--temperature", type=positive_float, default=None, help="sampling temperature (toy code stages: 0.7)")
    p.add_argument("--top-p", type=positive_float, default=1.0)
    p.add_argument("--top-k", type=non_negative_int, default=0)
    p.add_argument("--rollout-batch", type=positive_int, default=None, help="sequences per generate() call")
    p.add_argument("--max-seq-len", type=positive_int, default=None, help="prompt + response limit (default: the model's)")
    p.add_argument("--max-resample-rounds", type=non_negative_int, default=2, help="dynamic sampling: refills per step")
    p.add_argument("--max-rollouts", type=positive_int, default=None,
                   help="stop after the step at which this many rollouts have been drawn, the difficulty filter's "
                        "included (equal-rollout comparisons: with vs. without the filter, turn credit vs. none)")
    p.add_argument("--no-dynamic-sampling", action="store_true", help="keep zero-variance groups")
    # Objective
    p.add_argument("--lr", type=positive_float, default=None)
    p.add_argument("--warmup-steps", type=non_negative_int, default=None)
    p.add_argument("--weight-decay", type=non_negative_float, default=0.0)
    p.add_argument("--grad-clip", type=positive_float, default=1.0)
    p.add_argument("--kl-coef", type=non_negative_float, default=0.0, help="beta of the k3 KL to the initial policy (0: no reference model)")
    p.add_argument("--clip-low", type=non_negative_float, default=0.2)
    p.add_argument("--clip-high", type=non_negative_float, default=0.28, help="> clip-low: DAPO clip-higher")
    p.add_argument("--loss-agg", default="token-mean", choices=["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
    p.add_argument("--no-std", action="store_true", help="advantage r - mean without dividing by the std (Dr. GRPO)")
    p.add_argument("--epochs", type=positive_int, default=1, help="passes over each batch of rollouts")
    p.add_argument("--minibatches", type=positive_int, default=2, help="optimizer steps per pass")
    p.add_argument("--overlong", default="penalty", choices=["none", "penalty", "mask"])
    p.add_argument("--overlong-penalty", type=finite_float, default=0.5)
    # Code stages (2.3)
    p.add_argument("--w-format", type=finite_float, default=0.1)
    p.add_argument("--w-correctness", type=finite_float, default=1.0)
    p.add_argument("--w-time", type=finite_float, default=0.5)
    p.add_argument("--judge-workers", type=positive_int, default=os.cpu_count() or 1)
    p.add_argument("--test-time-s", type=positive_float, default=None, help="wall clock per test case in the sandbox")
    p.add_argument("--no-difficulty-filter", action="store_true")
    p.add_argument("--filter-n", type=positive_int, default=8)
    p.add_argument("--filter-lo", type=non_negative_int, default=1)
    p.add_argument("--filter-hi", type=non_negative_int, default=5)
    p.add_argument("--filter-max-items", type=non_negative_int, default=None, help="0: all training items (toy code stages: 96)")
    # Agent stage (2.2)
    p.add_argument("--agent-max-turns", type=positive_int, default=None)
    p.add_argument("--agent-context", type=positive_int, default=None, help="tokens of the context window")
    p.add_argument("--turn-credit", default="penalty", choices=["penalty", "mask", "none", "reward"],
                   help="what a turn the critic fails gets (none: trajectory reward only, the ablation; reward: "
                        "the share of passed turns joins the trajectory reward; see assign_advantages)")
    p.add_argument("--turn-penalty", type=finite_float, default=0.5, help="the per-turn penalty (reward: the weight)")
    p.add_argument("--critic", default="rule", choices=["rule", "strict"],
                   help="the turn judge: rule (search_agent.RuleCritic) or strict (also fails made-up names in "
                        "queries and guessed answers; see RuleCritic)")
    p.add_argument("--agent-max-hops", type=non_negative_int, default=0,
                   help="train/evaluate on questions of <= this many hops (0: all)")
    p.add_argument("--agent-min-hops", type=non_negative_int, default=0,
                   help="train/evaluate on questions of >= this many hops (2: no one-hop question, whose right "
                        "answers after a single search teach stopping one hop early on the others)")
    p.add_argument("--agent-world-seed", type=non_negative_int, default=0,
                   help="questions and tools of a freshly generated toy world (0: the shipped one); the toy agent's SFT "
                        "never saw it, and the shipped tokenizer splits its names into common pieces")
    p.add_argument("--agent-worlds", type=positive_int, default=1,
                   help="with --agent-world-seed S: the questions of the fresh worlds S .. S+N-1, each searched in its "
                        "own world (one world's facts can be memorised; many worlds leave only the skill to learn)")
    # Memory
    p.add_argument("--micro-batch-tokens", type=positive_int, default=1024,
                   help="tokens per packed row of the update (a memory knob: attention is per document, so "
                        "on CPU 1024 and 4096 measured the same speed)")
    p.add_argument("--loss-chunk", type=positive_int, default=1024, help="tokens per chunk of the output projection")
    p.add_argument("--activation-checkpointing", action="store_true", help="recompute each block in backward")
    # Logging and checkpoints
    p.add_argument("--eval-every", type=non_negative_int, default=5)
    p.add_argument("--eval-items", type=positive_int, default=None, help="held-out items per evaluation (toy: 64; agent: 16)")
    p.add_argument("--save-every", type=positive_int, default=10)
    p.add_argument("--keep-checkpoints", type=non_negative_int, default=2)
    p.add_argument("--sharded-checkpoints", action="store_true",
                   help="checkpoints through torch.distributed.checkpoint (each rank writes its shards; resumable at "
                        "any world size) instead of gathered HF weights + optimizer.pt")
    args = p.parse_args(argv)
    if args.group_size < 2:  # one rollout has no group to be compared with: its advantage is 0 (or 0/0 with the std)
        p.error(f"argument --group-size: expected an integer >= 2, got {args.group_size}")
    for k, v in DEFAULTS[args.config][args.stage].items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    if args.out is None:
        args.out = os.path.join("runs", args.config, args.stage)
    return args


def main(argv=None):
    args = parse_args(argv)
    world = setup(args.device)
    if args.init is None:
        if args.config != "toy":
            raise SystemExit(f"--init is required with --config {args.config} (the previous stage's HF checkpoint)")
        args.init = ensure_toy_init(args.stage, print0, world)
    # bad checkpoints are one line naming the directory and what is wrong, on every rank, before anything is built
    flag = "--init"
    try:
        check_hf_checkpoint(args.init, tokenizer_dir=args.init)
        if args.reward_model and args.stage in ("point", "pair"):
            flag = "--reward-model"
            reward_models.check_reward_model(args.reward_model)
    except CheckpointError as e:
        raise SystemExit(f"train_grpo: {flag} {e}") from None
    run(args, world)
    cleanup()


def run(args, world, env=None):
    """The training loop. `env` overrides the stage's environment (tests use a synthetic one)."""
    device = world.device
    torch.manual_seed(args.seed)
    random.seed(args.seed)
    os.makedirs(args.out, exist_ok=True)
    log = print0
    tokenizer = Tokenizer.from_pretrained(args.init)
    # fp32 master weights: a bf16 release checkpoint would otherwise be trained in bf16 (updates rounded away)
    model = Transformer.from_pretrained(args.init, dtype=torch.float32).to(device)
    max_seq = args.max_seq_len or model.config.max_position_embeddings
    rollout_model = model
    if world.world_size > 1:  # shard the policy; generate with a plain, synced per-rank copy
        rollout_model = Transformer.from_pretrained(args.init).to(device).eval()
    parallelize(model, activation_checkpointing=args.activation_checkpointing,  # FSDP2 only with a process group
                mp_policy=mixed_precision_policy(device))  # bf16 compute + fp32 reduce on GPU
    ref_model = None
    if args.kl_coef > 0:
        ref_model = Transformer.from_pretrained(args.init).to(device).eval().requires_grad_(False)
        if world.world_size > 1:  # sharded like the policy: no full frozen replica per rank
            parallelize(ref_model, mp_policy=mixed_precision_policy(device))
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay,
                                  betas=(0.9, 0.999), fused=not is_sharded(model))  # fused: ~4x on CPU
    if env is None:
        env = make_env(args.stage, args, tokenizer, log, device=device)
    log(f"stage {args.stage}: init {args.init}, {len(env.items)} training items, {len(env.eval_items)} held out, "
        f"world {world.world_size}, G={args.group_size}, {args.prompts_per_step} prompts/step")

    # resume, or filter the item pool (code stages) and start at step 0
    state = {}
    # a newer checkpoint that is damaged (truncated, files missing) is skipped with a warning naming it
    ckpt = latest_checkpoint(args.out, warn=lambda line: log(line, file=sys.stderr)) if args.resume else None
    if ckpt:
        state = load_checkpoint(ckpt, model, optimizer)
        log(f"resumed from {ckpt} (step {state['step']})")
    by_id = {env.item_id(it): it for it in env.items}
    rollouts = state.get("rollouts", 0)  # every rollout drawn so far: filter, dynamic-sampling refills, training
    if "pool" in state:
        pool = [by_id[i] for i in state["pool"]]
    else:
        pool = list(env.items)
        if env.success is not None and not args.no_difficulty_filter:
            candidates = list(pool)
            random.Random(args.seed).shuffle(candidates)
            if args.filter_max_items:
                candidates = candidates[:args.filter_max_items]
            sync_rollout_model(model, rollout_model)
            pool, report = difficulty_filter(rollout_model, tokenizer, env, candidates, args, world, log)
            rollouts += len(candidates) * args.filter_n
            if world.is_main:
                with open(os.path.join(args.out, "difficulty_filter.json"), "w") as f:
                    json.dump(report, f, indent=1)
            if len(pool) < args.prompts_per_step:
                log(f"difficulty filter kept only {len(pool)} items (< {args.prompts_per_step} per step): "
                    "training on all candidates instead")
                pool = candidates
    order = list(range(len(pool)))
    random.Random(args.seed + 1).shuffle(order)
    cursor = state.get("cursor", 0)
    start_step = state.get("step", 0)

    def next_items(n):
        nonlocal cursor
        picked = [pool[order[(cursor + i) % len(order)]] for i in range(n)]
        cursor += n
        return picked

    metrics_path = os.path.join(args.out, "metrics.jsonl")
    if world.is_main and start_step == 0 and os.path.exists(metrics_path):
        os.remove(metrics_path)
    elif world.is_main:  # resumed: drop lines of steps the killed run logged after its last checkpoint
        truncate_metrics(metrics_path, start_step)
    t_start = time.time()
    if start_step == 0 and args.eval_every:
        sync_rollout_model(model, rollout_model)
        ev = evaluate_policy(rollout_model, tokenizer, env, args, world)
        if world.is_main:
            with open(metrics_path, "a") as f:
                f.write(json.dumps({"step": 0, **ev}) + "\n")
        log("step 0 eval: " + " ".join(f"{k} {v:.3f}" for k, v in ev.items()))

    for step in range(start_step + 1, args.max_steps + 1):
        t0 = time.time()
        lr = args.lr * min(1.0, step / max(1, args.warmup_steps))
        for group in optimizer.param_groups:
            group["lr"] = lr
        sync_rollout_model(model, rollout_model)

        # 1-3. rollouts, rewards, dynamic sampling (all ranks draw the same global slice of items)
        kept, dropped, skipped, drawn, n_gen_tokens = [], 0, 0, 0, 0
        drawn_n, drawn_reward = 0.0, 0.0  # every trajectory of the step, kept or dropped (unbiased by the filter)
        for round_ in range(args.max_resample_rounds + 1):
            need = args.prompts_per_step - int(all_reduce_sum(float(len({s.group for s in kept}))))
            if need <= 0 or (round_ > 0 and args.no_dynamic_sampling):
                break
            items = next_items(need)[world.rank::world.world_size]
            drawn += len(items)
            fits = [it for it in items if env.rollout is not None
                    or len(env.prompt_ids(it)) + args.max_new_tokens <= max_seq]
            rollouts += int(all_reduce_sum(float(len(fits)))) * args.group_size
            skipped += len(items) - len(fits)  # a prompt that overflows the context: skipped, counted
            seed = (args.seed * 1_000_003 + step * 997 + round_ * 31 + world.rank) % (2**31)
            samples = rollout_groups(rollout_model, tokenizer, env, fits, args, seed) if fits else []
            n_gen_tokens += sum(len(s.response) for s in samples)
            base = max([s.group for s in kept], default=-1) + 1
            for g in sorted({s.group for s in samples}):
                members = assign_advantages([s for s in samples if s.group == g], args)  # turn credit included
                if args.no_dynamic_sampling or has_signal(members):
                    for s in members:
                        s.group = base + g
                    kept += members
                else:
                    dropped += 1
            round_stats = trajectory_stats(samples, ())  # per round: each round numbers its groups from 0
            drawn_n, drawn_reward = drawn_n + round_stats["n"], drawn_reward + round_stats["reward"]
        t_update = time.time()

        # 4. policy update: epochs x minibatches (split by groups), equal micro-batch counts on all ranks
        groups = sorted({s.group for s in kept})
        totals = dict(loss=0.0, kl=0.0, entropy=0.0, clip=0.0, tokens=0.0)
        grad_norm = 0.0
        model.train()
        for epoch in range(args.epochs):
            for m in range(args.minibatches):
                mb_groups = set(groups[m::args.minibatches])
                mb = [s for s in kept if s.group in mb_groups]
                stats, grad_norm = policy_update(model, ref_model, optimizer, mb, args, world)
                for k in totals:
                    totals[k] += stats[k]

        # metrics (sums over ranks), per trajectory: an agent trajectory of k segments counts once
        sums = {k: all_reduce_sum(v) for k, v in trajectory_stats(kept, env.log_keys).items()}
        n = sums["n"]
        n_drawn = all_reduce_sum(drawn_n)
        # the kept trajectories' figures are what the update saw; a step whose every group was dropped (a policy
        # that already agrees with itself) has none: null, not 0
        per_traj = lambda total: total / n if n else None  # noqa: E731
        mean_r = per_traj(sums["reward"])
        tok = all_reduce_sum(totals["tokens"])
        gen_tok = all_reduce_sum(float(n_gen_tokens))
        dt = time.time() - t0
        update_s = time.time() - t_update
        row = {"step": step, "lr": lr, "reward_mean": mean_r,
               "reward_std": math.sqrt(max(sums["reward_sq"] / n - mean_r ** 2, 0.0)) if n else None,
               **{k: per_traj(sums[k]) for k in env.log_keys},
               "reward_mean_drawn": all_reduce_sum(drawn_reward) / n_drawn if n_drawn else None,
               "kl": all_reduce_sum(totals["kl"]) / max(tok, 1.0),
               "entropy": all_reduce_sum(totals["entropy"]) / max(tok, 1.0),
               "clip_frac": all_reduce_sum(totals["clip"]) / max(tok, 1.0),
               "response_len": per_traj(sums["response_len"]),
               "overlong_frac": per_traj(sums["overlong"]),
               "filtered_groups": int(all_reduce_sum(float(dropped))),
               "skipped_prompts": int(all_reduce_sum(float(skipped))),
               "samples": int(all_reduce_sum(float(len(kept)))), "trajectories": int(n), "rollouts": rollouts,
               "grad_norm": grad_norm,
               "tok_per_s": gen_tok / dt, "step_s": dt,
               "rollout_s": dt - update_s, "update_s": update_s}
        last = step == args.max_steps or (args.max_rollouts is not None and rollouts >= args.max_rollouts)
        if args.eval_every and (step % args.eval_every == 0 or last):
            sync_rollout_model(model, rollout_model)
            row.update(evaluate_policy(rollout_model, tokenizer, env, args, world))
        if world.is_main:
            with open(metrics_path, "a") as f:
                f.write(json.dumps(row) + "\n")
        eta = (time.time() - t_start) / (step - start_step) * (args.max_steps - step)
        if n:
            kept_line = (f"reward {row['reward_mean']:.3f}±{row['reward_std']:.3f} | "
                         + " ".join(f"{k} {row[k]:.3f}" for k in env.log_keys[:3])
                         + f" | len {row['response_len']:.0f} | overlong {row['overlong_frac']:.2f}")
        else:
            drawn_r = row["reward_mean_drawn"]
            kept_line = "no group kept" + (f" (drawn reward {drawn_r:.3f})" if drawn_r is not None else "")
        log(f"step {step}/{args.max_steps} | {kept_line} | "
            f"kl {row['kl']:.4f} | clip {row['clip_frac']:.3f} | dropped {row['filtered_groups']} | "
            f"{row['tok_per_s']:.0f} tok/s | {dt:.1f}s | eta {eta / 60:.1f}m"
            + "".join(f" | {k} {v:.3f}" for k, v in row.items() if k.startswith("eval_")))

        if step % args.save_every == 0 or last:
            trainer_state = {"cursor": cursor, "pool": [env.item_id(it) for it in pool], "stage": args.stage,
                             "rollouts": rollouts}
            save_checkpoint(args.out, step, model, optimizer, tokenizer, trainer_state, keep=args.keep_checkpoints,
                            sharded=args.sharded_checkpoints)
        if last:
            if step < args.max_steps:
                log(f"rollout budget spent: {rollouts} >= --max-rollouts {args.max_rollouts} at step {step}")
            break
    save_hf(model, tokenizer, args.out)  # the next stage's --init
    log(f"done: {args.out} ({(time.time() - t_start) / 60:.1f} min)")


if __name__ == "__main__":
    main()
