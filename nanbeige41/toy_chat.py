"""The toy "general" chat domain, generated from a seed, for paper sections 2.1.1-2.1.3.

The paper's general-domain pipeline is: SFT (2.1.1) leaves "degradation issues ... such as repetition
and redundant thinking" (2.1.2); a point-wise reward model trained on preference data "naturally
suppresses overly redundant, repetitive, and low-readability answers", and GRPO against it cuts
formatting errors and overlong truncation (5.27% -> 0.38% on LCB v6); then a pair-wise reward model,
trained on strong-vs-weak response pairs whose win/loss labels come from checklist filtering, gives the
binary reward "rollout beats the reference answer" (2.1.3). This module makes that world small enough
for a few-million-parameter model on a CPU:

- a fixed fictional glossary (GLOSSARY: 36 made-up things, each with a kind, place, use, colour and
  trait), so every prompt has one clean reference answer a tiny model can learn;
- nine template tasks (definitions, numbered lists, one-word answers, two-sentence explanations,
  comparisons, "term: colour" formatting, capitals, yes/no, unusual facts) and two/three-turn
  dialogues with follow-ups about "it";
- the four defects of 2.1.2 as text transforms: repetition, redundant reasoning, broken format,
  over-length;
- `sft_general_conversations(seed, n)`: SFT records in which DEFECT_RATE (18%) of the final assistant
  answers carry one defect — realistic SFT noise, so the toy SFT policy sometimes produces them and
  point-wise RL has something to remove;
- `preference_pairs`: {prompt, chosen, rejected} in TRL's conversational layout, rejected = a defect (or a
  truncated answer, so that brevity alone is not rewarded);
- `strong_weak_pairs`: {prompt, strong, weak, checklist} — a "strong model" (mostly clean, sometimes
  flawed) against a "weak model" (wrong facts, ignored format or context, incomplete, or defects),
  single- and multi-turn. reward_models.py derives win/loss labels from them with a checklist judge;
  `rule_judge` here is the offline, deterministic judge for the checklist items;
- `rl_prompts`: prompts with reference answers for the GRPO `point` and `pair` stages;
- detectors for logging: `repetition_rate`, `is_repetitive`, `is_overlong`, `has_rambling`,
  `defect_stats`.

    python -m nanbeige41.toy_chat --out data/toy     # writes prefs.jsonl, pairs.jsonl, rl_prompts.jsonl

Everything is derived from `random.Random` streams seeded from `--seed`, so the same seed gives
byte-identical files (a test regenerates them). The glossary itself uses a fixed seed, so SFT, reward
and RL data always talk about the same things.

Departures from the paper (toy simplifications): answers are templates, not model generations; the
"strong" and "weak" models are template corruptions; redundant reasoning is a few circular sentences in the think
block (inline `<think>...</think>` in the assistant content, which the chat template moves into the reasoning
slot), not thousands of tokens; for the `pair` stage the reference answer is a weak-model
answer (the toy policy cannot out-do a gold template, so a gold reference would give no signal).
"""
import argparse
import json
import os
import random
import re

# -----------------------------------------------------------------------------
# The glossary: fixed (GLOSSARY_SEED), independent of the data seed.

GLOSSARY_SEED = 1234
N_TERMS = 36
SYLLABLES = ["vel", "mor", "ka", "tin", "zu", "bre", "lo", "quen", "fir", "da", "sho", "rim",
             "pa", "nel", "gor", "ti", "lan", "sel", "ou", "bax", "mi", "dro"]
KINDS = ["a small river fish", "a woven basket", "a slow folk dance", "a hard winter fruit",
         "a copper coin", "a mountain bird", "a bitter herbal tea", "a stringed instrument",
         "a board game", "a paper lantern", "a desert flower", "a clay oven"]
PLACE_FORMS = ["the {} hills", "the island of {}", "the {} valley", "the town of {}", "the {} coast"]
USES = ["used to make blue dye", "eaten at harvest festivals", "played at weddings",
        "given as a gift to new neighbours", "used to keep bread warm", "carried by travellers for luck",
        "traded at the spring market", "used to teach children to count"]
