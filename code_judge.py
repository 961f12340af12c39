"""code_judge.py: the sandboxed code judge of Nanbeige4.1-3B (paper section 2.3, Figure 3, Appendix C).

The paper's "unified judge system" is shared by SFT data filtering, RL data construction, code RL
(stages code1 and code2) and evaluation. This file implements it for this project:

  * problems in the LiveCodeBench layout, real LCB dumps included (nanbeige41/lcb.py: `load_problems`,
    private tests decoded with a pickle loader that refuses every global);
  * per-test verdicts AC/WA/TLE/MLE/RE/OLE/CE for stdin programs (Python, C++ via g++) and LeetCode-style
    functional tests (`judge`, `judge_many`), run in the sandbox (nanbeige41/sandbox.py: bubblewrap or
    unshare namespaces, a read-only system view, a private tmpfs, an unprivileged uid, rlimits, wall-clock
    kills) and compared here with LiveCodeBench's rules;
  * the time-complexity judge (`measure_complexity`, `model_complexity`, `judge_complexity`): measured on
    generated inputs of growing size against the reference solution, and fitted to O(1)..O(2^n)
    (nanbeige41/complexity.py), plus an "instruct judge model" over any OpenAI-compatible endpoint (or a
    callable), compared against `optimal_complexity`;
  * the gated reward of section 2.3.3 (`code_reward`, the one reward path: GRPO, the CLI and the tests):
        R = R_format + R_correctness            if PassRate < 1
        R = R_format + R_correctness + R_time   if PassRate = 1
    with weights as arguments and every component returned, so training can log them (Figure 4).

The design rule that defeats known reward hacks: the child never holds an expected output. It gets
test inputs only and prints results (functional tests: the returned value re-serialised through the
exact base types, so a lying __eq__/__repr__ or an int subclass cannot pass); this process compares.
A verdict never depends on what the program says about itself (the sandbox's docstring says how).

What the reward pays for, and why it cannot be had for less (the README's security section lists
each attack class and its test):
  * a program cannot tell a timing run from a test run: one harness protocol for both, the same
    limits, and the forked child empties its copy of the harness state before the program runs;
  * R_time needs every size the reference finished, finished too, with the reference's outputs;
    the candidate runs on the reference's clock (killed at 2 * RATIO_LIMIT its time per size), so a
    program that crashes, stalls or sleeps on large inputs gets nothing and costs ~a second;
  * a reference in another language (Python for a C++ candidate) decides nothing about constants:
    the candidate's own growth (log-log slope at its largest sizes) is compared with the optimal class;
  * outputs compare as LiveCodeBench does (exact decimals: 1e+18 != 10^18 + 1), in linear time, a
    tolerance only for floats on both sides; any output the judge cannot parse is WA, never a crash;
  * input generators from a data file run in the sandbox; g++ runs under memory and time limits;
  * the model complexity judge sees the code without comments or strings, and its class comes from
    one JSON field of its answer.

Run:
    python code_judge.py --problem data/toy/code_problems.jsonl --id toy_pair_sum_000 --code sol.py --complexity --json
    echo "print(1)" | python code_judge.py --problem P.json --code - --json
    NANBEIGE_JUDGE_NO_BWRAP=1 python code_judge.py ...   # force the unshare fallback
    python -m pytest tests/test_code_judge*.py            # includes the hostile-program battery
    python bench/bench_code_judge.py                      # execs/s vs bare, complexity accuracy
Library (what training calls): code_reward / code_rewards (GRPO code1/code2), judge / judge_many (evaluation),
judge_complexity / cached_complexity.
Problem fields beyond LiveCodeBench's (all optional): input_generator (Python source of
gen(n, seed) -> str), reference_solution (Python) and reference_solutions ({"cpp": source, ...}),
optimal_complexity ("O(n log n)", ...).

Not covered: languages other than Python and C++; Python programs run with `-I -S` (no
site-packages, so no numpy inside solutions); measured complexity of stdin programs includes reading
the input, so nothing below O(n) is observable and O(1)/O(log n) cannot be separated; the measured
judge cannot reliably separate O(n) from O(n log n) and says so (`separable: false`), and in the
`fast` setting its class label is indicative only (meets_optimal there rests on the time ratio to the
reference, which separates O(n^2) from O(n) with a wide margin); a cgroup memory limit (RLIMIT_AS
counts virtual memory, an approximation of "memory"); seccomp filters. Without root the sandbox
degrades to rlimits only ("none"; refuse with require_full_isolation / --require-full-isolation).
"""
import argparse
import hashlib
import json
import os
import re
import sys
import threading
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

