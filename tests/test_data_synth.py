"""data_synth.py's pipelines (issue 16): the deep-search chain graph -> heads -> walks -> questions -> trajectories
-> judge on the toy world and on hand-made graphs, the code filters through the real sandbox, and every LLM-backed
step against a small OpenAI-chat server on 127.0.0.1. Properties are checked against the graph file itself, with
this file's own graph walking, not with the code under test."""
import json
import os
import threading
from collections import defaultdict
from http.server import ThreadingHTTPServer

import pytest

import data_synth
import search_agent
from nanbeige41 import synth
from http_fakes import FakeHandler

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROBLEMS = os.path.join(REPO, "data", "toy", "code_problems.jsonl")


def run(*argv):
    data_synth.main([str(a) for a in argv])


def read(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def write(path, records):
    with open(path, "w", encoding="utf-8") as f:
        for r in records:
            f.write((r if isinstance(r, str) else json.dumps(r)) + "\n")
    return path


def edges_of(graph_path):
    """subject -> [(relation, object)] straight from the graph file."""
    edges = defaultdict(list)
    for a in read(graph_path):
        for s, r, o in a["triples"]:
            edges[s].append((r, o))
    return edges


def reach(edges, start, relations):
    nodes = {start}
    for rel in relations:
        nodes = {o for n in nodes for r, o in edges[n] if r == rel}
    return nodes


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    """The toy pipeline up to questions, once for the module."""
    d = tmp_path_factory.mktemp("toy")
    run("graph", "--out", d / "graph.jsonl")
    run("heads", "--in", d / "graph.jsonl", "--out", d / "heads.jsonl", "--reference-date", "2026-10-31")
    run("walks", "--in", d / "heads.jsonl", "--graph", d / "graph.jsonl", "--out", d / "walks.jsonl", "--hops", 3,
        "--walks-per-head", 2)
    run("questions", "--in", d / "walks.jsonl", "--graph", d / "graph.jsonl", "--out", d / "questions.jsonl")
    return d


# ----------------------------------------------------------------------------- graph

def test_graph_reads_the_article_format_and_names_bad_lines(tmp_path):
    good = {"title": "Ada", "text": "Ada was born in Kessa.", "triples": [["Ada", "born_in", "Kessa"]],
            "last_modified": "2026-05-01T10:00:00Z"}
    write(tmp_path / "dump.jsonl", [good, {"title": "Kessa", "text": "", "triples": [], "last_modified": "2026-01-01"}])
    run("graph", "--in", tmp_path / "dump.jsonl", "--out", tmp_path / "g.jsonl")
    rows = read(tmp_path / "g.jsonl")
    assert [r["title"] for r in rows] == ["Ada", "Kessa"] and rows[0]["last_modified"] == "2026-05-01"
    assert "_source" not in rows[0]

    write(tmp_path / "bad.jsonl", [good, "{not json"])
    with pytest.raises(SystemExit, match=r"bad\.jsonl:2: malformed JSON"):
        run("graph", "--in", tmp_path / "bad.jsonl", "--out", tmp_path / "g2.jsonl")
    write(tmp_path / "bad.jsonl", [good, {**good, "title": "Bo", "triples": [["Bo", "x"]]}])
    with pytest.raises(SystemExit, match=r"bad\.jsonl:2: field 'triples\[0\]'"):
        run("graph", "--in", tmp_path / "bad.jsonl", "--out", tmp_path / "g2.jsonl")
    write(tmp_path / "bad.jsonl", [good, {**good, "last_modified": "yesterday"}])
    with pytest.raises(SystemExit, match=r"bad\.jsonl:2: field 'last_modified'"):
        run("graph", "--in", tmp_path / "bad.jsonl", "--out", tmp_path / "g2.jsonl")
    write(tmp_path / "bad.jsonl", [good, good])
    with pytest.raises(SystemExit, match=r"bad\.jsonl:2: title 'Ada' already defined at .*bad\.jsonl:1"):
        run("graph", "--in", tmp_path / "bad.jsonl", "--out", tmp_path / "g2.jsonl")
    assert not (tmp_path / "g2.jsonl").exists()


def test_graph_converts_musique_and_hotpotqa_records(tmp_path):
    musique = {"id": "2hop_1", "question": "Who is the spouse of the Green performer?", "answer": "Miquette Giraudy",
               "paragraphs": [{"idx": 0, "title": "Green (Steve Hillage album)", "paragraph_text": "Green is an album "
                               "by Steve Hillage."},
                              {"idx": 1, "title": "Steve Hillage", "paragraph_text": "Hillage's partner is Miquette "
                               "Giraudy."}],
               "question_decomposition": [
                   {"id": 1, "question": "Green >> performer", "answer": "Steve Hillage", "paragraph_support_idx": 0},
                   {"id": 2, "question": "Who is the spouse of #1?", "answer": "Miquette Giraudy",
                    "paragraph_support_idx": 1}]}
    write(tmp_path / "m.jsonl", [musique])
    run("graph", "--in", tmp_path / "m.jsonl", "--format", "musique", "--out", tmp_path / "gm.jsonl")
    triples = {tuple(t) for a in read(tmp_path / "gm.jsonl") for t in a["triples"]}
    assert ("Steve Hillage", "spouse", "Miquette Giraudy") in triples
    assert ("Green (Steve Hillage album)", "performer", "Steve Hillage") in triples

    hotpot = {"_id": "a1", "question": "?", "answer": "x",
              "context": [["Scott Derrickson", ["Scott Derrickson is an American director.", "He directed Sinister."]],
                          ["Sinister (film)", ["Sinister is a 2012 horror film."]]],
              "supporting_facts": [["Scott Derrickson", 1], ["Sinister (film)", 0]]}
    hotpot["context"][0][1][1] = "He directed Sinister (film)."
    write(tmp_path / "h.jsonl", [hotpot])
    run("graph", "--in", tmp_path / "h.jsonl", "--format", "hotpotqa", "--out", tmp_path / "gh.jsonl")
    rows = {a["title"]: a for a in read(tmp_path / "gh.jsonl")}
    assert rows["Scott Derrickson"]["triples"] == [["Scott Derrickson", "mentions", "Sinister (film)"]]
    assert rows["Sinister (film)"]["triples"] == []

    write(tmp_path / "bad.jsonl", [{"question": "?", "paragraphs": "nope", "question_decomposition": []}])
    with pytest.raises(SystemExit, match=r"bad\.jsonl:1: a MuSiQue record needs"):
        run("graph", "--in", tmp_path / "bad.jsonl", "--format", "musique", "--out", tmp_path / "x.jsonl")


# ----------------------------------------------------------------------------- heads

def test_time_window_selects_exactly_the_pages_updated_inside_it(tmp_path, toy):
    # 2026-08-31 minus six calendar months is 2026-02-28; both ends are inside the window
    dates = {"Early": "2026-02-27", "First": "2026-02-28", "Mid": "2026-05-15", "Last": "2026-08-31",
             "Future": "2026-09-01"}
    arts = [{"title": t, "text": "", "triples": [[t, "knows", "Mid"]], "last_modified": d} for t, d in dates.items()]
    arts += [{"title": "capital", "text": "", "triples": [["capital", "of", "Mid"]], "last_modified": "2026-05-01"},
             {"title": "Country", "text": "", "triples": [["Country", "of", "Mid"]], "last_modified": "2026-05-01"},
             {"title": "List of cities", "text": "", "triples": [["List of cities", "has", "Mid"]],
              "last_modified": "2026-05-01"},
             {"title": "Lonely", "text": "", "triples": [], "last_modified": "2026-05-01"}]
    write(tmp_path / "g.jsonl", arts)
    run("heads", "--in", tmp_path / "g.jsonl", "--out", tmp_path / "h.jsonl", "--reference-date", "2026-08-31")
    assert [h["title"] for h in read(tmp_path / "h.jsonl")] == ["First", "Mid", "Last"]

    # on the toy world: exactly the pages with a relation and 2026-04-30 <= last_modified <= 2026-10-31
    expected = [a["title"] for a in read(toy / "graph.jsonl") if "2026-04-30" <= a["last_modified"] <= "2026-10-31"]
    assert [h["title"] for h in read(toy / "heads.jsonl")] == expected and len(expected) > 50

    with pytest.raises(SystemExit, match=r"(?s)nothing kept.*h2\.jsonl was not written.*widen --months"):
        run("heads", "--in", tmp_path / "g.jsonl", "--out", tmp_path / "h2.jsonl", "--reference-date", "2030-01-01")
    assert not (tmp_path / "h2.jsonl").exists()


# ----------------------------------------------------------------------------- walks

def test_walks_respect_their_conditions(toy):
    edges = edges_of(toy / "graph.jsonl")
    titles = {a["title"] for a in read(toy / "graph.jsonl")}
    heads = {h["title"] for h in read(toy / "heads.jsonl")}
    walks = read(toy / "walks.jsonl")
    assert len(walks) > 100
    for w in walks:
        chain = w["chain"]
        assert len(chain) == 3 and chain[0]["subject"] == w["head"] in heads
        nodes = [chain[0]["subject"]] + [h["object"] for h in chain]
        assert len(set(nodes)) == len(nodes)                                   # no revisits
        assert len({h["relation"] for h in chain}) == len(chain)               # relation diversity
        for a, b in zip(chain, chain[1:]):
            assert a["object"] == b["subject"] and a["object"] in titles       # connected through articles
        for h in chain:
            assert (h["relation"], h["object"]) in edges[h["subject"]]         # every hop is an edge of the graph
            assert h["subject_last_modified"]                                  # temporal context recorded


def test_walks_prefer_rare_relations_and_explain_impossible_lengths(tmp_path):
    # the head has five "common" edges (a relation seen 50 more times elsewhere) and one "rare" edge
    arts = [{"title": "Head", "text": "", "last_modified": "2026-05-01",
             "triples": [["Head", "common", f"C{i}"] for i in range(5)] + [["Head", "rare", "R"]]}]
    arts += [{"title": t, "text": "", "last_modified": "2026-05-01", "triples": [[t, "value", "42"]]}
             for t in ["R"] + [f"C{i}" for i in range(5)]]
    arts += [{"title": f"X{i}", "text": "", "last_modified": "2026-05-01", "triples": [[f"X{i}", "common", "C0"]]}
             for i in range(50)]
    write(tmp_path / "g.jsonl", arts)
    write(tmp_path / "h.jsonl", [{"title": "Head"}] * 300)
    run("walks", "--in", tmp_path / "h.jsonl", "--graph", tmp_path / "g.jsonl", "--out", tmp_path / "w.jsonl",
        "--hops", 2, "--seed", 3)
    first = [w["chain"][0]["relation"] for w in read(tmp_path / "w.jsonl")]
    assert len(first) == 300
    assert first.count("rare") / len(first) > 0.7  # uniform choice would give 1/6

    with pytest.raises(SystemExit, match=r"(?s)at most 2 hops.*lower --hops"):
        run("walks", "--in", tmp_path / "h.jsonl", "--graph", tmp_path / "g.jsonl", "--out", tmp_path / "w4.jsonl",
            "--hops", 4)
    write(tmp_path / "h.jsonl", [{"title": "Head"}, {"title": "Nobody"}])
    with pytest.raises(SystemExit, match=r"h\.jsonl:2: field 'title' 'Nobody' is not an article"):
        run("walks", "--in", tmp_path / "h.jsonl", "--graph", tmp_path / "g.jsonl", "--out", tmp_path / "w5.jsonl")


# ----------------------------------------------------------------------------- questions

def test_toy_questions_have_unique_answers_reachable_only_through_the_full_chain(toy):
    edges = edges_of(toy / "graph.jsonl")
    questions = read(toy / "questions.jsonl")
    assert len(questions) > 100
    assert sum(q["obfuscated"] for q in questions) > len(questions) // 3
    for q in questions:
        relations = [h["relation"] for h in q["path"]]
        nodes = [q["head_title"]] + [h["title"] for h in q["path"]]
        assert reach(edges, q["head_title"], relations) == {q["answer"]}, q["id"]      # unique answer
        for i in range(len(relations)):                                              # every hop needed
            assert q["answer"] not in reach(edges, q["head_title"], relations[:i] + relations[i + 1:]), q["id"]
        for i, n in enumerate(nodes):                                                # no shortcut edge
            assert not {o for _, o in edges[n]} & set(nodes[i + 2:]), q["id"]
        text = q["question"].lower()
        assert all(n.lower() not in text for n in nodes[1:]), q["id"]                # nothing of the chain named
        if q["obfuscated"]:
            assert q["head_title"].lower() not in text


def test_a_question_that_names_its_answer_is_rejected():
    arts = [{"title": "Ada", "text": "", "triples": [["Ada", "born_in", "Kessa"]], "last_modified": "2026-05-01"},
            {"title": "Kessa", "text": "", "triples": [["Kessa", "population", "12000"]], "last_modified": "2026-05-01"}]
    graph = synth.build_graph(arts)
    chain = [("Ada", "born_in", "Kessa"), ("Kessa", "population", "12000")]
    assert synth.check_question(graph, "What is the population of the birthplace of Ada?", {"Ada"}, chain) is None
    assert synth.check_question(graph, "Is 12,000 the population of Ada's birthplace?", {"Ada"}, chain) == "answer leaked"
    assert synth.check_question(graph, "What is the population of Kessa?", {"Ada"}, chain) == "intermediate named"
    graph = synth.build_graph(arts + [{"title": "Bo", "text": "", "last_modified": "2026-05-01",
                                       "triples": [["Ada", "knows", "12000"]]}])
    assert synth.check_question(graph, "What is the population of the birthplace of Ada?", {"Ada"}, chain) == "shortcut edge"
    # Ada -r1-> B -r2-> C -r3-> D, and also Ada -r2-> X -r3-> D: the first hop can be left out (no shortcut edge)
    triples = [["Ada", "r1", "B"], ["B", "r2", "C"], ["C", "r3", "D"], ["Ada", "r2", "X"], ["X", "r3", "D"]]
    graph = synth.build_graph([{"title": t, "text": "", "last_modified": "2026-05-01",
                                "triples": [x for x in triples if x[0] == t]} for t in ("Ada", "B", "C", "D", "X")])
    chain = [tuple(t) for t in triples[:3]]
    assert synth.check_question(graph, "What is the r3 of the r2 of the r1 of Ada?", {"Ada"}, chain) == "hop not necessary"
    triples += [["B", "r2", "C2"], ["C2", "r3", "E"]]  # B has two r2 objects: the chain no longer fixes the answer
    graph = synth.build_graph([{"title": t, "text": "", "last_modified": "2026-05-01",
                                "triples": [x for x in triples if x[0] == t]} for t in ("Ada", "B", "C", "D", "X", "C2")])
    assert synth.check_question(graph, "What is the r3 of the r2 of the r1 of Ada?", {"Ada"}, chain) == "answer not unique"


# ----------------------------------------------------------------------------- trajectories and judge

def test_judge_masks_exactly_the_turns_the_critic_fails(toy, tmp_path):
    run("trajectories", "--in", toy / "questions.jsonl", "--graph", toy / "graph.jsonl", "--out", tmp_path / "t.jsonl",
        "--limit", 12)
    trajs = read(tmp_path / "t.jsonl")
    assert len(trajs) == 12 and all(t["final_answer"] == t["answer"] for t in trajs)
    # one trajectory made wrong, one with a repeated call (a logical-soundness failure)
    wrong = json.loads(json.dumps(trajs[0]))
    wrong["final_answer"] = "Nowhere"
    wrong["id"] = "wrong"
    repeated = json.loads(json.dumps(trajs[1]))
    repeated["id"] = "repeated"
    k = next(i for i, m in enumerate(repeated["messages"]) if m["role"] == "assistant")
    repeated["messages"][k + 2:k + 2] = [repeated["messages"][k], repeated["messages"][k + 1]]
    repeated["turns"].insert(1, repeated["turns"][0])
    write(tmp_path / "t2.jsonl", trajs + [wrong, repeated])
    run("judge", "--in", tmp_path / "t2.jsonl", "--out", tmp_path / "sft.jsonl")
    out = {r["id"]: r for r in read(tmp_path / "sft.jsonl")}
    assert "wrong" not in out and len(out) == 13
    critic = search_agent.RuleCritic()
    n_masked = 0
    for t in trajs + [repeated]:
        verdicts = critic.judge(t["question"], t["turns"])
        assistant = [m for m in out[t["id"]]["messages"] if m["role"] == "assistant"]
        assert [m.get("loss", True) for m in assistant] == [v is None or v["pass"] for v in verdicts], t["id"]
        n_masked += sum(v is not None and not v["pass"] for v in verdicts)
    assert [m.get("loss", True) for m in out["repeated"]["messages"] if m["role"] == "assistant"][1] is False
    assert n_masked >= 1
    from nanbeige41.data import check_conversation, check_loss_flags
    for r in out.values():
        assert check_conversation(r) is None and check_loss_flags(r) is None

    write(tmp_path / "bad.jsonl", [trajs[0], {"id": "x", "messages": []}])
    with pytest.raises(SystemExit, match=r"bad\.jsonl:2: field 'turns' missing"):
        run("judge", "--in", tmp_path / "bad.jsonl", "--out", tmp_path / "x.jsonl")


# ----------------------------------------------------------------------------- code data

def _toy_problem_with_two_solutions():
    for p in read(PROBLEMS):
        if p["split"] == "train" and len(p["solutions"]) == 2 and p["family"] == "pair_sum":
            return p
    raise AssertionError("no pair_sum problem in the toy set")


def test_code_rl_filter_keeps_exactly_k_in_1_to_5(tmp_path):
    p = _toy_problem_with_two_solutions()
    fast, slow = p["solutions"][0]["code"], p["solutions"][1]["code"]
    wrong = "print(0)"
    problems, candidates = [], []
    for k in (0, 1, 5, 6, 8):
        qid = f"{p['question_id']}_k{k}"
        problems.append({**p, "question_id": qid})
        candidates += [{"question_id": qid, "response": f"```python\n{fast if i < k else wrong}\n```"} for i in range(8)]
    # stage 2: 3 fast + 3 slow pass the tests (k = 6 for code1), but only the fast ones are time-optimal (k = 3)
    problems.append({**p, "question_id": "mixed"})
    candidates += [{"question_id": "mixed", "response": c} for c in [fast] * 3 + [slow] * 3 + [wrong] * 2]
    write(tmp_path / "p.jsonl", problems)
    write(tmp_path / "c.jsonl", candidates)
    run("code-rl-filter", "--in", tmp_path / "p.jsonl", "--candidates", tmp_path / "c.jsonl", "--out", tmp_path / "o.jsonl")
    kept = {r["question_id"]: r["k"] for r in read(tmp_path / "o.jsonl")}
    assert kept == {f"{p['question_id']}_k1": 1, f"{p['question_id']}_k5": 5}
    problems = [problems[-1]]
    write(tmp_path / "p2.jsonl", problems)
    run("code-rl-filter", "--in", tmp_path / "p2.jsonl", "--candidates", tmp_path / "c.jsonl", "--out",
        tmp_path / "o2.jsonl", "--stage", "code2")
    assert [(r["question_id"], r["k"], r["stage"]) for r in read(tmp_path / "o2.jsonl")] == [("mixed", 3, "code2")]


def test_code_sft_keeps_only_passing_time_optimal_solutions(tmp_path, capsys):
    p = _toy_problem_with_two_solutions()
    write(tmp_path / "p.jsonl", [p])
    run("code-sft", "--in", tmp_path / "p.jsonl", "--out", tmp_path / "o.jsonl")
    rows = read(tmp_path / "o.jsonl")
    assert len(rows) == 1 and p["solutions"][0]["code"] in rows[0]["messages"][1]["content"]
    assert rows[0]["meets_optimal"] is True and rows[0]["domain"] == "code"
    assert "not time-optimal 1" in capsys.readouterr().out


# ----------------------------------------------------------------------------- LLM steps on 127.0.0.1

class FakeChat(FakeHandler):
    """OpenAI chat JSON; replies chosen by what the prompt asks. `garbage` answers 200 with a non-JSON body."""
    requests = []
    garbage = False

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        FakeChat.requests.append(body)
        prompt = body["messages"][-1]["content"]
        message = None
        if FakeChat.garbage:
            reply = None
        elif "tools" in body:  # the search agent: one search for the question's first word, then an answer
            reply = "<answer>Vel</answer>" if body["messages"][-1]["role"] == "tool" else ""
            if not reply:
                query = json.dumps({"query": body["messages"][1]["content"].split()[0]})
                message = {"role": "assistant", "content": "", "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "search", "arguments": query}}]}
        elif prompt.startswith("You are a strict critic"):
            reply = "logical_soundness: 9\ntool_call_accuracy: 10\ninformation_gain: 2\nverdict: fail"
        elif prompt.startswith("Is \""):
            title = prompt.split('"')[1]
            reply = "keep: no" if title.startswith("Z") else "Some thoughts.\nkeep: yes"
        elif prompt.startswith("Write one hard multi-hop"):
            answer = prompt.split('must be "')[1].split('"')[0]
            head = prompt.split('you may describe "')[1].split('"')[0]
            # every other question leaks its answer; the others are fine
            leak = sum(r["messages"][-1]["content"].startswith("Write one hard") for r in FakeChat.requests) % 2
            reply = (f"Question: Is {answer} what we get from {head}?" if leak
                     else f"Question: What do we get from {head} through every link?")
        elif prompt.startswith("You review an answer"):
            reply = "verdict: ok" if "fixed" in prompt else "The answer is wrong.\nverdict: revise"
        elif prompt.startswith("Rewrite the answer"):
            reply = "The fixed answer is 42."
        elif prompt.startswith("Here is a question"):
            reply = "First add 40 and 2, which gives 42."
        elif "Write a Python program" in prompt:
            reply = "<think>\nread and sum\n</think>\n\n```python\nprint(0)\n```"
        else:
            reply = "?"
        message = message or {"role": "assistant", "content": reply}
        data = (b"not json at all" if reply is None else json.dumps({"choices": [{"message": message}]}).encode())
        self.reply(data)



@pytest.fixture
def endpoint():
    FakeChat.requests, FakeChat.garbage = [], False
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeChat)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()


def test_llm_head_filter_and_questions_against_a_local_server(tmp_path, endpoint, capsys):
    arts = [{"title": t, "text": f"{t} page.", "last_modified": "2026-05-01",
             "triples": [[t, "born_in", "Kessa"]]} for t in ("Ada", "Zed", "Bo")]
    arts += [{"title": "Kessa", "text": "", "last_modified": "2025-01-01", "triples": [["Kessa", "located_in", "Vel"]]},
             {"title": "Vel", "text": "", "last_modified": "2025-01-01", "triples": []}]
    write(tmp_path / "g.jsonl", arts)
    cache = tmp_path / "cache"
    args = ["heads", "--in", tmp_path / "g.jsonl", "--out", tmp_path / "h.jsonl", "--endpoint", endpoint, "--cache", cache]
    run(*args)
    assert [h["title"] for h in read(tmp_path / "h.jsonl")] == ["Ada", "Bo"]
    assert "llm: generic 1" in capsys.readouterr().out and len(FakeChat.requests) == 3
    run(*args)  # rerun: every answer comes from the cache
    assert len(FakeChat.requests) == 3 and "endpoint calls 0, cache hits 3" in capsys.readouterr().out

    run("walks", "--in", tmp_path / "h.jsonl", "--graph", tmp_path / "g.jsonl", "--out", tmp_path / "w.jsonl", "--hops", 2)
    run("questions", "--in", tmp_path / "w.jsonl", "--graph", tmp_path / "g.jsonl", "--out", tmp_path / "q.jsonl",
        "--endpoint", endpoint, "--cache", cache)
    out = capsys.readouterr().out
    rows = read(tmp_path / "q.jsonl")
    # Ada and Bo were both born in Kessa: "born_in then located_in" from Ada is unique (Vel), and one of the two
    # LLM questions names its answer and is rejected
    assert len(rows) == 1 and rows[0]["source"] == "llm" and "Vel" not in rows[0]["question"]
    assert "answer leaked 1" in out

    FakeChat.garbage = True
    with pytest.raises(SystemExit, match=r"(?s)endpoint error 2.*nothing kept"):
        run("questions", "--in", tmp_path / "w.jsonl", "--graph", tmp_path / "g.jsonl", "--out", tmp_path / "q2.jsonl",
            "--endpoint", endpoint, "--cache", tmp_path / "cache2")
    assert not (tmp_path / "q2.jsonl").exists()


def test_refine_and_code_sampling_against_a_local_server(tmp_path, endpoint, capsys):
    write(tmp_path / "r.jsonl", [{"prompt": "What is 40 + 2?", "response": "41", "domain": "stem"},
                                 {"messages": [{"role": "user", "content": "And 20 + 22?"},
                                               {"role": "assistant", "content": "43"}]}])
    run("refine", "--in", tmp_path / "r.jsonl", "--out", tmp_path / "o.jsonl", "--endpoint", endpoint,
        "--iterations", 3, "--cache", tmp_path / "cache")
    rows = read(tmp_path / "o.jsonl")
    assert len(rows) == 2 and rows[0]["domain"] == "stem"
    final = rows[0]["messages"][-1]
    assert final == {"role": "assistant", "reasoning_content": "First add 40 and 2, which gives 42.",
                     "content": "The fixed answer is 42."}
    assert rows[0]["refine"]["revisions"] == 1 and len(rows[0]["refine"]["critiques"]) == 2  # revise, then ok
    # per record: critique, revise, critique (ok), reconstruction
    assert len(FakeChat.requests) == 8

    p = _toy_problem_with_two_solutions()
    write(tmp_path / "p.jsonl", [p])
    with pytest.raises(SystemExit, match=r"(?s)fails tests 2.*nothing kept"):
        run("code-sft", "--in", tmp_path / "p.jsonl", "--out", tmp_path / "c.jsonl", "--endpoint", endpoint, "--n", 2,
            "--cache", tmp_path / "cache")
    sampled = [r for r in FakeChat.requests if "Write a Python program" in r["messages"][-1]["content"]]
    assert len(sampled) == 2 and all(r["temperature"] == 0.7 for r in sampled)

    FakeChat.garbage = True
    with pytest.raises(SystemExit, match=r"endpoint error or garbage 2"):
        run("refine", "--in", tmp_path / "r.jsonl", "--out", tmp_path / "o2.jsonl", "--endpoint", endpoint,
            "--cache", tmp_path / "cache3")


def test_trajectories_from_an_endpoint_policy_resume_and_judge(tmp_path, endpoint, capsys):
    arts = [{"title": "Ada", "text": "Ada was born in Kessa.", "last_modified": "2026-05-01",
             "triples": [["Ada", "born_in", "Kessa"]]},
            {"title": "Kessa", "text": "Kessa is a city in Vel.", "last_modified": "2026-05-01",
             "triples": [["Kessa", "located_in", "Vel"]]},
            {"title": "Vel", "text": "Vel is a country.", "last_modified": "2026-05-01", "triples": []}]
    write(tmp_path / "g.jsonl", arts)
    questions = [{"id": "good", "question": "Ada: in which country is her birthplace?", "answer": "Vel"},
                 {"id": "bad", "question": "Ada: in which city was she born?", "answer": "Kessa"}]
    write(tmp_path / "q.jsonl", questions)
    args = ["trajectories", "--in", tmp_path / "q.jsonl", "--graph", tmp_path / "g.jsonl", "--out", tmp_path / "t.jsonl",
            "--policy", "endpoint", "--endpoint", endpoint, "--model", "m", "--temperatures", "0.2,0.9"]
    run(*args, "--limit", 1)
    assert len(read(tmp_path / "t.jsonl")) == 2
    run(*args, "--resume")  # the first question's two trajectories are on disk already
    assert "already in --out (resumed) 2" in capsys.readouterr().out
    trajs = read(tmp_path / "t.jsonl")
    assert [(t["id"], t["agent"]) for t in trajs] == [("good", "endpoint:m@T0.2"), ("good", "endpoint:m@T0.9"),
                                                      ("bad", "endpoint:m@T0.2"), ("bad", "endpoint:m@T0.9")]
    assert sorted({r["temperature"] for r in FakeChat.requests}) == [0.2, 0.9]
    t = trajs[0]
    assert [m["role"] for m in t["messages"]] == ["system", "user", "assistant", "tool", "assistant"]
    assert t["messages"][2]["tool_calls"][0]["function"] == {"name": "search", "arguments": {"query": "Ada:"}}
    assert "Ada" in t["messages"][3]["content"] and t["final_answer"] == "Vel"
    run("judge", "--in", tmp_path / "t.jsonl", "--out", tmp_path / "sft.jsonl")
    assert "wrong final answer 2" in capsys.readouterr().out
    assert [r["id"] for r in read(tmp_path / "sft.jsonl")] == ["good", "good"]
    # the LLM critic fails the search turn of each (information gain 2/10): out of the loss, the answer stays in
    run("judge", "--in", tmp_path / "t.jsonl", "--out", tmp_path / "sft2.jsonl", "--critic", "llm",
        "--endpoint", endpoint, "--cache", tmp_path / "cache")
    assert "masked (loss false) 2; failing dimension counts: information_gain 2" in capsys.readouterr().out
    for r in read(tmp_path / "sft2.jsonl"):
        assert [m.get("loss", True) for m in r["messages"] if m["role"] == "assistant"] == [False, True]


@pytest.fixture(scope="module")
def untrained_ckpt(tmp_path_factory):
    import torch
    from nanbeige41.model import ModelConfig, Transformer
    from nanbeige41.tokenizer import Tokenizer, toy_tokenizer_path
    tok = Tokenizer.from_pretrained(toy_tokenizer_path())
    torch.manual_seed(0)
    model = Transformer(ModelConfig.preset("toy", vocab_size=len(tok), num_hidden_layers=1))
    model.init_weights()
    path = tmp_path_factory.mktemp("ckpt")
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def test_trajectories_from_an_in_process_model(toy, tmp_path, untrained_ckpt, capsys):
    run("trajectories", "--in", toy / "questions.jsonl", "--graph", toy / "graph.jsonl", "--out", tmp_path / "t.jsonl",
        "--policy", "model", "--ckpt", untrained_ckpt, "--temperatures", "1.0", "--samples", 2, "--limit", 1,
        "--max-turns", 2, "--max-new-tokens", 8)
    trajs = read(tmp_path / "t.jsonl")
    assert [(t["agent"], t["sample"]) for t in trajs] == [("model@T1", 0), ("model@T1", 1)]
    first = [[m for m in t["messages"] if m["role"] == "assistant"][0] for t in trajs]
    assert first[0] != first[1]  # the two samples of one question are drawn with different seeds
    with pytest.raises(SystemExit, match=r"(?s)no final answer 2.*nothing kept"):
        run("judge", "--in", tmp_path / "t.jsonl", "--out", tmp_path / "sft.jsonl")


def test_code_candidates_sampled_from_a_checkpoint(tmp_path, untrained_ckpt, capsys):
    write(tmp_path / "p.jsonl", [_toy_problem_with_two_solutions()])
    # an untrained model writes no program: every one of the 3 samples is dropped, and the run says so
    with pytest.raises(SystemExit, match=r"(?s)read 3, kept 0; dropped: .*3 samples per problem from .*nothing kept"):
        run("code-sft", "--in", tmp_path / "p.jsonl", "--out", tmp_path / "o.jsonl", "--ckpt", untrained_ckpt,
            "--n", 3, "--max-tokens", 8)
    with pytest.raises(SystemExit, match=r"--ckpt .*nowhere"):
        run("code-sft", "--in", tmp_path / "p.jsonl", "--out", tmp_path / "o.jsonl", "--ckpt", tmp_path / "nowhere")


def test_the_shipped_musique_style_sample_runs_to_three_hop_questions(tmp_path):
    sample = os.path.join(REPO, "data", "synth_samples", "musique_style.jsonl")
    run("graph", "--in", sample, "--format", "musique", "--date", "2026-09-01", "--out", tmp_path / "g.jsonl")
    run("heads", "--in", tmp_path / "g.jsonl", "--out", tmp_path / "h.jsonl")
    run("walks", "--in", tmp_path / "h.jsonl", "--graph", tmp_path / "g.jsonl", "--out", tmp_path / "w.jsonl", "--hops", 3)
    run("questions", "--in", tmp_path / "w.jsonl", "--graph", tmp_path / "g.jsonl", "--out", tmp_path / "q.jsonl")
    got = {(q["head_title"], q["answer"]) for q in read(tmp_path / "q.jsonl")}
    # book -> author -> birthplace -> county, two books of Hemingway's among them
    assert got == {("The Old Man and the Sea", "Cook County"), ("A Farewell to Arms", "Cook County"),
                   ("Pride and Prejudice", "Hampshire"), ("On the Origin of Species", "Shropshire")}
