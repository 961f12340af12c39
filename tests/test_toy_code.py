"""nanbeige41/toy_code.py: the shipped set regenerates byte for byte, every solution is correct,
programs are short, the SFT/RL format round-trips through code_judge's reward, and the fast
complexity setting separates the O(n^2) / O(n) pairs."""
import io
import os
import random
import subprocess
import sys
import tokenize

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
import code_judge as cj  # noqa: E402
from nanbeige41 import complexity, lcb
from nanbeige41 import toy_code as tc  # noqa: E402

SHIPPED = os.path.join(ROOT, "data", "toy", "code_problems.jsonl")


@pytest.fixture(scope="module")
def problems():
    return tc.make_problems()


def test_regenerating_gives_identical_bytes(tmp_path):
    out = tmp_path / "code_problems.jsonl"
    subprocess.run([sys.executable, "-m", "nanbeige41.toy_code", "--out", str(out)], cwd=ROOT, check=True,
                   capture_output=True)
    assert out.read_bytes() == open(SHIPPED, "rb").read()


def test_records_are_lcb_style_with_rl_fields(problems):
    assert 15 <= len(tc.FAMILIES) <= 20 and len(problems) == len(tc.FAMILIES) * tc.INSTANCES_PER_FAMILY
    loaded = lcb.load_problems(SHIPPED)                    # the judge's own loader accepts every record
    assert [p["question_id"] for p in loaded] == [p["question_id"] for p in problems]
    assert len({p["question_id"] for p in problems}) == len(problems)
    for p in problems:
        assert p["split"] in ("train", "test") and p["public_test_cases"] and p["private_test_cases"]
        assert p["reference_solution"] == p["solutions"][0]["code"]
        assert complexity.parse_complexity(p["optimal_complexity"]) == p["optimal_complexity"]
        for s in p["solutions"]:
            assert complexity.CLASS_RANK[s["complexity"]] >= complexity.CLASS_RANK[p["optimal_complexity"]]
        for value in p["params"].values():                # the instance parameter is in the statement
            assert str(value) in p["question_content"] and str(value) in p["reference_solution"]
        g = {}
        exec(p["input_generator"], g)
        assert g["gen"](50, 1) == g["gen"](50, 1) and g["gen"](1, 2).strip()
    for family in tc.FAMILIES:
        split = [p["split"] for p in problems if p["family"] == family["name"]]
        assert split.count("test") == 2
    two = [f for f in tc.FAMILIES if len(f["solutions"]) == 2]
    assert len(two) >= 12


def test_every_solution_passes_every_test_and_agrees_on_large_inputs(problems):
    # in-process: these are our own trusted programs (the sandboxed path is tested below)
    for p in problems[::3]:
        tests = lcb.all_tests(p)
        g = {}
        exec(p["input_generator"], g)
        big = g["gen"](300, 7)
        want = tc.run_program(p["reference_solution"], big)
        for s in p["solutions"]:
            for t in tests:
                assert tc.run_program(s["code"], t["input"]) == t["output"], (p["question_id"], s["approach"], t)
            assert tc.run_program(s["code"], big) == want, (p["question_id"], s["approach"])


def test_stack_pairs_two_pointers_matches_brute_force():
    family = [f for f in tc.FAMILIES if f["name"] == "stack_pairs"][0]
    rng = random.Random(0)

    def brute(a, k):
        best = 0

        def rec(used, count):
            nonlocal best
            best = max(best, count)
            free = [i for i in range(len(a)) if i not in used]
            if not free:
                return
            i = free[0]
            rec(used | {i}, count)
            for j in free[1:]:
                if a[i] * k <= a[j]:
                    rec(used | {i, j}, count + 1)
        rec(frozenset(), 0)
        return best
    for _ in range(150):
        k, n = rng.choice([2, 3, 4]), rng.randint(1, 8)
        a = sorted(rng.randint(1, 30) for _ in range(n))
        text = f"{n}\n{' '.join(map(str, a))}\n"
        for _, _, code in family["solutions"]:
            assert int(tc.run_program(tc._fill(code, {"K": k}), text)) == brute(a, k), (a, k)


def test_solutions_are_short(problems):
    # a few-million-parameter model must write these: < 120 Python tokens each
    for p in problems:
        for s in p["solutions"]:
            tokens = list(tokenize.generate_tokens(io.StringIO(s["code"]).readline))
            assert len(tokens) < 120, (p["question_id"], len(tokens))


def test_prompt_and_response_format_scores_full_reward(problems):
    p = [q for q in problems if q["family"] == "range_sum"][0]
    prompt = tc.code_prompt(p)
    assert p["question_content"] in prompt and prompt.endswith(tc.PROMPT_SUFFIX)
    fast, slow = p["solutions"]
    r = tc.code_response(fast)
    assert set(r) == {"reasoning_content", "content"}
    assert r["content"].count("```") == 2 and r["content"].startswith("```python\n")
    assert fast["complexity"] in r["reasoning_content"] and fast["approach"] in r["reasoning_content"]
    text = tc.response_text(fast)
    assert text == f"<think>\n{r['reasoning_content']}\n</think>\n\n{r['content']}"
    assert cj.extract_code(text) == fast["code"] + "\n"
    scored = cj.code_rewards([p, p], [text, tc.response_text(slow)], stage="code2")
    assert scored[0]["format"] == 1.0 and scored[0]["correctness"] == 1.0 and scored[0]["time"] == 1.0
    assert scored[1]["correctness"] == 1.0 and scored[1]["time"] == 0.0


@pytest.mark.slow
def test_fast_complexity_separates_every_quadratic_pair(problems):
    """Every family with an O(n^2) second solution: the optimal one meets the bound, the quadratic one
    does not (fast setting: 4x size steps up to 16384, 2 repetitions, ratio to the reference)."""
    firsts = {}
    for p in problems:
        firsts.setdefault(p["family"], p)
    wrong = []
    for family, p in firsts.items():
        if len(p["solutions"]) < 2 or p["solutions"][1]["complexity"] != "O(n^2)":
            continue
        for s, want in ((p["solutions"][0], True), (p["solutions"][1], False)):
            c = cj.judge_complexity(p, s["code"], fast=True)
            if c["meets_optimal"] is not want:
                wrong.append((family, s["complexity"], c["measured"]["ratio_to_reference"]))
    assert not wrong, wrong
