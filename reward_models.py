"""Reward models for general-domain RL: the point-wise Bradley-Terry RM (paper 2.1.2) and the pair-wise RM with
the swap-consistency regulariser (paper 2.1.3), plus the reward functions train_grpo.py calls.

    python reward_models.py train --kind point          # toy: data/toy/prefs.jsonl -> runs/toy/rm_point (40 steps)
    python reward_models.py train --kind pair           # toy: data/toy/pairs.jsonl (checklist-labelled) -> runs/toy/rm_pair (60 steps)
    python reward_models.py train --kind pair --swap-weight 0 --out runs/toy/rm_pair_noswap   # the ablation
    python reward_models.py score --kind point --ckpt runs/toy/rm_point --data data/toy/prefs.jsonl
    python reward_models.py score --kind pair --ckpt runs/toy/rm_pair --data SAMPLES.jsonl

    # real run: one GPU, bf16 autocast, activation checkpointing (a 3B RM with AdamW fits in 80 GB)
    python reward_models.py train --kind point --init /path/Nanbeige4.1-3B-SFT --data prefs.jsonl \
        --out runs/rm_point --device cuda --dtype bfloat16 --activation-checkpointing --max-len 8192 --lr 1e-5 \
        --max-steps 2000 --batch-size 32 --rows-per-forward 4

Toy figures (fresh toy-preset backbone, 16 pairs per step, 2 CPU cores; wall time grows several-fold on a busy
machine). Point: 40 steps in ~20 s, held-out accuracy 1.00 on all five rejected kinds. Pair, 60 steps in ~35-75 s,
45 held-out pairs: with the regulariser accuracy 0.89 (winner first) / 0.71 (winner second) / 0.84 (both orders
averaged), position bias mean|d(A,B) + d(B,A)| 0.078; with --swap-weight 0 on the same data and init: 0.84 / 0.78 /
0.87, bias 1.86 (24x larger).
The toy init is runs/toy/sft when it exists (the SFT stage's output), else a fresh backbone; the log says which.

Both models are the decoder of nanbeige41/model.py with a scalar head (Linear(H, 1), kept in fp32) read at the
last token of each sequence:
- point-wise: input = the conversation (prompt turns + the response as the final assistant turn, rendered with the
  chat template, cut after its closing <|im_end|>); output the score s. Loss (Bradley-Terry, as in the reward model
  work the paper follows): L = -log sigmoid(s_chosen - s_rejected - margin).
- pair-wise: input = the full dialogue history (multi-turn dialogues concatenated in full, 2.1.3) followed by two
  candidate turns rendered like assistant turns, `<|im_start|>response A\n<think>\n{reasoning A}\n</think>\n\n{A}<|im_end|>\n`
  then the same for B; output the reward difference d(A, B), with P(A beats B) = sigmoid(d). Every labelled pair enters each batch in both orders, and
      L = 1/2 [BCE(d(W, L), 1) + BCE(d(L, W), 0)] + swap_weight * mean((d(W, L) - (-d(L, W)))^2)
  where the second term is the paper's swap-consistency regulariser: "the mean squared error between the predicted
  reward difference for a response pair and the negated reward difference for the swapped pair".

Data. Preference records use TRL's layout {"prompt": messages, "chosen": ..., "rejected": ...} (chosen/rejected a
string or a list of messages ending in the assistant answer; an optional per-record "margin"). Strong-vs-weak
records {"prompt", "strong", "weak", "checklist": [{"text", ...}]} are labelled first by the checklist filter
(`checklist_filter`): a judge marks each checklist item for both responses, and a pair is kept (chosen = strong) only
when the strong response passes strictly more of its checklist — pairs where the verdict disagrees with the
strong/weak prior, or ties, are dropped and counted. Judges: `rules` (nanbeige41.toy_chat.rule_judge, offline and
deterministic, the toy default), an OpenAI-compatible endpoint (`--judge http://host/v1 --judge-model NAME`, key from
$OPENAI_API_KEY) or a project checkpoint directory (`--judge runs/toy/sft`). Bad records (missing or malformed
fields, identical chosen and rejected, longer than --max-len tokens) are skipped with a count per reason, or stop
the run under --strict. The last --eval-frac of a seeded shuffle is held out.

Batches are padded, not packed: each row is one sequence, right-padded, so plain causal attention (no mask) is exact
for every real token and the score is gathered at index length-1. A step's 2B rows are sorted by length and run
--rows-per-forward at a time, which keeps the padding small. Packing would save the padding but needs the
block-diagonal mask, which on CPU is a dense (T, T) tensor per row; RM sequences are short and similar in length.

Writes OUT/ = config.json + model.safetensors (the backbone, HF format, `Transformer.from_pretrained` loads it),
reward_head.safetensors (weight (1, H), bias (1,)), reward_head.json (kind, max_len, held-out metrics), the
tokenizer, and metrics.jsonl (one line per step and per evaluation).

The functions GRPO imports (batched, no_grad, fp32 head on a bf16 or fp32 backbone):
    rm = load_reward_model(path, device="cpu", dtype=None)          # kind in rm.kind
    tok = Tokenizer.from_pretrained(path)                           # saved with the RM
    point_rewards(rm, tok, prompts_messages, responses) -> list[float]             # the RM score per rollout
    pair_win_probs(prm, tok, prompts_messages, responses, references) -> list[float]  # P(rollout beats reference),
                                                                    # both orders averaged: (sig(d(r,ref)) + sig(-d(ref,r)))/2
    pair_rewards(prm, tok, prompts_messages, responses, references) -> list[float]  # 1.0 if that P > 0.5 else 0.0
Responses are the decoded assistant text (optionally starting with reasoning and "</think>", optionally ending in
<|im_end|>). Sequences longer than the RM's max_len keep their last max_len tokens (the score token) when scoring.

Not covered: multi-GPU (FSDP) RM training; the paper's RM data (curated human preferences, strong/weak model
generations) — the toy data comes from nanbeige41/toy_chat.py.
"""
import argparse
import json
import math
import os
import random
import time
from collections import Counter

