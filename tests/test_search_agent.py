"""search_agent.py tools, web backends (against a local HTTP server), answer scoring, critic, SFT data."""
import itertools
import json
import math
import os
import threading
import time
from http.server import ThreadingHTTPServer

import pytest

import search_agent as sa
from nanbeige41 import paths, qa_scoring, search_tools
from nanbeige41 import toy_world
from http_fakes import FakeHandler

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def wiki():
    return search_tools.LocalWiki.load()


@pytest.fixture(scope="module")
def toolbox(wiki):
    return search_tools.Toolbox(wiki, wiki)


# ----------------------------------------------------------------------------- BM25 and local tools

def test_bm25_matches_the_formula():
    docs = ["red apple pie", "green apple", "red red car", "blue sky"]
    index = search_tools.BM25(docs, k1=1.2, b=0.75)
    avgdl = sum(len(d.split()) for d in docs) / len(docs)
    query = "red apple"
    for d, doc in enumerate(docs):
        words = doc.split()
        expected = 0.0
        for t in {"red", "apple"}:
            df = sum(t in x.split() for x in docs)
            tf = words.count(t)
            idf = math.log(1 + (len(docs) - df + 0.5) / (df + 0.5))
            expected += idf * tf * 2.2 / (tf + 1.2 * (1 - 0.75 + 0.75 * len(words) / avgdl))
        assert index.scores(query)[d] == pytest.approx(expected)
    assert [i for i, _ in index.top(query, 10)] == [0, 2, 1]  # "blue sky" scores 0 and is not returned


def test_search_finds_an_entitys_own_page(wiki):
    entities = wiki.entities[::5]
    hits = sum(wiki.search(e["title"], 3)[0]["url"] == e["url"] for e in entities)
    assert hits / len(entities) > 0.95


def test_search_and_visit_observations(toolbox, wiki):
    person = next(e for e in wiki.entities if e["type"] == "person" and "mayor_of" in e["relations"])
    city = wiki.by_slug[person["relations"]["mayor_of"]]["title"]
    obs, ok = toolbox.call("search", {"query": f"{person['title']} mayor of"})
    assert ok and obs.startswith("1. ") and person["url"] in obs and f"mayor of {city}" in obs
    assert obs.count("\n") == 2 * 3 - 1  # top 3 results, a header line and a snippet each
    obs, ok = toolbox.call("visit", {"url": person["url"], "goal": "where was he born"})
    assert ok and "was born in" in obs and len(obs) < 700
    obs, ok = toolbox.call("visit", {"url": person["url"]})
    assert ok and "(part 1 of 1)" in obs and "Last modified on" in obs


def test_long_pages_come_in_parts(wiki):
    tools = search_tools.Toolbox(wiki, wiki, part_chars=100)
    page = wiki.entities[0]
    first, ok = tools.call("visit", {"url": page["url"]})
    n_parts = int(first.split(" of ")[1].split(")")[0])
    assert ok and n_parts > 2
    text = "".join(tools.call("visit", {"url": page["url"], "part": k})[0].split("\n", 1)[1]
                   for k in range(1, n_parts + 1))
    assert text == wiki.fetch(page["url"])[2]
    obs, ok = tools.call("visit", {"url": page["url"], "part": n_parts + 1})
    assert not ok and obs.startswith("Error: part must be")


@pytest.mark.parametrize("name, arguments, expected", [
    ("browse", {"query": "x"}, "unknown tool 'browse'"),
    ("search", {}, "missing ['query']"),
    ("search", {"query": "x", "lang": "en"}, "unknown ['lang']"),
    ("search", ["x"], "must be a JSON object"),
    ("search", {"query": "  "}, "non-empty query"),
    ("visit", {"url": "https://toywiki.org/wiki/No_Such_Page"}, "page not found"),
    ("python", {"code": "print(1)"}, "unknown tool 'python'"),  # not offered without the sandbox
])
def test_bad_calls_become_error_observations(toolbox, name, arguments, expected):
    obs, ok = toolbox.call(name, arguments)
    assert not ok and obs.startswith("Error:") and expected in obs


