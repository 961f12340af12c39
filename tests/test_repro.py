"""Issue 18: the paper's claims in miniature, each asserted over three seeds (`pytest -m repro`; the chain is
tests/reproduce.py, whose runs are cached in runs/repro and reused). The margins below are the measured
figures of the README's "Reproduction" table with room for noise; where a claim does not reproduce at toy
scale the test says so (strict xfail: it fails the day the claim starts reproducing, so the README gets fixed).
The suite was rerun from scratch on 2026-11-25 on a new machine (AMD EPYC): every test passed or xfailed as before
except claim 2's margins, reset from that run; docstrings that give only 2026-11-23 figures are that machine's,
and the README's table is the 2026-11-25 run.

The unmarked tests at the top check the chain itself in the default suite: the job table and claim 1's format
checker."""
import json
import os
import re
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reproduce as rp  # noqa: E402
import train_grpo  # noqa: E402


def test_job_table_is_complete_acyclic_and_every_grpo_command_parses(monkeypatch):
    monkeypatch.setattr(rp, "final_rollouts", lambda run, step=None: "1000")
    J = rp.jobs()
    for names in rp.CLAIM_JOBS.values():
        assert set(names) <= set(J)
    state = {}

    def visit(n):  # depth-first: a job met again while it is on the path is a cycle
        assert state.get(n) != "open", f"cycle through {n}"
        if state.get(n) == "done":
            return
        state[n] = "open"
        for d in J[n][1]:
            assert d in J, (n, d)
            visit(d)
        state[n] = "done"
    for n in J:
        visit(n)
    for name, (argv, deps, marker) in J.items():
        argv = argv() if callable(argv) else argv
        assert os.path.isfile(os.path.join(rp.ROOT, argv[0])), argv[0]
        if argv[0] == "train_grpo.py":
            args = train_grpo.parse_args(argv[1:])
            # every run it starts from is a job it waits for
            assert os.path.basename(args.init) in deps, (name, args.init)
            assert args.out == rp.R(name)


def test_build_starts_the_longest_chain_of_work_first():
    J = {"sft_s1": ([], [], None), "agent_pretrain": ([], [], None), "agent_midtrain": ([], ["agent_pretrain"], None),
         "format_sft_s1": ([], ["sft_s1"], None), "point_s0": ([], [], None), "code1_s0": ([], [], None),
         "code2_s0": ([], ["code1_s0"], None)}
    order = rp.build_order(["point_s0", "sft_s1", "format_sft_s1", "code1_s0", "code2_s0", "agent_pretrain",
                            "agent_midtrain"], J)
    # by the work each starts: agent_pretrain 45.4 + 12.0 behind it, agent_midtrain 12.0, code1 4.2 + 2.5 behind it,
    # sft_s1 5.5 + 0.2; a job waits for its inputs whatever its place
    assert order == ["agent_pretrain", "agent_midtrain", "code1_s0", "sft_s1", "code2_s0", "point_s0", "format_sft_s1"]
    assert rp.minutes("agent_eval_sft_nosearch_s2") == 2.1 and rp.minutes("agent_eval_none_s0") == 0.6
    assert rp.minutes("sft_search_s1") == 8.0 and rp.minutes("sft_nosearch") == 7.5 and rp.minutes("sft_s1") == 5.5
    assert rp.minutes("agent_penalty_s2") == 12.0 and rp.minutes("agent_none_s1") == 10.0


def test_the_wide_held_out_worlds_are_in_no_training_data():
    """Results 1 and 3 are measured on UNSEEN_WORLDS: no stage of the agent chain may train on them."""
    from agent_learnability import UNSEEN_WORLDS
    trained = set(rp.PRETRAIN_WORLDS) | set(rp.SFT_WORLDS) | {rp.AGENT_WORLD} | set(rp.AGENT_WORLDS)
    assert len(UNSEEN_WORLDS) == 4 and not set(UNSEEN_WORLDS) & trained


def _reference_text(tok, msgs, tools, ref):
    prompt = tok.render(msgs, tools=tools, add_generation_prompt=True)
    full = tok.render(msgs + [ref], tools=tools)
    assert full.startswith(prompt)
    return full[len(prompt):].split("<|im_end|>")[0]


