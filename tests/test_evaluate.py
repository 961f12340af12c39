"""evaluate.py and nanbeige41/benchmarks.py: every suite on its shipped sample with a tiny model, scoring rules
(pass@k vs brute force, \\boxed{} normalisation, BFCL AST matching), the real LiveCodeBench row through the code
judge, oracle generations scoring 1.0, resume, seeded determinism, endpoint mode on 127.0.0.1, bad input."""
import argparse
import itertools
import json
import os
import threading
from http.server import ThreadingHTTPServer

import pytest
import torch

import evaluate as ev
from nanbeige41 import benchmarks as B
from nanbeige41.tokenizer import Tokenizer, toy_tokenizer_path
from http_fakes import FakeHandler

LCB_ROW = "/work/shared/fixtures/livecodebench/code_generation_lite_1873_A.jsonl"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = dict(vocab_size=4096, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
            num_key_value_heads=1, head_dim=None)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, tok):
    """A tiny random checkpoint and a tiny pair-wise RM on the same backbone."""
    import reward_models
    from nanbeige41.checkpoint import save_hf
    from nanbeige41.model import ModelConfig, Transformer
    torch.manual_seed(0)
    model = Transformer(ModelConfig.preset("toy", **TINY))
    root = tmp_path_factory.mktemp("tiny")
    save_hf(model, tok, str(root / "tiny"))
    reward_models.save_reward_model(reward_models.RewardModel(model, "pair", 256), tok, str(root / "rm"))
    return str(root / "tiny"), str(root / "rm")


def report(out, name):
    return json.load(open(os.path.join(out, name, "report.json")))


# ----------------------------------------------------------------------------- scoring rules

def test_pass_at_k_matches_brute_force():
    for n in range(1, 7):
        for c in range(n + 1):
            correct = [True] * c + [False] * (n - c)
            for k in range(1, n + 1):
                subsets = list(itertools.combinations(range(n), k))
                brute = sum(any(correct[i] for i in s) for s in subsets) / len(subsets)
                assert abs(B.pass_at_k(n, c, k) - brute) < 1e-12, (n, c, k)
    with pytest.raises(ValueError):
        B.pass_at_k(2, 1, 3)


@pytest.mark.parametrize("text, gold, ok", [
    ("so x = 3 and \\boxed{\\frac{1}{2}}", "0.5", True),
    ("\\boxed{1} first, then \\boxed{\\dfrac{5}{6}}", "\\frac{5}{6}", True),      # the last box counts
    ("\\boxed{5\\sqrt{2}}", "\\sqrt{50}", True),
    ("\\boxed{1,000}", "1000", True),
    ("\\boxed{x = 7}", "7", True),
    ("\\boxed{45^\\circ}", "45", True),
    ("\\boxed{(1, -2)}", "(1,-2)", True),
    ("\\boxed{\\frac{\\pi}{2}}", "\\pi/2", True),
    ("\\boxed{2^{10}}", "1024", True),
    ("\\boxed{\\text{12}}", "12", True),
    ("\\boxed{\\frac{1}{3}}", "0.333", False),                                     # rationals compare exactly
    ("\\boxed{(1, 2)}", "(2,1)", False),
    ("\\boxed{7}", "8", False),
    ("\\boxed{\\frac{1}{0}}", "1", False),
    ("no box: The answer is 22.", "22", True),                                      # the toy fallback
    ("nothing here", "22", False),
    ("\\boxed{9^{9^{9}}}", "1", False),                                             # refused, not computed
])
def test_boxed_answer_normalisation(text, gold, ok):
    answer, _ = B.extract_math_answer(text)
    assert B.math_equal(answer, gold) is ok


def _bfcl_item(category, functions, answer):
    return {"id": "x", "category": category, "functions": functions, "possible_answer": answer}


CONVERT = {"name": "convert", "parameters": {"type": "dict", "properties": {
    "amount": {"type": "float"}, "count": {"type": "integer"}, "unit": {"type": "string"},
    "tags": {"type": "array", "items": {"type": "string"}}, "exact": {"type": "boolean"}},
    "required": ["amount", "unit"]}}
