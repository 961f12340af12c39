"""code_judge.py: problem loading (real LCB row), verdicts, comparison, functional and C++ tests,
batching/restarts, the complexity judge (measured + model over HTTP on 127.0.0.1), the gated reward
and the CLI. The hostile-program battery is in test_code_judge_security.py."""
import base64
import http.server
import json
import math
import os
import pickle
import random
import shutil
import subprocess
import sys
import threading
import time
import zlib

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
import code_judge as cj  # noqa: E402
from nanbeige41 import complexity, lcb, sandbox
from http_fakes import FakeHandler

LCB_ROW = "/work/shared/fixtures/livecodebench/code_generation_lite_1873_A.jsonl"
TOY = os.path.join(ROOT, "data", "toy", "code_problems.jsonl")
SHORT_SORT = ('t=int(input())\nfor _ in range(t):\n s=input().strip()\n'
              ' print("YES" if sum(x!=y for x,y in zip(s,"abc")) in (0,2) else "NO")\n')
SUM = "n=int(input())\na=list(map(int,input().split()))\nprint(sum(a))\n"


def stdin_problem(tests, **extra):
    return lcb.normalize_problem(dict({"question_id": "p", "question_content": "sum",
                                      "public_test_cases": [dict(t, testtype="stdin") for t in tests]}, **extra))


def toy(family, index=0):
    return [p for p in lcb.load_problems(TOY) if p["question_id"] == f"toy_{family}_{index:03d}"][0]


# ----------------------------------------------------------------------------- loading

@pytest.mark.skipif(not os.path.exists(LCB_ROW), reason="shared LCB fixture not present")
def test_real_livecodebench_row_loads_as_is_and_judges():
    [problem] = lcb.load_problems(LCB_ROW)
    assert problem["question_id"] == "1873_A" and problem["metadata"] == {}
    assert len(problem["public_test_cases"]) == 1 and len(problem["private_test_cases"]) >= 1
    assert all(t["testtype"] == "stdin" for t in lcb.all_tests(problem))
    result = cj.judge(problem, SHORT_SORT)
    assert result["verdicts"] == ["AC"] * result["total"], result
    wrong = cj.judge(problem, SHORT_SORT.replace("(0,2)", "(0,)"))
    assert wrong["pass_rate"] < 1 and "WA" in wrong["verdicts"]


def test_private_tests_pickle_refuses_globals(tmp_path):
    class Evil:
        def __reduce__(self):
            return (os.system, ("true",))
    blob = base64.b64encode(zlib.compress(pickle.dumps(Evil()))).decode()
    path = tmp_path / "evil.json"
    path.write_text(json.dumps({"question_id": "e", "private_test_cases": blob}))
    with pytest.raises(lcb.ProblemError, match="private_test_cases.*refused"):
        lcb.load_problems(str(path))
    good = base64.b64encode(zlib.compress(pickle.dumps(json.dumps([{"input": "1\n", "output": "1", "testtype": "stdin"}])))).decode()
    path.write_text(json.dumps({"question_id": "g", "private_test_cases": good}))
    assert lcb.load_problems(str(path))[0]["private_test_cases"][0]["output"] == "1"


def test_load_errors_name_file_line_and_field(tmp_path):
    good = json.dumps({"question_id": "a", "public_test_cases": [{"input": "", "output": "1", "testtype": "stdin"}]})
    path = tmp_path / "p.jsonl"
    path.write_text(good + "\n{not json\n")
    with pytest.raises(lcb.ProblemError, match=r"p\.jsonl:2: invalid JSON"):
        lcb.load_problems(str(path))
    path.write_text(good + "\n" + json.dumps({"question_id": "b", "public_test_cases": [{"input": 1}]}) + "\n")
    with pytest.raises(lcb.ProblemError, match=r"p\.jsonl:2: field 'public_test_cases'\[0\]"):
        lcb.load_problems(str(path))
    path.write_text(json.dumps({"question_id": "c", "optimal_complexity": "fast",
                                "public_test_cases": [{"input": "", "output": "1"}]}) + "\n")
    with pytest.raises(lcb.ProblemError, match="optimal_complexity"):
        lcb.load_problems(str(path))
    with pytest.raises(lcb.ProblemError, match="cannot read"):
        lcb.load_problems(str(tmp_path / "missing.json"))