def test_format_checker_accepts_every_reference_reply_and_rejects_broken_ones(tok):
    turns = rp.held_out_turns(per_domain=6)
    assert {d for d, *_ in turns} == {"code", "general", "search", "stem", "tool"}
    broken = 0
    for domain, msgs, tools, ref in turns:
        names = {t["function"]["name"] for t in tools or []}
        text = _reference_text(tok, msgs, tools, ref)
        assert rp.reply_ok(tok, text, "eos", ref, names, domain), (domain, text[:200])
        assert not rp.reply_ok(tok, text, "length", ref, names, domain)  # cut off at the token limit
        assert not rp.reply_ok(tok, text.replace("</think>", ""), "eos", ref, names, domain)  # think never closed
        if ref.get("tool_calls"):
            assert not rp.reply_ok(tok, text.replace('"arguments": {', '"arguments": {{'), "eos", ref, names, domain)
            assert not rp.reply_ok(tok, text, "eos", ref, names - {ref["tool_calls"][0]["function"]["name"]},
                                   domain)  # a tool that does not exist
            broken += 1
        elif domain == "code":
            assert not rp.reply_ok(tok, text.replace("```python", "```"), "eos", ref, names, domain)
            broken += 1
    assert broken >= 10


# -----------------------------------------------------------------------------
# The claims (`pytest -m repro`). Each test builds what its claim needs (reusing runs/repro) and asserts, for every
# seed, the direction and a margin below the smallest gap measured over the three seeds (the measured figures are
# in each docstring and in the README's table, from one run of `python tests/reproduce.py`).

# What each repro test builds besides its claim's CLAIM_JOBS (the tests named test_claimN_...).
EXTRA_NEEDS = {"test_trained_agent_through_the_context_policy": ["long_horizon"],
               "test_claim7_prerequisite_the_toy_base_model_copies_names_from_its_context": []}

def needs(test_name):
    if test_name in EXTRA_NEEDS:
        return EXTRA_NEEDS[test_name]
    m = re.match(r"test_claim(\d+)_", test_name)
    return rp.CLAIM_JOBS[int(m.group(1))] if m else []


@pytest.fixture(scope="module")
def built(request):
    """Builds every run the selected repro tests need in one go, two jobs at a time across claims, longest chain of
    work first (one claim at a time would leave a core idle whenever a claim has an odd number of runs or a
    chain). A test run alone builds only what it needs."""
    rp.build(list(dict.fromkeys(n for item in request.session.items if item.get_closest_marker("repro")
                                for n in needs(item.name))))


def repro(test):
    """@repro: marked `repro` (deselected by default; `pytest -m repro`) and built by the fixture above."""
    return pytest.mark.repro(pytest.mark.usefixtures("built")(test))


def claim(n):
    rp.build(rp.CLAIM_JOBS[n])
    result = rp.claim_results(n)
    print(json.dumps(result, indent=1))
    return result


def seeds(result):
    return [result["per_seed"][s] for s in rp.SEEDS]


class NotReproduced(Exception):
    """The paper's direction did not show in a run (a claim the README reports as not reproduced at toy scale)."""


def paper_says(condition, what):
    """The paper's claim, checked in a test marked xfail(strict=True, raises=NotReproduced): any other failure (a
    broken comparison) still fails the test, and the day the claim reproduces the strict xfail fails too."""
    if not condition:
        raise NotReproduced(what)


def not_reproduced(reason):
    return pytest.mark.xfail(strict=True, raises=NotReproduced, reason=reason)


@repro
@not_reproduced("not reproduced at toy scale: code1 lowers held-out correctness (README)")
def test_claim4_code_stage_1_raises_correctness():
    """Paper: code RL stage 1 raises correctness. Measured (code1 from sft_s0, 20 steps, lr 2e-4): held-out pass
    rate 0.421 -> 0.316 / 0.368 / 0.289 (16 -> 12 / 14 / 11 of 38) while the training-batch reward (first 5 steps
    -> last 5) rises in two seeds (0.59 -> 0.73, 0.71 -> 0.71, 0.60 -> 0.62): the filtered problems are fitted,
    the held-out instances are not. The README's lr sweep (2e-5 .. 2e-4) found the same. Strict: this fails the
    day the claim reproduces."""
    for r in seeds(claim(4)):
        assert 0 < r["pass_rate"][0] < 1 and len(r["pass_rate"]) == 2  # the runs were evaluated
        paper_says(r["pass_rate"][1] > r["pass_rate"][0], f"held-out pass rate {r['pass_rate']}")