WEATHER = {"name": "get_weather", "parameters": {"type": "dict", "properties": {"city": {"type": "string"}},
                                                 "required": ["city"]}}


@pytest.mark.parametrize("args, ok, why", [
    ({"amount": 5, "unit": "kg"}, True, ""),                                     # int -> float coercion
    ({"amount": 5.0, "unit": "KG"}, True, ""),                                   # strings: case-insensitive
    ({"amount": 5.0, "unit": "k-g."}, True, ""),                                 # and without ,./-_*^ and spaces
    ({"amount": 5.0, "unit": "lb"}, False, "not among"),
    ({"amount": "5", "unit": "kg"}, False, "type str"),
    ({"amount": 5.0}, False, "missing required"),
    ({"amount": 5.0, "unit": "kg", "count": 2}, True, ""),                       # optional given, allowed value
    ({"amount": 5.0, "unit": "kg", "count": 2.0}, False, "type float"),          # no float -> int coercion
    ({"amount": 5.0, "unit": "kg", "exact": 1}, False, "type int"),              # bool is not int
    ({"amount": 5.0, "unit": "kg", "colour": "red"}, False, "unexpected"),
    ({"amount": 5.0, "unit": "kg", "tags": ["A b"]}, True, ""),
    ({"amount": 5.0, "unit": "kg", "tags": ["ab", "cd"]}, False, "not among"),
])
def test_bfcl_simple_rules(args, ok, why):
    answer = [{"convert": {"amount": [5.0], "unit": ["kg"], "count": ["", 2], "tags": ["", ["ab"]],
                           "exact": ["", True]}}]
    got, reason = B.bfcl_check(_bfcl_item("simple", [CONVERT], answer), [{"name": "convert", "arguments": args}])
    assert got is ok and why in reason


def test_bfcl_optional_left_out_only_when_allowed():
    item = _bfcl_item("simple", [CONVERT], [{"convert": {"amount": [1.0], "unit": ["kg"], "count": [3]}}])
    ok, why = B.bfcl_check(item, [{"name": "convert", "arguments": {"amount": 1.0, "unit": "kg"}}])
    assert not ok and "not optional" in why


def test_bfcl_parallel_order_free_and_counts():
    answer = [{"get_weather": {"city": ["Brisk"]}}, {"get_weather": {"city": ["Ostra"]}}]
    item = _bfcl_item("parallel", [WEATHER], answer)
    call = lambda c: {"name": "get_weather", "arguments": {"city": c}}  # noqa: E731
    assert B.bfcl_check(item, [call("Ostra"), call("Brisk")])[0]
    assert B.bfcl_check(item, [call("Brisk"), call("Ostra")])[0]
    assert not B.bfcl_check(item, [call("Brisk"), call("Brisk")])[0]
    twice = _bfcl_item("parallel", [WEATHER], [answer[0], answer[0]])
    assert not B.bfcl_check(twice, [call("Brisk"), call("Ostra")])[0]           # one call cannot match twice
    assert "wrong number" in B.bfcl_check(item, [call("Brisk")])[1]
    multiple = _bfcl_item("multiple", [CONVERT, WEATHER], [{"get_weather": {"city": ["Brisk"]}}])
    assert B.bfcl_check(multiple, [call("brisk")])[0]
    assert "wrong function" in B.bfcl_check(multiple, [{"name": "convert", "arguments": {"city": "Brisk"}}])[1]


def test_bfcl_irrelevance_means_no_call():
    item = _bfcl_item("irrelevance", [WEATHER], None)
    assert B.bfcl_check(item, [])[0]
    assert not B.bfcl_check(item, [{"name": "get_weather", "arguments": {"city": "x"}}])[0]


def test_choice_extraction():
    assert B.extract_choice("Let me see... The answer is (C).", 4) == "C"
    assert B.extract_choice("B", 4) == "B"
    assert B.extract_choice("\\boxed{D}", 4) == "D"
    assert B.extract_choice("The answer is (E).", 4) is None                      # not one of four choices
    assert B.extract_choice("I am not sure.", 4) is None
    assert B.extract_choice("The answer is a long story.", 4) is None