# ----------------------------------------------------------------------------- comparison and verdicts

def test_outputs_match_like_livecodebench():
    assert lcb.outputs_match("6\n", "6")
    assert lcb.outputs_match(" 1  2 3 \n\n", "1 2 3")
    assert lcb.outputs_match("1.0 2", "1 2.00")          # numbers compare as numbers
    assert lcb.outputs_match("007", "7")
    assert not lcb.outputs_match("1\n2", "1 2")          # line structure matters
    assert not lcb.outputs_match("0.333", "0.3333333")
    assert lcb.outputs_match("0.333", "0.3333333", float_tol=1e-3)
    assert not lcb.outputs_match("YES", "yes")
    assert lcb.values_match([1, 2.0000001], [1, 2.0], float_tol=1e-6) and not lcb.values_match([1, 2.1], [1, 2])
    assert not lcb.values_match([1, 2.0000001], [1, 2], float_tol=1e-6)   # an integer answer is exact
    assert lcb.values_match(True, 1) and not lcb.values_match([1], [1, 2])   # LCB compares with ==: True == 1
    assert not lcb.outputs_match("YES  NO", "YES NO") and not lcb.outputs_match("YES 1.0", "YES 1")   # LCB: words only as whole lines


def test_batched_run_gives_per_test_verdicts_and_resumes_after_a_kill():
    problem = stdin_problem([{"input": str(k) + "\n", "output": str(2 * k)} for k in range(8)])
    code = ("import os, sys\nk=int(input())\n"
            "if k==1: print(-1)\n"                       # WA
            "elif k==2: 1/0\n"                           # RE (exception, process survives)
            "elif k==3:\n while True: pass\n"            # TLE: killed, next process resumes at 4
            "elif k==4: os._exit(0)\n"                   # WA: nothing printed (only this test's process ends)
            "elif k==5: print('x'*3000000)\n"            # OLE
            "elif k==6: b=bytearray(2*1024**3)\n"        # MLE
            "else: print(2*k)\n")
    limits = sandbox.Limits(time_s=1.0, output_bytes=1 << 20, memory_mb=512)
    t0 = time.time()
    result = cj.judge(problem, code, limits=limits)
    assert result["verdicts"] == ["AC", "WA", "RE", "TLE", "WA", "OLE", "MLE", "AC"], result
    assert result["passed"] == 2 and result["pass_rate"] == 0.25
    assert time.time() - t0 < 10


def test_stop_after_tle_scores_the_rest_tle_without_running_them():
    problem = stdin_problem([{"input": str(k) + "\n", "output": str(2 * k)} for k in range(6)])
    code = "k=int(input())\nif k==1:\n while True: pass\nprint(2*k)\n"
    t0 = time.time()
    result = cj.judge(problem, code, limits=sandbox.Limits(time_s=1.0, stop_after_tle=True))
    assert result["verdicts"] == ["AC", "TLE", "TLE", "TLE", "TLE", "TLE"], result
    assert time.time() - t0 < 6  # one timeout, not five
    # without the flag the run resumes after the timeout and the later tests pass
    assert cj.judge(problem, code, limits=sandbox.Limits(time_s=1.0))["verdicts"] == ["AC", "TLE", "AC", "AC", "AC", "AC"]


def test_syntax_error_is_ce_and_exit_zero_is_not_a_pass():
    problem = stdin_problem([{"input": "1\n5\n", "output": "5"}, {"input": "1\n6\n", "output": "6"}])
    assert cj.judge(problem, "print(")["verdicts"] == ["CE", "CE"]
    assert cj.judge(problem, "exit(0)\n" + SUM)["verdicts"] == ["WA", "WA"]
    assert cj.judge(problem, SUM + "exit(3)\n")["verdicts"] == ["RE", "RE"]  # non-zero exit after printing
    assert cj.judge(problem, "import sys\nprint(sum(map(int,open(0).read().split()[1:])))")["verdicts"] == ["AC", "AC"]