import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

from nanbeige41 import toy_chat
from nanbeige41.checkpoint import CheckpointError, check_hf_checkpoint
from nanbeige41.cli import finite_float, non_negative_float, non_negative_int, positive_float, positive_int
from nanbeige41.data import read_jsonl
from nanbeige41.distributed import parallelize
from nanbeige41.generate import generate
from nanbeige41.model import PRESETS, ModelConfig, Transformer
from nanbeige41.openai_api import ApiError, chat_completion
from nanbeige41.tokenizer import EMPTY_THINK, IM_END, IM_START, THINK, THINK_END, Tokenizer, toy_tokenizer_path

TOY_INIT = "runs/toy/sft"
TOY_DATA = {"point": "data/toy/prefs.jsonl", "pair": "data/toy/pairs.jsonl"}
TOY_OUT = {"point": "runs/toy/rm_point", "pair": "runs/toy/rm_pair"}
TOY_STEPS = {"point": 40, "pair": 60}
HEAD_WEIGHTS, HEAD_CONFIG = "reward_head.safetensors", "reward_head.json"


# -----------------------------------------------------------------------------
# The model: decoder + scalar head

class RewardModel(nn.Module):
    def __init__(self, backbone, kind, max_len):
        super().__init__()
        self.backbone, self.kind, self.max_len = backbone, kind, max_len
        self.head = nn.Linear(backbone.config.hidden_size, 1)  # fp32 even when the backbone is bf16
        nn.init.normal_(self.head.weight, std=backbone.config.initializer_range)
        nn.init.zeros_(self.head.bias)

    def forward(self, input_ids, lengths):
        """input_ids (B, T) right-padded, lengths (B,) -> scores (B,) fp32, read at token lengths-1.
        Right padding needs no mask: causal attention never lets a real token see the pads after it."""
        hidden = self.backbone(input_ids, return_hidden=True)  # (B, T, H)
        last = hidden[torch.arange(input_ids.shape[0], device=input_ids.device), lengths - 1]  # (B, H)
        return self.head(last.float()).squeeze(-1)  # (B,)


def bt_loss(s_chosen, s_rejected, margin=0.0):
    """Bradley-Terry: mean of -log sigmoid(s_chosen - s_rejected - margin); margin a float or (B,) tensor."""
    return -F.logsigmoid(s_chosen - s_rejected - margin).mean()


def swap_consistency(d_ab, d_ba):
    """Paper 2.1.3: MSE between d(A, B) and the negated difference of the swapped pair, -d(B, A)."""
    return ((d_ab - (-d_ba)) ** 2).mean()


def pair_loss(d_wl, d_lw, swap_weight):
    """d_wl = d(winner, loser), d_lw = d(loser, winner), both (B,). Win/loss cross-entropy over both orders plus
    swap_weight * the swap-consistency term. Returns (loss, ce, swap)."""
    ce = 0.5 * (F.binary_cross_entropy_with_logits(d_wl, torch.ones_like(d_wl))
                + F.binary_cross_entropy_with_logits(d_lw, torch.zeros_like(d_lw)))
    swap = swap_consistency(d_wl, d_lw)
    return ce + swap_weight * swap, ce, swap


# -----------------------------------------------------------------------------
# Turning conversations into token ids

def split_response(response):
    """Decoded assistant text -> (reasoning, content). Drops what follows the end of turn; the reasoning is what
    precedes "</think>", after the "<think>" the model opens (optional here: text without one is accepted)."""
    for stop in (IM_END, "<|endoftext|>"):
        response = response.split(stop)[0]
    if THINK_END not in response:
        return "", response.strip("\n")
    reasoning, _, content = response.partition(THINK_END)
    return reasoning.split(THINK)[-1].strip("\n"), content.strip("\n")


def encode_point(tokenizer, prompt_messages, response):
    """Ids of the conversation with `response` as the final assistant turn, ending at its <|im_end|>."""
    reasoning, content = split_response(response)
    ids, _ = tokenizer.encode_chat(list(prompt_messages) + [
        {"role": "assistant", "content": content, "reasoning_content": reasoning}])
    while ids and ids[-1] != tokenizer.im_end_id:  # drop the "\n" the template puts after <|im_end|>
        ids.pop()
    return ids


