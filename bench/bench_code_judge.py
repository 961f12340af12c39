"""Benchmark of code_judge.py (issue 3): sandbox overhead and complexity-classification accuracy.

1. Executions per second of a trivial correct Python solution judged with all isolation on, against a
   bare `subprocess.run([python, "-I", "-S", "-c", code])` of the same program in the same run,
   sequentially and with one worker per core; the ratio sandboxed / bare is the figure of merit
   (goal >= 0.7). Also the batched rate: many tests in one sandboxed process.
2. Complexity judge on the project's labelled set (nanbeige41/toy_code.py: every solution of one
   train instance per family carries a complexity label): exact-class accuracy of the measured
   class, accuracy up to the O(n)/O(n log n) ambiguity the judge reports, and the accuracy of
   meets_optimal (what the code2 reward uses), in the full and the fast setting.

Run:
    python bench/bench_code_judge.py                      # everything (~3 min on 2 cores)
    python bench/bench_code_judge.py --skip-complexity --execs 200
    python bench/bench_code_judge.py --out bench_code_judge.json
Numbers depend on the machine and its load; run it on an idle machine for reported figures.
"""
import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
import code_judge as cj  # noqa: E402
from nanbeige41 import complexity, lcb, sandbox
from nanbeige41 import toy_code as tc  # noqa: E402

CODE = "n=int(input())\na=list(map(int,input().split()))\nprint(sum(a))\n"
TEST = {"input": "3\n1 2 3\n", "output": "6", "testtype": "stdin"}


def rate(fn, count, workers):
    t0 = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(lambda _: fn(), range(count)))
    return count / (time.perf_counter() - t0)


def bench_execs(count, backends):
    python = os.path.realpath(sys.executable)
    problem = lcb.normalize_problem({"question_id": "bench", "public_test_cases": [TEST]})

    def bare():
        r = subprocess.run([python, "-I", "-S", "-c", CODE], input=TEST["input"].encode(), capture_output=True)
        assert r.stdout.strip() == b"6"

    rows = []
    workers = os.cpu_count() or 1
    for backend in backends:
        def sandboxed():
            assert cj.judge(problem, CODE, isolation=backend)["verdicts"] == ["AC"]
        sandboxed()  # probe and warm caches outside the timing
        for label, w in (("sequential", 1), (f"parallel x{workers}", workers)):
            # interleave bare and sandboxed halves so machine load affects both alike
            b1, s1 = rate(bare, count // 2, w), rate(sandboxed, count // 2, w)
            s2, b2 = rate(sandboxed, count // 2, w), rate(bare, count // 2, w)
            b, s = (b1 + b2) / 2, (s1 + s2) / 2
            rows.append({"backend": backend, "mode": label, "bare_per_s": round(b, 1),
                         "sandboxed_per_s": round(s, 1), "ratio": round(s / b, 3)})
            print(f"{backend:8s} {label:12s} bare {b:7.1f}/s  sandboxed {s:7.1f}/s  ratio {s / b:.2f}", flush=True)
        many = lcb.normalize_problem({"question_id": "bench", "public_test_cases": [TEST] * 50})
        t0 = time.perf_counter()
        assert cj.judge(many, CODE, isolation=backend)["passed"] == 50
        per_s = 50 / (time.perf_counter() - t0)
        rows.append({"backend": backend, "mode": "batched 50 tests/process", "sandboxed_per_s": round(per_s, 1)})
        print(f"{backend:8s} batched      {per_s:7.1f} tests/s (50 tests in one sandboxed process)", flush=True)
    return rows


def bench_complexity(fast):
    firsts = {}
    for p in tc.make_problems():
        if p["split"] == "train":
            firsts.setdefault(p["family"], p)
    rows = []
    t0 = time.perf_counter()
    for family, p in firsts.items():
        for s in p["solutions"]:
            c = cj.judge_complexity(p, s["code"], fast=fast)
            m = c["measured"]
            want_meets = complexity.CLASS_RANK[s["complexity"]] <= complexity.CLASS_RANK[p["optimal_complexity"]]
            rows.append({"family": family, "label": s["complexity"], "measured": m["complexity"],
                         "candidates": m["candidates"], "ratio": m["ratio_to_reference"],
                         "exact": m["complexity"] == s["complexity"],
                         "within_candidates": s["complexity"] in m["candidates"],
                         "meets_ok": c["meets_optimal"] == want_meets})
            print(f"  {family:13s} {s['complexity']:11s} -> {m['complexity']:12s} cand={m['candidates']} "
                  f"ratio={m['ratio_to_reference']} meets={c['meets_optimal']}", flush=True)
    n = len(rows)
    summary = {"setting": "fast" if fast else "full", "solutions": n,
               "exact_accuracy": round(sum(r["exact"] for r in rows) / n, 3),
               "within_candidates": round(sum(r["within_candidates"] for r in rows) / n, 3),
               "meets_optimal_accuracy": round(sum(r["meets_ok"] for r in rows) / n, 3),
               "quadratic_separated": all(r["meets_ok"] for r in rows if r["label"] in ("O(n^2)", "O(n)")),
               "seconds": round(time.perf_counter() - t0, 1)}
    print(json.dumps(summary), flush=True)
    return summary, rows


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--execs", type=int, default=120, help="executions per timing (split in interleaved halves)")
    p.add_argument("--skip-complexity", action="store_true")
    p.add_argument("--out", default=None, help="write all figures as JSON here")
    args = p.parse_args()
    backends = [b for b in ("bwrap", "unshare") if sandbox.isolation_backend(b) == b] or ["none"]
    print(f"machine: {os.cpu_count()} cores, python {sys.version.split()[0]}, backends {backends}")
    result = {"execs": bench_execs(args.execs, backends)}
    if not args.skip_complexity:
        for fast in (True, False):
            print(f"complexity judge, {'fast' if fast else 'full'} setting:")
            summary, rows = bench_complexity(fast)
            result["complexity_" + summary["setting"]] = {"summary": summary, "rows": rows}
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