COLORS = ["silver", "red", "green", "amber", "white", "black", "blue", "yellow", "grey", "violet"]
TRAITS = ["it glows faintly at night", "it smells of pine", "it lasts for many years", "it is very light",
          "it makes a soft humming sound", "it changes colour in the rain", "it is always sold in pairs",
          "it must be kept dry"]


def _make_glossary():
    rng = random.Random(GLOSSARY_SEED)
    terms, places = [], []
    while len(terms) < N_TERMS:
        t = "".join(rng.choice(SYLLABLES) for _ in range(rng.choice([2, 3])))
        if t not in terms and len(t) >= 4:
            terms.append(t)
    while len(places) < 12:
        p = "".join(rng.choice(SYLLABLES) for _ in range(2)).capitalize()
        if p not in places and p.lower() not in terms:
            places.append(p)
    return [dict(term=t, kind=rng.choice(KINDS), place=rng.choice(PLACE_FORMS).format(rng.choice(places)),
                 use=rng.choice(USES), color=rng.choice(COLORS), trait=rng.choice(TRAITS)) for t in terms]


GLOSSARY = _make_glossary()

# -----------------------------------------------------------------------------
# Tasks. Each returns (question, gold answer, checklist, task name). A checklist item has a "text" (what
# an LLM judge reads) and a "rule"/"arg" that `rule_judge` evaluates offline.


def _item(text, rule, arg=None):
    return {"text": text, "rule": rule, "arg": arg}


def _clean_items(max_words, prose=True):
    readable = [_item("Is cleanly formatted: starts with a capital, no stray markdown or separators", "well_formed")]
    return (readable if prose else []) + [_item("Does not repeat itself", "no_repetition"),
            _item("Answers directly, without rambling about how to answer", "no_rambling"),
            _item(f"Is at most {max_words} words long", "max_words", max_words)]


def task_define(e, rng):
    q = rng.choice(["What is a {t}?", "Define {t}.", "Tell me what a {t} is.", "What does the word {t} mean?"])
    a = f"A {e['term']} is {e['kind']} from {e['place']}. It is {e['use']}."
    return q.format(t=e["term"]), a, [_item(f"Says that a {e['term']} is {e['kind']}", "contains", e["kind"]),
                                      _item(f"Says it comes from {e['place']}", "contains", e["place"]),
                                      _item(f"Says it is {e['use']}", "contains", e["use"])] + _clean_items(40), "define"


def task_list(e, rng):
    q = rng.choice(["List three facts about the {t}.", "Give me three facts about the {t} as a numbered list."])
    facts = [f"It is {e['color']}.", f"It comes from {e['place']}.", f"It is {e['use']}."]
    rng.shuffle(facts)
    a = "\n".join(f"{i + 1}. {f}" for i, f in enumerate(facts))
    return q.format(t=e["term"]), a, [_item("Is a numbered list of exactly three lines", "numbered_list", 3),
                                      _item(f"Mentions that it comes from {e['place']}", "contains", e["place"]),
                                      _item(f"Mentions that it is {e['use']}", "contains", e["use"])] + _clean_items(40), "list"


def task_color(e, rng):
    q = rng.choice(["What colour is a {t}? Answer in one word.", "In one word, what colour is the {t}?"])
    return q.format(t=e["term"]), e["color"].capitalize() + ".", [
        _item(f"Says the colour is {e['color']}", "contains", e["color"]),
        _item("Is a single word", "max_words", 1)] + _clean_items(1), "color"


def task_explain(e, rng):
    q = rng.choice(["Explain in two sentences why people value the {t}.", "In two sentences, why do people like the {t}?"])
    a = f"People value the {e['term']} because it is {e['use']}. They also like that {e['trait']}."
    return q.format(t=e["term"]), a, [_item("Has exactly two sentences", "sentences", 2),
                                      _item(f"Mentions that it is {e['use']}", "contains", e["use"]),
                                      _item(f"Mentions that {e['trait']}", "contains", e["trait"])] + _clean_items(40), "explain"