import numpy as np

from nanbeige41.cli import finite_float, non_negative_float, positive_float, positive_int
from nanbeige41.complexity import (CLASS_POWER, CLASS_RANK, NEXT_POWER, fit_complexity, growth_power,
                                   parse_complexity, strip_comments_and_strings)
from nanbeige41.openai_api import chat_completion
from nanbeige41.lcb import ProblemError, all_tests, load_problems, outputs_match, verdict_and_reason
from nanbeige41.sandbox import Limits, SandboxError, isolation_backend, run_tests, sandbox_features

VERDICTS = ("AC", "WA", "TLE", "MLE", "RE", "OLE", "CE")


# ----------------------------------------------------------------------------- verdicts

def verdict(run, test, float_tol=0.0):
    return verdict_and_reason(run, test, float_tol)[0]


def judge(problem, code, *, lang="python", limits=None, isolation="auto", require_full_isolation=False,
          float_tol=0.0, tests=None):
    """Run `code` on all (or the given) tests of `problem`: dict(passed, total, pass_rate, verdicts, sandbox)."""
    tests = all_tests(problem) if tests is None else tests
    mode = "functional" if tests and tests[0]["testtype"] == "functional" else "stdin"
    runs, features = run_tests(code, [t["input"] for t in tests], lang=lang, mode=mode,
                               func_name=problem.get("metadata", {}).get("func_name"), limits=limits,
                               isolation=isolation, require_full_isolation=require_full_isolation)
    checked = [verdict_and_reason(r, t, float_tol) for r, t in zip(runs, tests)]
    verdicts = [v for v, _ in checked]
    passed = verdicts.count("AC")
    return {"passed": passed, "total": len(tests), "pass_rate": passed / max(1, len(tests)),
            "verdicts": verdicts, "sandbox": features, "details": [reason for _, reason in checked]}


def judge_many(problem_code_pairs, *, workers=None, **kw):
    """Judge many (problem, code) pairs, one sandbox per candidate, in parallel across cores."""
    workers = workers or os.cpu_count() or 1
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(lambda pc: judge(pc[0], pc[1], **kw), problem_code_pairs))


# ----------------------------------------------------------------------------- time complexity



@dataclass
class MeasureConfig:
    n0: int = 16
    step: int = 2
    n_max: int = 1 << 17
    reps: int = 3
    budget_s: float = 0.5   # stop growing n after a size that took longer than this
    time_s: float = 10.0    # kill limit per size


FULL = MeasureConfig(n_max=1 << 16, budget_s=0.3)
FAST = MeasureConfig(n0=64, step=4, n_max=1 << 14, reps=2, budget_s=0.12, time_s=1.0)


def _sizes(config):
    sizes, n = [], config.n0
    while n <= config.n_max:
        sizes.append(n)
        n *= config.step
    return sizes


# Runs inside the sandbox after the problem's generator source: the generator comes from a data
# file, and a data file is as untrusted as a model's code (it used to be exec-ed here, as root).
GENERATOR_DRIVER = """
import sys as _sys
_n, _seed = map(int, _sys.stdin.read().split())
_text = gen(_n, _seed)
if type(_text) is not str:
    raise TypeError("gen(n, seed) must return a str")
_sys.stdout.write(_text)
"""
GENERATOR_LIMITS = Limits(time_s=20.0, output_bytes=64 << 20)
_INPUT_CACHE = OrderedDict()
_INPUT_LOCK = threading.Lock()


def generated_inputs(problem, sizes, seed, isolation="auto"):
    """gen(n, seed + k) for the k-th size, from the problem's `input_generator`, run in the sandbox.
    Cached by (generator, sizes, seed): the reference and every candidate see the same inputs.
    A generator that fails is the data's fault: ProblemError naming the problem and the size."""
    source = problem["input_generator"]
    key = (hashlib.sha256(source.encode()).hexdigest(), tuple(sizes), seed)
    with _INPUT_LOCK:  # held while generating: the G rollouts of one problem generate once
        if key in _INPUT_CACHE:
            _INPUT_CACHE.move_to_end(key)
            return _INPUT_CACHE[key]
        runs, _ = run_tests(source + GENERATOR_DRIVER, [f"{n} {seed + k}" for k, n in enumerate(sizes)],
                            limits=GENERATOR_LIMITS, isolation=isolation)
        for n, r in zip(sizes, runs):
            if r.status != "ok":
                raise ProblemError(f"problem {problem['question_id']}: field 'input_generator' failed for n={n} "
                                   f"({r.status} {r.detail})".rstrip())
        inputs = [r.output for r in runs]
        _INPUT_CACHE[key] = inputs
        while len(_INPUT_CACHE) > 64:
            _INPUT_CACHE.popitem(last=False)
        return inputs