# ----------------------------------------------------------------------------- LiveCodeBench rows and the judge

SHORT_SORT = """```python
t = int(input())
for _ in range(t):
    s = input().strip()
    print("YES" if sum(a != b for a, b in zip(s, "abc")) <= 2 else "NO")
```"""


def test_real_lcb_row_decodes_and_is_judged(tok):
    items = ev.load_items("code", LCB_ROW, None)
    assert len(items) == 1 and items[0]["id"] == "1873_A"
    assert len(items[0]["public_test_cases"]) >= 1 and len(items[0]["private_test_cases"]) >= 1  # base64/zlib/pickle
    assert all(t["testtype"] == "stdin" for t in items[0]["private_test_cases"])
    args = argparse.Namespace(test_time_s=4.0, judge_workers=1, no_complexity=True, n_samples=2)
    gens = [[{"text": "Check each string.\n</think>\n\n" + SHORT_SORT, "finish_reason": "eos"},
             {"text": "x\n</think>\n\n" + SHORT_SORT.replace("<= 2", "<= 0"), "finish_reason": "eos"}]]
    right, wrong = ev.score_code(items, gens, args, tok)[0]
    total = len(items[0]["public_test_cases"]) + len(items[0]["private_test_cases"])
    assert right["correct"] and right["verdicts"] == ["AC"] * total
    assert not wrong["correct"] and "WA" in wrong["failure"]


def test_shipped_code_sample_private_tests_round_trip():
    import base64
    import pickle
    import zlib
    raw = [json.loads(line) for line in open(ev.DEFAULT_DATA["code"])]
    items = ev.load_items("code", ev.DEFAULT_DATA["code"], None)
    for r, it in zip(raw, items):
        assert isinstance(r["public_test_cases"], str) and isinstance(r["metadata"], str)
        decoded = json.loads(pickle.loads(zlib.decompress(base64.b64decode(r["private_test_cases"]))))
        assert decoded == it["private_test_cases"]
    assert any(it["starter_code"].startswith("class Solution") for it in items)


# ----------------------------------------------------------------------------- every suite, tiny model

@pytest.mark.slow
def test_every_suite_on_its_shipped_sample(tiny, tmp_path):
    ckpt, rm = tiny
    out = str(tmp_path / "all")
    assert ev.main(["--suite", "all", "--ckpt", ckpt, "--rm", rm, "--out", out, "--max-new-tokens", "12",
                    "--max-turns", "2", "--no-complexity"]) == 0
    for suite in ev.SUITES:
        r = report(os.path.join(out, suite), "tiny")
        items = ev.load_items(suite, ev.DEFAULT_DATA[suite], argparse.Namespace(baseline=None))
        assert [it["id"] for it in r["items"]] == [it["id"] for it in items]  # none dropped, in order
        for rec in r["items"]:
            s = rec["samples"][0]
            assert {"response", "parsed", "correct", "failure"} <= set(s)
            assert s["correct"] or s["failure"]  # every miss says why
        assert r["metrics"]["items"] == len(items) and ev.HEADLINE[suite] in r["metrics"]
        assert r["settings"]["temperature"] == 0.0 and r["settings"]["max_new_tokens"] == 12
    summary = open(os.path.join(out, "summary.md")).read()
    assert "| tiny |" in summary and all(f"## {s}" in summary for s in ev.SUITES)
    assert os.path.isfile(os.path.join(out, "chart.png")) or os.path.isfile(os.path.join(out, "chart.svg"))


# ----------------------------------------------------------------------------- oracle and failing generators

class FakeGenerator:
    """Stands in for evaluate.Generator: `reply(messages, tools)` -> text; counts generated requests."""
    calls = []

    def __init__(self, args, ckpt=None):
        self.ckpt, self.tok = ckpt, Tokenizer.from_pretrained(toy_tokenizer_path())

    def __call__(self, requests, max_new_tokens, seed):
        FakeGenerator.calls.append(len(requests))
        return [{"text": "ok\n</think>\n\n" + FakeGenerator.reply(m, t), "finish_reason": "eos"} for m, t in requests]