@repro
@not_reproduced("not reproduced at toy scale: without the filter more rollouts reach the update and held-out "
                "correctness ends higher (README)")
def test_claim6_difficulty_filter_improves_sample_efficiency():
    """Paper: the on-policy k in [1, 5] of 8 filter improves sample efficiency. Measured at equal rollouts (code1
    with the filter: the first 10 steps of code1_s*, 1,600-1,680 rollouts, the filter's 768 included; without it,
    --max-rollouts at the same count: 14-16 steps): the share of rollouts that reach the update (groups with a
    nonzero advantage) is 36.7% / 37.7% / 40.0% with the filter vs 54.7% / 55.1% / 47.5% without, and held-out
    pass rate at the end 0.289 / 0.368 / 0.395 vs 0.368 / 0.421 / 0.368. At T = 0.7 a problem kept for 1 <= k <= 5
    of 8 still gives an all-fail group often (dynamic sampling drops 24-37 groups in the filtered steps), so the
    filter's upfront 768 rollouts do not pay back."""
    for r in seeds(claim(6)):
        f, nf = r["filter"], r["no_filter"]
        assert abs(f["rollouts"] - nf["rollouts"]) <= 0.05 * f["rollouts"]  # the comparison is at equal rollouts
        paper_says(f["useful_share"] > nf["useful_share"], f"useful share {f['useful_share']} vs {nf['useful_share']}")
        paper_says(f["eval_pass_rate"][1] >= nf["eval_pass_rate"][1], "held-out pass rate at equal rollouts")


def wide(result):
    """Result 1 and 3's wide held-out figures: correct of 600 (4 worlds no stage trains on) before the agent stage
    (sft_search, SFT seeds 0 / 1 / 2) and after it (agent seeds 0 / 1 / 2, each from sft_search seed 0): the
    24-step runs of 4 questions a step (`penalty`, `none`) and the runs of 16 (`q16`, `q16none`)."""
    before = [w["correct"] for w in result["wide_before"]]
    after = {c: [r[c]["wide"]["correct"] for r in seeds(result)] for c in rp.CREDITS}
    assert all(w["n"] == 600 for w in result["wide_before"] + [r[c]["wide"] for r in seeds(result) for c in after])
    return before, after


@repro
def test_claim8_the_agent_stage_raises_held_out_accuracy():
    """Issue 13, result 1: the agent stage (`agent_q16_s*`: 12 steps of 16 questions x G = 8 from sft_search, T = 0.7,
    lr 1e-4, turn penalty 0.1), greedy, 8 turns, on 600 questions of 4 worlds never trained on. Measured
    (2026-11-25): 50 before, **68 / 56 / 65** after (seeds 0 / 1 / 2; +18 / +6 / +15); every seed still ends >= 596
    of 600 episodes with an answer (598 before). On world 4242's 65: 6 -> 7 / 9 / 10. The 24-step runs of 4
    questions a step (`agent_penalty_s*`) went 50 -> 52 / 36 / 59 on the same 600 (6 -> 8 / 9 / 10 on the 65: there
    the 65-question gain was eval noise)."""
    result = claim(8)
    before, after = wide(result)
    assert all(w["terminations"].get("answer", 0) >= 570 for w in result["wide_before"])
    for r, a in zip(seeds(result), after["q16"]):
        assert r["q16"]["steps"] == 12 and r["q16"]["wide"]["terminations"].get("answer", 0) >= 570
        assert a >= before[0] + 3, (before[0], after["q16"])  # smallest measured gain 6 of 600