_TIMING_LOCK = threading.Lock()  # timing runs of this process never overlap: they would skew each other


def _timed_runs(code, lang, inputs, config, limits, isolation, time_limits=None):
    """`config.reps` lockstep runs of `code` on `inputs` (a warm-up input, then growing sizes), each
    in a fresh process. Without `time_limits` (the reference) a run stops after the first size over
    config.budget_s and later repetitions run only the sizes the first one finished; with them (a
    candidate, on the reference's clock) every input runs under its own kill limit and no budget.
    Returns (fastest seconds per input or None, output per input, first failure per input or None)."""
    with _TIMING_LOCK:
        best, outputs, failed = [None] * len(inputs), [None] * len(inputs), [None] * len(inputs)
        todo = list(inputs)
        for _ in range(config.reps):
            runs, _ = run_tests(code, todo, lang=lang, limits=limits, isolation=isolation, lockstep=True,
                                stop_after_s=config.budget_s if time_limits is None else None,
                                time_limits=None if time_limits is None else time_limits[:len(todo)])
            for k, r in enumerate(runs):
                if r.status == "ok":
                    best[k] = r.seconds if best[k] is None else min(best[k], r.seconds)
                    outputs[k] = r.output
                elif r.status != "SKIP" and failed[k] is None:
                    failed[k] = f"{r.status} {r.detail}".strip()
            if any(failed):
                break  # a failure decides; more repetitions would only hold the timing lock longer
            last_ok = max([k for k, b in enumerate(best) if b is not None], default=0)
            todo = todo[: last_ok + 1]
        return best, outputs, failed


def _fit_times(best):
    """Raw per-size times -> the times the fit uses. Run time cannot shrink as n grows: a running
    minimum from the right removes the upward outliers that a loaded machine puts on small sizes
    (they would dominate a log-space fit); the fastest size is the fixed per-test cost (harness,
    pipe, wake-up) and is subtracted."""
    best = list(best)
    for k in range(len(best) - 2, -1, -1):
        if best[k] is not None and best[k + 1] is not None:
            best[k] = min(best[k], best[k + 1])
    offset = min([b for b in best if b is not None], default=0.0)
    return [None if b is None else max(b - offset, 1e-7) for b in best]


# Measured on the toy set (fast setting, loaded 2-core machine, several runs): identical code runs
# up to 3.6x the cached reference (noise), O(n log n)-vs-O(n) pairs 1.5-8.3x, O(n^2) ones >= 14x.
RATIO_LIMIT = 8.0
# A candidate runs each size under 2 * RATIO_LIMIT times the reference's time there, plus this slack
# for scheduling noise: slower than that it has failed the ratio rule anyway, so it is stopped (a
# program that sleeps in every timed size costs about a second, not minutes of the timing lock).
CLOCK_SLACK_S = 0.25
WARMUP_FLOOR_S = 0.5

_REFERENCE_CACHE = OrderedDict()
_REFERENCE_LOCK = threading.Lock()


def reference_for(problem, lang):
    """(source, language) of the reference to time a `lang` candidate against: the one in the
    candidate's language when the problem has it (`reference_solutions: {"cpp": ...}`), else the
    Python `reference_solution`; (None, None) without any."""
    refs = problem.get("reference_solutions") or {}
    if refs.get(lang):
        return refs[lang], lang
    if refs.get("python") or problem.get("reference_solution"):
        return refs.get("python") or problem["reference_solution"], "python"
    return None, None


