"""The toy wiki world: byte-identical regeneration, internal consistency, head selection, walks, questions."""
import datetime
import os
import random
from collections import Counter

import pytest

import data_synth
from nanbeige41 import toy_world

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "data", "toy")
FILES = ["world.json", "search_questions.jsonl", "search_sft.jsonl"]


def test_regeneration_gives_identical_bytes(tmp_path):
    data_synth.make_world_files(str(tmp_path))
    for name in FILES:
        with open(os.path.join(DATA, name), "rb") as shipped, open(tmp_path / name, "rb") as fresh:
            assert shipped.read() == fresh.read(), f"{name} differs from a fresh `python data_synth.py world`"


def test_shipped_files_are_small():
    assert sum(os.path.getsize(os.path.join(DATA, n)) for n in FILES) < 2_000_000


def test_other_seed_gives_other_world():
    assert toy_world.generate_world(1)["entities"][0]["title"] != toy_world.generate_world(0)["entities"][0]["title"]


def test_world_is_consistent(world):
    index = {e["id"]: e for e in world["entities"]}
    types = Counter(e["type"] for e in world["entities"])
    assert len(world["entities"]) >= 300 and len(types) == 7
    assert len({e["title"] for e in world["entities"]}) == len(world["entities"])  # unique names
    for e in world["entities"]:
        for rel, obj in e["relations"].items():
            subject_type, object_type, inverse = toy_world.RELATIONS[rel][:3]
            assert e["type"] == subject_type and index[obj]["type"] == object_type, (e["id"], rel)
            if inverse:  # a unique inverse points straight back
                assert index[obj]["relations"][inverse] == e["id"], (e["id"], rel)
            # the article states the fact: the object's name appears on the subject's page
            assert index[obj]["title"] in e["article"], (e["id"], rel)
        for attr in toy_world.ATTRIBUTES:
            if attr in e["attributes"]:
                value = e["attributes"][attr]
                assert (f"{value:,}" if isinstance(value, int) and value > 9999 else str(value)) in e["article"]
        # the nationality in a person's article is that of their birthplace
        if e["type"] == "person":
            country = index[index[e["relations"]["born_in"]]["relations"]["located_in"]]["title"]
            assert f"from {country}." in e["article"]
            if "won" in e["relations"]:
                assert e["attributes"]["won_year"] >= index[e["relations"]["won"]]["attributes"]["first_awarded"]
    for e in world["entities"]:
        if e["type"] == "product":
            maker = index[e["relations"]["made_by"]]
            assert e["attributes"]["launch_year"] > maker["attributes"]["founded_year"]


def test_time_aware_head_selection(world):
    ref = datetime.date.fromisoformat(world["reference_date"])
    recent = set(toy_world.recent_entities(world, months=6))
    for e in world["entities"]:
        age = (ref - datetime.date.fromisoformat(e["last_modified"])).days
        assert 0 <= age <= 731
        assert (e["id"] in recent) == (age <= 183)
    assert 0.2 < len(recent) / len(world["entities"]) < 0.5
    assert len(toy_world.recent_entities(world, months=1)) < len(recent)


def test_conditional_random_walk(world):
    graph = toy_world.build_graph(world)
    index = {e["id"]: e for e in world["entities"]}
    rng = random.Random(0)
    heads = toy_world.recent_entities(world)
    n_found = 0
    for head in heads[:60]:
        for length in (1, 2, 3, 4):
            walk = toy_world.random_walk(graph, head, length, rng, end_types={"country", "city"}, entities=index)
            if walk is None:
                continue
            n_found += 1
            nodes = [head] + [obj for _, obj in walk]
            assert len(walk) == length and len(set(nodes)) == len(nodes)
            assert index[nodes[-1]]["type"] in {"country", "city"}
            for (rel, obj), source in zip(walk, nodes):
                assert (rel, obj) in graph[source]
            for (r1, _), (r2, _) in zip(walk, walk[1:]):
                assert toy_world.RELATIONS[r1][2] != r2  # never straight back along the inverse
    assert n_found > 100
    # the search is exhaustive: with no simple path of 40 hops in this world, the answer is None, not a shorter walk
    assert toy_world.random_walk(graph, heads[0], 40, rng, entities=index) is None