@repro
def test_claim8_the_agent_stage_over_many_worlds_two_hop_questions_raises_held_out_accuracy():
    """Issue 13, result 1, the best setting found: the same 16 x 12 over the two-hop training questions of 50 fresh
    worlds (`agent_mw2_s*`: `--agent-world-seed 5000 --agent-worlds 50 --agent-min-hops 2`). Measured (2026-11-25):
    50 -> **59 / 67 / 79** of the 600 (+9 / +17 / +29, mean +18.3; `agent_q16_s*`: +13); world 4242's 65 (unseen
    by these runs too): 6 -> 11 / 11 / 10."""
    result = claim(8)
    before, after = wide(result)
    for r, a in zip(seeds(result), after["mw2"]):
        assert r["mw2"]["steps"] == 12 and r["mw2"]["wide"]["terminations"].get("answer", 0) >= 570
        assert a >= before[0] + 5, (before[0], after["mw2"])  # smallest measured gain 9 of 600
        assert r["mw2"]["correct"] >= result["before"]["accuracy"] * 65 + 2  # measured +4 / +5 / +5 of 65


@repro
def test_claim8_one_hop_questions_in_the_agent_stage_teach_stopping_early():
    """Why the two-hop-only runs gain more: a one-hop question is answered right after a single search, so in a
    training mix of one- and two-hop questions many of the rewarded trajectories stop after one search, and the
    agent learns to stop one hop early (the commonest failure of the SFT agent). Measured (2026-11-25) on the 600
    (127 one-hop, 473 two-hop questions): before, sft_search answers 14 one-hop and 36 two-hop questions right in
    2.50 turns; trained on two-hop questions only (`agent_mw2_s*`) the agent searches longer (2.85 / 3.02 / 2.87
    turns) and answers 57 / 64 / 76 two-hop questions right, while its one-hop answers fall to 2 / 3 / 3 (a second
    search it does not need). Trained on both (`agent_mw_s*`): 67 / 37 / 56 of 600 in 2.69 / 2.13 / 2.92 turns; on
    world 4242's 65, seed 1 went from 2 / 14 one-hop and 4 / 51 two-hop right to 4 / 14 and 1 / 51 in 2.03 turns."""
    result = claim(8)
    b = result["wide_before"][0]
    for r in seeds(result):
        w = r["mw2"]["wide"]
        assert w["questions_by_hops"] == b["questions_by_hops"] == {"1": 127, "2": 473}
        assert w["correct_by_hops"]["2"] >= b["correct_by_hops"]["2"] + 14, (w, b)  # measured +21 / +28 / +40
        assert w["turns"] >= b["turns"] + 0.2, (w["turns"], b["turns"])  # measured +0.35 / +0.52 / +0.37
    assert min(r["mw"]["wide"]["turns"] for r in seeds(result)) < b["turns"] - 0.2  # seed 1: 2.13 vs 2.50


@repro
def test_claim8_the_agent_stage_gain_is_beyond_seed_noise():
    """Issue 13, result 1, the strong form: every seed's gain on the wide set exceeds the spread of the three seeds'
    results, and every seed ends above the best of the three SFT seeds. Shown by the two-hop runs over 50 worlds at
    24 steps (`agent_mw2long_s*`: 4,480 / 4,104 / 4,376 rollouts): 50 -> **79 / 87 / 81** of 600 (+29 / +37 / +31,
    mean +32.3; spread 8), against the SFT seeds' 50 / 69 / 53; world 4242's 65: 6 -> 11 / 10 / 11. Measured
    (2026-11-25) at 12 steps, where no setting cleared the bar: `agent_mw2_s*` 59 / 67 / 79 (+9 smallest; spread 20),
    `agent_q16_s*` 68 / 56 / 65 (+6; 12), `agent_mw_s*` 67 / 37 / 56; the 4-question runs 52 / 36 / 59, 16 a step
    without turn credit 78 / 52 / 78, 32 a step with it (outside the suite) 84 / 55 / 47."""
    result = claim(8)
    before, after = wide(result)
    gains = [a - before[0] for a in after["mw2long"]]
    for r in seeds(result):
        assert r["mw2long"]["steps"] == 24 and r["mw2long"]["wide"]["terminations"].get("answer", 0) >= 570
    assert min(gains) >= max(after["mw2long"]) - min(after["mw2long"]) + 10, (gains, after["mw2long"])  # 29 vs 8
    assert min(after["mw2long"]) >= max(before) + 5, (after["mw2long"], before)  # measured 79 vs 69