def oracle(messages, tools):
    """The right answer for the shipped math / gpqa / tool samples, read from their files."""
    user = messages[-1]["content"]
    for it in B.load_math(ev.DEFAULT_DATA["math"]):
        if user.startswith(it["problem"]):
            return f"So \\boxed{{{it['answer']}}}"
    for it in B.load_gpqa(ev.DEFAULT_DATA["gpqa"]):
        if user.startswith(it["question"]):
            line = next(x for x in user.split("\n") if x.endswith(") " + it["choices"][0]))
            return f"The answer is {line[:3]}."
    for it in B.load_bfcl(ev.DEFAULT_DATA["tool"]):
        if it["messages"][-1]["content"] == user:
            calls = [{"name": n, "arguments": {p: next(v for v in vals if v != "") for p, vals in a.items()
                                               if "" not in vals}}
                     for exp in it["possible_answer"] or [] for n, a in exp.items()]
            return "\n".join(f'<tool_call>\n{json.dumps(c)}\n</tool_call>' for c in calls)
    raise AssertionError(f"no oracle for {user!r}")


@pytest.mark.parametrize("suite", ["math", "gpqa", "tool"])
def test_oracle_generations_score_one(monkeypatch, tmp_path, suite):
    monkeypatch.setattr(ev, "Generator", FakeGenerator)
    monkeypatch.setattr(FakeGenerator, "reply", staticmethod(oracle), raising=False)
    assert ev.main(["--suite", suite, "--ckpt", "oracle", "--out", str(tmp_path)]) == 0
    r = report(str(tmp_path), "oracle")
    assert r["metrics"][ev.HEADLINE[suite]] == 1.0, [x for x in r["items"] if not x["score"]]
    if suite == "gpqa":  # the gold letter moves with the seeded shuffle: not always the first
        letters = {x["samples"][0]["parsed"] for x in r["items"]}
        assert len(letters) > 1


def test_matharena_layout(monkeypatch, tmp_path):
    monkeypatch.setattr(ev, "Generator", FakeGenerator)
    answers = {"2^{10}": "1000", "divisors": "9", "7^{4}": "1", "consecutive": "25"}
    monkeypatch.setattr(FakeGenerator, "reply", staticmethod(
        lambda m, t: next(f"\\boxed{{{a}}}" for k, a in answers.items() if k in m[-1]["content"])), raising=False)
    data = os.path.join(ev.SAMPLES, "math", "matharena_sample")
    assert ev.main(["--suite", "math", "--data", data, "--ckpt", "x", "--out", str(tmp_path)]) == 0
    assert report(str(tmp_path), "x")["metrics"]["accuracy"] == 1.0


def test_failures_are_scored_with_reasons_never_dropped(monkeypatch, tmp_path):
    def broken(self, requests, max_new_tokens, seed):
        raise RuntimeError("out of memory")
    monkeypatch.setattr(ev, "Generator", FakeGenerator)
    monkeypatch.setattr(FakeGenerator, "__call__", broken)
    assert ev.main(["--suite", "tool", "--ckpt", "x", "--out", str(tmp_path)]) == 0
    r = report(str(tmp_path), "x")
    assert len(r["items"]) == 10 and r["metrics"]["accuracy"] == 0.0
    assert all("generation failed: RuntimeError: out of memory" in x["samples"][0]["failure"] for x in r["items"])


