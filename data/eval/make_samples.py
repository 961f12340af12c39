"""Writes the small evaluation samples under data/eval/, each in its benchmark's public file format. Every item is
our own (toy-world facts, toy code families with a fresh seed, hand-written questions); none is copied from a
benchmark. Deterministic: rerunning gives byte-identical files.

    python data/eval/make_samples.py
"""
import base64
import csv
import json
import os
import pickle
import random
import sys
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))
from nanbeige41 import toy_code, toy_world  # noqa: E402


def write_jsonl(path, rows):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


def lcb_private(tests):
    """LiveCodeBench's private_test_cases encoding: base64(zlib(pickle(json string)))."""
    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(tests)))).decode()


# ----------------------------------------------------------------------------- code (LCB code_generation_lite)

def code_rows():
    rows = []
    for k, family in enumerate(toy_code.FAMILIES):  # one instance per toy family, from a fresh seed: unseen ones
        name = family["name"]
        p = toy_code.make_problem(family, 20, random.Random(2026 + k))
        rows.append({
            "question_title": f"Sample {k + 1}: {name}", "question_content": p["question_content"], "platform": "toy",
            "question_id": f"eval_{name}", "contest_id": "toy_eval", "contest_date": "2026-11-01T00:00:00",
            "starter_code": "", "difficulty": "easy",
            "public_test_cases": json.dumps(p["public_test_cases"]), "private_test_cases": lcb_private(p["private_test_cases"]),
            "metadata": "{}",
            # beyond LCB's fields: the complexity label and what the complexity judge needs to measure it
            "optimal_complexity": p["optimal_complexity"], "input_generator": p["input_generator"],
            "reference_solution": p["reference_solution"]})
    functional = [
        ("countPeaks", "Given an integer array nums, return how many indices i (0 < i < len(nums) - 1) have "
         "nums[i] greater than both neighbours.", "def countPeaks(self, nums: List[int]) -> int:",
         [([[1, 3, 2, 4, 1]], 2), ([[5, 4, 3]], 0), ([[1, 2, 1, 2, 1, 2, 1]], 3), ([[7]], 0), ([[2, 9, 2]], 1)]),
        ("shiftWord", "Given a lowercase string word and an integer k, shift every letter k places forward in the "
         "alphabet (z wraps to a) and return the result.", "def shiftWord(self, word: str, k: int) -> str:",
         [(["abc", 1], "bcd"), (["xyz", 2], "zab"), (["hello", 0], "hello"), (["a", 25], "z"), (["zz", 27], "aa")]),
    ]
    for name, statement, signature, cases in functional:
        tests = [{"input": "\n".join(json.dumps(a) for a in args), "output": json.dumps(out), "testtype": "functional"}
                 for args, out in cases]
        rows.append({
            "question_title": name, "question_content": statement, "platform": "leetcode", "question_id": f"eval_{name}",
            "contest_id": "toy_eval", "contest_date": "2026-11-01T00:00:00",
            "starter_code": f"class Solution:\n    {signature}\n        ", "difficulty": "easy",
            "public_test_cases": json.dumps(tests[:2]), "private_test_cases": lcb_private(tests[2:]),
            "metadata": json.dumps({"func_name": name})})
    return rows


# ----------------------------------------------------------------------------- math

MATH = [  # (problem, answer): the toy SFT's arithmetic style, and a few with fraction / expression answers
    ("What is 37 + 48?", "85"), ("What is 9 * 14?", "126"), ("What is 600 - 275?", "325"),
    ("Solve for x: 5x + 7 = 52.", "9"), ("What is 25% of 480?", "120"),
    ("A rectangle is 6 m wide and 9 m long. What is its area in square metres?", "54"),
    ("What is $\\frac{1}{2} + \\frac{1}{3}$? Give the answer as a fraction.", "\\frac{5}{6}"),
    ("Simplify $\\sqrt{50}$.", "5\\sqrt{2}"),
]
MATHARENA = [("Compute $2^{10} - 24$.", "1000"), ("How many positive divisors does $36$ have?", "9"),
             ("Find the remainder when $7^{4}$ is divided by $10$.", "1"),
             ("The sum of three consecutive integers is $72$. What is the largest of them?", "25")]


# ----------------------------------------------------------------------------- GPQA-style multiple choice