def measure_complexity(problem, code, *, lang="python", fast=False, isolation="auto", seed=1234, limits=None):
    """Measured time complexity of `code` on `problem["input_generator"]` inputs (see fit_complexity),
    against the reference solution run on the same inputs. The rules that make it hard to game:

      * every size the reference finished, the candidate must finish too, with the reference's
        outputs: a crash, timeout or kill there is listed in `unfinished` and fails R_time (a
        program that gives up on large inputs is not fast);
      * the candidate runs on the reference's clock (2 * RATIO_LIMIT times its time per size);
      * same language: the time ratio at the largest size decides (rule "ratio"); a reference in
        another language says nothing about constants (C++ vs Python), so the fit decides (rule "fit");
      * the program sees the same limits and the same harness as in its test runs.
    Raises ProblemError when the generator itself fails."""
    if not problem.get("input_generator"):
        return None
    config = FAST if fast else FULL
    limits = replace(limits or Limits(), stop_after_tle=True)
    sizes = _sizes(config)
    inputs = generated_inputs(problem, [1] + sizes, seed, isolation)   # a warm-up input, then the sizes
    ref_code, ref_lang = reference_for(problem, lang)
    ref_best = ref_outputs = None
    if ref_code:
        key = (problem["question_id"], hashlib.sha256(ref_code.encode()).hexdigest(), ref_lang, fast, seed,
               limits.memory_mb)
        with _REFERENCE_LOCK:  # parallel candidates of one problem measure its reference once
            if key not in _REFERENCE_CACHE:
                _REFERENCE_CACHE[key] = _timed_runs(ref_code, ref_lang, inputs, config, limits, isolation)[:2]
                while len(_REFERENCE_CACHE) > 256:
                    _REFERENCE_CACHE.popitem(last=False)
            ref_best, ref_outputs = _REFERENCE_CACHE[key]
    if ref_best is None:
        best, outputs, failed = _timed_runs(code, lang, inputs, config, limits, isolation)
    else:
        upto = 1 + max([k for k, b in enumerate(ref_best) if b is not None], default=0)
        clock = [min(config.time_s, max(WARMUP_FLOOR_S, 10 * (ref_best[0] or 0.0)))]
        clock += [min(config.time_s, 2 * RATIO_LIMIT * ref_best[k] + CLOCK_SLACK_S) for k in range(1, upto)]
        best, outputs, failed = _timed_runs(code, lang, inputs[:upto], config, limits, isolation, clock)
        pad = len(inputs) - upto
        best, outputs, failed = best + [None] * pad, outputs + [None] * pad, failed + [None] * pad
    times = _fit_times(best[1:])
    fit = fit_complexity(sizes, times)
    names = ["warm-up"] + [f"n={n}" for n in sizes]
    result = dict(fit, sizes=sizes, seconds=[None if t is None else round(t, 6) for t in times],
                  ratio_to_reference=None, outputs_match_reference=None, reference_language=ref_lang,
                  rule=None, fit_complexity=fit["complexity"], growth_power=growth_power(sizes, times),
                  unfinished=[f"{names[k]}: {failed[k] or 'not finished'}" for k in range(len(inputs))
                              if ref_best is not None and ref_best[k] is not None and best[k] is None])
    if ref_best is None:
        return _inseparable(result, fit)
    ref_times = _fit_times(ref_best[1:])
    ref_outputs = ref_outputs[1:]
    outputs = outputs[1:]
    common = [k for k in range(len(sizes)) if times[k] is not None and ref_times[k] is not None]
    if common:
        k = common[-1]
        result["ratio_to_reference"] = round(times[k] / max(ref_times[k], 5e-5), 3)
        result["ratio_size"] = sizes[k]
    # A ratio just above the limit is where load noise could flip the verdict: measure both once
    # more and keep the smaller ratio (a real O(n^2)-vs-O(n) gap stays far above).
    ratio = result["ratio_to_reference"]
    if ref_lang == lang and ratio is not None and RATIO_LIMIT < ratio < 4 * RATIO_LIMIT and not result["unfinished"]:
        upto = len(clock)
        again = _fit_times(_timed_runs(code, lang, inputs[:upto], config, limits, isolation, clock)[0][1:])
        ref_again = _fit_times(_timed_runs(ref_code, ref_lang, inputs[:upto], config, limits, isolation)[0][1:])
        k = common[-1]
        if again[k] is not None and ref_again[k] is not None:
            result["ratio_to_reference"] = round(min(ratio, again[k] / max(ref_again[k], 5e-5)), 3)
            result["remeasured"] = True
    # every size the candidate finished must agree with the reference
    checked = [k for k in range(len(sizes)) if outputs[k] is not None and ref_outputs[k] is not None]
    result["outputs_match_reference"] = bool(checked) and all(
        outputs_match(outputs[k], ref_outputs[k]) for k in checked)
    # growth of the candidate beyond the reference on the sizes both measured above the floor
    both = [k for k in common if times[k] > 5e-5 and ref_times[k] > 5e-5]
    if len(both) >= 2 and sizes[both[-1]] >= 4 * sizes[both[0]]:
        log_n = np.log([sizes[k] for k in both])
        log_ratio = np.log([times[k] / ref_times[k] for k in both])
        result["excess_slope"] = round(float(np.polyfit(log_n, log_ratio, 1)[0]), 3)
    optimal = parse_complexity(problem.get("optimal_complexity") or "")
    ratio = result["ratio_to_reference"]
    result["rule"] = "ratio" if ref_lang == lang else "fit"
    if result["rule"] == "ratio" and optimal is not None and ratio is not None:
        # Class relative to the reference. CPython's per-element cost grows with n (caches, big
        # lists), so on its own a linear program often fits O(n log n) and noise moves fits by a log
        # factor either way; the reference is optimal by construction and runs on the same inputs.
        # Within RATIO_LIMIT of it, the candidate is in the optimal class (as far as timing can
        # tell); far slower, it is in the fitted class but at least one power of n above optimal.
        if ratio <= RATIO_LIMIT and not result["unfinished"]:
            result["complexity"] = optimal
            result["candidates"] = [optimal]
            result["separable"] = True
            result["confidence"] = max(result["confidence"], 0.5)  # the reference comparison decided
        else:
            floor = NEXT_POWER[optimal]
            result["complexity"] = max(fit["complexity"], floor, key=CLASS_RANK.get)
            result["candidates"] = sorted({max(c, floor, key=CLASS_RANK.get) for c in fit["candidates"]},
                                          key=CLASS_RANK.get)
            result["separable"] = len(result["candidates"]) == 1
    return _inseparable(result, fit)