def task_compare(e, rng):
    other = rng.choice([g for g in GLOSSARY if g["kind"] != e["kind"]])
    q = f"What is the difference between a {e['term']} and a {other['term']}?"
    a = f"A {e['term']} is {e['kind']}, while a {other['term']} is {other['kind']}."
    return q, a, [_item(f"Says a {e['term']} is {e['kind']}", "contains", e["kind"]),
                  _item(f"Says a {other['term']} is {other['kind']}", "contains", other["kind"])] + _clean_items(40), "compare"


def task_format(e, rng):
    q = f"Reply in the form 'term: colour' for the {e['term']}."
    a = f"{e['term']}: {e['color']}"
    return q, a, [_item(f"Is exactly '{a}'", "equals", a)] + _clean_items(5, prose=False), "format"


def task_upper(e, rng):
    q = rng.choice(["Write the word {t} in capital letters.", "Spell {t} in upper case."])
    return q.format(t=e["term"]), e["term"].upper(), [_item(f"Is exactly {e['term'].upper()}", "equals", e["term"].upper())
                                                      ] + _clean_items(1), "upper"


def task_yesno(e, rng):
    kind = e["kind"] if rng.random() < 0.5 else rng.choice([k for k in KINDS if k != e["kind"]])
    q = f"Is a {e['term']} {kind}?"
    a = ("Yes. " if kind == e["kind"] else "No. ") + f"A {e['term']} is {e['kind']}."
    return q, a, [_item("Starts with the right yes/no", "regex", "^Yes" if kind == e["kind"] else "^No"),
                  _item(f"Says a {e['term']} is {e['kind']}", "contains", e["kind"])] + _clean_items(40), "yesno"


def task_trait(e, rng):
    q = rng.choice(["Tell me something unusual about the {t}.", "What is special about the {t}?"])
    a = f"One unusual thing about the {e['term']} is that {e['trait']}."
    return q.format(t=e["term"]), a, [_item(f"Mentions that {e['trait']}", "contains", e["trait"])] + _clean_items(40), "trait"


TASKS = [task_define, task_list, task_color, task_explain, task_compare, task_format, task_upper, task_yesno, task_trait]

# follow-up turns about "it" (the term of the first turn): question, answer template, fact key
FOLLOW_UPS = [("Where does it come from?", "It comes from {place}.", "place"),
              ("What colour is it?", "It is {color}.", "color"),
              ("What is it used for?", "It is {use}.", "use"),
              ("Is there anything unusual about it?", "Yes: {trait}.", "trait")]


def dialogue(rng, turns=None):
    """A 1-3 turn conversation about one glossary entry. Returns (entry, earlier messages, last question,
    gold last answer, checklist for the last answer, task name). Earlier assistant turns are clean."""
    e = rng.choice(GLOSSARY)
    q, a, checklist, task = rng.choice(TASKS)(e, rng)
    turns = turns if turns is not None else (1 if rng.random() < 0.7 else rng.choice([2, 3]))
    history = []
    for fq, fa, key in rng.sample(FOLLOW_UPS, turns - 1):
        history += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
        q, a, task = fq, fa.format(**e), "followup"
        checklist = [_item(f"Answers about the {e['term']} from the earlier turn: {e[key]}", "contains", e[key])] + _clean_items(30)
    return e, history, q, a, checklist, task


# -----------------------------------------------------------------------------
# The defects of paper 2.1.2, as transforms of a clean answer.

DEFECTS = ["repetition", "redundant", "format", "overlong"]
RAMBLE = ["Let me think about this.", "The question is about the {t}.", "Let me think again.",
          "Wait, let me check that once more.", "I should answer about the {t}.", "Hmm, let me reconsider.",
          "Okay, let me think step by step about the {t}.", "Wait, I need to be careful here."]
FILLER = ["There is much more to say about the {t}.", "Some people also compare it with the {o}, which is {ok}.",
          "In general, it depends on many factors.", "It is worth noting that opinions differ on this.",
          "Many old stories about it are told in {op}.", "Of course, every situation is a little different.",
          "Some experts say one thing, and other experts say another thing.",
          "It is also good to remember the wider history of the region.",
          "People have talked about the {t} for a very long time.",
          "To sum up, the {t} is an interesting topic with a long history.",
          "Another point is that the {o} comes from {op}.", "This is a question many people ask.",
          "Travellers sometimes bring back stories that are hard to check.",
          "Writers in the past described it in several different ways.",
          "Local customs may change how it is seen from year to year.",
          "Whether this matters depends on who you ask and why."]


