"""Answer scoring of the search agent and of evaluation: SQuAD-normalised exact match, token F1, the GAIA
scorer's rules, and an LLM judge over any chat function (nanbeige41.openai_api.endpoint_chat).
`score_answer(prediction, gold, method)` returns every score, with `correct` the chosen one.
"""
import re
import string
from collections import Counter


def normalize_answer(s):
    """SQuAD: lower case, drop punctuation and the articles a/an/the, collapse whitespace."""
    s = "".join(ch for ch in str(s).lower() if ch not in set(string.punctuation))
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def exact_match(prediction, gold):
    return float(normalize_answer(prediction) == normalize_answer(gold))


def token_f1(prediction, gold):
    pred, ref = normalize_answer(prediction).split(), normalize_answer(gold).split()
    common = sum((Counter(pred) & Counter(ref)).values())
    if not pred or not ref:
        return float(pred == ref)
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(ref)
    return 2 * precision * recall / (precision + recall)


def _as_number(s):
    try:
        return float(str(s).replace("$", "").replace("%", "").replace(",", "").strip())
    except ValueError:
        return None


def _gaia_str(s, drop_punctuation=True):
    s = re.sub(r"\s", "", str(s)).lower()
    return s.translate(str.maketrans("", "", string.punctuation)) if drop_punctuation else s


def gaia_match(prediction, gold):
    """The GAIA scorer's rules: a numeric gold is compared as a number after stripping `$ % ,` from the
    prediction; a gold containing `,` or `;` is a list compared item by item (same length, numbers as
    numbers, strings without whitespace, case-insensitive); otherwise strings compared ignoring
    whitespace, punctuation and case."""
    prediction = "None" if prediction is None else str(prediction)
    gold = str(gold)
    if _as_number(gold) is not None and "," not in gold:
        return _as_number(prediction) == float(gold)
    if "," in gold or ";" in gold:
        gold_items, pred_items = re.split(r"[,;]", gold), re.split(r"[,;]", prediction)
        if len(gold_items) != len(pred_items):
            return False
        return all((_as_number(p) == float(g)) if _as_number(g) is not None else
                   _gaia_str(p, drop_punctuation=False) == _gaia_str(g, drop_punctuation=False)
                   for p, g in zip(pred_items, gold_items))
    return _gaia_str(prediction) == _gaia_str(gold)


JUDGE_PROMPT = """You grade answers. Question: {question}
Gold answer: {gold}
Predicted answer: {prediction}
Is the predicted answer correct (same meaning as the gold answer)? Reply with one line: "correct: yes" or "correct: no"."""


def parse_judge_verdict(text):
    """True / False from the judge's last line starting with `correct:`; None when there is none.
    Anchored at the line start so "incorrect: yes" or "not correct: yes" never reads as a yes."""
    found = re.findall(r"^[\s*_#>-]*correct[\s*_]*:[\s*_]*(yes|no)\b", text or "", flags=re.I | re.M)
    return None if not found else found[-1].lower() == "yes"


def llm_judge(question, prediction, gold, chat):
    """chat: messages -> reply text (see endpoint_chat). Returns True/False, None if unparsable."""
    reply = chat([{"role": "user", "content": JUDGE_PROMPT.format(question=question, gold=gold,
                                                                  prediction=prediction)}])
    return parse_judge_verdict(reply)


def score_answer(prediction, gold, method="gaia", question="", chat=None):
    """All scores of one answer; `correct` is the one chosen by `method` (gaia | em | f1 | llm)."""
    if prediction is None:
        return {"em": 0.0, "f1": 0.0, "gaia": False, "correct": False}
    scores = {"em": exact_match(prediction, gold), "f1": token_f1(prediction, gold),
              "gaia": gaia_match(prediction, gold)}
    if method == "llm":
        scores["llm"] = llm_judge(question, prediction, gold, chat)
    scores["correct"] = {"gaia": scores["gaia"], "em": scores["em"] == 1.0, "f1": scores["f1"] >= 0.5,
                         "llm": bool(scores.get("llm"))}[method]
    return scores