def _inseparable(result, fit):
    if result["complexity"] in ("O(n)", "O(n log n)") and (result["confidence"] < 0.5 or fit["points"] < 4):
        # the hard pair (BigO(Bench)): say so rather than pretend
        result["separable"] = False
        result["candidates"] = sorted(set(result["candidates"]) | {"O(n)", "O(n log n)"}, key=CLASS_RANK.get)
    return result


COMPLEXITY_PROMPT = """What is the worst-case time complexity of this solution, in terms of the input size n?
Judge the code itself (comments and string contents were removed). Answer with one JSON object and
nothing else: {{"complexity": "O(...)"}}, one big-O expression such as O(n), O(n log n) or O(n^2).

Problem:
{problem}

Solution:
```{lang}
{code}
```"""


def model_complexity(problem, code, *, lang="python", endpoint=None, model="default", generate=None,
                     api_key_env="OPENAI_API_KEY", timeout=60):
    """The paper's instruct judge model: ask a language model for the complexity and parse the class.

    `generate`: a callable prompt -> text (e.g. this project's model through nanbeige41.generate), or
    `endpoint`: base URL of an OpenAI-compatible server (POST {endpoint}/chat/completions).
    The model sees the code without comments and string contents (strip_comments_and_strings) and
    must answer {"complexity": "O(...)"}; the class comes from that field only (parse_answer), so
    neither the program nor the free text around an answer can choose it.
    Returns (class or None, raw answer)."""
    visible = strip_comments_and_strings(code, lang)
    if visible is None:
        return None, "code does not tokenize: not shown to the model"
    prompt = COMPLEXITY_PROMPT.format(problem=problem.get("question_content", "")[:4000], lang=lang, code=visible)
    if generate is not None:
        answer = generate(prompt)
    else:
        choice = chat_completion(endpoint, model, [{"role": "user", "content": prompt}], api_key_env=api_key_env,
                                 what="complexity judge", http={"timeout_s": timeout}, temperature=0.0, max_tokens=64)
        answer = choice["message"].get("content") or ""
    return parse_answer(answer), answer


def parse_answer(answer):
    """The model judge's class: the answer must be one JSON object (a ```json fence allowed) whose
    "complexity" field is exactly one big-O expression. Anything else is no answer (None)."""
    if not isinstance(answer, str):
        return None
    text = re.sub(r"^```(?:json)?\s*|\s*```$", "", answer.strip())
    try:
        obj = json.loads(text)
    except ValueError:
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("complexity"), str):
        return None
    return parse_complexity(obj["complexity"], strict=True)