def encode_pair(tokenizer, prompt_messages, response_a, response_b):
    """Ids of the dialogue history followed by the two candidate turns (A first), ending at B's <|im_end|>.
    Both responses are re-rendered as the template renders an assistant turn, so a rollout (which always has a
    think block) and a reference answer (which may not) differ only in what they say."""
    def turn(name, response):
        reasoning, content = split_response(response)
        return f"{IM_START}{name}\n{THINK}\n{reasoning}\n{THINK_END}\n\n{content}{IM_END}"
    text = tokenizer.render(list(prompt_messages)) + turn("response A", response_a) + "\n" + turn("response B", response_b)
    return tokenizer.encode(text)


def pad_batch(seqs, pad_id, device):
    """list of id lists -> input_ids (B, T) right-padded, lengths (B,)."""
    T = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), T), pad_id, dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, :len(s)] = torch.tensor(s, dtype=torch.long)
    return ids.to(device), torch.tensor([len(s) for s in seqs], device=device)


def forward_rows(rm, seqs, pad_id, device, rows_per_forward):
    """Scores (N,) fp32, differentiable, of N id lists in their order. The rows are sorted by length and run
    rows_per_forward at a time, so each forward pads only to its own longest row: a toy batch mixes 20-token
    answers with 250-token overlong ones, and one padded (2B, T_max) forward would be mostly padding."""
    order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]))
    parts = []
    for start in range(0, len(order), rows_per_forward):
        ids, lengths = pad_batch([seqs[i] for i in order[start:start + rows_per_forward]], pad_id, device)
        parts.append(rm(ids, lengths))
    inverse = torch.argsort(torch.tensor(order, device=device))
    return torch.cat(parts)[inverse]


@torch.no_grad()
def score_sequences(rm, seqs, pad_id, batch_size=16):
    """Scores (point: s; pair: d) of many id lists, as a list in their order. A sequence over rm.max_len keeps its
    last max_len tokens (the score is read at the end)."""
    was_training = rm.training
    rm.eval()
    scores = forward_rows(rm, [s[-rm.max_len:] for s in seqs], pad_id, rm.head.weight.device, batch_size).tolist()
    rm.train(was_training)
    return scores


# -----------------------------------------------------------------------------
# The reward functions GRPO calls

def point_rewards(rm, tokenizer, prompts_messages, responses, batch_size=16):
    """Point-wise reward (paper 2.1.2): the RM's score of each (prompt, response). Returns list[float]."""
    if rm.kind != "point":
        raise ValueError(f"point_rewards needs a point-wise RM, got kind={rm.kind!r}")
    seqs = [encode_point(tokenizer, p, r) for p, r in zip(prompts_messages, responses, strict=True)]
    return score_sequences(rm, seqs, tokenizer.pad_id, batch_size)


def pair_logits(prm, tokenizer, prompts_messages, responses_a, responses_b, batch_size=16):
    """d(A, B) per item: the pair-wise RM's logit that A beats B. Returns list[float]."""
    if prm.kind != "pair":
        raise ValueError(f"pair-wise scoring needs a pair-wise RM, got kind={prm.kind!r}")
    seqs = [encode_pair(tokenizer, p, a, b) for p, a, b in zip(prompts_messages, responses_a, responses_b, strict=True)]
    return score_sequences(prm, seqs, tokenizer.pad_id, batch_size)


def pair_win_probs(prm, tokenizer, prompts_messages, responses, references, batch_size=16):
    """P(response beats reference), asked in both orders and averaged to cancel position bias:
    (sigmoid(d(response, reference)) + sigmoid(-d(reference, response))) / 2. One batched pass over 2N sequences."""
    n = len(responses)
    d = pair_logits(prm, tokenizer, list(prompts_messages) * 2, list(responses) + list(references),
                    list(references) + list(responses), batch_size)
    return [(_sigmoid(d[i]) + _sigmoid(-d[n + i])) / 2 for i in range(n)]


def pair_rewards(prm, tokenizer, prompts_messages, responses, references, batch_size=16):
    """Pair-wise reward (paper 2.1.3): 1.0 when the rollout beats the reference answer (both-order P > 0.5),
    else 0.0. Returns list[float]."""
    return [float(p > 0.5) for p in pair_win_probs(prm, tokenizer, prompts_messages, responses, references, batch_size)]


def _sigmoid(x):
    return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))


# -----------------------------------------------------------------------------
# Checkpoints

def save_reward_model(rm, tokenizer, path, extra=None):
    os.makedirs(path, exist_ok=True)
    rm.backbone.save_pretrained(path)
    save_file({"weight": rm.head.weight.detach().float().cpu().contiguous(),
               "bias": rm.head.bias.detach().float().cpu().contiguous()}, os.path.join(path, HEAD_WEIGHTS))
    with open(os.path.join(path, HEAD_CONFIG), "w") as f:
        json.dump({"kind": rm.kind, "max_len": rm.max_len, "hidden_size": rm.backbone.config.hidden_size,
                   **(extra or {})}, f, indent=2)
    tokenizer.save_pretrained(path)


