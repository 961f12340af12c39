"""The LiveCodeBench problem format and output rules, as code_judge.py reads and grades them.

- `load_problems` / `normalize_problem`: problems in the LCB layout, including real LCB dumps as they are:
  test cases as JSON strings, private tests as base64(zlib(pickle(json))) read with a pickle loader that
  refuses every global, so a hostile dump cannot run code. Errors name file, line and field (ProblemError).
- `verdict_and_reason`: a sandbox run (nanbeige41.sandbox.TestRun) against one test, with LCB's rules:
  stdin outputs compare line by line, a differing line only as exact decimals when every token is a number
  (1e+18 != 10^18 + 1), in linear time; functional tests compare returned JSON values with `==`. An output
  the judge cannot parse is WA with the reason, never a crash.
"""
import base64
import io
import json
import math
import pickle
import re
import zlib
from decimal import Decimal, InvalidOperation

from nanbeige41.complexity import parse_complexity

LANGUAGES = ("python", "cpp")  # what the sandbox runs (code_judge.LANG_TAGS has the fence tags of each)


class ProblemError(ValueError):
    """A problem file or record is unreadable; the message names file, line and field."""


class _NoGlobalsUnpickler(pickle.Unpickler):
    # LCB private tests are a pickled JSON *string*; refusing every global means a hostile dump can
    # at most build str/list/dict, never call a function.
    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"global {module}.{name} refused")


def _decode_tests(value, where):
    if value is None or value == "":
        return []
    if isinstance(value, str):
        text = value.strip()
        try:
            if text.startswith("["):
                value = json.loads(text)
            else:  # LiveCodeBench private_test_cases: base64(zlib(pickle(json string)))
                obj = _NoGlobalsUnpickler(io.BytesIO(zlib.decompress(base64.b64decode(text)))).load()
                value = json.loads(obj) if isinstance(obj, (str, bytes)) else obj
        except Exception as e:
            raise ProblemError(f"{where}: cannot decode test cases ({type(e).__name__}: {e})") from None
    if not isinstance(value, list):
        raise ProblemError(f"{where}: test cases must be a list, got {type(value).__name__}")
    tests = []
    for k, t in enumerate(value):
        if not isinstance(t, dict) or not isinstance(t.get("input"), str) or not isinstance(t.get("output"), str):
            raise ProblemError(f"{where}[{k}]: each test needs string 'input' and 'output'")
        testtype = t.get("testtype", "stdin")
        if testtype not in ("stdin", "functional"):
            raise ProblemError(f"{where}[{k}]: testtype must be 'stdin' or 'functional', got {testtype!r}")
        tests.append({"input": t["input"], "output": t["output"], "testtype": testtype})
    return tests


def normalize_problem(raw, where="<problem>"):
    """One LCB-style record -> dict with decoded test lists and metadata dict (other fields kept)."""
    if not isinstance(raw, dict):
        raise ProblemError(f"{where}: a problem must be a JSON object")
    if "question_id" not in raw:
        raise ProblemError(f"{where}: field 'question_id' missing")
    problem = dict(raw)
    problem["question_id"] = str(raw["question_id"])
    problem.setdefault("question_content", "")
    problem["starter_code"] = raw.get("starter_code") or ""
    metadata = raw.get("metadata") or {}
    if isinstance(metadata, str):
        try:
            metadata = json.loads(metadata) if metadata.strip() else {}
        except json.JSONDecodeError as e:
            raise ProblemError(f"{where}: field 'metadata': {e}") from None
    problem["metadata"] = metadata
    for field in ("public_test_cases", "private_test_cases"):
        problem[field] = _decode_tests(raw.get(field), f"{where}: field '{field}'")
    if not isinstance(metadata, dict):
        raise ProblemError(f"{where}: field 'metadata' must be an object, got {type(metadata).__name__}")
    tests = problem["public_test_cases"] + problem["private_test_cases"]
    if not tests:
        raise ProblemError(f"{where}: no test cases")
    kinds = {t["testtype"] for t in tests}
    if len(kinds) > 1:  # one program cannot be both a stdin program and a class Solution
        raise ProblemError(f"{where}: tests mix 'stdin' and 'functional' testtype; a problem has one kind")
    func_name = metadata.get("func_name")
    if kinds == {"functional"} and not func_name:
        raise ProblemError(f"{where}: functional tests need field 'metadata.func_name'")
    if func_name is not None and not (isinstance(func_name, str) and func_name.isidentifier()):
        raise ProblemError(f"{where}: field 'metadata.func_name' must be a method name, got {func_name!r}")
    for field in ("input_generator", "reference_solution", "optimal_complexity"):
        if raw.get(field) is not None and not isinstance(raw[field], str):
            raise ProblemError(f"{where}: field '{field}' must be a string, got {type(raw[field]).__name__}")
    refs = raw.get("reference_solutions")
    if refs is not None and not (isinstance(refs, dict) and all(k in LANGUAGES and isinstance(v, str)
                                                                for k, v in refs.items())):
        raise ProblemError(f"{where}: field 'reference_solutions' must map python/cpp to source strings")
    if raw.get("optimal_complexity") and parse_complexity(raw["optimal_complexity"]) is None:
        raise ProblemError(f"{where}: field 'optimal_complexity' {raw['optimal_complexity']!r} is not a known class")
    return problem