def test_a_crashing_backend_is_an_observation(wiki):
    class Broken:
        def search(self, query, k):
            raise KeyError("index corrupted")
    obs, ok = search_tools.Toolbox(Broken(), wiki).call("search", {"query": "x"})
    assert not ok and "KeyError" in obs


def test_python_tool_only_through_the_sandbox(wiki):
    calls = []
    tools = search_tools.Toolbox(wiki, wiki, python_runner=lambda code: calls.append(code) or "42")
    assert "python" in tools.names and tools.call("python", {"code": "print(42)"}) == ("42", True)
    assert calls == ["print(42)"]


# ----------------------------------------------------------------------------- web backends on 127.0.0.1

class FakeWeb(FakeHandler):
    """Speaks Serper's and Jina Reader's JSON. Queries / urls containing a mode word misbehave."""
    hits = {}


    def _misbehave(self, key):
        FakeWeb.hits[key] = FakeWeb.hits.get(key, 0) + 1
        if "fail500" in key or ("flaky" in key and FakeWeb.hits[key] <= 2):
            self.reply(status=500, body={"error": "boom"})
            return True
        if "notfound" in key:
            self.reply(status=404, body={"error": "no"})
            return True
        if "slow" in key:
            time.sleep(0.5)
        return False

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        FakeWeb.last_key = self.headers.get("X-API-KEY")
        if self._misbehave(body["q"]):
            return
        self.reply(status=200, body={"searchParameters": {"q": body["q"]}, "organic": [
            {"title": f"Result {i} for {body['q']}", "link": f"https://example.org/{i}",
             "snippet": f"snippet {i}", "position": i} for i in range(1, body["num"] + 3)]})

    def do_GET(self):
        target = self.path[1:]
        if self._misbehave(target):
            return
        if "plain" in target:
            self.reply("Title: plain\n\nJust text. The capital is Kessa.", 200, "text/plain")
            return
        self.reply(status=200, body={"code": 200, "status": 20000, "data": {
            "title": "Example page", "url": target,
            "content": "Intro sentence. The capital of Velmoria is Kessa. Other things."}})


@pytest.fixture(scope="module")
def web(monkeypatch_module=None):
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeWeb)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    http = dict(retries=2, backoff_s=0.01, timeout_s=0.2)
    yield search_tools.Toolbox(search_tools.SerperSearch(base, **http), search_tools.JinaReader(base, **http))
    server.shutdown()


def test_serper_client(web, monkeypatch):
    monkeypatch.setenv("SERPER_API_KEY", "sk-secret-123")
    obs, ok = web.call("search", {"query": "capital of velmoria"})
    assert ok and "1. Result 1 for capital of velmoria | https://example.org/1\nsnippet 1" in obs
    assert obs.count("https://example.org/") == 3  # top_k, though the server sent more
    assert FakeWeb.last_key == "sk-secret-123"


def test_missing_key_is_an_observation(web, monkeypatch):
    monkeypatch.delenv("SERPER_API_KEY", raising=False)
    obs, ok = web.call("search", {"query": "x"})
    assert not ok and "SERPER_API_KEY is not set" in obs


@pytest.mark.parametrize("query, expected, attempts", [
    ("fail500 always", "HTTP 500 after 3 attempt(s)", 3),
    ("flaky twice", None, 3),                        # 500, 500, then 200: retries with back-off win
    ("notfound", "HTTP 404 after 1 attempt(s)", 1),  # a client error is not retried
    ("slow server", "timeout after 0.2s after 3 attempt(s)", 3),
])
def test_http_failures_and_retries(web, monkeypatch, query, expected, attempts):
    monkeypatch.setenv("SERPER_API_KEY", "sk-secret-123")
    FakeWeb.hits.pop(query, None)
    obs, ok = web.call("search", {"query": query})
    if expected:
        assert not ok and expected in obs
    else:
        assert ok and "Result 1" in obs
    assert "sk-secret" not in obs
    time.sleep(0.6 if "slow" in query else 0)  # let the slow handler threads finish
    assert FakeWeb.hits[query] == attempts