def check_reward_model(path):
    """A directory as save_reward_model writes it: backbone and tokenizer pass check_hf_checkpoint, and the head files
    are there. Returns (head config, tokenizer); raises CheckpointError "PATH: what is wrong"."""
    _, tokenizer = check_hf_checkpoint(path, tokenizer_dir=path)
    cfg_path = os.path.join(path, HEAD_CONFIG)
    if not os.path.isfile(cfg_path):
        raise CheckpointError(f"{path}: no {HEAD_CONFIG} (not a reward-model checkpoint; train one with "
                              "`python reward_models.py train --kind point|pair`)")
    try:
        with open(cfg_path) as f:
            cfg = json.load(f)
        if cfg["kind"] not in ("point", "pair") or not isinstance(cfg["max_len"], int):
            raise ValueError(f"kind {cfg['kind']!r}, max_len {cfg['max_len']!r}")
    except (ValueError, TypeError, KeyError) as e:
        raise CheckpointError(f"{cfg_path}: malformed ({type(e).__name__}: {e})") from None
    if not os.path.isfile(os.path.join(path, HEAD_WEIGHTS)):
        raise CheckpointError(f"{path}: no {HEAD_WEIGHTS}")
    return cfg, tokenizer


def load_reward_model(path, device="cpu", dtype=None):
    """A RewardModel in eval mode from a directory save_reward_model wrote. dtype applies to the backbone
    (e.g. torch.bfloat16 on GPU); the head stays fp32. A bad directory is a CheckpointError (check_reward_model)."""
    cfg, _ = check_reward_model(path)
    backbone = Transformer.from_pretrained(path, dtype=dtype, device=device)
    rm = RewardModel(backbone, cfg["kind"], cfg["max_len"])
    head = load_file(os.path.join(path, HEAD_WEIGHTS))
    if tuple(head["weight"].shape) != (1, backbone.config.hidden_size):
        raise CheckpointError(f"{path}/{HEAD_WEIGHTS}: head weight {tuple(head['weight'].shape)} does not match "
                              f"hidden_size {backbone.config.hidden_size}")
    rm.head.load_state_dict(head)
    return rm.to(device).eval()


# -----------------------------------------------------------------------------
# Judges and the checklist filter (paper 2.1.3, "checklist filtering strategy as Nanbeige4")

class JudgeError(Exception):
    """A checklist judge gave no usable verdict (endpoint down, unparseable reply)."""


def judge_prompt(prompt_messages, response, checklist):
    history = "\n".join(f"[{m['role']}] {m.get('content') or ''}" for m in prompt_messages)
    items = "\n".join(f"{i + 1}. {item['text']}" for i, item in enumerate(checklist))
    return (f"You are grading one assistant response against a checklist.\n\nConversation:\n{history}\n\n"
            f"Response:\n{response}\n\nChecklist:\n{items}\n\nFor each item, decide whether the response satisfies it. "
            f"Reply with only a JSON array of {len(checklist)} strings, each \"yes\" or \"no\", in checklist order.")


def parse_verdicts(text, n):
    """The judge's reply -> n bools. Raises JudgeError unless it holds a JSON array of n yes/no (or true/false)."""
    start, end = text.find("["), text.rfind("]")
    try:
        values = json.loads(text[start:end + 1]) if start != -1 and end > start else None
    except json.JSONDecodeError:
        values = None
    if not isinstance(values, list) or len(values) != n:
        raise JudgeError(f"expected a JSON array of {n} verdicts, got {text[:120]!r}")
    yes, no = {"yes", "true", "pass", "1"}, {"no", "false", "fail", "0"}
    out = []
    for v in values:
        v = str(v).strip().lower()
        if v not in yes | no:
            raise JudgeError(f"verdict {v!r} is neither yes nor no")
        out.append(v in yes)
    return out


def score_rollouts(rm, tokenizer, stage, items, texts, log):
    """GRPO's point / pair reward of each rollout text (items: records with `messages`, and `reference` for pair):
    one batched call; if it fails, one call per rollout, so a bad one scores 0 with a log line instead of taking
    the step down."""
    fn = point_rewards if stage == "point" else pair_rewards

    def call(batch, batch_texts):
        refs = [] if stage == "point" else [[r["reference"] for r in batch]]
        return fn(rm, tokenizer, [r["messages"] for r in batch], batch_texts, *refs)
    try:
        return call(items, texts)
    except Exception as e:  # noqa: BLE001 — fall back to one sample at a time to isolate the bad one
        log(f"batched RM scoring failed ({type(e).__name__}: {e}); scoring one by one")
    scores = []
    for item, text in zip(items, texts):
        try:
            scores.append(call([item], [text])[0])
        except Exception as e:  # noqa: BLE001 — one bad sample must not end the run
            log(f"reward error on {item.get('id')}: {type(e).__name__}: {e}")
            scores.append(0.0)
    return scores


def endpoint_judge(base_url, model, **http):
    """A judge backed by any OpenAI-compatible /chat/completions endpoint (temperature 0; the key from
    $OPENAI_API_KEY, retries as every network call: nanbeige41.openai_api; `http`: retries=, timeout_s=)."""
    def judge(prompt_messages, response, checklist):
        try:
            choice = chat_completion(base_url, model, [{"role": "user", "content": judge_prompt(
                prompt_messages, response, checklist)}], what="judge", http=http, temperature=0)
        except ApiError as e:
            raise JudgeError(f"{base_url}: {e}") from None
        return parse_verdicts(choice["message"].get("content") or "", len(checklist))
    return judge


