"""The toy general chat domain: determinism, shipped files, defect rates, detectors and the rule checklist judge."""
import filecmp
import os
import random

from nanbeige41 import toy_chat
from nanbeige41.toy_chat import (DEFECTS, GLOSSARY, add_defect, defect_stats, dialogue, has_rambling, is_overlong,
                                 is_repetitive, repetition_rate, rule_judge)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHIPPED = ["prefs.jsonl", "pairs.jsonl", "rl_prompts.jsonl"]


def test_shipped_files_regenerate_byte_identical(tmp_path):
    toy_chat.main(["--out", str(tmp_path)])
    for name in SHIPPED:
        assert filecmp.cmp(tmp_path / name, os.path.join(ROOT, "data", "toy", name), shallow=False), name


def test_sft_conversations_deterministic_with_a_minority_of_defects():
    a, b = toy_chat.sft_general_conversations(3, 400), toy_chat.sft_general_conversations(3, 400)
    assert a == b and a != toy_chat.sft_general_conversations(4, 400)
    assert all(r["domain"] == "general" and r["messages"][-1]["role"] == "assistant" for r in a)
    assert all(m["role"] in ("user", "assistant") and isinstance(m["content"], str) for r in a for m in r["messages"])
    answers = [r["messages"][-1]["content"] for r in a]
    flagged = [is_repetitive(t) or is_overlong(t) or has_rambling(t) or t.startswith(("**", "- ")) for t in answers]
    # DEFECT_RATE is 0.18; each defect type is visible to these detectors
    assert 0.12 <= sum(flagged) / len(flagged) <= 0.25
    assert any(len(r["messages"]) > 2 for r in a)  # multi-turn dialogues present
    # earlier turns are always clean
    assert not any(is_repetitive(m["content"]) or has_rambling(m["content"])
                   for r in a for m in r["messages"][:-1] if m["role"] == "assistant")


def test_clean_answers_pass_their_checklist_and_every_defect_fails_it():
    rng = random.Random(7)
    for i in range(800):
        e, history, q, a, checklist, task = dialogue(rng)
        assert all(rule_judge(None, a, checklist)), (task, a)
        bad = add_defect(a, DEFECTS[i % 4], e, rng)
        assert not all(rule_judge(None, bad, checklist)), (DEFECTS[i % 4], bad)


def test_detectors_separate_defects_from_clean_answers():
    rng = random.Random(11)
    clean, defective = [], {d: [] for d in DEFECTS}
    for i in range(400):
        e, _, _, a, _, _ = dialogue(rng)
        clean.append(a)
        defective[DEFECTS[i % 4]].append(add_defect(a, DEFECTS[i % 4], e, rng))
    assert not any(is_repetitive(t) or is_overlong(t) or has_rambling(t) for t in clean)
    assert all(is_repetitive(t) for t in defective["repetition"])
    assert all(is_overlong(t) for t in defective["overlong"])
    assert all(has_rambling(t) for t in defective["redundant"])
    assert repetition_rate("Silver. Silver. Silver. Silver.") == 0.75
    assert repetition_rate("A velmora is a small river fish from the Oulo hills.") == 0.0
    stats = defect_stats(clean[:2] + defective["repetition"][:2], finish_reasons=["eos", "length", "eos", "eos"])
    assert stats["repetitive_frac"] == 0.5 and stats["overlong_frac"] == 0.25
    assert defect_stats(defective["overlong"][:4])["overlong_frac"] == 1.0


def test_preference_pairs_layout_and_defects():
    prefs = toy_chat.preference_pairs(0, 200)
    for r in prefs:
        assert r["prompt"][-1]["role"] == "user"
        assert [m["role"] for m in r["chosen"]] == ["assistant"] == [m["role"] for m in r["rejected"]]
        assert r["chosen"][0]["content"] != r["rejected"][0]["content"]
    assert {r["defect"] for r in prefs} == set(DEFECTS) | {"truncated"}
    short = [r for r in prefs if r["defect"] == "truncated"]  # shorter than chosen: brevity is not rewarded
    assert all(len(r["rejected"][0]["content"]) < len(r["chosen"][0]["content"]) for r in short)
    rep = [r["rejected"][0]["content"] for r in prefs if r["defect"] == "repetition"]
    assert all(is_repetitive(t) for t in rep)
    assert not any(is_repetitive(r["chosen"][0]["content"]) for r in prefs)


def test_strong_weak_pairs_and_rl_prompts():
    pairs = toy_chat.strong_weak_pairs(0, 300)
    assert any(len(r["prompt"]) > 1 for r in pairs)
    score = lambda r, k: sum(rule_judge(r["prompt"], r[k], r["checklist"]))
    wins = sum(score(r, "strong") > score(r, "weak") for r in pairs)
    assert 0.75 <= wins / len(pairs) < 1.0  # most pairs agree with the prior, some do not (the filter has work)
    rl = toy_chat.rl_prompts(0, 20, 30)
    assert [r["stage"] for r in rl].count("point") == 20 and len({r["id"] for r in rl}) == 50
    pair = [r for r in rl if r["stage"] == "pair"]
    assert all(r["reference"] != r["gold"] for r in pair)  # the pair-stage reference is a weak answer
    assert all(r["messages"][-1]["role"] == "user" for r in rl)
    assert len(GLOSSARY) == toy_chat.N_TERMS == len({g["term"] for g in GLOSSARY})