def test_jina_reader(web, monkeypatch):
    monkeypatch.setenv("JINA_API_KEY", "jina-secret")
    obs, ok = web.call("visit", {"url": "https://example.org/velmoria", "goal": "capital of Velmoria"})
    assert ok and obs == "Example page | https://example.org/velmoria\nThe capital of Velmoria is Kessa."
    obs, ok = web.call("visit", {"url": "https://example.org/plain"})
    assert ok and "Just text." in obs
    obs, ok = web.call("visit", {"url": "https://example.org/fail500"})
    assert not ok and "visit failed: HTTP 500" in obs and "jina-secret" not in obs


# ----------------------------------------------------------------------------- answer scoring

@pytest.mark.parametrize("prediction, gold, expected", [
    ("206,083", "206083", True),           # numbers compared as numbers, separators stripped
    ("$1,000", "1000", True),
    ("17%", "17", True),
    ("17.0", "17", True),
    ("seventeen", "17", False),
    ("1989 ", "1989", True),
    ("Kessa", "kessa", True),
    ("Kessa!", "kessa", True),             # punctuation ignored for plain strings
    ("New  York", "newyork", True),        # so is whitespace
    ("Kessa, Velmoria", "Kessa, Velmoria", True),
    ("kessa;velmoria", "Kessa, Velmoria", True),   # list split on , or ;
    ("Kessa, Velmoria, Ulm", "Kessa, Velmoria", False),
    ("Velmoria, Kessa", "Kessa, Velmoria", False),  # order matters item by item
    ("Kessa., Velmoria", "Kessa, Velmoria", False),  # list items keep their punctuation
    ("1, 2.0", "1, 2", True),
    (None, "Kessa", False),
    ("", "Kessa", False),
])
def test_gaia_scorer_table(prediction, gold, expected):
    assert qa_scoring.gaia_match(prediction, gold) is expected


def test_em_and_f1():
    assert qa_scoring.exact_match("The Kessa.", "kessa") == 1.0
    assert qa_scoring.exact_match("Kessa city", "Kessa") == 0.0
    assert qa_scoring.token_f1("Kessa city", "Kessa") == pytest.approx(2 / 3)
    assert qa_scoring.token_f1("Ulm", "Kessa") == 0.0
    assert qa_scoring.score_answer(None, "x")["correct"] is False
    assert qa_scoring.score_answer("17.0", "17")["correct"] is True  # gaia by default: numbers as numbers
    assert qa_scoring.score_answer("17.0", "17", method="em")["correct"] is False  # SQuAD: "170" != "17"


@pytest.mark.parametrize("reply, verdict", [
    ("correct: yes", True),
    ("Correct: No", False),
    ("incorrect: yes", None),                 # the trap: "incorrect: yes" contains "correct: yes"
    ("The answer is not correct: yes it differs\ncorrect: no", False),
    ("**Correct:** yes", True),
    ("reasoning...\ncorrect: yes\nwait\ncorrect: no", False),  # the last verdict line wins
    ("yes", None),
    ("", None),
])
def test_judge_verdict_parsing(reply, verdict):
    assert qa_scoring.parse_judge_verdict(reply) is verdict


def test_llm_judge_scoring():
    seen = []
    chat = lambda messages: seen.append(messages) or "The prediction names the same city.\ncorrect: yes"
    scores = qa_scoring.score_answer("the city of Kessa", "Kessa", method="llm", question="Where?", chat=chat)
    assert scores["llm"] is True and scores["correct"] is True and scores["em"] == 0.0
    assert "Gold answer: Kessa" in seen[0][0]["content"]
    assert qa_scoring.score_answer("x", "Kessa", method="llm", chat=lambda m: "incorrect: yes")["correct"] is False


