"""Issue 13 as long reproductions (`pytest -m repro`): why the toy search agent could not learn, and its four
measured results.

The toy SFT model copies nothing from its context; a toy base model pretrained on freshly generated worlds'
pages (nanbeige41.toy_world.pretraining_docs, the analogue of the recipe's Nanbeige4-3B-Base) does. From it, SFT
on fresh-world search trajectories and the agent stage give the results in the README ("Issue 13's chain"),
asserted below with the margins measured there (bench/agent_learnability.py)."""
import json
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "bench"))
ENV = dict(os.environ, OMP_NUM_THREADS="1")  # measured that way; on a busy 2-core machine 2 threads spin


@pytest.mark.repro
def test_toy_base_pretraining_learns_to_copy_names_from_context(tmp_path):
    """300 steps x 4k tokens of fresh-world text (seed 0): repeated mentions of a name on an unseen world become
    far more predictable than first mentions. Measured with this test's 300-step schedule: first 4.00, repeats
    1.89 nats/token (6.9 min on the loaded 2-core machine); step 300 of a 600-step schedule: 4.05 / 1.28, its
    step 150: 4.11 / 3.41. The toy SFT model without it: 10.61 / 10.93 (no copying)."""
    from agent_learnability import induction_probe
    from nanbeige41 import data, toy_world
    from nanbeige41.model import Transformer
    from nanbeige41.tokenizer import Tokenizer
    text = tmp_path / "pretrain.jsonl"
    data.write_jsonl(str(text), toy_world.pretraining_docs(range(1, 31)))
    out = tmp_path / "base"
    subprocess.run([sys.executable, os.path.join(REPO, "train_sft.py"), "--config", "toy", "--data", str(text),
                    "--mixture", "pretrain=1", "--seq-len", "512", "--batch-tokens", "4096", "--max-steps", "300",
                    "--eval-data", "--out", str(out), "--seed", "0", "--quiet"], check=True, cwd=REPO, env=ENV)
    probe = induction_probe(Transformer.from_pretrained(str(out)).eval(), Tokenizer.from_pretrained(str(out)))
    print(json.dumps(probe))
    assert probe["name_loss_first_mention"] > 3.0  # the names are new to it
    assert probe["name_loss_repeat"] < probe["name_loss_first_mention"] - 1.5  # measured gap 2.11


# -----------------------------------------------------------------------------
# The toy agent (issue 13's four results), on checkpoints cached in runs/toy/agent_chain: built on the way when
# missing (bench/agent_learnability.build_chain: ~30 min for the chain on one core), reused when present.

CHAIN = os.path.join(REPO, "runs", "toy", "agent_chain")
WORLD = 4242  # the agent stage's fresh world: its <= 2-hop test split (70 questions) is the held-out set


def _chain(with_search=True):
    from agent_learnability import build_chain
    return build_chain(CHAIN, with_search)


def _agent(credit, seed, steps=20):
    """train_grpo --stage agent from the chain's last SFT checkpoint (cached per turn credit and seed)."""
    init = _chain()
    out = os.path.join(CHAIN, f"agent_{credit}_s{seed}")
    if not os.path.isfile(os.path.join(out, "model.safetensors")):
        subprocess.run([sys.executable, os.path.join(REPO, "train_grpo.py"), "--stage", "agent", "--init", init,
                        "--out", out, "--max-steps", str(steps), "--eval-every", "0", "--agent-max-hops", "2",
                        "--agent-world-seed", str(WORLD), "--turn-credit", credit, "--lr", "1e-4",
                        "--seed", str(seed)], check=True, cwd=REPO, env=ENV)
    return out


def _eval(ckpt):
    from agent_learnability import held_out_eval
    ev = held_out_eval(ckpt, n=70, max_hops=2, world_seed=WORLD)
    print(json.dumps(ev))
    return ev


@pytest.mark.repro
def test_agent_stage_before_and_after_over_three_seeds():
    """Result 1 (README, "Issue 13's chain"): 20 agent-stage steps, 3 seeds. Measured: held-out accuracy 1 of 70
    before, 2 / 2 / 1 after (at most one question: not a margin above seed noise, so only "not lower" is
    asserted); the critic's held-out fail rate 11.5% before, 1.3% / 0.0% / 2.7% after."""
    before = _eval(_chain())
    after = [_eval(_agent("penalty", seed)) for seed in (0, 1, 2)]
    assert all(a["accuracy"] >= before["accuracy"] for a in after)
    assert all(a["turn_fail_rate"] < before["turn_fail_rate"] - 0.06 for a in after)  # measured gaps 0.088-0.115
    assert all(a["terminations"].get("answer", 0) >= 0.9 * a["n"] for a in after)  # measured: every episode answers


@pytest.mark.repro
def test_turn_level_credit_vs_trajectory_only():
    """Result 3: --turn-credit penalty vs none, seeds 0 and 1. Measured held-out critic fail rate 1.3% / 0.0%
    (penalty) vs 13.5% / 5.8% (trajectory-only; 11.5% before the stage); accuracy 2 / 2 vs 1 / 3 of 70 (no
    difference this held-out set can resolve, so accuracy is not asserted)."""
    for seed in (0, 1):
        with_turns, trajectory_only = _eval(_agent("penalty", seed)), _eval(_agent("none", seed))
        assert with_turns["turn_fail_rate"] < trajectory_only["turn_fail_rate"] - 0.04  # measured gaps 0.122, 0.058


@pytest.mark.repro
def test_trained_agent_through_the_context_policy():
    """Result 4: the trained agent (seed 0) with 60 turns allowed and only the last 2 tool results verbatim, on all
    hops. Measured: every episode answers, after 2.1 turns on average and at most 3, so the keep-last-K rewrite
    never happens (0 of 148 turns): the trained toy agent does not sustain a long horizon (README)."""
    from agent_learnability import long_horizon
    report = long_horizon(_agent("penalty", 0), n=70, max_hops=0, world_seed=WORLD)
    print(json.dumps(report))
    assert report["terminations"] == {"answer": 70}
    assert report["max_turns_in_episode"] <= 4 and report["turns_before_answer_mean"] < 3
    assert report["rewrites_per_episode"] == 0 and report["turns_with_placeholder_view"] == 0


@pytest.mark.repro
def test_table3_in_miniature_search_trajectories_in_sft():
    """Result 2: 400 SFT steps from the same base with vs. without the fresh-world search trajectories. Measured:
    0 of 70 correct either way (not asserted: no accuracy difference at this budget); with them 69 of 70 episodes
    answer and the critic fails 12.8% of turns, without them all 70 end `error` and it fails every turn."""
    _chain()
    with_search = _eval(os.path.join(CHAIN, "sft_search"))
    without = _eval(_chain(with_search=False))
    assert with_search["terminations"].get("answer", 0) >= 60 and without["terminations"].get("answer", 0) <= 5
    assert with_search["turn_fail_rate"] < without["turn_fail_rate"] - 0.5  # measured 0.128 vs 1.0