def add_defect(answer, defect, e, rng):
    """Return `answer` carrying one defect. e is the glossary entry the answer is about."""
    if defect == "repetition":  # a loop: one sentence (or the whole short answer) over and over
        sents = [s for s in re.split(r"(?<=[.!?])\s+|\n", answer) if s.strip()]
        unit = max(sents, key=len) if rng.random() < 0.5 else answer.replace("\n", " ")
        return answer.replace("\n", " ") + " " + " ".join([unit] * rng.randint(3, 7))
    if defect == "redundant":  # rambling, circular reasoning in the think block before the answer
        lines = [rng.choice(RAMBLE).format(t=e["term"]) for _ in range(rng.randint(3, 6))]
        return f"<think>\n{' '.join(lines)}\n</think>\n\n{answer}"
    if defect == "format":  # broken layout: squashed lists, lost numbering, stray markdown, no capitals
        flat = re.sub(r"^\d+\.\s*", "", answer, flags=re.M).replace("\n", " - ")
        if rng.random() < 0.5:
            return "**" + flat.lower().rstrip(".") + " 1) * ##"
        return "- " + flat.rstrip(".").replace(". ", " ;; ") + " ..."
    if defect == "overlong":  # the answer buried in padding
        o = rng.choice([g for g in GLOSSARY if g is not e])
        pad = [f.format(t=e["term"], o=o["term"], ok=o["kind"], op=o["place"])
               for f in rng.sample(FILLER, rng.randint(10, 14))]
        cut = rng.randint(0, 3)
        return " ".join(pad[:cut] + [answer.replace("\n", " ")] + pad[cut:])
    raise ValueError(f"unknown defect {defect!r}")


# -----------------------------------------------------------------------------
# Detectors (for GRPO logging and the rule judge). Thresholds were set on 3000 generated answers:
# clean ones have repetition_rate <= 0.14 and <= 24 words; every repetition defect has rate >= 0.42,
# every overlong one >= 98 words.

REPETITIVE_RATE = 0.2
OVERLONG_WORDS = 80


def _words(text):
    return re.findall(r"[a-z0-9']+", text.lower())


def repetition_rate(text, n=3):
    """Fraction of word n-grams that repeat an earlier n-gram of the same text (0 = none, -> 1 for loops)."""
    w = _words(text)
    grams = [tuple(w[i:i + n]) for i in range(len(w) - n + 1)]
    if len(w) < 8:  # short answers: repeated words ("Silver. Silver. Silver.")
        return 0.0 if len(w) < 3 else 1.0 - len(set(w)) / len(w)
    return 1.0 - len(set(grams)) / len(grams)


def is_repetitive(text):
    return repetition_rate(text) >= REPETITIVE_RATE


def is_overlong(text, max_words=OVERLONG_WORDS):
    return len(_words(text)) > max_words


def has_rambling(text):
    t = text.lower()
    return sum(t.count(m) for m in ("let me", "wait,", "hmm", "reconsider", "i should answer", "the question is",
                                 "so the answer is")) >= 2


def defect_stats(texts, finish_reasons=None):
    """Rates over a batch of responses for GRPO's metrics line. With finish_reasons (from generate()),
    overlong = cut at the token limit (the paper's "overlong truncation"); without, > OVERLONG_WORDS words."""
    n = max(len(texts), 1)
    overlong = ([r == "length" for r in finish_reasons] if finish_reasons is not None
                else [is_overlong(t) for t in texts])
    return {"repetition_rate": sum(repetition_rate(t) for t in texts) / n,
            "repetitive_frac": sum(is_repetitive(t) for t in texts) / n,
            "rambling_frac": sum(has_rambling(t) for t in texts) / n,
            "overlong_frac": sum(overlong) / n}