def model_judge(model, tokenizer, max_new_tokens=64):
    """A judge backed by a project checkpoint (greedy, thinking off). A toy model is no reliable judge: this is the
    path for a real checkpoint; unparseable replies drop the pair like any judge error."""

    def judge(prompt_messages, response, checklist):
        text = tokenizer.render([{"role": "user", "content": judge_prompt(prompt_messages, response, checklist)}],
                                add_generation_prompt=True) + EMPTY_THINK  # thinking off: the block is prefilled
        out = generate(model, [tokenizer.encode(text)], max_new_tokens, temperature=0, eos_ids=[tokenizer.im_end_id])
        return parse_verdicts(tokenizer.decode(out[0]["tokens"], skip_special_tokens=True), len(checklist))
    return judge


def make_judge(spec, judge_model=None):
    if spec == "rules":
        return toy_chat.rule_judge
    if spec.startswith(("http://", "https://")):
        return endpoint_judge(spec, judge_model or "default")
    if os.path.isdir(spec):
        return model_judge(Transformer.from_pretrained(spec).eval(), Tokenizer.from_pretrained(spec))
    raise ValueError(f"--judge {spec!r}: expected 'rules', an http(s):// OpenAI-compatible base URL, or a checkpoint dir")


def checklist_filter(records, judge, log=print):
    """Strong/weak records -> preference records {prompt, chosen=strong, rejected=weak} for the pairs whose checklist
    verdict agrees with the prior: the strong response passes a strictly larger share of the checklist. Returns
    (kept, counts) with counts of kept / disagree (weak scored higher) / tie / judge_error."""
    kept, counts = [], Counter()
    for r in records:
        try:
            strong = judge(r["prompt"], r["strong"], r["checklist"])
            weak = judge(r["prompt"], r["weak"], r["checklist"])
        except JudgeError as e:
            counts["judge_error"] += 1
            if counts["judge_error"] <= 3:
                log(f"checklist judge error ({r.get('_source', '?')}): {e}")
            continue
        s, w = sum(strong) / len(strong), sum(weak) / len(weak)
        if s > w:
            kept.append({**{k: v for k, v in r.items() if k not in ("strong", "weak")},
                         "chosen": r["strong"], "rejected": r["weak"], "checklist_scores": [s, w]})
        counts["kept" if s > w else "tie" if s == w else "disagree"] += 1
    log(f"checklist filter: {dict(counts)} of {len(records)} strong/weak pairs")
    return kept, counts


# -----------------------------------------------------------------------------
# Reading and checking data

def read_records(path):
    """Records of a JSONL file; a malformed line fails naming `file:line` (the SFT reader, shared)."""
    return read_jsonl(path)