# ----------------------------------------------------------------------------- critic

def _turn(name, arguments, observation, ok=True):
    return {"tool_calls": [{"name": name, "arguments": arguments}], "observations": [observation], "ok": [ok]}


def test_rule_critic_three_dimensions():
    gold = {"answer": "Velmoria", "path": [{"relation": "born_in", "entity": "Kessa", "title": "Kessa"},
                                           {"relation": "located_in", "entity": "Velmoria", "title": "Velmoria"}]}
    question = "In which country is the birthplace of Ada Sol?"
    turns = [
        _turn("search", {"query": "Ada Sol born"}, "Ada Sol was born in Kessa."),           # good
        _turn("search", {"query": "Ada Sol born"}, "Ada Sol was born in Kessa."),           # repeated
        _turn("search", {"query": "weather tomorrow"}, "Sunny."),                           # ungrounded, no gain
        _turn("visit", {"url": "https://x.org/nowhere"}, "Error: page not found", ok=False),
        {"tool_calls": [], "observations": [], "ok": [], "parse_errors": ["invalid JSON"]},  # malformed call
        _turn("search", {"query": "Kessa country"}, "Kessa is a city in Velmoria."),       # good
        {"tool_calls": [], "observations": [], "ok": [], "final_answer": "Velmoria"},
    ]
    # the default critic judges from the visible trajectory only: the same verdicts with or without gold
    v = sa.RuleCritic().judge(question, turns, gold)
    assert v == sa.RuleCritic().judge(question, turns)
    assert [x["pass"] for x in v[:6]] == [True, False, False, False, False, True] and v[6] is None
    assert v[1]["logical_soundness"] == 0.0 and v[1]["tool_call_accuracy"] == 1.0
    assert v[2]["logical_soundness"] == 0.5 and v[2]["information_gain"] == 0.0  # "Sunny." says nothing asked
    assert v[3]["tool_call_accuracy"] == 0.0 and v[4]["tool_call_accuracy"] == 0.0
    assert v[0]["information_gain"] == 1.0 and v[1]["information_gain"] == 0.0  # new words, then none
    assert all(x["judge"] == "rule" for x in v[:6])
    # the privileged variant reads the gold path: gain only for revealing a gold-path entity or the answer
    v = sa.RuleCritic(use_gold=True).judge(question, turns, gold)
    assert [x["pass"] for x in v[:6]] == [True, False, False, False, False, True] and v[0]["judge"] == "rule-gold"


def test_default_critic_does_not_read_the_gold_path():
    """A relevant, grounded turn that reveals no gold-path entity: the visible critic passes it (a critic
    model could not know the path); only the privileged use_gold=True critic fails it."""
    gold = {"answer": "Velmoria", "path": [{"relation": "born_in", "entity": "Kessa", "title": "Kessa"},
                                           {"relation": "located_in", "entity": "Velmoria", "title": "Velmoria"}]}
    question = "In which country is the birthplace of Ada Sol?"
    turns = [_turn("search", {"query": "Ada Sol studied"}, "Ada Sol studied at Ulm Institute of Technology.")]
    assert sa.RuleCritic().judge(question, turns, gold)[0]["pass"] is True
    assert sa.RuleCritic(use_gold=True).judge(question, turns, gold)[0]["pass"] is False
    # and "No results" is no gain whatever the words
    no_hit = [_turn("search", {"query": "Ada Sol zebra"}, "No results for 'Ada Sol zebra'.")]
    assert sa.RuleCritic().judge(question, no_hit)[0]["information_gain"] == 0.0