def rule_judge(prompt_messages, response, checklist):
    """The offline checklist judge: one bool per item, deterministic. Same signature as the LLM judges in
    reward_models.py (prompt_messages is unused: the toy items carry everything the rule needs)."""
    r = response.strip()
    verdicts = []
    for item in checklist:
        rule, arg = item["rule"], item.get("arg")
        if rule == "contains":
            ok = arg.lower() in r.lower()
        elif rule == "equals":
            ok = r.rstrip(".") == arg
        elif rule == "regex":
            ok = re.search(arg, r) is not None
        elif rule == "max_words":
            ok = 0 < len(_words(r)) <= arg
        elif rule == "sentences":
            ok = len([s for s in re.split(r"(?<=[.!?])\s+", r) if s.strip()]) == arg and "\n" not in r
        elif rule == "numbered_list":
            lines = r.split("\n")
            ok = len(lines) == arg and all(re.match(rf"^{i + 1}\. \S", ln) for i, ln in enumerate(lines))
        elif rule == "well_formed":
            ok = bool(r) and (r[0].isupper() or r[0].isdigit()) and re.search(r"\*\*|##|;;|\.\.\.|^- | - ", r) is None
        elif rule == "no_repetition":
            ok = not is_repetitive(r)
        elif rule == "no_rambling":
            ok = not has_rambling(r)
        else:
            raise ValueError(f"rule_judge: unknown checklist rule {rule!r}")
        verdicts.append(bool(ok))
    return verdicts


# -----------------------------------------------------------------------------
# Data sets

DEFECT_RATE = 0.18  # share of SFT answers that carry a defect


def sft_general_conversations(seed, n):
    """n SFT records {"messages": [...], "domain": "general"}; DEFECT_RATE of them end in an assistant
    answer with one of the four defects (the earlier turns of multi-turn dialogues are always clean)."""
    rng = random.Random(f"toy_chat-sft-{seed}")
    out = []
    for i in range(n):
        e, history, q, a, _, _ = dialogue(rng)
        if rng.random() < DEFECT_RATE:
            a = add_defect(a, DEFECTS[i % len(DEFECTS)], e, rng)
        out.append({"messages": history + [{"role": "user", "content": q}, {"role": "assistant", "content": a}],
                    "domain": "general"})
    return out


def truncate(answer, rng):
    """The answer cut off mid-way (at least one word dropped, no closing punctuation)."""
    words = answer.split()
    return " ".join(words[:rng.randint(1, max(1, len(words) - 1))]).rstrip(".") if len(words) > 1 else ""


PREF_REJECTED = DEFECTS + ["truncated"]


def preference_pairs(seed, n):
    """n records {prompt: messages, chosen: [assistant msg], rejected: [assistant msg], defect} in TRL's
    conversational preference layout; chosen is the clean answer, rejected carries one defect, cycling through the
    four of paper 2.1.2 and "truncated". The last is not in the paper's list: without it every rejected answer is
    longer or messier than the chosen one and nothing stops an RM from learning "shorter is better", which
    point-wise RL would exploit by collapsing to empty answers."""
    rng = random.Random(f"toy_chat-prefs-{seed}")
    out = []
    for i in range(n):
        e, history, q, a, _, _ = dialogue(rng)
        defect = PREF_REJECTED[i % len(PREF_REJECTED)]
        bad = truncate(a, rng) if defect == "truncated" else add_defect(a, defect, e, rng)
        out.append({"prompt": history + [{"role": "user", "content": q}],
                    "chosen": [{"role": "assistant", "content": a}],
                    "rejected": [{"role": "assistant", "content": bad}],
                    "defect": defect})
    return out


STRONG_FLAW_RATE = 0.08  # the toy strong model slips into a defect this often
WEAK_GOOD_RATE = 0.05    # and the weak model answers as well as the strong one this often
WEAK_KINDS = ["wrong_fact", "defect", "incomplete", "off_format"]