def test_functional_tests_compare_returned_values():
    problem = lcb.normalize_problem({
        "question_id": "lc", "starter_code": "class Solution:\n    def twoSum(self, nums: List[int], target: int) -> List[int]:\n",
        "metadata": json.dumps({"func_name": "twoSum"}),
        "public_test_cases": json.dumps([{"input": "[2,7,11,15]\n9", "output": "[0, 1]", "testtype": "functional"},
                                         {"input": "[3,2,4]\n6", "output": "[1, 2]", "testtype": "functional"}])})
    good = ("class Solution:\n    def twoSum(self, nums: List[int], target: int) -> List[int]:\n"
            "        seen = {}\n        for i, x in enumerate(nums):\n"
            "            if target - x in seen: return (seen[target - x], i)\n            seen[x] = i\n")
    assert cj.judge(problem, good)["verdicts"] == ["AC", "AC"]   # a tuple is returned, compared as a list
    printing = good.replace("return (seen[target - x], i)", "print([seen[target - x], i]); return None")
    assert cj.judge(problem, printing)["verdicts"] == ["WA", "WA"]   # printed text is not the return value


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not installed")
def test_cpp_programs_compile_and_run_in_the_sandbox():
    problem = stdin_problem([{"input": "3\n1 2 3\n", "output": "6"}, {"input": "2\n5 5\n", "output": "10"}])
    good = "#include <iostream>\nint main(){int n;long long s=0,x;std::cin>>n;while(n--){std::cin>>x;s+=x;}std::cout<<s<<'\\n';}\n"
    assert cj.judge(problem, good, lang="cpp")["verdicts"] == ["AC", "AC"]
    assert cj.judge(problem, "int main( {", lang="cpp")["verdicts"] == ["CE", "CE"]
    crash = "#include <cstdio>\nint main(){int n;scanf(\"%d\",&n);if(n==2){volatile int*p=0;*p=1;}printf(\"6\\n\");}\n"
    assert cj.judge(problem, crash, lang="cpp")["verdicts"] == ["AC", "RE"]
    spin = "int main(){volatile unsigned long x=0;for(;;)x++;}\n"
    assert cj.judge(problem, spin, lang="cpp", limits=sandbox.Limits(time_s=1.0))["verdicts"] == ["TLE", "TLE"]


def test_judge_many_runs_candidates_in_parallel_in_order():
    problem = stdin_problem([{"input": "2\n1 2\n", "output": "3"}])
    codes = [SUM, "print(4)", SUM, "print(3)"]
    results = cj.judge_many([(problem, c) for c in codes], workers=2)
    assert [r["verdicts"][0] for r in results] == ["AC", "WA", "AC", "AC"]


def test_isolation_is_reported_and_can_be_required():
    problem = stdin_problem([{"input": "1\n1\n", "output": "1"}])
    result = cj.judge(problem, SUM)
    assert result["sandbox"]["backend"] in ("bwrap", "unshare") and result["sandbox"]["full"]
    assert cj.judge(problem, SUM, isolation="none")["sandbox"]["full"] is False
    with pytest.raises(sandbox.SandboxError, match="full isolation required"):
        cj.judge(problem, SUM, isolation="none", require_full_isolation=True)
    with pytest.raises(sandbox.SandboxError, match="unknown language"):
        sandbox.run_tests(SUM, ["1\n1\n"], lang="rust")


# ----------------------------------------------------------------------------- complexity

def test_parse_complexity_classes():
    cases = {"O(n)": "O(n)", "The answer is O(N log N).": "O(n log n)", "O(n^2)": "O(n^2)", "O(n**2)": "O(n^2)",
             "O(n²)": "O(n^2)", "O(N + M log N)": "O(n log n)", "O(n*m)": "O(n^2)", "Θ(1)": "O(1)",
             "O(log n)": "O(log n)", "O(2^n)": "O(2^n)", "O(n^2 log n)": "O(n^2 log n)", "O(n^3)": "O(n^3)",
             "first O(n^2), finally O(n)": "O(n)", "no idea": None, "O(n q)": "O(n^2)"}
    for text, want in cases.items():
        assert complexity.parse_complexity(text) == want, text