def test_strict_rule_critic_fails_made_up_names_and_guessed_answers():
    """The toy agent's typical slip: it keeps the relation but swaps a name it was asked about for one it never
    saw ("Zoran Minpo" for "Olga Minpo"). The strict visible critic fails that turn (soundness 0); the same query
    with the question's name, or with a name an earlier observation showed, passes. The default critic passes
    the slip and leaves the answer to the answer score."""
    strict = sa.RuleCritic(strict=True)
    question = "In what year was the university where Olga Minpo studied founded?"
    seen = "Olga Minpo studied at Tamo Institute of Technology."
    made_up = [_turn("search", {"query": "Zoran Minpo studied at"}, seen)]
    v = strict.judge(question, made_up)[0]
    assert v["logical_soundness"] == 0.0 and v["pass"] is False
    assert sa.RuleCritic().judge(question, made_up)[0]["pass"] is True  # the default critic lets it pass
    assert sa.invented_names("Zoran Minpo studied at", {"olga", "minpo", "studied"}) == ["zoran"]
    assert strict.judge(question, [_turn("search", {"query": "Olga Minpo studied at"}, seen)])[0]["pass"]
    chained = [_turn("search", {"query": "Olga Minpo studied at"}, seen),
               _turn("search", {"query": "Tamo Institute of Technology founded"}, "Tamo Institute of Technology "
                     "was founded in 1870.")]
    assert [x["pass"] for x in strict.judge(question, chained)] == [True, True]
    # the final answer: a guess (no observation holds it, or nothing was searched at all) fails; an answer read
    # from an observation passes, numbers read through the pages' thousands separators
    answer = lambda a: {"tool_calls": [], "observations": [], "ok": [], "final_answer": a}  # noqa: E731
    assert strict.judge(question, [answer("1870")])[0]["pass"] is False
    assert sa.RuleCritic().judge(question, [answer("1870")]) == [None]
    assert strict.judge(question, [answer("Olga Minpo")])[0]["pass"] is False  # from the question only
    assert [x["pass"] for x in strict.judge(question, chained + [answer("1870")])] == [True, True, True]
    assert strict.judge(question, chained + [answer("1871")])[-1]["logical_soundness"] == 0.0
    population = [_turn("search", {"query": "Momar population"}, "Momar has a population of 601,266.")]
    assert strict.judge("How many live in Momar?", population + [answer("601266")])[-1]["pass"] is True
    # lower-case keywords are not names: a query of unseen plain words stays at the old 0.5 (no shared word)
    assert strict.judge(question, [_turn("search", {"query": "weather"}, "Sunny.")])[0][
        "logical_soundness"] == 0.5


@pytest.mark.parametrize("reply, passed, scores", [
    ("logical_soundness: 8\ntool_call_accuracy: 10\ninformation_gain: 7\nverdict: pass", True, (0.8, 1.0, 0.7)),
    ("**Logical_Soundness**: 9\nTool_Call_Accuracy: 9\ninformation_gain: 2\nverdict: pass", False, (0.9, 0.9, 0.2)),
    ("logical_soundness: 9\ntool_call_accuracy: 9\ninformation_gain: 9\nverdict: fail", False, (0.9, 0.9, 0.9)),
    ("not_logical_soundness: 9\ntool_call_accuracy: 9\ninformation_gain: 9", False, (0.0, 0.9, 0.9)),
    ("I think it is fine.", False, (0.0, 0.0, 0.0)),
])
def test_llm_critic_parsing(reply, passed, scores):
    turns = [_turn("search", {"query": "Ada Sol"}, "Ada Sol was born in Kessa."),
             {"tool_calls": [], "observations": [], "ok": [], "final_answer": "Kessa"}]
    prompts = []
    critic = sa.LLMCritic(lambda messages: prompts.append(messages[0]["content"]) or reply)
    v = critic.judge("Where was Ada Sol born?", turns)
    assert v[1] is None and v[0]["pass"] is passed
    assert tuple(v[0][d] for d in sa.DIMENSIONS) == pytest.approx(scores)
    assert len(prompts) == 1 and "Ada Sol was born in Kessa." in prompts[0]