@repro
@not_reproduced("not reproduced at toy scale: turn-level credit does not raise held-out accuracy in every seed "
                "(README)")
def test_claim8_turn_level_supervision_helps_the_agent():
    """Paper (2.2): turn-level supervision helps long-horizon agents. Issue 13, result 3: `--turn-credit penalty`
    vs `none` (trajectory reward only) at equal rollouts (`none` runs until it has drawn as many), at 4 and at 16
    questions a step. Measured (2026-11-25) on 600 questions of 4 unseen worlds: 4 a step (1,128 vs 1,152 / 1,384
    vs 1,392 / 968 vs 1,048 rollouts) 52 vs 59 / 36 vs 42 / 59 vs 63, trajectory-only ahead in every seed; 16 a
    step (2,232 vs 2,424 / 2,584 vs 2,792 / 2,248 vs 2,416) 68 vs 78 / 56 vs 52 / 65 vs 78, ahead in two of
    three. On world 4242's 65: 8 vs 7 / 9 vs 3 / 10 vs 10 and 7 vs 13 / 9 vs 6 / 10 vs 11; the critic fails 8.8%
    vs 3.5% / 12.0% vs 8.8% / 7.0% vs 2.8% of world 4242's held-out turns at 4 a step: *more* with turn credit."""
    result = claim(8)
    _, after = wide(result)
    pairs = (("penalty", "none"), ("q16", "q16none"))
    for r in seeds(result):
        for p, n in pairs:  # the runs without turn credit overshoot the budget by <= 8.6% (their last step)
            assert abs(r[n]["rollouts"] - r[p]["rollouts"]) <= 0.1 * r[p]["rollouts"], (p, n)
    paper_says(all(a > b for p, n in pairs for a, b in zip(after[p], after[n])), f"held-out accuracy {after}")


@repro
def test_trained_agent_through_the_context_policy():
    """Issue 13, result 4: the trained agent (agent_penalty_s0, 24 steps) with 60 turns allowed and only the last
    2 tool results verbatim, on all hops (1-4) of world 4242's first 65 held-out questions. Measured (2026-11-25):
    64 episodes answer and 1 ends in an error, after 2.69 turns on average and at most 7; the keep-last-K rewrite
    happens 4 times in the 65 episodes (0.06 an episode) and 1.7% of turns see a placeholder: the trained toy agent
    does not sustain a long horizon. Accuracy 3 of 65 (one of 28 three-hop questions)."""
    rp.build(["long_horizon"])
    report = rp.load("long_horizon")
    print(json.dumps(report))
    assert report["n"] == 65 and report["terminations"].get("answer", 0) >= 60  # measured 64
    assert report["max_turns_in_episode"] <= 10 and report["turns_before_answer_mean"] < 4  # measured 7, 2.69
    assert report["rewrites_per_episode"] < 0.3 and report["turns_with_placeholder_view"] < 0.1  # 0.06, 0.017


@repro
def test_claim7_prerequisite_the_toy_base_model_copies_names_from_its_context():
    """Issue 13's cause and its fix, measured on the shipped toy base (data/toy/agent_base: 1,500 pretraining steps on
    60 fresh worlds' pages, walks and worked chains, then 400 mid-training steps with the expert's trajectories in
    plain text; jobs agent_pretrain -> agent_midtrain, `--ship-base`). Induction probe on a fresh world's pages:
    name loss 3.75 nats at the first mention vs 0.14 at the repeats (the old recipe's base, 300 steps on 30 worlds'
    pages with listed first names: 5.46 vs 4.05). After "Question: <q>\nThought:" its greedy thought names the
    question's head entity in 63 of the 65 held-out questions of world 4242 (96.9%)."""
    from agent_learnability import held_out_questions, induction_probe, question_copy_probe
    from nanbeige41.model import Transformer
    from nanbeige41.tokenizer import Tokenizer
    import torch
    torch.set_num_threads(1)
    model, tok = Transformer.from_pretrained(rp.BASE, dtype=torch.float32).eval(), Tokenizer.from_pretrained(rp.BASE)
    probe = induction_probe(model, tok)
    copy = question_copy_probe(model, tok, held_out_questions(2, rp.AGENT_WORLD))
    print(json.dumps({**probe, **copy}))
    assert probe["name_loss_first_mention"] > 3.0 and probe["name_loss_repeat"] < 0.5  # measured 3.75 / 0.14
    assert copy["n"] == 65 and copy["head_named"] > 0.85  # measured 0.969


