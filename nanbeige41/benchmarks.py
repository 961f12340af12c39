"""The benchmarks' public file formats and their scoring rules, for evaluate.py (paper section 3).

Each loader reads a benchmark's own layout from a local path and returns items {id, ...}; a record in the
wrong format fails with `file:line` and the fields the format expects, an empty data set is an error.

| suite | reads                                                                   | scored by                      |
|-------|-------------------------------------------------------------------------|--------------------------------|
| code  | LiveCodeBench code_generation_lite rows (code_judge.load_problems)      | code_judge verdicts, pass_at_k |
| math  | {problem, answer} JSONL; MathArena's problems/N.tex + answers.csv       | last_boxed + math_equal        |
| gpqa  | {question, choices, answer} JSONL (or GPQA's Question / Correct Answer / Incorrect Answer 1-3 columns, JSONL or CSV) | the chosen letter |
| qa    | {question, answer} JSONL; GAIA / MiroFlow {task_id, task_question, ground_truth} | search_agent.score_answer |
| pref  | Arena-Hard {uid, category, prompt} + a baseline answers JSONL           | pair-wise RM or an LLM judge   |
| tool  | BFCL data files + possible_answer/ files of the same name               | bfcl_check (AST rules)         |

Rules written from the public checkers' documented behaviour (our own code):
- pass@k: the unbiased estimator of Chen et al. (2021), 1 - C(n-c, k) / C(n, k), as LiveCodeBench reports it.
- math: MathArena-style "last \\boxed{}" answer. Normalisation: LaTeX wrappers and spacing dropped, then both sides
  compared exactly as rationals (integers, decimals, fractions) or, for simple closed forms (sqrt, pi, powers),
  numerically to 1e-9 relative; tuples element by element. Departure: with no \\boxed{} the last "answer is X"
  is read (what the toy models write); the report marks which one was used.
- BFCL AST matching (bfcl_eval's ast_checker): function name; every required parameter present; every given
  parameter known and allowed; Python types with int -> float coercion; strings compared after dropping spaces
  and ,./-_*^ and lower-casing; lists and dicts element-wise under the same rule; an optional parameter may be
  left out only when its allowed values include ""; parallel calls matched in any order; irrelevance = no call.
  Not covered: BFCL's Java / JavaScript type converters, multi-turn and executable categories.
"""

import csv
import math
import os
import re
from fractions import Fraction

from nanbeige41.data import read_jsonl


class FormatError(ValueError):
    """A data file that is not in the benchmark's format: the message names file:line and expected fields."""


def read_rows(path, required, fmt):
    """JSONL records with every `required` field (file:line errors name what the format expects)."""
    try:
        rows = read_jsonl(path)
    except (OSError, ValueError) as e:
        raise FormatError(f"{e} (expected {fmt})") from None
    for r in rows:
        missing = [f for f in required if f not in r]
        if missing:
            raise FormatError(f"{r['_source']}: missing field(s) {', '.join(missing)}; expected {fmt}")
    return rows


def _item_id(row, key, k):
    return str(row[key]) if row.get(key) not in (None, "") else str(k)


# -----------------------------------------------------------------------------
# pass@k

def pass_at_k(n, c, k):
    """Unbiased pass@k from n samples of which c are correct: 1 - C(n-c, k) / C(n, k), computed as a stable
    product (Chen et al. 2021, the estimator LiveCodeBench reports)."""
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples, got {n}")
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


# -----------------------------------------------------------------------------
# math