# ----------------------------------------------------------------------------- SFT trajectories

def test_sft_records(wiki):
    path = os.path.join(ROOT, "data", "toy", "search_sft.jsonl")
    records = [json.loads(line) for line in open(path, encoding="utf-8")]
    questions = {q["id"]: q for q in toy_world.load_questions(os.path.join(ROOT, "data", "toy",
                                                                          "search_questions.jsonl"))}
    assert len(records) >= 250
    assert all(questions[r["id"]]["split"] == "train" for r in records)
    # turn-level filtering keeps the trajectory and flags the failing turn (it is not dropped)
    flagged = [m for r in records for m in r["messages"] if "loss" in m]
    assert flagged and all(m["role"] == "assistant" and m["loss"] is False and m.get("tool_calls") for m in flagged)
    assert sum(any(m.get("tool_calls") and m["tool_calls"][0]["function"]["name"] == "visit"
                   for m in r["messages"]) for r in records) > 30
    tools = search_tools.Toolbox(wiki, wiki)
    for r in records[::7]:
        assert r["domain"] == "search" and r["tools"] == search_tools.DEFAULT_TOOLS
        roles = [m["role"] for m in r["messages"]]
        assert roles[:2] == ["system", "user"] and roles[-1] == "assistant"
        final = r["messages"][-1]
        assert not final.get("tool_calls") and final["content"] == sa.format_answer(r["answer"])
        assert sa.extract_answer(final["content"]) == questions[r["id"]]["answer"]
        for m, nxt in zip(r["messages"][2:-1], r["messages"][3:]):
            if m["role"] == "assistant":  # every tool call is followed by its result, replayable from the tools
                call = m["tool_calls"][0]["function"]
                assert nxt == {"role": "tool", "content": tools.call(call["name"], call["arguments"])[0]}
        assert len(json.dumps(r["messages"], ensure_ascii=False)) + len(json.dumps(r["tools"])) <= 3000


def test_sft_records_fit_a_toy_context():
    from nanbeige41.tokenizer import Tokenizer, toy_tokenizer_path
    tok = Tokenizer.from_pretrained(toy_tokenizer_path())
    path = os.path.join(ROOT, "data", "toy", "search_sft.jsonl")
    lengths = [len(tok.encode_chat(r["messages"], r["tools"])[0]) for r in map(json.loads, open(path, encoding="utf-8"))]
    assert max(lengths) < 950  # measured 842 (mean 677) with the shipped toy tokenizer; < ~900 is the target



def test_fresh_world_trajectories_never_repeat_a_head_and_replay_on_their_own_world():
    # Issue 13: search SFT over fresh worlds, so no name can be memorised; the shipped world (seed 0) is refused
    records = sa.fresh_world_trajectories([11, 12], questions_per_world=20, hop_weights={1: 1, 2: 1})
    assert len(records) >= 30 and len({r["id"] for r in records}) == len(records)
    shipped = {e["title"] for e in toy_world.load_world(paths.TOY_WORLD)["entities"]}
    heads = {w: {r["messages"][2]["tool_calls"][0]["function"]["arguments"]["query"] for r in records
                 if r["id"].startswith(f"w{w}-")} for w in (11, 12)}
    assert heads[11] and heads[12] and not heads[11] & heads[12]
    for r in records[::5]:  # every observation replays from its own world's tools, none from the shipped one
        world = int(r["id"].split("-")[0][1:])
        tools = search_tools.Toolbox(search_tools.LocalWiki(toy_world.fresh_world(world)), None)
        tools.reader = tools.searcher
        for m, nxt in zip(r["messages"][2:-1], r["messages"][3:]):
            if m["role"] == "assistant":
                call = m["tool_calls"][0]["function"]
                assert nxt["content"] == tools.call(call["name"], call["arguments"])[0]
        assert not any(t in r["messages"][1]["content"] for t in shipped if len(t) > 12)
    with pytest.raises(ValueError, match="shipped world"):
        sa.fresh_world_trajectories([0, 1])