def test_qa_suite_through_the_agent_loop(monkeypatch, tmp_path):
    import search_agent as sa
    from nanbeige41 import agent_policies

    class Scripted(FakeGenerator):
        def policy(self, seed):  # search once, then answer with the gold (read from the file)
            gold = {it["question"]: it["answer"] for it in B.load_qa(ev.DEFAULT_DATA["qa"])}

            def script(messages, turn):
                if turn == 0:
                    return {"role": "assistant", "content": "", "reasoning_content": "search",
                            "tool_calls": [{"name": "search", "arguments": {"query": messages[1]["content"]}}]}
                return {"role": "assistant", "content": sa.format_answer(gold[messages[1]["content"]]),
                        "reasoning_content": "done"}
            return agent_policies.ScriptedPolicy(script, self.tok)
    monkeypatch.setattr(ev, "Generator", Scripted)
    assert ev.main(["--suite", "qa", "--ckpt", "x", "--out", str(tmp_path)]) == 0
    m = report(str(tmp_path), "x")["metrics"]
    assert m["gaia"] == 1.0 and m["em"] == 1.0 and m["turns"] == 2.0 and m["answered"] == 1.0


def test_arena_judge_both_orders():
    replies = iter(["[[A>B]]", "[[A>B]]", "[[A>>B]]", "[[B>A]]", "no label", "[[A=B]]"])
    chat = lambda messages: next(replies)  # noqa: E731
    assert ev.arena_judge(chat, "p", "mine", "base") == 0.5    # wins as A, loses as B: position bias cancels
    assert ev.arena_judge(chat, "p", "mine", "base") == 1.0
    assert ev.arena_judge(chat, "p", "mine", "base") == 0.25   # unreadable = loss, tie = 0.5


# ----------------------------------------------------------------------------- resume and determinism

def test_resume_skips_finished_items(monkeypatch, tmp_path):
    monkeypatch.setattr(ev, "Generator", FakeGenerator)
    monkeypatch.setattr(FakeGenerator, "reply", staticmethod(oracle), raising=False)
    args = ["--suite", "math", "--ckpt", "x", "--out", str(tmp_path), "--batch-size", "3"]
    FakeGenerator.calls = []
    assert ev.main(args) == 0
    assert FakeGenerator.calls == [3, 3, 2]
    first = report(str(tmp_path), "x")
    FakeGenerator.calls = []
    assert ev.main(args) == 0
    assert FakeGenerator.calls == []  # everything cached
    cache = os.path.join(str(tmp_path), "x", "cache.jsonl")
    lines = open(cache).read().splitlines()
    open(cache, "w").write("\n".join(lines[:-1]) + "\n" + lines[-1][:20])  # a crash while writing the last item
    assert ev.main(args) == 0
    assert FakeGenerator.calls == [2]  # only the chunk holding the missing item
    assert report(str(tmp_path), "x")["items"] == first["items"]
    FakeGenerator.calls = []
    assert ev.main(args + ["--seed", "1"]) == 0  # other settings: the cache is not reused
    assert FakeGenerator.calls == [3, 3, 2]


def test_seeded_sampling_is_deterministic(tiny, tmp_path):
    ckpt, _ = tiny
    runs = []
    for name, seed in (("a", "3"), ("b", "3"), ("c", "4")):
        out = str(tmp_path / name)
        assert ev.main(["--suite", "math", "--ckpt", ckpt, "--out", out, "--n-samples", "2", "--max-new-tokens", "8",
                        "--seed", seed]) == 0
        r = report(out, "tiny")
        assert r["settings"]["temperature"] == 0.7 and "pass@2" not in r["metrics"]
        runs.append([s["response"] for it in r["items"] for s in it["samples"]])
    assert runs[0] == runs[1] and runs[0] != runs[2]


# ----------------------------------------------------------------------------- endpoint mode

class FakeOpenAI(FakeHandler):
    requests = []


    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        FakeOpenAI.requests.append((self.path, body))
        user = body["messages"][-1]["content"]
        msg = {"role": "assistant", "content": "\\boxed{85}" if "37 + 48" in user else "I think 3."}
        if body.get("tools"):
            msg = {"role": "assistant", "content": "", "tool_calls": [{"id": "c0", "type": "function", "function": {
                "name": "get_weather", "arguments": json.dumps({"city": "Varo"})}}]}
        data = json.dumps({"choices": [{"index": 0, "message": msg, "finish_reason": "stop"}]}).encode()
        self.reply(data)


@pytest.fixture
def server():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), FakeOpenAI)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    FakeOpenAI.requests = []
    yield f"http://127.0.0.1:{srv.server_address[1]}/v1"
    srv.shutdown()