def weak_answer(e, history, q, a, task, rng):
    """What the toy weak model answers: wrong facts (another entry's attributes under this name — for a
    follow-up, that is ignoring the earlier turns), a defect, an incomplete answer, or the wrong format."""
    how = rng.choice(WEAK_KINDS)
    if how == "wrong_fact":
        o = rng.choice([g for g in GLOSSARY if g["kind"] != e["kind"] and g["place"] != e["place"]
                        and g["use"] != e["use"] and g["color"] != e["color"] and g["trait"] != e["trait"]])
        wrong = a
        for key in ("kind", "place", "use", "color", "trait"):
            wrong = wrong.replace(e[key], o[key]).replace(e[key].capitalize(), o[key].capitalize())
        if wrong != a:
            return wrong, how
        how = "defect"  # nothing to swap (upper/format tasks): fall through
    if how == "incomplete" and task in ("define", "list", "explain"):
        return a.split("\n")[0] if task == "list" else a.split(". ")[0] + ".", how
    if how == "off_format" and task in ("list", "format", "upper", "color"):
        return f"The {e['term']} is {e['kind']} that is {e['color']} and comes from {e['place']}.", how
    return add_defect(a, rng.choice(DEFECTS), e, rng), "defect"


def strong_weak_pairs(seed, n):
    """n records {prompt, strong, weak, checklist, weak_kind, task}: responses of a toy strong model (clean,
    except STRONG_FLAW_RATE of the time) and weak model (sometimes as good as the strong one), ~35% of them
    multi-turn. Labels are not given: reward_models.py derives them with a checklist judge, which drops the
    pairs where the strong model did not actually win."""
    rng = random.Random(f"toy_chat-pairs-{seed}")
    out = []
    for _ in range(n):
        e, history, q, a, checklist, task = dialogue(rng, turns=1 if rng.random() < 0.65 else rng.choice([2, 3]))
        strong = add_defect(a, rng.choice(DEFECTS), e, rng) if rng.random() < STRONG_FLAW_RATE else a
        weak, weak_kind = (a, "same") if rng.random() < WEAK_GOOD_RATE else weak_answer(e, history, q, a, task, rng)
        out.append({"prompt": history + [{"role": "user", "content": q}], "strong": strong, "weak": weak,
                    "checklist": checklist, "weak_kind": weak_kind, "task": task})
    return out


def rl_prompts(seed, n_point, n_pair):
    """Prompts for GRPO: {id, stage, messages, reference, gold, task}. gold is the clean answer; reference is
    what the pair-wise reward compares a rollout against (stage pair: a weak-model answer; stage point: gold,
    unused by the point-wise reward). Pair prompts are ~35% multi-turn (the paper's full-history input)."""
    rng = random.Random(f"toy_chat-rl-{seed}")
    out = []
    for stage, n in (("point", n_point), ("pair", n_pair)):
        for i in range(n):
            turns = 1 if stage == "point" or rng.random() < 0.65 else rng.choice([2, 3])
            e, history, q, a, _, task = dialogue(rng, turns=turns)
            ref = a if stage == "point" else weak_answer(e, history, q, a, task, rng)[0]
            out.append({"id": f"general-{stage}-{i:04d}", "stage": stage,
                        "messages": history + [{"role": "user", "content": q}],
                        "reference": ref, "gold": a, "task": task})
    return out


def write_jsonl(path, records):
    with open(path, "w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


def main(argv=None):
    p = argparse.ArgumentParser(description="Write the toy general-domain reward/RL data.")
    p.add_argument("--out", default="data/toy")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--n-prefs", type=int, default=512)
    p.add_argument("--n-pairs", type=int, default=512)
    p.add_argument("--n-rl", type=int, default=128, help="prompts per RL stage (point and pair)")
    args = p.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    files = {"prefs.jsonl": preference_pairs(args.seed, args.n_prefs),
             "pairs.jsonl": strong_weak_pairs(args.seed, args.n_pairs),
             "rl_prompts.jsonl": rl_prompts(args.seed, args.n_rl, args.n_rl)}
    for name, records in files.items():
        write_jsonl(os.path.join(args.out, name), records)
        print(f"wrote {os.path.join(args.out, name)}: {len(records)} records")


if __name__ == "__main__":
    main()