def load_problems(path):
    """Read .json (one object or a list) or .jsonl; every error names path, line and field."""
    try:
        text = open(path, encoding="utf-8").read()
    except OSError as e:
        raise ProblemError(f"{path}: cannot read ({e.strerror})") from None
    records = []
    if path.endswith(".jsonl"):
        for lineno, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    records.append((f"{path}:{lineno}", json.loads(line)))
                except json.JSONDecodeError as e:
                    raise ProblemError(f"{path}:{lineno}: invalid JSON ({e.msg})") from None
    else:
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as e:
            raise ProblemError(f"{path}:{e.lineno}: invalid JSON ({e.msg})") from None
        items = obj if isinstance(obj, list) else [obj]
        records = [(f"{path}[{k}]" if isinstance(obj, list) else path, r) for k, r in enumerate(items)]
    return [normalize_problem(r, where) for where, r in records]


def all_tests(problem):
    return problem["public_test_cases"] + problem["private_test_cases"]


# A number token: no nested quantifiers, so a non-matching token of n digits costs O(n), not O(n^2)
# ("111...1x", 1 MB of it, took hours with the old pattern and held the GIL all the while).
_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
TOKEN_SLACK = 1024  # a token this much longer than the expected one is wrong, whatever it spells


def _decimal(token):
    if not _NUMBER.fullmatch(token):
        return None
    try:
        return Decimal(token)   # exact, any length (int() refuses > 4300 digits)
    except InvalidOperation:    # an exponent beyond what Decimal represents
        return None


def _is_float(token):
    return "." in token or "e" in token or "E" in token


def _tokens_equal(got, want, float_tol):
    """Two tokens of lines that differ: both numbers with the same exact decimal value (so 007 = 7
    and 1.50 = 1.5, but 1e+18 != 1000000000000000001). `float_tol` (relative) applies only when
    BOTH are written as floats: an integer answer is always exact. A word is never equal here."""
    if len(got) > len(want) + TOKEN_SLACK:
        return False
    a, b = _decimal(got), _decimal(want)
    if a is None or b is None:
        return False
    if a == b:
        return True
    if float_tol > 0 and _is_float(got) and _is_float(want):
        fa, fb = float(a), float(b)
        return math.isfinite(fa) and math.isfinite(fb) and abs(fa - fb) <= float_tol * max(1.0, abs(fb))
    return False


def outputs_match(got, want, float_tol=0.0):
    """LiveCodeBench's stdin rule (its grade_stdio): strip the output, split it into lines and
    strip each; a line equal as a string passes; otherwise every token of it, on both sides, must
    be a number and the two lists of exact decimals equal ("YES  NO" != "YES NO", "1.50" == "1.5").
    `float_tol` adds a relative tolerance for float tokens (0 = exact, as in LCB). Linear time."""
    got_lines, want_lines = got.strip().split("\n"), want.strip().split("\n")
    if len(got_lines) != len(want_lines):
        return False
    for g, w in zip(got_lines, want_lines):
        g, w = g.strip(), w.strip()
        if g == w:
            continue
        gt, wt = g.split(), w.split()
        if len(gt) != len(wt) or not all(_tokens_equal(a, b, float_tol) for a, b in zip(gt, wt)):
            return False
    return True


def values_match(got, want, float_tol=0.0):
    """Functional tests: compare two plain JSON values with LiveCodeBench's `==` (so True == 1 and
    2 == 2.0; tuples were already lists in the child, at every depth, where LCB converts only the
    top level). Integers compare exactly; the tolerance applies only when both sides are floats."""
    if isinstance(got, (bool, int, float)) and isinstance(want, (bool, int, float)):
        if got == want:
            return True
        return (float_tol > 0 and isinstance(got, float) and isinstance(want, float)
                and abs(got - want) <= float_tol * max(1.0, abs(want)))
    if isinstance(got, list) and isinstance(want, list):
        return len(got) == len(want) and all(values_match(a, b, float_tol) for a, b in zip(got, want))
    if isinstance(got, dict) and isinstance(want, dict):
        return got.keys() == want.keys() and all(values_match(got[k], want[k], float_tol) for k in got)
    return type(got) is type(want) and got == want


def verdict_and_reason(run, test, float_tol=0.0):
    """(verdict, reason). Whatever the program printed, this never raises: an output the judge
    cannot even parse (a number past int()'s digit limit, JSON nested 10^5 deep from a patched
    json.dumps, ...) is a wrong answer with the reason, and the run goes on."""
    if run.status != "ok":
        return run.status, run.detail
    try:
        if test["testtype"] == "functional":
            try:
                got, want = json.loads(run.output), json.loads(test["output"])
            except ValueError:
                return "WA", "returned value is not valid JSON"
            return ("AC", "") if values_match(got, want, float_tol) else ("WA", "")
        return ("AC", "") if outputs_match(run.output, test["output"], float_tol) else ("WA", "")
    except Exception as e:  # RecursionError, MemoryError, ...: the output is not an answer
        return "WA", f"output could not be compared ({type(e).__name__})"