def judge_complexity(problem, code, *, lang="python", measured=True, fast=False, model_judge=None,
                     isolation="auto", limits=None):
    """Combine the measured and the model signals and compare with `optimal_complexity`.

    With a measured reference, the measurement decides meets_optimal: every size the reference
    finished done too, with its outputs, and (same language) no more than RATIO_LIMIT times slower
    at the largest size, or (other language) a fitted class no worse than optimal. Without one,
    the measured class stands when the fit separates it; when it cannot (e.g. O(n) vs O(n log n))
    and the model names one of the fitted candidates, the model decides; with no measurement at
    all (no input generator: every real LiveCodeBench row) the model's class is used, from code it
    saw without comments or strings. `model_judge`: None or a callable (problem, code) -> class."""
    result = {"complexity": None, "measured": None, "model": None, "meets_optimal": None, "error": None}
    if measured and problem.get("input_generator"):
        try:
            result["measured"] = measure_complexity(problem, code, lang=lang, fast=fast, isolation=isolation,
                                                    limits=limits)
        except ProblemError as e:  # the data's fault (its generator failed): no measured signal
            result["error"] = str(e)
    if model_judge is not None:
        result["model"] = model_judge(problem, code)
    m, model = result["measured"], result["model"]
    candidates = None
    if m is not None:
        result["complexity"] = m["complexity"]
        candidates = m["candidates"]
        if not m["separable"] and model in candidates:
            result["complexity"] = model
    elif model is not None:
        result["complexity"] = model
        candidates = [model]
    optimal = parse_complexity(problem.get("optimal_complexity") or "")
    if m is not None and m["unfinished"]:
        result["meets_optimal"] = False  # gave up (crashed, timed out) on a size the reference finished
    elif m is not None and m["rule"] == "ratio" and m["ratio_to_reference"] is not None:
        # Against the measured reference: same answers on the large inputs and no more than
        # RATIO_LIMIT times slower at the largest common size (the slope of that ratio, reported
        # as excess_slope, was too noisy here to decide on: 0.4 for identical code, 0.56 for O(n^2)).
        result["meets_optimal"] = m["outputs_match_reference"] is True and m["ratio_to_reference"] <= RATIO_LIMIT
    elif m is not None and m["rule"] == "fit" and optimal is not None:
        # A reference in another language says nothing about the candidate's constants (C++ vs
        # Python), so the candidate's own growth decides: its log-log slope over its slowest
        # sizes (growth_power), against the optimal class's power of n (a stdin program reads its input:
        # power 1 is its floor), with 0.4 of margin for noise (C++ O(n^2) on pair_sum measured
        # 1.9-2.2 on a loaded machine; O(n) never reaches 1 ms: no slope at all).
        bound = max(CLASS_POWER[optimal], 1.0) + 0.4
        result["meets_optimal"] = (m["outputs_match_reference"] is True
                                   and (m["growth_power"] is None or m["growth_power"] <= bound))
    elif result["complexity"] is not None and optimal is not None:
        meets = min(CLASS_RANK[c] for c in candidates) <= CLASS_RANK[optimal]
        if m is not None and m["outputs_match_reference"] is False:
            meets = False
        result["meets_optimal"] = bool(meets)
    return result


# ----------------------------------------------------------------------------- gated reward

FENCE = re.compile(r"```([A-Za-z0-9_+-]*)[ \t]*\n(.*?)```", re.S)
LANG_TAGS = {"python": ("python", "py", "python3"), "cpp": ("cpp", "c++", "cc", "cxx")}


def extract_code(text, lang="python"):
    """The last fenced block in the expected language (or an untagged one); plain code as is."""
    blocks = FENCE.findall(text)
    if not blocks:
        return None if "```" in text else text
    tagged = [body for tag, body in blocks if tag.lower() in LANG_TAGS[lang]]
    untagged = [body for tag, body in blocks if not tag]
    chosen = tagged or untagged
    return chosen[-1] if chosen else None


def format_ok(text, lang="python", *, truncated=False, require_think=True):
    """R_format: not truncated; if `require_think`, the text opens the think block itself ("<think>": the 4.1
    generation prompt ends at "<|im_start|>assistant\n") and closes it once, with reasoning inside;
    the answer holds exactly one fenced block, tagged with the expected language."""
    if truncated:
        return False
    answer = text
    if require_think:
        if not text.startswith("<think>") or text.count("<think>") != 1 or text.count("</think>") != 1:
            return False
        reasoning, answer = text.removeprefix("<think>").split("</think>")
        if not reasoning.strip():
            return False
    blocks = FENCE.findall(answer)
    if not require_think and "```" not in answer:
        return bool(answer.strip())  # plain source given to the CLI: nothing to check but non-empty
    return len(blocks) == 1 and blocks[0][0].lower() in LANG_TAGS[lang] and answer.count("```") == 2


_COMPLEXITY_CACHE = OrderedDict()
_CACHE_LOCK = threading.Lock()