def test_questions_follow_their_gold_paths(world, questions):
    index = {e["id"]: e for e in world["entities"]}
    recent = set(toy_world.recent_entities(world))
    assert len(questions) >= 300
    assert {q["split"] for q in questions} == {"train", "test"}
    assert set(Counter(q["hops"] for q in questions)) == {1, 2, 3, 4}
    assert len({q["question"] for q in questions}) == len(questions)
    for q in questions:
        assert q["head"] in recent and q["head_title"] in q["question"]
        node = q["head"]
        for hop in q["path"]:
            if hop["entity"] is None:  # attribute hop: the answer is a value of the current node
                assert str(index[node]["attributes"][hop["relation"]]) == q["answer"]
            else:
                assert index[node]["relations"][hop["relation"]] == hop["entity"]
                node = hop["entity"]
        if q["path"][-1]["entity"] is not None:
            assert index[node]["title"] == q["answer"]
        assert len(q["path"]) == q["hops"]


def test_question_templates():
    index = {"a": {"title": "Ada Sol", "attributes": {}}, "k": {"title": "Kessa", "attributes": {"population": 5}},
             "v": {"title": "Velmoria", "attributes": {}}}
    q, a = toy_world.synthesize_question(index, "a", [("born_in", "k"), ("located_in", "v")])
    assert (q, a) == ("In which country is the birthplace of Ada Sol?", "Velmoria")
    q, a = toy_world.synthesize_question(index, "a", [("born_in", "k")], attribute="population")
    assert (q, a) == ("What is the population of the birthplace of Ada Sol?", "5")


@pytest.mark.parametrize("reply, accepted", [
    ("Question: Which nation is home to the city where {head} came into the world?", True),
    ("Sure!\nquestion: Which nation is home to the city where {head} came into the world?", True),
    ("Question: Which nation holds {mid}, where {head} was born?", False),     # names an intermediate entity
    ("Question: Is it {answer}, the country of {head}'s birthplace?", False),  # names the answer
    ("Question: Which nation is home to the city where the famous one was born?", False),  # head dropped
    ("Question: Where was {head} born? And which country is that?", False),   # two questions
    ("Which nation is home to the city where {head} was born?", False),        # not in the asked format
])
def test_llm_question_rewrite_checks(world, questions, reply, accepted):
    row = next(q for q in questions if q["hops"] == 2 and q["path"][0]["relation"] == "born_in"
               and q["path"][1]["relation"] == "located_in")
    prompts = []
    chat = lambda messages: prompts.append(messages[0]["content"]) or reply.format(
        head=row["head_title"], mid=row["path"][0]["title"], answer=row["answer"])
    new, ok = toy_world.rewrite_question(row, chat, world)
    assert ok is accepted
    assert new["question"] != row["question"] if accepted else new is row
    if accepted:
        assert new["template_question"] == row["question"] and new["answer"] == row["answer"]
    assert row["head_title"] in prompts[0] and row["path"][0]["title"] in prompts[0]  # the chain is given


def test_pretraining_text_is_fresh_worlds_pages_and_chains():
    docs = toy_world.pretraining_docs([1, 2], walks_per_world=20)
    assert docs == toy_world.pretraining_docs([1, 2], walks_per_world=20)  # deterministic
    fresh = {e["title"] for s in (1, 2) for e in toy_world.fresh_world(s)["entities"]}
    pages = [d for d in docs if "\n\n" not in d["text"]]
    chains = [d for d in docs if "\n\n" in d["text"]]
    assert len(pages) >= len(fresh) and len(chains) >= 20 * 2 * 0.8 and all(d["domain"] == "pretrain" for d in docs)
    # a page names its subject in its first line and again in its sentences (what induction learns from)
    assert all(d["text"].split("\n")[1].count(d["text"].split("\n")[0]) >= 1 for d in pages[:50])
    # a chain's next page is about an entity the previous page names
    first, second = chains[0]["text"].split("\n\n")[:2]
    assert second.split("\n")[0] in first