GPQA = [
    ("Which particle carries a negative electric charge?", ["electron", "proton", "neutron", "photon"]),
    ("What is the chemical formula of table salt?", ["NaCl", "KCl", "NaOH", "CaCO3"]),
    ("Which planet is closest to the Sun?", ["Mercury", "Venus", "Earth", "Mars"]),
    ("In which organelle does aerobic respiration mainly take place?", ["mitochondrion", "ribosome", "nucleus",
                                                                        "Golgi apparatus"]),
    ("What is the SI unit of force?", ["newton", "joule", "watt", "pascal"]),
    ("Which gas makes up most of Earth's atmosphere?", ["nitrogen", "oxygen", "argon", "carbon dioxide"]),
    ("What is the pH of pure water at 25 degrees Celsius?", ["7", "0", "14", "1"]),
    ("Which quantity is conserved in an elastic collision but not in an inelastic one?",
     ["kinetic energy", "momentum", "mass", "electric charge"]),
]


# ----------------------------------------------------------------------------- deep-search QA over the toy world

def qa_rows():
    world = toy_world.load_world(os.path.join(HERE, "..", "toy", "world.json"))
    ents = {e["id"]: e for e in world["entities"]}
    title = lambda i: ents[i]["title"]  # noqa: E731
    rng = random.Random(14)
    rows = []
    countries = sorted((e for e in world["entities"] if e["type"] == "country"), key=lambda e: e["id"])
    cities = sorted((e for e in world["entities"] if e["type"] == "city"), key=lambda e: e["id"])
    people = sorted((e for e in world["entities"] if e["type"] == "person"), key=lambda e: e["id"])
    companies = sorted((e for e in world["entities"] if e["type"] == "company"), key=lambda e: e["id"])
    for c in rng.sample(countries, 2):
        rows.append((f"Which city is the capital of {c['title']}?", title(c["relations"]["capital"])))
    for c in rng.sample(countries, 1):
        rows.append((f"Which language is official in {c['title']}?", c["attributes"]["language"]))
    for c in rng.sample(cities, 2):
        rows.append((f"Which country is {c['title']} in?", title(c["relations"]["located_in"])))
    for p in rng.sample(people, 2):
        rows.append((f"Where was {p['title']} born?", title(p["relations"]["born_in"])))
    for c in rng.sample(companies, 1):  # two hops: company -> city -> country
        city = ents[c["relations"]["headquartered_in"]]
        rows.append((f"In which country is the city where {c['title']} has its headquarters?",
                     title(city["relations"]["located_in"])))
    return rows


# ----------------------------------------------------------------------------- Arena-Hard-style preference

PREF = [  # (category, prompt, baseline answer: a weak reference with the defects the RMs learned to punish)
    ("hard_prompt", "What colour is a velvel? Answer in one word.", "It is worth noting that opinions differ on "
     "this. Blue. Blue. Blue."),
    ("hard_prompt", "Spell tinlanzu in upper case.", "tinlanzu tinlanzu"),
    ("hard_prompt", "Give me three facts about the droka as a numbered list.", "The droka is a dance. It is a dance."),
    ("hard_prompt", "Is a kapa a clay oven?", "In general, it depends on many factors. Some people say yes."),
    ("creative_writing", "Explain in two sentences why people value the morda.", "People value the morda. People "
     "value the morda. People value the morda."),
    ("creative_writing", "Tell me what a gorlan is.", "**a gorlan is a thing 1) * ##"),
    ("hard_prompt", "What is the difference between a shogor and a lantin?", "Whether this matters depends on who "
     "you ask and why."),
    ("creative_writing", "Tell me something unusual about the zudazu.", "- Yes ..."),
]


# ----------------------------------------------------------------------------- BFCL

def fn(name, description, props, required):
    return {"name": name, "description": description,
            "parameters": {"type": "dict", "properties": props, "required": required}}


WEATHER = fn("get_weather", "Current weather in a city.", {"city": {"type": "string", "description": "city name"}},
             ["city"])
PRICE = fn("get_price", "Price of a product in the shop, in VAL.", {"product": {"type": "string"}}, ["product"])
CONVERT = fn("convert_currency", "Convert an amount between currencies.",
             {"amount": {"type": "float"}, "from_currency": {"type": "string"}, "to_currency": {"type": "string"}},
             ["amount", "from_currency", "to_currency"])
ADD_DAYS = fn("add_days", "The date a number of days after a date (YYYY-MM-DD).",
              {"date": {"type": "string"}, "days": {"type": "integer"},
               "calendar": {"type": "string", "description": "optional, default gregorian"}}, ["date", "days"])
SYSTEM = {"role": "system", "content": "You are a helpful assistant. Call a tool when it helps; answer directly "
                                       "when it does not."}