def cached_complexity(problem, code, **kw):
    """judge_complexity memoised by (problem id, sha256 of code, options): the RL loop sees the same
    correct program many times, and measuring is the expensive part."""
    key = (problem["question_id"], hashlib.sha256(code.encode()).hexdigest(), kw.get("fast"), kw.get("lang"))
    with _CACHE_LOCK:
        if key in _COMPLEXITY_CACHE:
            _COMPLEXITY_CACHE.move_to_end(key)
            return _COMPLEXITY_CACHE[key]
    result = judge_complexity(problem, code, **kw)
    with _CACHE_LOCK:
        _COMPLEXITY_CACHE[key] = result
        while len(_COMPLEXITY_CACHE) > 4096:
            _COMPLEXITY_CACHE.popitem(last=False)
    return result


def code_reward(problem, text, *, stage="code2", truncated=False, require_think=True, w_format=0.1,
                w_correctness=1.0, w_time=0.5, complexity_judge="measured", model_judge=None, fast=True,
                lang="python", limits=None, isolation="auto", require_full_isolation=False, float_tol=0.0):
    """The section 2.3.3 reward of one generated assistant text, the one reward path: GRPO, the CLI and
    the tests use. `text` is everything after the generation prompt "<|im_start|>assistant\n", i.e.
    "<think>\n{reasoning}\n</think>\n\n{content}" (require_think=False: plain code or markdown, the CLI).

    stage "code1": R = w_format*R_format + w_correctness*PassRate (Stage 1);
    stage "code2": + w_time*R_time when PassRate = 1 (the gate of Figure 3). R_time is computed, and the
    complexity judge run at all, only then. complexity_judge: "measured" (the cheap `fast` setting by
    default, cached by (problem id, code hash)), "model" (`model_judge`, a callable (problem, code) ->
    class string), "both", or None (no R_time). Returns one flat dict: the reward (`total` and the raw
    components `format`, `correctness`, `time` in [0, 1]) and the judge's result (`passed`, `total_tests`,
    `pass_rate`, `verdicts`, `details`, `sandbox`, `complexity`, `meets_optimal`, `complexity_detail`)."""
    if stage not in ("code1", "code2"):
        raise ValueError(f"stage must be 'code1' or 'code2', got {stage!r}")
    if complexity_judge not in ("measured", "model", "both", None):
        raise ValueError(f"complexity_judge must be measured/model/both/None, got {complexity_judge!r}")
    use_model = complexity_judge in ("model", "both")
    if use_model and model_judge is None:
        raise ValueError("complexity_judge='model'/'both' needs model_judge=callable(problem, code)")
    r_format = float(format_ok(text, lang, truncated=truncated, require_think=require_think))
    answer = text.split("</think>")[-1] if require_think else text
    # a model response must put its program in a fenced block; plain text counts as code only on the CLI
    code = extract_code(answer, lang) if ("```" in answer or not require_think) else None
    if code is None or not code.strip():
        result = {"passed": 0, "total": len(all_tests(problem)), "pass_rate": 0.0,
                  "verdicts": ["CE"] * len(all_tests(problem)),
                  "sandbox": sandbox_features(isolation_backend(isolation)),
                  "details": ["no code block found"]}
    else:
        result = judge(problem, code, lang=lang, limits=limits, isolation=isolation,
                       require_full_isolation=require_full_isolation, float_tol=float_tol)
    complexity = {"complexity": None, "meets_optimal": None}
    detail, r_time = None, 0.0
    if stage == "code2" and complexity_judge is not None and result["pass_rate"] == 1.0:
        complexity = cached_complexity(problem, code, lang=lang, fast=fast,
                                       measured=complexity_judge in ("measured", "both"),
                                       model_judge=model_judge if use_model else None, isolation=isolation,
                                       limits=limits)
        detail, r_time = complexity, float(bool(complexity["meets_optimal"]))
    total = w_format * r_format + w_correctness * result["pass_rate"]
    if result["pass_rate"] == 1.0:  # the gate of Figure 3
        total += w_time * r_time
    return {"total": total, "format": r_format, "correctness": result["pass_rate"], "time": r_time,
            "pass_rate": result["pass_rate"], "passed": result["passed"], "total_tests": result["total"],
            "verdicts": result["verdicts"], "details": result["details"], "sandbox": result["sandbox"],
            "complexity": complexity["complexity"], "meets_optimal": complexity["meets_optimal"],
            "complexity_detail": detail}