def test_expert_can_restate_the_question_as_its_first_search():
    """first_query="question" (issue 13's copy-by-matching experiment): the first search is the question verbatim,
    with no entity-first reasoning before it; later hops search "<entity> <relation words>" as before."""
    restated = sa.fresh_world_trajectories([11], questions_per_world=20, hop_weights={2: 1}, first_query="question")
    assert len(restated) >= 10
    for r in restated:
        first = r["messages"][2]
        assert first["tool_calls"][0]["function"]["arguments"] == {"query": r["messages"][1]["content"]}
        assert first["reasoning_content"] == "I search for the question itself."
    later = [m["tool_calls"][0]["function"]["arguments"] for r in restated for m in r["messages"][3:]
             if m["role"] == "assistant" and m.get("tool_calls")]
    assert later and all(a.get("query") not in {r["messages"][1]["content"] for r in restated} for a in later)


def test_sft_trajectories_train_every_turn_with_its_reasoning():
    # The 4.1 template drops reasoning only before the last user query; in an agent trajectory that is the question,
    # so every assistant turn after it is trained with its think block, opening <think> included, and no tool
    # result is in the loss. Turns the critic failed ("loss": false) stay out of it.
    from nanbeige41.tokenizer import Tokenizer, toy_tokenizer_path
    tok = Tokenizer.from_pretrained(toy_tokenizer_path())
    path = os.path.join(ROOT, "data", "toy", "search_sft.jsonl")
    for r in list(map(json.loads, open(path, encoding="utf-8")))[::10]:
        ids, mask = tok.encode_chat(r["messages"], r["tools"])
        turns = [tok.decode([i for i, _ in run]) for masked, run in itertools.groupby(zip(ids, mask), lambda x: x[1])
                 if masked]  # the masked runs, one per assistant turn
        assistant = [m for m in r["messages"] if m["role"] == "assistant" and m.get("loss", True)]
        assert len(turns) == len(assistant)
        for text, m in zip(turns, assistant):
            assert text.startswith(f"<think>\n{m['reasoning_content']}\n</think>\n\n") and "<tool_response>" not in text


def test_extract_answer_convention():
    assert sa.extract_answer("<answer>Kessa</answer>") == "Kessa"
    assert sa.extract_answer("maybe <answer>Ulm</answer> no: <answer> Kessa </answer>") == "Kessa"
    assert sa.extract_answer("The answer is Kessa.") is None
    assert sa.extract_answer(None) is None


def test_trajectory_text_is_the_expert_trajectory_in_plain_text():
    records = sa.fresh_world_trajectories([21], 12)
    docs = sa.worked_search_docs([21], 12)
    assert len(docs) == len(records) >= 6 and all(d["domain"] == "pretrain" for d in docs)
    for rec, doc in zip(records, docs):
        lines = doc["text"].split("\n")
        assert lines[0] == f"Question: {rec['messages'][1]['content']}" and lines[-1] == f"Answer: {rec['answer']}"
        thoughts = [m["reasoning_content"] for m in rec["messages"] if m["role"] == "assistant"]
        assert [ln[len("Thought: "):] for ln in lines if ln.startswith("Thought: ")] == thoughts
        for m in rec["messages"]:
            if m["role"] == "tool":  # every observation, verbatim, after "Result:"
                assert f"Result:\n{m['content']}\n" in doc["text"]
            for call in m.get("tool_calls", []):
                args = call["function"]["arguments"]
                assert (f"Search: {args['query']}" if call["function"]["name"] == "search"
                        else f"Visit: {args['url']}") in doc["text"]
        assert "<tool_call>" not in doc["text"] and "toywiki" in doc["text"]