def test_pretraining_quiz_pages_hold_the_question_its_path_and_answer():
    plain = toy_world.pretraining_docs([3], walks_per_world=5)
    docs = toy_world.pretraining_docs([3], walks_per_world=5, questions_per_world=10)
    assert docs[:len(plain)] == plain  # the quiz pages come after the unchanged text
    quiz = docs[len(plain):]
    world = toy_world.fresh_world(3)
    titles = {e["id"]: e["title"] for e in world["entities"]}
    questions = toy_world.synthesize_questions(world, 10, seed=3, test_fraction=0.0)
    assert len(quiz) == len(questions) >= 8
    for d, q in zip(quiz, questions):
        parts = d["text"].split("\n\n")
        assert parts[0] == f"Question: {q['question']}" and parts[-1] == f"Answer: {q['answer']}"
        path = [q["head"]] + [h["entity"] for h in q["path"] if h["entity"]]
        assert [p.split("\n")[0] for p in parts[1:-1]] == [titles[e] for e in path]


def test_worked_chains_follow_the_question_path_the_way_the_search_expert_reasons():
    world = toy_world.generate_world(5)
    index = {e["id"]: e for e in world["entities"]}
    questions = toy_world.synthesize_questions(world, 40, seed=6, test_fraction=0.0)
    chains = [toy_world.worked_chain(index, q) for q in questions]
    assert sum(c is not None for c in chains) >= 36  # the toy articles state nearly every hop in one sentence
    for q, chain in zip(questions, chains):
        if chain is None:
            continue
        lines = chain.split("\n")
        assert lines[0] == f"Question: {q['question']}" and lines[-1] == f"Answer: {q['answer']}"
        assert len(lines) == 2 + 3 * len(q["path"])
        known = index[q["head"]]
        for k, hop in enumerate(q["path"]):
            need, search, found = lines[1 + 3 * k: 4 + 3 * k]
            assert need.startswith("I need ") and known["title"] in need
            assert search == f"Search: {known['title']} {toy_world.SEARCH_KEYWORDS[hop['relation']]}"
            assert found.startswith("Found: ") and found[len("Found: "):] in known["article"]
            value = hop["title"]
            assert value in found or (value.isdigit() and f"{int(value):,}" in found)
            known = index[hop["entity"]] if hop["entity"] else known
    # the expert agent's first thought is the chain's first "I need" line (search_agent.sft_trajectories)
    import search_agent
    rec = search_agent.sft_trajectories(world, questions[:1], max_chars=10**9)[0]
    assert rec["messages"][2]["reasoning_content"] == chains[0].split("\n")[1]
    docs = toy_world.pretraining_docs([5], walks_per_world=5, chains_per_world=40)
    assert docs[:len(toy_world.pretraining_docs([5], walks_per_world=5))] == toy_world.pretraining_docs([5], walks_per_world=5)


def test_fresh_worlds_name_everyone_anew_and_never_replace_the_shipped_world():
    shipped = toy_world.generate_world(0)
    assert toy_world.generate_world(0, given_names=toy_world.GIVEN_NAMES) == shipped  # the shipped world unchanged
    with pytest.raises(ValueError, match="shipped"):
        toy_world.fresh_world(0)
    firsts = {}
    for seed in (7, 8):
        world = toy_world.fresh_world(seed)
        assert world == toy_world.fresh_world(seed)
        firsts[seed] = {e["title"].split()[0] for e in world["entities"] if e["type"] == "person"}
        assert 10 <= len(firsts[seed]) <= len(toy_world.GIVEN_NAMES)  # a world's own first names, shared by many
        assert not firsts[seed] & set(toy_world.GIVEN_NAMES)
    assert len(firsts[7] & firsts[8]) <= 3  # two worlds' first names barely meet (syllable pairs can repeat)
