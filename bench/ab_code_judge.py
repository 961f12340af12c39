"""A/B benchmark of code_judge.py against an earlier revision of itself: is the sandbox any slower?

Both versions are loaded side by side in one process (the old one from `git show REV:code_judge.py`)
and judged in interleaved rounds, so machine load hits both alike; a bare `python -I -S` run of
the same program is timed in every round as the reference point. Per round: 40 judge calls with
one test each (one sandbox per call), then 4 calls with 50 tests each (the batched rate).

Run:
    python bench/ab_code_judge.py                         # bwrap (or the best backend), against 3af38d3
    python bench/ab_code_judge.py --rev HEAD~3 --backend unshare --rounds 12
Prints the medians and the ratio new / old; > 1 means the working tree is faster.
"""
import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from nanbeige41 import lcb  # noqa: E402  (the problem format; the same for both revisions)

CODE = "n=int(input())\na=list(map(int,input().split()))\nprint(sum(a))\n"
TEST = {"input": "3\n1 2 3\n", "output": "6", "testtype": "stdin"}


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rev", default="3af38d3", help="the old revision (default: before the issue-12 hardening)")
    p.add_argument("--backend", default="bwrap", help="bwrap, unshare or none")
    p.add_argument("--rounds", type=int, default=12)
    args = p.parse_args()
    old_source = subprocess.run(["git", "-C", ROOT, "show", f"{args.rev}:code_judge.py"], check=True,
                                capture_output=True, text=True).stdout
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(old_source)
    versions = {"old": load(f.name, "code_judge_old"), "new": load(os.path.join(ROOT, "code_judge.py"), "code_judge_new")}
    os.unlink(f.name)
    rates = {tag: {"single": [], "batch": []} for tag in versions}
    bare, python = [], os.path.realpath(sys.executable)
    for rnd in range(args.rounds):
        for tag in (("old", "new") if rnd % 2 == 0 else ("new", "old")):
            cj = versions[tag]
            one = lcb.normalize_problem({"question_id": "ab", "public_test_cases": [TEST]})
            fifty = lcb.normalize_problem({"question_id": "ab", "public_test_cases": [TEST] * 50})
            t0 = time.perf_counter()
            for _ in range(40):
                assert cj.judge(one, CODE, isolation=args.backend)["verdicts"] == ["AC"]
            rates[tag]["single"].append(40 / (time.perf_counter() - t0))
            t0 = time.perf_counter()
            for _ in range(4):
                assert cj.judge(fifty, CODE, isolation=args.backend)["passed"] == 50
            rates[tag]["batch"].append(200 / (time.perf_counter() - t0))
        t0 = time.perf_counter()
        for _ in range(40):
            subprocess.run([python, "-I", "-S", "-c", CODE], input=TEST["input"].encode(), capture_output=True)
        bare.append(40 / (time.perf_counter() - t0))
    backend = versions["new"].isolation_backend(args.backend)
    print(f"machine: {os.cpu_count()} cores, backend {backend}, {args.rounds} rounds, old = {args.rev}")
    for kind, label in (("single", "one test per sandbox"), ("batch", "50 tests per sandbox")):
        old, new = statistics.median(rates["old"][kind]), statistics.median(rates["new"][kind])
        print(f"{label:22s} old {old:7.1f}/s  new {new:7.1f}/s  new/old {new / old:.3f}")
    print(f"bare python            {statistics.median(bare):7.1f}/s")


if __name__ == "__main__":
    main()