def load_math(path):
    """{problem, answer} JSONL, or a MathArena competition folder: problems/N.tex and answers.csv (id,answer)."""
    if os.path.isdir(path):
        csv_path = os.path.join(path, "answers.csv")
        if not os.path.isfile(csv_path):
            raise FormatError(f"{path}: a MathArena folder needs answers.csv (id,answer) and problems/N.tex")
        items = []
        with open(csv_path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            if not reader.fieldnames or "answer" not in reader.fieldnames or "id" not in reader.fieldnames:
                raise FormatError(f"{csv_path}:1: header must name columns id,answer; got {reader.fieldnames}")
            for lineno, row in enumerate(reader, 2):
                tex = os.path.join(path, "problems", f"{row['id']}.tex")
                if not os.path.isfile(tex):
                    raise FormatError(f"{csv_path}:{lineno}: no problem file {tex} for id {row['id']!r}")
                items.append({"id": row["id"], "problem": open(tex, encoding="utf-8").read().strip(),
                              "answer": row["answer"]})
        if not items:
            raise FormatError(f"{csv_path}: empty data set (no rows)")
        return items
    rows = read_rows(path, ("problem", "answer"), "JSONL {problem, answer[, id]}")
    return [{"id": _item_id(r, "id", k), "problem": r["problem"], "answer": str(r["answer"])}
            for k, r in enumerate(rows)]


def last_boxed(text):
    """Content of the last \\boxed{...} (or \\fbox{...}) with braces matched; None when there is none."""
    start = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if start < 0:
        return None
    i = text.find("{", start)
    if i < 0 or text[start:i].strip() not in ("\\boxed", "\\fbox"):
        m = re.match(r"\\boxed\s+([^\s$]+)", text[start:])  # \boxed 5
        return m.group(1) if m else None
    depth = 0
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i + 1:j]
    return None


def extract_math_answer(text):
    """(answer, where): the last \\boxed{} answer, else the last 'answer is X' (toy models), else (None, None)."""
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed, "boxed"
    found = re.findall(r"answer is[:\s]*\$?([^\n$]+?)\$?\s*(?:\.\s|\.?$|\n)", text, flags=re.I | re.M)
    return (found[-1].strip(), "answer is") if found else (None, None)


def _braced(s, i):
    """(content, end) of the {...} group starting at s[i] == '{', or of the single character there."""
    if i >= len(s):
        return "", i
    if s[i] != "{":
        return s[i], i + 1
    depth = 0
    for j in range(i, len(s)):
        depth += {"{": 1, "}": -1}.get(s[j], 0)
        if depth == 0:
            return s[i + 1:j], j + 1
    return s[i + 1:], len(s)


def normalize_math(s):
    """A canonical string for an answer: LaTeX spacing, \\left/\\right, $, text wrappers, degree and percent
    signs, thousands separators and trailing dots dropped; \\dfrac/\\tfrac -> \\frac; 'x = 3' -> '3'."""
    s = str(s).strip().strip("$").strip()
    s = re.sub(r"\\text\{([^}]*)\}|\\mathrm\{([^}]*)\}|\\textbf\{([^}]*)\}", lambda m: next(g for g in m.groups() if g is not None), s)
    for a, b in (("\\dfrac", "\\frac"), ("\\tfrac", "\\frac"), ("\\left", ""), ("\\right", ""), ("\\!", ""),
                 ("\\,", ""), ("\\;", ""), ("\\ ", ""), ("^{\\circ}", ""), ("^\\circ", ""), ("\\%", ""), ("%", ""),
                 ("\\$", ""), ("\\cdot", "*"), ("\\times", "*")):
        s = s.replace(a, b)
    s = re.sub(r"\s+", "", s).rstrip(".")
    s = re.sub(r"^[a-zA-Z]\w*=", "", s)  # "x=3", "n=12"
    if re.fullmatch(r"[+-]?\d{1,3}(,\d{3})+(\.\d+)?", s):
        s = s.replace(",", "")
    return s


def _to_python(s):
    """Simple LaTeX -> a Python arithmetic expression (or None): \\frac, \\sqrt, ^, \\pi, implicit products."""
    out, i = [], 0
    while i < len(s):
        if s.startswith("\\frac", i):
            a, i = _braced(s, i + 5)
            b, i = _braced(s, i)
            pa, pb = _to_python(a), _to_python(b)
            if pa is None or pb is None:
                return None
            out.append(f"(({pa})/({pb}))")
        elif s.startswith("\\sqrt", i):
            a, i = _braced(s, i + 5)
            pa = _to_python(a)
            if pa is None:
                return None
            out.append(f"sqrt({pa})")
        elif s.startswith("\\pi", i):
            out.append("pi")
            i += 3
        elif s[i] in "{}":
            out.append("(" if s[i] == "{" else ")")
            i += 1
        elif s[i] == "^":
            out.append("**")
            i += 1
        elif s[i] in "0123456789.+-*/()":
            out.append(s[i])
            i += 1
        else:
            return None
    expr = "".join(out)
    # implicit multiplication: 2sqrt(3), 2(1+x), )(, 3pi
    return re.sub(r"(?<=[\d)])(?=[(sp])", "*", expr)