def test_endpoint_mode(server, tmp_path):
    out = str(tmp_path / "m")
    assert ev.main(["--suite", "math", "--endpoint", server, "--model", "served-model", "--out", out]) == 0
    r = report(out, "served-model")
    assert r["metrics"]["accuracy"] == 1 / 8 and r["items"][0]["samples"][0]["parsed"] == "85"
    path, body = FakeOpenAI.requests[0]
    assert path == "/v1/chat/completions" and body["model"] == "served-model" and "tools" not in body  # no tools: the key is left out (null or [] is an error to some servers)
    assert body["temperature"] == 0.0 and body["max_tokens"] == ev.MAX_NEW_TOKENS["math"]
    out = str(tmp_path / "t")
    assert ev.main(["--suite", "tool", "--endpoint", server, "--model", "served-model", "--out", out]) == 0
    items = {x["id"]: x for x in report(out, "served-model")["items"]}
    assert items["simple_0"]["score"] == 1.0 and items["parallel_0"]["score"] == 0.0  # one call of two
    assert FakeOpenAI.requests[-1][1]["tools"][0]["function"]["parameters"]["type"] == "object"  # dict -> object


# ----------------------------------------------------------------------------- bad input

def _write(path, lines):
    path.write_text("".join(line + "\n" for line in lines))
    return str(path)


@pytest.mark.parametrize("suite, name, lines, expected", [
    ("math", "m.jsonl", ['{"problem": "1+1", "answer": "2"}', '{"problem": "2+2"}'],
     ["m.jsonl:2", "missing field(s) answer", "expected JSONL {problem, answer"]),
    ("math", "m.jsonl", ['{"problem": "1+1", "answer": "2"}', '{"problem": '], ["m.jsonl:2", "malformed JSON"]),
    ("math", "m.jsonl", [], ["empty data file"]),
    ("gpqa", "g.jsonl", ['{"question": "q", "choices": ["a", "b"], "answer": "Z"}'], ["g.jsonl:1", "'answer'"]),
    ("qa", "q.jsonl", ['{"query": "q"}'], ["q.jsonl:1", "task_question"]),
    ("code", "c.jsonl", ['{"question_id": "a", "public_test_cases": "[]", "private_test_cases": "not base64"}'],
     ["c.jsonl:1", "private_test_cases", "expected LiveCodeBench"]),
    ("tool", "BFCL_v3_simple.json", ['{"id": "simple_0", "question": [[{"role": "user", "content": "hi"}]], '
                                     '"function": []}'], ["possible_answer", "BFCL_v3_simple.json"]),
])
def test_bad_input_names_file_line_and_fields(tmp_path, capsys, suite, name, lines, expected):
    data = _write(tmp_path / name, lines)
    assert ev.main(["--suite", suite, "--data", data, "--ckpt", "x", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("evaluate: error:") and all(e in err for e in expected), err


def test_usage_errors(capsys, tmp_path):
    assert ev.main(["--suite", "math", "--out", str(tmp_path)]) == 2                      # no model
    assert ev.main(["--suite", "math", "--ckpt", "x", "--n-samples", "4", "--temperature", "0"]) == 2
    assert ev.main(["--suite", "pref", "--ckpt", "x", "--rm", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err
    assert "--ckpt DIR" in err and "meaningless" in err and "no pair-wise RM" in err


def test_bfcl_folder_skips_uncovered_categories(tmp_path):
    import shutil
    shutil.copytree(ev.DEFAULT_DATA["tool"], tmp_path / "data")
    (tmp_path / "data" / "BFCL_v4_multi_turn_base.json").write_text('{"id": "multi_turn_base_0"}\n')
    items = B.load_bfcl(str(tmp_path / "data"))
    assert len(items) == 10 and not any("multi_turn" in it["category"] for it in items)
    with pytest.raises(B.FormatError, match="not covered"):
        B.load_bfcl(str(tmp_path / "data" / "BFCL_v4_multi_turn_base.json"))