def code_rewards(problems, responses, *, truncated=None, workers=None, **kw):
    """code_reward for a batch (problems[i] pairs with responses[i]), candidates in parallel.
    Correctness first for all, then the gated complexity measurement for the all-passed ones;
    with ~cpu_count workers, timing runs share the machine, which the ratio rule tolerates."""
    truncated = truncated or [False] * len(responses)
    if not (len(problems) == len(responses) == len(truncated)):
        raise ValueError(f"batch sizes differ: {len(problems)} problems, {len(responses)} responses, "
                         f"{len(truncated)} truncated flags")
    workers = workers or os.cpu_count() or 1
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(lambda i: code_reward(problems[i], responses[i], truncated=truncated[i], **kw),
                             range(len(responses))))


# ----------------------------------------------------------------------------- command line

def main(argv=None):
    p = argparse.ArgumentParser(description="Judge one solution against one problem (prints one JSON object).")
    p.add_argument("--problem", required=True, help="problem .json or .jsonl (LiveCodeBench layout)")
    p.add_argument("--id", default=None, help="question_id to pick when the file holds several problems")
    p.add_argument("--code", required=True, help="solution file, or - for stdin; markdown responses are accepted")
    p.add_argument("--lang", default="python", help="python or cpp")
    p.add_argument("--complexity", action="store_true", help="also judge time complexity (R_time)")
    p.add_argument("--fast", action="store_true", help="fast complexity setting (few sizes, 2 reps)")
    p.add_argument("--json", action="store_true", help="print exactly one JSON line")
    # Sandbox
    p.add_argument("--test-time-s", type=positive_float, default=Limits.time_s,
                   help="wall clock per test case in the sandbox")
    p.add_argument("--memory-mb", type=positive_int, default=Limits.memory_mb)
    p.add_argument("--float-tol", type=non_negative_float, default=0.0, help="relative tolerance for float tokens")
    p.add_argument("--require-full-isolation", action="store_true", help="refuse to run without namespaces")
    p.add_argument("--no-bwrap", action="store_true", help="use the unshare fallback even if bwrap exists")
    # Reward
    p.add_argument("--w-format", type=finite_float, default=0.1)
    p.add_argument("--w-correctness", type=finite_float, default=1.0)
    p.add_argument("--w-time", type=finite_float, default=0.5)
    p.add_argument("--model-endpoint", default=None, help="OpenAI-compatible base URL for the model complexity judge")
    p.add_argument("--model-name", default="default")
    args = p.parse_args(argv)

    try:
        problems = load_problems(args.problem)
        if args.id is not None:
            problems = [q for q in problems if q["question_id"] == args.id]
            if not problems:
                raise ProblemError(f"{args.problem}: no problem with question_id {args.id!r}")
        elif len(problems) > 1:
            raise ProblemError(f"{args.problem}: holds {len(problems)} problems; pick one with --id")
        if args.lang not in LANG_TAGS:
            raise ProblemError(f"{args.problem}: unknown language {args.lang!r} (python or cpp)")
        text = sys.stdin.read() if args.code == "-" else open(args.code, encoding="utf-8").read()
    except (ProblemError, OSError) as e:
        print(f"code_judge: error: {e}", file=sys.stderr)
        return 2
    problem = problems[0]
    model_judge = None
    if args.model_endpoint:
        def model_judge(prob, code):
            return model_complexity(prob, code, lang=args.lang, endpoint=args.model_endpoint, model=args.model_name)[0]
    try:
        r = code_reward(problem, text, stage="code2" if args.complexity else "code1",
                        require_think="</think>" in text, w_format=args.w_format, w_correctness=args.w_correctness,
                        w_time=args.w_time, complexity_judge="both" if model_judge else "measured",
                        model_judge=model_judge, fast=args.fast,
                        limits=Limits(time_s=args.test_time_s, memory_mb=args.memory_mb), lang=args.lang,
                        isolation="unshare" if args.no_bwrap else "auto",
                        require_full_isolation=args.require_full_isolation, float_tol=args.float_tol)
    except SandboxError as e:
        print(f"code_judge: error: problem {problem['question_id']}: {e}", file=sys.stderr)
        return 3
    out = {"passed": r["passed"], "total": r["total_tests"], "pass_rate": r["pass_rate"], "verdicts": r["verdicts"],
           "complexity": r["complexity"], "meets_optimal": r["meets_optimal"], "sandbox": r["sandbox"],
           "reward": {k: r[k] for k in ("format", "correctness", "time", "total")}}
    out["question_id"] = problem["question_id"]
    if args.json:
        print(json.dumps(out))
    else:
        print(f"{problem['question_id']}: {r['passed']}/{r['total_tests']} passed  verdicts={' '.join(r['verdicts'])}")
        print(f"complexity={r['complexity']} meets_optimal={r['meets_optimal']} sandbox={r['sandbox']['backend']}")
        print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