def _value(s):
    """A Fraction for rationals, a float for simple closed forms, else None."""
    if re.fullmatch(r"[+-]?(\d+(\.\d*)?|\.\d+)", s):
        return Fraction(s)
    m = re.fullmatch(r"([+-]?)\\frac\{(\d+)\}\{(\d+)\}|([+-]?\d+)/(\d+)", s)
    if m:
        num, den = (m.group(2), m.group(3)) if m.group(2) else (m.group(4), m.group(5))
        if int(den) != 0:
            return Fraction(int(num), int(den)) * (-1 if m.group(1) == "-" else 1)
    expr = _to_python(s)
    if not expr or len(expr) > 200:
        return None
    # powers only of a literal exponent <= 64: 9^{9^{9}} must be refused, not computed
    if "**" in expr and (re.search(r"\*\*\(*[^\d(]|\*\*\(*[\d.]+\)*\*\*", expr) or
                         any(float(e) > 64 for e in re.findall(r"\*\*\(*([\d.]+)", expr))):
        return None
    # powers only of a literal exponent <= 64: 9^{9^{9}} must be refused, not computed
    if "**" in expr and (re.search(r"\*\*\(*[^\d(]|\*\*\(*[\d.]+\)*\*\*", expr) or
                         any(float(e) > 64 for e in re.findall(r"\*\*\(*([\d.]+)", expr))):
        return None
    try:  # the expression holds only digits, operators, parentheses, sqrt and pi (checked by _to_python)
        v = eval(expr, {"__builtins__": {}}, {"sqrt": math.sqrt, "pi": math.pi})  # noqa: S307
        return float(v) if isinstance(v, (int, float)) and math.isfinite(v) else None
    except (ArithmeticError, SyntaxError, TypeError, ValueError, OverflowError):
        return None