def bfcl_files():
    def q(text):
        return [[SYSTEM, {"role": "user", "content": text}]]
    data = {
        "simple": [
            ("What is the weather like in Varo right now?", [WEATHER], [{"get_weather": {"city": ["Varo"]}}]),
            ("What date is 12 days after 2026-03-04?", [ADD_DAYS],
             [{"add_days": {"date": ["2026-03-04"], "days": [12], "calendar": ["", "gregorian"]}}]),
            ("How much is 250 MAR in DUN?", [CONVERT],
             [{"convert_currency": {"amount": [250.0], "from_currency": ["MAR"], "to_currency": ["DUN"]}}]),
        ],
        "multiple": [
            ("I want to buy 3 of the kettle. How much will that cost?", [WEATHER, PRICE, CONVERT],
             [{"get_price": {"product": ["kettle"]}}]),
            ("What is the weather like in Tamsin right now?", [PRICE, WEATHER], [{"get_weather": {"city": ["Tamsin"]}}]),
        ],
        "parallel": [
            ("Which is warmer right now, Brisk or Ostra?", [WEATHER],
             [{"get_weather": {"city": ["Brisk"]}}, {"get_weather": {"city": ["Ostra"]}}]),
            ("Which is warmer right now, Lintel or Zemla?", [WEATHER],
             [{"get_weather": {"city": ["Lintel"]}}, {"get_weather": {"city": ["Zemla"]}}]),
        ],
        "parallel_multiple": [
            ("What is the weather in Caldo, and what is the price of the lamp?", [WEATHER, PRICE],
             [{"get_weather": {"city": ["Caldo"]}}, {"get_price": {"product": ["lamp"]}}]),
        ],
        "irrelevance": [("What is 7 plus 15?", [WEATHER], None), ("Please convert 120 VAL for me.", [CONVERT], None)],
    }
    files = {}
    for category, items in data.items():
        rows, answers = [], []
        for k, (text, functions, truth) in enumerate(items):
            rows.append({"id": f"{category}_{k}", "question": q(text), "function": functions})
            if truth is not None:
                answers.append({"id": f"{category}_{k}", "ground_truth": truth})
        files[f"BFCL_v3_{category}.json"] = (rows, answers)
    return files


def main():
    write_jsonl(os.path.join(HERE, "code", "code_generation_lite.jsonl"), code_rows())
    write_jsonl(os.path.join(HERE, "math", "problems.jsonl"),
                [{"id": f"math_{k}", "problem": p, "answer": a} for k, (p, a) in enumerate(MATH)])
    arena_dir = os.path.join(HERE, "math", "matharena_sample")
    os.makedirs(os.path.join(arena_dir, "problems"), exist_ok=True)
    with open(os.path.join(arena_dir, "answers.csv"), "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["id", "answer"])
        for k, (problem, answer) in enumerate(MATHARENA, 1):
            w.writerow([k, answer])
            with open(os.path.join(arena_dir, "problems", f"{k}.tex"), "w", encoding="utf-8") as g:
                g.write(problem + "\n")
    gpqa = []
    for k, (question, choices) in enumerate(GPQA):  # the correct choice is written first; "answer" names it
        gpqa.append({"id": f"gpqa_{k}", "question": question, "choices": choices, "answer": choices[0]})
    write_jsonl(os.path.join(HERE, "gpqa", "gpqa_sample.jsonl"), gpqa)
    qa = qa_rows()
    write_jsonl(os.path.join(HERE, "qa", "toy_world_qa.jsonl"),
                [{"id": f"qa_{k}", "question": q, "answer": a} for k, (q, a) in enumerate(qa[:6])])
    write_jsonl(os.path.join(HERE, "qa", "gaia_layout.jsonl"),
                [{"task_id": f"gaia_{k}", "task_question": q, "ground_truth": a, "level": 1}
                 for k, (q, a) in enumerate(qa[6:])])
    write_jsonl(os.path.join(HERE, "pref", "question.jsonl"),
                [{"uid": f"pref_{k}", "category": c, "subcategory": "toy", "prompt": p} for k, (c, p, _) in enumerate(PREF)])
    write_jsonl(os.path.join(HERE, "pref", "model_answer", "toy_baseline.jsonl"),
                [{"uid": f"pref_{k}", "ans_id": f"baseline_{k}", "model": "toy_baseline",
                  "messages": [{"role": "user", "content": p}, {"role": "assistant", "content": {"answer": b}}]}
                 for k, (_, p, b) in enumerate(PREF)])
    for name, (rows, answers) in bfcl_files().items():
        write_jsonl(os.path.join(HERE, "tool", name), rows)
        if answers:
            write_jsonl(os.path.join(HERE, "tool", "possible_answer", name), answers)
    print(f"wrote the evaluation samples under {HERE}")


if __name__ == "__main__":
    main()