def _response_text(value):
    """chosen/rejected as TRL writes them: a string, or a list of messages ending in the assistant's answer."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and value and isinstance(value[-1], dict) and value[-1].get("role") == "assistant":
        msg = value[-1]
        reasoning = msg.get("reasoning_content")
        return (f"{THINK}\n{reasoning}\n{THINK_END}\n\n" if reasoning else "") + (msg.get("content") or "")
    return None


def _prompt_messages(value):
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    if isinstance(value, list) and value and all(isinstance(m, dict) for m in value):
        return value
    return None


def prepare_examples(records, tokenizer, kind, max_len, strict=False, judge=None, log=print):
    """Records -> examples with token ids, skipping bad ones with a count per reason (or raising under strict).
    point: {"chosen_ids", "rejected_ids", "margin"}; pair: {"ab_ids" (winner first), "ba_ids"}. Each keeps "meta"."""
    skipped, first = Counter(), {}

    def skip(reason, r):
        skipped[reason] += 1
        first.setdefault(reason, r.get("_source", "?"))

    prefs = [r for r in records if "strong" not in r and "weak" not in r]
    raw_pairs = [r for r in records if "strong" in r or "weak" in r]
    if raw_pairs:
        ok_pairs = []
        for r in raw_pairs:
            if not all(isinstance(r.get(k), str) for k in ("strong", "weak")) or _prompt_messages(r.get("prompt")) is None \
                    or not isinstance(r.get("checklist"), list) or not r["checklist"]:
                skip("missing_field", r)
            else:
                ok_pairs.append({**r, "prompt": _prompt_messages(r["prompt"])})
        labelled, _ = checklist_filter(ok_pairs, judge or toy_chat.rule_judge, log=log)
        prefs += labelled
    examples = []
    for r in prefs:
        prompt, chosen, rejected = _prompt_messages(r.get("prompt")), _response_text(r.get("chosen")), _response_text(r.get("rejected"))
        if prompt is None or chosen is None or rejected is None:
            skip("missing_field", r)
            continue
        if chosen.strip() == rejected.strip():
            skip("identical", r)
            continue
        try:
            if kind == "point":
                a, b = encode_point(tokenizer, prompt, chosen), encode_point(tokenizer, prompt, rejected)
            else:
                a, b = encode_pair(tokenizer, prompt, chosen, rejected), encode_pair(tokenizer, prompt, rejected, chosen)
        except ValueError:  # malformed messages (unknown role, non-string content, ...), as the tokenizer reports
            skip("bad_messages", r)
            continue
        if max(len(a), len(b)) > max_len:
            skip("overlong", r)
            continue
        meta = {k: r[k] for k in ("defect", "weak_kind", "task", "_source") if k in r}
        if kind == "point":
            examples.append({"chosen_ids": a, "rejected_ids": b, "margin": float(r.get("margin", 0.0)), "meta": meta})
        else:
            examples.append({"ab_ids": a, "ba_ids": b, "meta": meta})
    if skipped:
        detail = ", ".join(f"{k}={v} (first: {first[k]})" for k, v in sorted(skipped.items()))
        if strict:
            raise ValueError(f"--strict: {sum(skipped.values())} bad record(s): {detail}")
        log(f"skipped {sum(skipped.values())} bad record(s): {detail}")
    return examples, skipped


# -----------------------------------------------------------------------------
# Evaluation

@torch.no_grad()
def evaluate(rm, examples, pad_id, batch_size=32):
    """Held-out figures. point: pairwise accuracy (s_chosen > s_rejected), overall and per defect.
    pair: accuracy in both orders (d(W, L) > 0 and d(L, W) < 0) and position bias mean |d(A,B) + d(B,A)|."""
    if not examples:
        return {}
    if rm.kind == "point":
        s_c = score_sequences(rm, [e["chosen_ids"] for e in examples], pad_id, batch_size)
        s_r = score_sequences(rm, [e["rejected_ids"] for e in examples], pad_id, batch_size)
        wins = [c > r for c, r in zip(s_c, s_r)]
        out = {"accuracy": sum(wins) / len(wins), "mean_gap": sum(c - r for c, r in zip(s_c, s_r)) / len(wins)}
        for defect in sorted({e["meta"].get("defect") for e in examples} - {None}):
            w = [ok for ok, e in zip(wins, examples) if e["meta"].get("defect") == defect]
            out[f"accuracy_{defect}"] = sum(w) / len(w)
        return out
    d_wl = score_sequences(rm, [e["ab_ids"] for e in examples], pad_id, batch_size)
    d_lw = score_sequences(rm, [e["ba_ids"] for e in examples], pad_id, batch_size)
    n = len(examples)
    both = [(a > 0) + (b < 0) for a, b in zip(d_wl, d_lw)]
    return {"accuracy_ab": sum(a > 0 for a in d_wl) / n,       # winner shown first
            "accuracy_ba": sum(b < 0 for b in d_lw) / n,       # winner shown second
            "accuracy_avg": sum(_sigmoid(a) + _sigmoid(-b) > 1 for a, b in zip(d_wl, d_lw)) / n,  # both-order P > 0.5
            "consistent": sum(x == 2 for x in both) / n,       # right in both orders
            "position_bias": sum(abs(a + b) for a, b in zip(d_wl, d_lw)) / n}


# -----------------------------------------------------------------------------
# Training

def train(args):
    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    log = print
    # Model: --init checkpoint, else the toy SFT checkpoint when present, else a fresh backbone of --config
    init = args.init or (TOY_INIT if os.path.isfile(os.path.join(TOY_INIT, "config.json")) else None)
    tok_path = args.tokenizer or (init if init and os.path.isfile(os.path.join(init, "tokenizer.json")) else toy_tokenizer_path())
    if init:
        try:  # a bad --init is main's one-line error, before any data is read
            _, tokenizer = check_hf_checkpoint(init, tokenizer_dir=tok_path)
        except CheckpointError as e:
            raise CheckpointError(f"--init {e}") from None
        backbone = Transformer.from_pretrained(init)
        log(f"init: backbone from {init}")
    else:
        backbone = Transformer(ModelConfig.preset(args.config))
        log(f"init: fresh {args.config}-preset backbone (no --init and no {TOY_INIT}; seed {args.seed})")
        tokenizer = Tokenizer.from_pretrained(tok_path)
        if tokenizer.vocab_size > backbone.config.vocab_size:
            raise ValueError(f"tokenizer {tok_path} has {tokenizer.vocab_size} tokens, the backbone only "
                             f"{backbone.config.vocab_size}")
    parallelize(backbone, activation_checkpointing=args.activation_checkpointing)  # one process: no sharding
    rm = RewardModel(backbone, args.kind, args.max_len).to(device)

    # Data
    data = args.data or TOY_DATA[args.kind]
    judge = make_judge(args.judge, args.judge_model)
    examples, _ = prepare_examples(read_records(data), tokenizer, args.kind, args.max_len, args.strict, judge, log)
    random.Random(args.seed).shuffle(examples)
    n_eval = max(1, int(len(examples) * args.eval_frac))
    train_set, eval_set = examples[:-n_eval], examples[-n_eval:]
    if len(train_set) < args.batch_size:
        raise ValueError(f"{data}: only {len(train_set)} usable training pairs, fewer than --batch-size {args.batch_size}")
    log(f"data: {data}: {len(train_set)} train / {len(eval_set)} held-out pairs, kind={args.kind}")

    # Optimiser: the backbone's lm_head is never used by a reward model, so it is left out
    params = [p for n, p in rm.named_parameters() if not n.startswith("backbone.lm_head")]
    optimizer = torch.optim.AdamW(params, lr=args.lr, weight_decay=args.weight_decay, betas=(0.9, 0.95))
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.dtype == "bfloat16")
    os.makedirs(args.out, exist_ok=True)
    metrics = open(os.path.join(args.out, "metrics.jsonl"), "w")
    order, cursor = [], 0
    batch_rng = random.Random(args.seed + 1)
    t0 = time.time()
    for step in range(1, args.max_steps + 1):
        # warmup then cosine to 10% of --lr
        frac = (step - args.warmup_steps) / max(1, args.max_steps - args.warmup_steps)
        lr = args.lr * (step / args.warmup_steps if step <= args.warmup_steps else 0.1 + 0.45 * (1 + math.cos(math.pi * frac)))
        for g in optimizer.param_groups:
            g["lr"] = lr
        if cursor + args.batch_size > len(order):  # a new epoch: reshuffle
            order, cursor = batch_rng.sample(range(len(train_set)), len(train_set)), 0
        batch = [train_set[i] for i in order[cursor:cursor + args.batch_size]]
        cursor += args.batch_size
        B = len(batch)
        # one padded forward over 2B rows: chosen then rejected (point), winner-first then loser-first (pair)
        first, second = ("chosen_ids", "rejected_ids") if args.kind == "point" else ("ab_ids", "ba_ids")
        rows = [e[first] for e in batch] + [e[second] for e in batch]
        with autocast:
            scores = forward_rows(rm, rows, tokenizer.pad_id, device, args.rows_per_forward)  # (2B,) fp32
        if args.kind == "point":
            margin = torch.tensor([e["margin"] for e in batch], device=device) + args.margin
            loss = bt_loss(scores[:B], scores[B:], margin)
            extra = {"bt": loss.item()}
            acc = (scores[:B] > scores[B:]).float().mean().item()
        else:
            loss, ce, swap = pair_loss(scores[:B], scores[B:], args.swap_weight)
            extra = {"ce": ce.item(), "swap": swap.item()}
            acc = 0.5 * ((scores[:B] > 0).float().mean().item() + (scores[B:] < 0).float().mean().item())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(params, args.grad_clip).item()
        optimizer.step()
        row = {"step": step, "loss": loss.item(), **extra, "train_acc": acc, "lr": lr, "grad_norm": grad_norm,
               "tokens": sum(len(r) for r in rows), "elapsed_s": time.time() - t0}
        if step % args.eval_every == 0 or step == args.max_steps:
            row["eval"] = evaluate(rm, eval_set, tokenizer.pad_id)
        metrics.write(json.dumps(row) + "\n")
        metrics.flush()
        if step % args.log_every == 0 or "eval" in row:
            log(f"step {step:4d} | loss {loss.item():.4f} | " + " | ".join(f"{k} {v:.4f}" for k, v in extra.items())
                + f" | acc {acc:.3f} | lr {lr:.2e} | {time.time() - t0:.1f}s"
                + (f" | eval {json.dumps({k: round(v, 4) for k, v in row['eval'].items()})}" if "eval" in row else ""))
    metrics.close()
    final = row["eval"]
    save_reward_model(rm, tokenizer, args.out, extra={
        "init": init or f"fresh {args.config}", "data": data, "steps": args.max_steps, "swap_weight": args.swap_weight,
        "held_out": final, "train_seconds": round(time.time() - t0, 1)})
    log(f"saved {args.kind}-wise reward model to {args.out} ({time.time() - t0:.1f}s)")
    log("held-out: " + json.dumps({k: round(v, 4) for k, v in final.items()}))
    return final


# -----------------------------------------------------------------------------
# Scoring

def score(args):
    try:
        cfg, tokenizer = check_reward_model(args.ckpt)
        if cfg["kind"] != args.kind:
            raise CheckpointError(f"{args.ckpt}: holds a {cfg['kind']}-wise reward model, not --kind {args.kind}")
    except CheckpointError as e:  # main's one-line error
        raise CheckpointError(f"--ckpt {e}") from None
    rm = load_reward_model(args.ckpt, device=args.device,
                           dtype=torch.bfloat16 if args.dtype == "bfloat16" else None)
    records = read_records(args.data or TOY_DATA[args.kind])
    prompts, a, b = [], [], []
    for r in records:  # response [+ reference] / response_a, response_b / chosen, rejected / strong, weak
        pair = next(((_response_text(r.get(x)), _response_text(r.get(y))) for x, y in
                     (("response_a", "response_b"), ("response", "reference"), ("chosen", "rejected"), ("strong", "weak"))
                     if x in r), (None, None))
        prompt = _prompt_messages(r.get("prompt", r.get("messages")))
        if prompt is None or pair[0] is None or (args.kind == "pair" and pair[1] is None):
            raise ValueError(f"{r['_source']}: need prompt/messages and response(s) (response_a+response_b, "
                             "response[+reference], chosen+rejected or strong+weak)")
        prompts.append(prompt)
        a.append(pair[0])
        b.append(pair[1])
    if args.kind == "point":
        has_b = [x is not None for x in b]
        s_a = point_rewards(rm, tokenizer, prompts, a, args.batch_size)
        s_b = point_rewards(rm, tokenizer, [p for p, h in zip(prompts, has_b) if h], [x for x in b if x is not None], args.batch_size)
        it = iter(s_b)
        rows = [{"score": sa, **({"score_b": next(it)} if h else {})} for sa, h in zip(s_a, has_b)]
    else:
        n = len(a)
        d = pair_logits(rm, tokenizer, prompts * 2, a + b, b + a, args.batch_size)
        rows = [{"d_ab": d[i], "p_ab": _sigmoid(d[i]), "d_ba": d[n + i], "p_ba": _sigmoid(d[n + i]),
                 "p_a_wins": (_sigmoid(d[i]) + _sigmoid(-d[n + i])) / 2} for i in range(n)]
    for r, row in zip(records, rows):
        print(json.dumps({"source": r["_source"], **{k: round(v, 4) for k, v in row.items()}}))
    if args.kind == "point" and all("score_b" in row for row in rows):
        print(f"# first-listed response scored higher: {sum(r['score'] > r['score_b'] for r in rows) / len(rows):.4f}")
    if args.kind == "pair":
        print(f"# first-listed response preferred: shown first {sum(r['d_ab'] > 0 for r in rows) / len(rows):.4f} | shown second "
              f"{sum(r['d_ba'] < 0 for r in rows) / len(rows):.4f} | position bias mean|d(A,B)+d(B,A)| "
              f"{sum(abs(r['d_ab'] + r['d_ba']) for r in rows) / len(rows):.4f}")
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train", help="train a point- or pair-wise reward model")
    t.add_argument("--kind", choices=["point", "pair"], required=True)
    # Data
    t.add_argument("--data", default=None, help=f"JSONL; default {TOY_DATA}")
    t.add_argument("--max-len", type=positive_int, default=1024, help="longer pairs are skipped (and counted)")
    t.add_argument("--eval-frac", type=positive_float, default=0.1)
    t.add_argument("--strict", action="store_true", help="fail on any bad record instead of skipping it")
    t.add_argument("--judge", default="rules", help="checklist judge for strong/weak records: rules | URL | CKPT")
    t.add_argument("--judge-model", default=None, help="model name for an endpoint judge")
    # Model
    t.add_argument("--init", default=None, help=f"HF checkpoint; default {TOY_INIT} if present, else a fresh --config")
    t.add_argument("--config", default="toy", choices=sorted(PRESETS), help="model preset of a fresh backbone")
    t.add_argument("--tokenizer", default=None, help="default: the --init checkpoint's, else data/toy/tokenizer")
    t.add_argument("--out", default=None, help=f"default {TOY_OUT}")
    # Optimisation
    t.add_argument("--max-steps", type=positive_int, default=None, help=f"default {TOY_STEPS} (the pair task is harder)")
    t.add_argument("--batch-size", type=positive_int, default=16, help="pairs per step (2x rows)")
    t.add_argument("--rows-per-forward", type=positive_int, default=8, help="rows of similar length per forward pass")
    t.add_argument("--lr", type=positive_float, default=1e-3)
    t.add_argument("--warmup-steps", type=non_negative_int, default=10)
    t.add_argument("--weight-decay", type=non_negative_float, default=0.0)
    t.add_argument("--grad-clip", type=positive_float, default=1.0)
    t.add_argument("--margin", type=finite_float, default=0.0, help="point: Bradley-Terry margin, added to any per-record margin")
    t.add_argument("--swap-weight", type=non_negative_float, default=1.0, help="pair: weight of the swap-consistency MSE (0 = off)")
    t.add_argument("--activation-checkpointing", action="store_true")
    t.add_argument("--device", default="cpu")
    t.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"], help="bfloat16: autocast")
    t.add_argument("--seed", type=int, default=0)
    # Logging
    t.add_argument("--log-every", type=positive_int, default=10)
    t.add_argument("--eval-every", type=positive_int, default=20)
    s = sub.add_parser("score", help="score samples with a trained reward model")
    s.add_argument("--kind", choices=["point", "pair"], required=True)
    s.add_argument("--ckpt", default=None, help=f"default {TOY_OUT}")
    s.add_argument("--data", default=None, help="JSONL of {prompt, response[, reference] | response_a, response_b | chosen, rejected}")
    s.add_argument("--batch-size", type=positive_int, default=16)
    s.add_argument("--device", default="cpu")
    s.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    args = p.parse_args(argv)
    try:  # a bad --init / --ckpt / --judge directory: one line naming it and what is wrong, no traceback
        if args.command == "train":
            args.out = args.out or TOY_OUT[args.kind]
            args.max_steps = args.max_steps or TOY_STEPS[args.kind]
            return train(args)
        args.ckpt = args.ckpt or TOY_OUT[args.kind]
        return score(args)
    except CheckpointError as e:
        raise SystemExit(f"reward_models: {e}") from None


if __name__ == "__main__":
    main()