def test_fit_recovers_synthetic_classes_with_noise():
    rng = random.Random(0)
    sizes = [64 * 2 ** k for k in range(12)]
    for name, log_f in complexity.COMPLEXITY_CLASSES[2:7]:
        scale = 1e-3 / math.exp(log_f(sizes[6]))   # 1 ms at the middle size
        times = [scale * math.exp(log_f(n)) * (1 + 0.1 * rng.uniform(-1, 1)) for n in sizes]
        fit = complexity.fit_complexity(sizes, times)
        assert name in fit["candidates"] and len(fit["candidates"]) <= 2, (name, fit)
        assert fit["complexity"] in (name, *fit["candidates"])


def test_fast_measurement_separates_quadratic_from_linear_and_caches():
    problem = toy("pair_sum")
    linear, quadratic = (s["code"] for s in problem["solutions"])
    t0 = time.time()
    fast_lin = cj.cached_complexity(problem, linear, fast=True)
    fast_quad = cj.cached_complexity(problem, quadratic, fast=True)
    first = time.time() - t0
    assert fast_lin["meets_optimal"] is True and fast_quad["meets_optimal"] is False, (fast_lin, fast_quad)
    # far from the line: stopped on the reference's clock at a size the reference finished, or
    # (when it finished everything) far more than RATIO_LIMIT slower
    m = fast_quad["measured"]
    assert m["unfinished"] or m["ratio_to_reference"] > 3 * cj.RATIO_LIMIT, m
    t0 = time.time()
    assert cj.cached_complexity(problem, quadratic, fast=True) is fast_quad
    assert time.time() - t0 < 0.05 < first


def test_fast_because_wrong_gets_no_time_reward():
    problem = toy("pair_sum")
    # right on the small tests, wrong on large inputs (gives up beyond 100 elements)
    cheat = problem["solutions"][0]["code"].replace("for x in a:", "for x in a[:100]:")
    c = cj.judge_complexity(problem, cheat, fast=True)
    assert c["measured"]["outputs_match_reference"] is False and c["meets_optimal"] is False


class _ChatHandler(FakeHandler):
    requests = []

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _ChatHandler.requests.append((self.path, body, self.headers.get("Authorization")))
        reply = {"choices": [{"message": {"role": "assistant", "content": '{"complexity": "O(N log N)"}'}}]}
        data = json.dumps(reply).encode()
        self.reply(data)



def test_model_complexity_judge_over_openai_compatible_http(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "k")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _ChatHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        problem = toy("min_diff")
        url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        label, raw = cj.model_complexity(problem, problem["reference_solution"], endpoint=url, model="judge")
        assert label == "O(n log n)" and "O(N log N)" in raw
        path, body, auth = _ChatHandler.requests[-1]
        assert path == "/v1/chat/completions" and body["model"] == "judge" and auth == "Bearer k"
        assert complexity.strip_comments_and_strings(problem["reference_solution"]) in body["messages"][0]["content"]
    finally:
        server.shutdown()
    # the callable path (this project's model through generate); no input_generator -> the model decides
    bare = dict(problem, input_generator=None)
    c = cj.judge_complexity(bare, "x", model_judge=lambda p, code: cj.model_complexity(
        p, code, generate=lambda _: '{"complexity": "O(n^2)"}')[0])
    assert c["complexity"] == "O(n^2)" and c["meets_optimal"] is False
    c = cj.judge_complexity(bare, "x", model_judge=lambda p, code: "O(n)")
    assert c["meets_optimal"] is True


# ----------------------------------------------------------------------------- gated reward

def response(code, reasoning="Hash map, O(n)."):
    # what the model writes after the generation prompt "<|im_start|>assistant\n": it opens <think> itself
    return f"<think>\n{reasoning}\n</think>\n\n```python\n{code}\n```"