@repro
def test_claim5_code_stage_2_raises_r_time_while_correctness_holds():
    """Paper (Figure 4): stage 2's gated time-complexity reward raises R_time while correctness holds. Measured
    (code2 from code1_s* (20 steps), 10 steps, lr 5e-5; held-out = 38 problems, greedy): R_time 0.184 -> 0.237 /
    0.184 -> 0.316 / 0.158 -> 0.263; the share of correct solutions in the optimal class 58.3% -> 69.2% / 50.0%
    -> 80.0% / 54.5% -> 76.9%; pass rate 0.316 -> 0.342 / 0.368 -> 0.395 / 0.289 -> 0.342; training-batch R_time
    (first 5 steps -> last 5) 0.52 -> 0.61 / 0.43 -> 0.66 / 0.45 -> 0.53. R_time is measured with timed runs, so
    reruns differ by a problem or two (README). 2026-11-25 (AMD EPYC): R_time 0.132 -> 0.211 / 0.263 -> 0.421 /
    0.184 -> 0.368; optimal share of correct 50.0% -> 72.7% / 62.5% -> 100% / 53.8% -> 100%; pass rate 0.263 ->
    0.289 / 0.421 -> 0.421 / 0.342 -> 0.368; training-batch R_time 0.53 -> 0.57 / 0.33 -> 0.47 / 0.40 -> 0.56."""
    for r in seeds(claim(5)):
        assert r["r_time"][1] > r["r_time"][0] + 0.03  # smallest measured gap 0.053 (2 problems; one is 0.026)
        assert r["optimal_among_correct"][1] > r["optimal_among_correct"][0] + 0.05  # smallest 0.109
        assert r["pass_rate"][1] >= r["pass_rate"][0] - 0.03  # held: measured never lower (a problem is 0.026)
        assert r["train_r_time"][1] > r["train_r_time"][0] + 0.02  # smallest 0.043 (2026-11-25; 0.074 on 11-23)


@repro
def test_claim7_search_trajectories_in_sft_help_deep_search():
    """Paper (Table 3): SFT with the synthesized multi-hop QA + trajectories improves deep search. Measured: 400 SFT
    steps from the shipped toy base with vs. without fresh-world search trajectories (the same budget: without
    them the 45% search share goes to the other domains), seeds 0 / 1 / 2, world 4242's 65 held-out questions of
    <= 2 hops (2026-11-25): accuracy 6 / 10 / 10 of 65 with them, 0 / 0 / 0 without; with them all 65 episodes
    end with an answer and the critic fails 6.5% / 14.1% / 11.5% of turns, without them every episode ends
    `error` (no parseable tool call or answer) and it fails 100%. The first query names the question's entity in
    84.6% / 87.7% / 89.2% of episodes."""
    for r in seeds(claim(7)):
        with_search, without = r["with_search"], r["without_search"]
        correct = [round(x["accuracy"] * x["n"]) for x in (with_search, without)]
        assert with_search["n"] == without["n"] == 65
        assert correct[0] >= correct[1] + 4, correct  # smallest measured gap 6 of 65
        assert with_search["terminations"].get("answer", 0) >= 60 and without["terminations"].get("answer", 0) <= 5
        assert with_search["turn_fail_rate"] < without["turn_fail_rate"] - 0.5  # smallest measured gap 0.859