def _split_top(s):
    """'(1,2)' -> ['1', '2'] when s is a parenthesised tuple (commas at depth 1); else None."""
    if len(s) < 2 or s[0] not in "([" or s[-1] not in ")]":
        return None
    parts, depth, cur = [], 0, ""
    for ch in s[1:-1]:
        depth += {"(": 1, "[": 1, "{": 1, ")": -1, "]": -1, "}": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    return parts + [cur] if parts else None


def math_equal(prediction, gold):
    """True when the two answers are the same after normalize_math: equal strings, equal rationals, close
    closed-form values (1e-9 relative), or tuples equal element by element."""
    if prediction is None:
        return False
    p, g = normalize_math(prediction), normalize_math(gold)
    if p == g:
        return True
    tp, tg = _split_top(p), _split_top(g)
    if tp is not None or tg is not None:
        return tp is not None and tg is not None and len(tp) == len(tg) and all(map(math_equal, tp, tg))
    vp, vg = _value(p), _value(g)
    if vp is None or vg is None:
        return False
    if isinstance(vp, Fraction) and isinstance(vg, Fraction):
        return vp == vg
    return abs(float(vp) - float(vg)) <= 1e-9 * max(1.0, abs(float(vg)))


# -----------------------------------------------------------------------------
# GPQA-style multiple choice

LETTERS = "ABCDEFGHIJ"


def load_gpqa(path):
    """{question, choices, answer} (answer: letter, index or the correct choice's text), or GPQA's own columns
    (Question, Correct Answer, Incorrect Answer 1-3) in JSONL or CSV. Items keep the correct choice first
    (answer_index 0 before shuffling); evaluate.py shuffles the choices with a seed per item."""
    gpqa_cols = ("Question", "Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2", "Incorrect Answer 3")
    if path.endswith(".csv"):
        with open(path, newline="", encoding="utf-8") as f:
            rows = [dict(r, _source=f"{path}:{k}") for k, r in enumerate(csv.DictReader(f), 2)]
        if not rows:
            raise FormatError(f"{path}: empty data set (no rows)")
    else:
        rows = read_jsonl(path)
    items = []
    for k, r in enumerate(rows):
        if all(c in r for c in gpqa_cols):
            items.append({"id": _item_id(r, "Record ID", k), "question": r["Question"].strip(),
                          "choices": [r[c].strip() for c in gpqa_cols[1:]], "answer_index": 0})
            continue
        if not all(f in r for f in ("question", "choices", "answer")) or not isinstance(r["choices"], list) \
                or not 2 <= len(r["choices"]) <= len(LETTERS):
            raise FormatError(f"{r['_source']}: expected {{question, choices: [2-10 strings], answer}} or GPQA's "
                              f"columns {', '.join(gpqa_cols)}")
        answer, choices = r["answer"], [str(c) for c in r["choices"]]
        if isinstance(answer, int) and 0 <= answer < len(choices):
            index = answer
        elif isinstance(answer, str) and len(answer.strip()) == 1 and answer.strip().upper() in LETTERS[:len(choices)]:
            index = LETTERS.index(answer.strip().upper())
        elif str(answer) in choices:
            index = choices.index(str(answer))
        else:
            raise FormatError(f"{r['_source']}: field 'answer' {answer!r} is neither a letter, an index nor one "
                              "of the choices")
        choices = [choices[index]] + choices[:index] + choices[index + 1:]
        items.append({"id": _item_id(r, "id", k), "question": r["question"], "choices": choices, "answer_index": 0})
    return items


def extract_choice(text, n_choices):
    """The chosen letter: the last 'answer is (X)' / 'Answer: X' / \\boxed{X}, else a lone letter reply."""
    letters = LETTERS[:n_choices]
    boxed = last_boxed(text)
    if boxed and boxed.strip("() ").upper() in letters and len(boxed.strip("() ")) == 1:
        return boxed.strip("() ").upper()
    # the letter itself is case-sensitive: "the answer is a long story" names no choice
    found = re.findall(rf"[Aa]nswer(?: is)?[:\s]*\(?([{letters}])\)?(?![A-Za-z])", text)
    if found:
        return found[-1].upper()
    m = re.fullmatch(rf"\s*\(?([{letters}])[).]?\s*", text)
    return m.group(1) if m else None


# -----------------------------------------------------------------------------
# Deep-search QA

def load_qa(path):
    """{question, answer} JSONL (toy / BrowseComp-style exports), GAIA / MiroFlow {task_id, task_question,
    ground_truth}, or GAIA's metadata.jsonl {task_id, Question, Final answer}."""
    rows = read_jsonl(path)
    items = []
    for k, r in enumerate(rows):
        if "task_question" in r and "ground_truth" in r:
            items.append({"id": _item_id(r, "task_id", k), "question": r["task_question"],
                          "answer": str(r["ground_truth"])})
        elif "Question" in r and "Final answer" in r:  # GAIA's own metadata.jsonl
            items.append({"id": _item_id(r, "task_id", k), "question": r["Question"], "answer": str(r["Final answer"])})
        elif "question" in r and "answer" in r:
            items.append({"id": _item_id(r, "id", k), "question": r["question"], "answer": str(r["answer"])})
        else:
            raise FormatError(f"{r['_source']}: expected {{question, answer}}, {{task_id, task_question, ground_truth}} "
                              "or GAIA's {task_id, Question, Final answer}")
    return items


# -----------------------------------------------------------------------------
# Arena-Hard

def _baseline_text(r):
    """The answer text of an Arena-Hard model_answer row: v2 `messages` (assistant content a string or
    {answer}), or v0.1 `choices[0].turns[0].content`."""
    if isinstance(r.get("messages"), list):
        content = [m for m in r["messages"] if m.get("role") == "assistant"][-1]["content"]
        return content["answer"] if isinstance(content, dict) else str(content)
    if isinstance(r.get("choices"), list):
        return r["choices"][0]["turns"][0]["content"]
    return str(r["answer"]) if "answer" in r else None


def load_arena(path, baseline_path=None):
    """Arena-Hard question.jsonl {uid, category, prompt} + baseline answers keyed by uid (v0.1: question_id,
    turns). `path` may be the benchmark folder holding question.jsonl and model_answer/<baseline>.jsonl."""
    if os.path.isdir(path):
        answers_dir = os.path.join(path, "model_answer")
        if baseline_path is None and os.path.isdir(answers_dir):
            files = sorted(f for f in os.listdir(answers_dir) if f.endswith(".jsonl"))
            if len(files) != 1:
                raise FormatError(f"{answers_dir}: {len(files)} answer files; pick the baseline with --baseline")
            baseline_path = os.path.join(answers_dir, files[0])
        path = os.path.join(path, "question.jsonl")
    if baseline_path is None:
        raise FormatError(f"{path}: the pref suite needs baseline answers (--baseline FILE.jsonl)")
    items = []
    for r in read_jsonl(path):
        qid = r.get("uid", r.get("question_id"))
        if qid is None or not ("prompt" in r or "turns" in r):
            raise FormatError(f"{r['_source']}: expected Arena-Hard {{uid, category, prompt}} (v0.1: {{question_id, "
                              "category, turns}})")
        prompt = r["prompt"] if "prompt" in r else r["turns"][0]["content"]
        items.append({"id": str(qid), "category": r.get("category", ""), "prompt": prompt})
    baselines = {}
    for r in read_jsonl(baseline_path):
        text = _baseline_text(r)
        qid = r.get("uid", r.get("question_id"))
        if qid is None or text is None:
            raise FormatError(f"{r['_source']}: expected a model answer {{uid, messages: [..., {{role: assistant, "
                              "content}}]}} (v0.1: {question_id, choices: [{turns: [{content}]}]})")
        baselines[str(qid)] = text
    for it in items:
        if it["id"] not in baselines:
            raise FormatError(f"{baseline_path}: no baseline answer for uid {it['id']!r}")
        it["baseline"] = baselines[it["id"]]
    return items


# -----------------------------------------------------------------------------
# BFCL

BFCL_TYPES = {"string": str, "integer": int, "float": float, "boolean": bool, "array": list, "tuple": list,
              "dict": dict, "any": str}
SCHEMA_TYPES = {"dict": "object", "float": "number", "tuple": "array", "any": "string"}


BFCL_NOT_COVERED = ("multi_turn", "exec", "java", "web_search", "memory", "format_sensitivity")


def bfcl_category(path):
    """'data/BFCL_v3_parallel_multiple.json' -> 'parallel_multiple' (live_ prefixes kept)."""
    name = os.path.basename(path)
    return re.sub(r"^BFCL_v\d+_", "", name.rsplit(".", 1)[0])


def load_bfcl(path):
    """One BFCL data file (JSON lines {id, question: [[messages]], function: [...]}) or a folder of them; the
    possible answers come from possible_answer/<same file name> beside it (none for irrelevance)."""
    if os.path.isdir(path):  # BFCL's data folder: every covered category in it
        files = sorted(os.path.join(path, f) for f in os.listdir(path) if f.startswith("BFCL_") and f.endswith(".json")
                       and not any(k in bfcl_category(f) for k in BFCL_NOT_COVERED))
        if not files:
            raise FormatError(f"{path}: no BFCL_*.json data files of a covered (single-turn Python AST) category")
        return [it for f in files for it in load_bfcl(f)]
    category = bfcl_category(path)
    if any(k in category for k in BFCL_NOT_COVERED):
        raise FormatError(f"{path}: BFCL category {category!r} is not covered (single-turn Python AST categories only)")
    rows = read_rows(path, ("id", "question", "function"), "BFCL JSON lines {id, question: [[messages]], function}")
    answers = {}
    if "irrelevance" not in category and "relevance" not in category:
        ans_path = os.path.join(os.path.dirname(path), "possible_answer", os.path.basename(path))
        if not os.path.isfile(ans_path):
            raise FormatError(f"{path}: possible answers expected in {ans_path}")
        for r in read_rows(ans_path, ("id", "ground_truth"), "BFCL possible_answer lines {id, ground_truth}"):
            answers[str(r["id"])] = r["ground_truth"]
    items = []
    for r in rows:
        q = r["question"]
        turn = q[0] if isinstance(q, list) and q and isinstance(q[0], list) else q
        if not isinstance(turn, list) or not all(isinstance(m, dict) and "role" in m for m in turn):
            raise FormatError(f"{r['_source']}: field 'question' must be [[{{role, content}}, ...]]")
        if not ("irrelevance" in category or "relevance" in category) and str(r["id"]) not in answers:
            raise FormatError(f"{r['_source']}: no possible answer for id {r['id']!r}")
        items.append({"id": str(r["id"]), "category": category, "messages": turn, "functions": r["function"],
                      "possible_answer": answers.get(str(r["id"]))})
    return items


def _schema(p):
    """BFCL parameter schema -> JSON-schema types for the chat template (dict -> object, float -> number)."""
    if isinstance(p, dict):
        return {k: (SCHEMA_TYPES.get(v, v) if k == "type" and isinstance(v, str) else _schema(v)) for k, v in p.items()}
    return [_schema(v) for v in p] if isinstance(p, list) else p


def bfcl_tools(functions):
    return [{"type": "function", "function": {"name": f["name"], "description": f.get("description", ""),
                                              "parameters": _schema(f.get("parameters", {}))}} for f in functions]


def _std(s):
    return re.sub(r"[ ,./\-_*^]", "", s).lower().replace("'", '"')


def _std_value(v):
    return _std(v) if isinstance(v, str) else v


def _value_ok(value, allowed, type_name):
    """Is `value` one of the allowed values (BFCL's string / list / dict rules)?"""
    if type_name == "dict" and isinstance(value, dict):
        for option in allowed:
            if option == "" or not isinstance(option, dict):
                continue
            if all(k in option and _std_value(v) in [_std_value(x) for x in option[k]] for k, v in value.items()) \
                    and all(k in value or "" in opts for k, opts in option.items()):
                return True
        return False
    if isinstance(value, list):
        got = [_std_value(v) for v in value]
        return any(isinstance(opt, list) and got == [_std_value(v) for v in opt] for opt in allowed)
    if isinstance(value, str):
        return _std(value) in [_std(a) for a in allowed if isinstance(a, str)]
    return any(value == a and type(a) is not str for a in allowed)


def _check_call(func, call, expected):
    """One call against one expected {name: {param: [allowed values]}}: (ok, reason)."""
    name, allowed = next(iter(expected.items()))
    if call["name"] != name:
        return False, f"wrong function: {call['name']!r}, expected {name!r}"
    if func is None:
        return False, f"no description of {name!r} in the item"
    props = func.get("parameters", {}).get("properties", {})
    args = call["arguments"]
    for p in func.get("parameters", {}).get("required", []):
        if p not in args:
            return False, f"{name}: missing required parameter {p!r}"
    for p, value in args.items():
        if p not in props or p not in allowed:
            return False, f"{name}: unexpected parameter {p!r}"
        type_name = props[p].get("type", "any")
        if type_name == "float" and type(value) is int:
            value = float(value)  # BFCL allows Python's int -> float
        want = BFCL_TYPES.get(type_name, str)
        answer_types = {type(a) for a in allowed[p] if a != ""}
        if type(value) is not want and type(value) not in answer_types:
            return False, f"{name}: parameter {p!r} has type {type(value).__name__}, expected {type_name}"
        if type_name in ("array", "tuple") and "items" in props[p] and type(value) is want:
            item_type = BFCL_TYPES.get(props[p]["items"].get("type"), object)
            if item_type is not object and not all(type(v) is item_type for v in value):
                return False, f"{name}: parameter {p!r} items must be {props[p]['items'].get('type')}"
        if not _value_ok(value, allowed[p], type_name):
            return False, f"{name}: parameter {p!r} = {value!r} not among {allowed[p]}"
    for p, options in allowed.items():
        if p not in args and "" not in options:
            return False, f"{name}: parameter {p!r} left out but not optional"
    return True, ""


def bfcl_check(item, calls):
    """(ok, reason) for the model's calls [{name, arguments}] on one BFCL item (ast_checker's rules)."""
    category, expected = item["category"], item["possible_answer"]
    funcs = {f["name"]: f for f in item["functions"]}
    if "irrelevance" in category:
        return (not calls), ("" if not calls else f"called {calls[0]['name']!r} on an irrelevant request")
    if "relevance" in category:
        return bool(calls), ("" if calls else "no call on a relevant request")
    if len(calls) != len(expected):
        return False, f"wrong number of calls: {len(calls)}, expected {len(expected)}"
    if "parallel" not in category:
        return _check_call(funcs.get(next(iter(expected[0]))), calls[0], expected[0])
    unmatched = list(range(len(calls)))
    for exp in expected:  # order-free: each expected call takes the first unmatched call that fits it
        reasons = []
        for i in unmatched:
            ok, why = _check_call(funcs.get(next(iter(exp))), calls[i], exp)
            if ok:
                unmatched.remove(i)
                break
            reasons.append(why)
        else:
            return False, f"no call matches expected {next(iter(exp))!r} ({'; '.join(reasons)})"
    return True, ""