def test_format_check():
    good = response("print(1)")
    assert cj.format_ok(good)
    assert not cj.format_ok(good, truncated=True)
    assert not cj.format_ok("```python\nprint(1)\n```")                       # no reasoning layout
    assert not cj.format_ok(good + "\n```python\nprint(2)\n```")              # two blocks
    assert not cj.format_ok(response("print(1)").replace("```python", "```cpp"))
    assert not cj.format_ok("<think>\n\n</think>\n\n```python\nprint(1)\n```")  # empty reasoning
    assert not cj.format_ok(good.removeprefix("<think>"))                     # the model did not open <think>
    assert not cj.format_ok("<think>\n" + good)                               # opened twice
    assert cj.extract_code(good + "\n```python\nprint(2)\n```") == "print(2)\n"
    assert cj.format_ok("plain code", require_think=False)


def test_gated_reward_components():
    problem = toy("pair_sum")
    fast_code, slow_code = (s["code"] for s in problem["solutions"])
    r = cj.code_reward(problem, response(slow_code), stage="code1")
    assert (r["format"], r["correctness"], r["time"]) == (1.0, 1.0, 0.0) and r["complexity"] is None
    assert r["total"] == pytest.approx(0.1 + 1.0)
    r = cj.code_reward(problem, response(fast_code), stage="code2", w_time=0.5)
    assert r["time"] == 1.0 and r["meets_optimal"] is True and r["total"] == pytest.approx(1.6)
    r = cj.code_reward(problem, response(slow_code), stage="code2")
    assert r["time"] == 0.0 and r["meets_optimal"] is False and r["total"] == pytest.approx(1.1)
    # PassRate < 1: R_time is gated off and the complexity judge never runs
    wrong = fast_code.replace("print(r)", "print(r if n != 5 else r + 1)")
    r = cj.code_reward(problem, response(wrong), stage="code2")
    assert 0 < r["correctness"] < 1 and r["time"] == 0.0 and r["complexity"] is None
    assert r["total"] == pytest.approx(0.1 + r["correctness"])
    r = cj.code_reward(problem, response(fast_code), truncated=True, stage="code1")
    assert r["format"] == 0.0 and r["correctness"] == 1.0
    r = cj.code_reward(problem, "<think>\nI think the answer is 3.\n</think>\n\n3", stage="code2")
    assert r["total"] == 0.0 and r["verdicts"] == ["CE"] * r["total_tests"]
    batch = cj.code_rewards([problem] * 3, [response(fast_code), response(slow_code), "x"], stage="code1")
    assert [b["correctness"] for b in batch] == [1.0, 1.0, 0.0]
    with pytest.raises(ValueError, match="stage"):
        cj.code_reward(problem, "x", stage="code3")


# ----------------------------------------------------------------------------- command line

def run_cli(*args, stdin=None):
    return subprocess.run([sys.executable, os.path.join(ROOT, "code_judge.py"), *args], input=stdin,
                          capture_output=True, text=True, timeout=120, cwd=ROOT)


def test_cli_shape_markdown_from_stdin_and_errors(tmp_path):
    problem = toy("inversions")
    path = tmp_path / "p.json"
    path.write_text(json.dumps(problem))
    out = run_cli("--problem", str(path), "--code", "-", "--json", "--complexity", "--fast",
                  stdin="Here you go:\n```python\n" + problem["reference_solution"] + "\n```\n")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert set(result) >= {"passed", "total", "pass_rate", "verdicts", "complexity", "meets_optimal", "sandbox", "reward"}
    assert result["pass_rate"] == 1.0 and result["meets_optimal"] is True
    assert set(result["reward"]) == {"format", "correctness", "time", "total"} and result["reward"]["time"] == 1.0
    wrong = tmp_path / "w.py"
    wrong.write_text("print(0)\n")
    out = run_cli("--problem", TOY, "--id", problem["question_id"], "--code", str(wrong), "--json")
    assert out.returncode == 0 and json.loads(out.stdout)["pass_rate"] < 1      # a failing solution is a result
    out = run_cli("--problem", str(tmp_path / "nope.json"), "--code", str(wrong), "--json")
    assert out.returncode != 0 and "nope.json" in out.stderr
    out = run_cli("--problem", str(path), "--code", str(wrong), "--lang", "cobol", "--json")
    assert out.returncode != 0 and "cobol" in out.stderr and str(path) in out.stderr
    out = run_cli("--problem", TOY, "--code", str(wrong), "--json")
    assert out.returncode != 0 and "--id" in out.stderr