@repro
def test_claim2_point_rl_with_the_rm_alone_cuts_truncation():
    """Paper (2.1.2): point-wise RL cuts overlong truncation (5.27% -> 0.38%) with the reward model alone. Measured
    (point from sft_s0, 15 steps, `--overlong none`: no length penalty; rollouts of steps 1-5 vs 11-15, 64 a step;
    2026-11-25, AMD EPYC): cut at the length limit 2.2% -> 1.2% / 4.1% -> 0.6% / 3.8% -> 1.2%, RM score 1.14 ->
    1.71 / 1.14 -> 1.70 / 0.93 -> 2.00. The held-out greedy RM score (12 prompts) does not rise: 4.33 -> 4.27 /
    4.05 / 4.13. (On the 2026-11-23 machine: cut 4.4% -> 2.2% / 4.1% -> 1.9% / 4.7% -> 2.2%, RM score +1.3 to
    +1.6; float summation order differs between the two machines' CPUs and every run diverges from there.)"""
    for r in seeds(claim(2)):
        assert r["cut_at_limit"][1] < r["cut_at_limit"][0] - 0.005  # smallest measured fall 0.94 points
        assert r["rm_score"][1] > r["rm_score"][0] + 0.3  # smallest measured rise 0.56


@repro
@not_reproduced("not reproduced at toy scale: repetitive rollouts rise in seed 0 (1-3% either way) (README)")
def test_claim2_point_rl_suppresses_repetition():
    """Paper (2.1.2): point-wise RL suppresses repetition. Measured (same runs): repetitive rollouts 1.2% -> 2.8%
    / 2.8% -> 1.2% / 3.1% -> 1.2% (4-10 of 320): down in two seeds, up in one."""
    for r in seeds(claim(2)):
        paper_says(r["repetitive"][1] < r["repetitive"][0], f"repetitive {r['repetitive']}")


@repro
def test_claim3_swap_consistency_removes_the_pair_rm_position_bias():
    """Paper (2.1.3): the swap-consistency regulariser makes the pair-wise RM order-consistent. Measured (pair RM
    from sft_s0, seeds 0 / 1 / 2; held-out mean abs(d(A,B) + d(B,A))): 0.094 / 0.105 / 0.065 with it, 1.478 /
    1.113 / 1.283 without (`--swap-weight 0`): 10-20x."""
    for r in seeds(claim(3)):
        assert r["position_bias_noswap"] > 5 * r["position_bias_swap"]  # smallest measured ratio 10.6
        assert r["position_bias_swap"] < 0.2  # measured at most 0.105


@repro
@not_reproduced("not reproduced at toy scale: the toy pair RM's win/lose signal is near chance (README)")
def test_claim3_pair_rl_raises_the_win_rate_against_the_reference():
    """Paper (2.1.3): pair-wise RL raises the win rate against reference answers. Measured (pair from sft_s0 with
    rm_pair_s0, 15 steps): training-batch win rate 0.588 -> 0.579 / 0.587 -> 0.589 / 0.531 -> 0.580 (steps 1-5 vs
    11-15): down in seed 0; the held-out greedy replies already win on all 12 prompts before the stage (1.000 ->
    1.000)."""
    for r in seeds(claim(3)):
        paper_says(r["win_rate"][1] > r["win_rate"][0], f"win rate {r['win_rate']}")


@repro
def test_claim1_sft_over_the_length_curriculum_teaches_the_formats():
    """Paper (2.1.1): SFT on the domain mixture over a length curriculum teaches the formats. Measured (toy SFT,
    500 steps over the 256 -> 512 -> 1024 curriculum, seeds 0 / 1 / 2): well-formed replies to 60 held-out turns
    (reproduce.reply_ok: closed <think>, one ```python block for code, a real tool with JSON arguments where the
    reference calls one) 0% at random init -> 91.7% / 81.7% / 75.0% after SFT (code, general and stem 12 of 12
    each; tool 7-9 of 12; search 12 / 6 / 0 of 12); the held-out loss falls within every stage (seed 0: 256:
    3.59 -> 0.88, 512: 1.73 -> 1.13, 1024: 1.15 -> 0.82; each stage is evaluated at its own length)."""
    for r in seeds(claim(1)):
        assert r["format_valid_before"] == 0.0
        assert r["format_valid_after"] >= 0.6  # measured at least 0.75
        for stage, (first, last) in r["eval_loss_per_stage"].items():
            assert last < first - 0.15, stage  # smallest measured fall 0.27 (the 1024 stage, seed 2)
