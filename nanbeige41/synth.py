"""The deep-search data pipeline of paper section 2.2.1 (Figure 2), steps 1-2, over any entity-relation graph:
graph loading (the toy world, a JSONL dump of articles, MuSiQue / HotpotQA records), time-aware head selection
with a semantic filter, conditional random walks, template questions with obfuscation, and the checks every
question must pass. data_synth.py drives these as subcommands; the LLM-backed variants (head filter, question
writing) take a `chat(messages) -> text` function and live there too, this module only builds prompts and parses.

The article format (one JSON object per line), what `graph` reads and writes:
    {"title": "Ada Solmin",                        # unique, the node name
     "text": "Ada Solmin was born in Kessa ...",   # the page (the offline search tools index it)
     "triples": [["Ada Solmin", "born_in", "Kessa"], ["Ada Solmin", "birth_year", "1957"]],
     "last_modified": "2026-07-01",                # ISO date (a datetime is cut to its date)
     "type": "person", "url": "https://..."}       # optional
A triple's object that is the title of an article is an entity (walks may pass through it); any other object is
a literal value (a walk may end on it). Triples may name any subject; they are graph edges subject -> object.

Departures: relation names of a dump are used as they are ("the spouse of X"), so offline template questions
over real data read stiffly (the LLM path writes the real questions); MuSiQue relations come from its
sub-questions by a regex and HotpotQA has no relations at all (its links become `mentions` edges).
"""
import calendar
import datetime
import json
import re
import sys
import time
from collections import Counter, defaultdict

from nanbeige41 import toy_world
from nanbeige41.toy_world import BASE_URL, slug

# -----------------------------------------------------------------------------
# Progress and counts (every subcommand prints a progress line and a summary)


_LAST_PROGRESS = {}  # label -> when its last progress line was printed


def progress(label, done, total, started, kept, every_s=2.0):
    """One stderr line with counts, rate and ETA, at most every `every_s` seconds and at the end."""
    now = time.monotonic()
    if done < total and now - _LAST_PROGRESS.get(label, 0.0) < every_s:
        return
    _LAST_PROGRESS[label] = now
    rate = done / max(now - started, 1e-9)
    eta = (total - done) / rate if rate > 0 else 0.0
    print(f"data_synth {label}: {done}/{total} ({100 * done / max(total, 1):.0f}%), kept {kept}, "
          f"{rate:.1f}/s, ETA {eta:.0f}s", file=sys.stderr, flush=True)


def summary(label, read, kept, dropped, extra=""):
    """`data_synth walks: read 120, kept 98; dropped: no walk of 3 hops 22` (every filter, zeros left out)."""
    parts = [f"{why} {n}" for why, n in dropped.items() if n]
    return (f"data_synth {label}: read {read}, kept {kept}; dropped: " + (", ".join(parts) if parts else "none")
            + (f"; {extra}" if extra else ""))


# -----------------------------------------------------------------------------
# Graph: articles in, adjacency out


def _field_error(source, field, message):
    return ValueError(f"{source}: field '{field}' {message}")


def check_article(record):
    """A record of the article format, validated and normalised; raises ValueError naming file:line and field."""
    source = record.get("_source", "<article>")
    title = record.get("title")
    if not isinstance(title, str) or not title.strip():
        raise _field_error(source, "title", "must be a non-empty string")
    text = record.get("text", "")
    if not isinstance(text, str):
        raise _field_error(source, "text", f"must be a string, got {type(text).__name__}")
    triples = record.get("triples", [])
    if not isinstance(triples, list):
        raise _field_error(source, "triples", "must be a list of [subject, relation, object]")
    for i, t in enumerate(triples):
        if not (isinstance(t, list) and len(t) == 3 and all(isinstance(x, str) and x.strip() for x in t)):
            raise _field_error(source, f"triples[{i}]", f"must be [subject, relation, object] strings, got "
                               f"{json.dumps(t)[:80]}")
    modified = record.get("last_modified")
    try:
        date = datetime.date.fromisoformat(str(modified)[:10])
    except ValueError:
        raise _field_error(source, "last_modified", f"must be an ISO date YYYY-MM-DD, got {json.dumps(modified)}") from None
    out = {"title": title.strip(), "text": text, "triples": [[s.strip(), r.strip(), o.strip()] for s, r, o in triples],
           "last_modified": date.isoformat()}
    for key in ("type", "url"):
        if record.get(key) is not None:
            out[key] = str(record[key])
    return out


def articles_from_world(world):
    """The toy world (nanbeige41/toy_world.py) in the article format: its relations, and the attributes a question
    may ask for (toy_world.ATTRIBUTES) as literal triples."""
    index = {e["id"]: e for e in world["entities"]}
    articles = []
    for e in world["entities"]:
        triples = [[e["title"], rel, index[obj]["title"]] for rel, obj in e["relations"].items()]
        triples += [[e["title"], attr, str(value)] for attr, value in e["attributes"].items() if attr in toy_world.ATTRIBUTES]
        articles.append({"title": e["title"], "text": e["article"], "triples": triples,
                         "last_modified": e["last_modified"], "type": e["type"], "url": e["url"]})
    return articles


def _musique_relation(sub_question):
    """'Green >> performer' -> 'performer' (MuSiQue's Wikidata-style steps); 'Who is the spouse of #1?' -> 'spouse';
    'When was #2 founded?' -> 'founded' (a regex, see the module docstring)."""
    if ">>" in sub_question:
        return "_".join(sub_question.split(">>", 1)[1].lower().split()) or "related_to"
    r = re.sub(r"#\d+", " ", sub_question.lower()).replace("?", " ")
    r = re.sub(r"^\s*(who|what|which|when|where|how|in which|in what)(\s+\w+)?\s+(is|was|are|were|did|does|do|has|had)"
               r"(\s+the)?\s+", "", r)
    r = re.sub(r"\s+(of|by|in|at|for|to)\s*$", "", r.strip())
    return "_".join(r.split()) or "related_to"


def articles_from_qa(records, style, date):
    """Articles from MuSiQue- or HotpotQA-style records, for real multi-hop text (dates do not exist there, so
    every article gets `date`). MuSiQue (`paragraphs` [{title, paragraph_text, paragraph_support_idx...}],
    `question_decomposition` [{question, answer, paragraph_support_idx}]): each step is a triple
    [subject, relation, answer] with the subject the answer of the step its '#k' refers to (the title of its
    supporting paragraph for the first) and the relation from its wording. HotpotQA (`context` [[title,
    [sentences]]], `supporting_facts` [[title, sentence index]]): a supporting sentence of one page that names
    another supporting page gives [page, "mentions", other]. Returns (articles, n_triples)."""
    pages, triples = {}, defaultdict(list)
    for rec in records:
        source = rec.get("_source", "<record>")
        if style == "musique":
            paragraphs = rec.get("paragraphs")
            steps = rec.get("question_decomposition")
            if not isinstance(paragraphs, list) or not isinstance(steps, list):
                raise ValueError(f"{source}: a MuSiQue record needs 'paragraphs' and 'question_decomposition' lists")
            by_idx = {}
            for i, p in enumerate(paragraphs):
                if not (isinstance(p, dict) and isinstance(p.get("title"), str)
                        and isinstance(p.get("paragraph_text"), str)):
                    raise _field_error(source, f"paragraphs[{i}]", "needs string 'title' and 'paragraph_text'")
                by_idx[p.get("idx", i)] = p["title"]
                pages.setdefault(p["title"], p["paragraph_text"])
            answers = []
            for i, step in enumerate(steps):
                if not (isinstance(step, dict) and isinstance(step.get("question"), str)
                        and isinstance(step.get("answer"), str)):
                    raise _field_error(source, f"question_decomposition[{i}]", "needs string 'question' and 'answer'")
                ref = re.search(r"#(\d+)", step["question"])
                if ref and 1 <= int(ref.group(1)) <= len(answers):
                    subject = answers[int(ref.group(1)) - 1]
                else:
                    subject = by_idx.get(step.get("paragraph_support_idx"))
                if subject:
                    triples[subject].append([subject, _musique_relation(step["question"]), step["answer"].strip()])
                answers.append(step["answer"].strip())
        elif style == "hotpotqa":
            context, facts = rec.get("context"), rec.get("supporting_facts")
            if not isinstance(context, list) or not isinstance(facts, list):
                raise ValueError(f"{source}: a HotpotQA record needs 'context' and 'supporting_facts' lists")
            sentences = {}
            for i, c in enumerate(context):
                if not (isinstance(c, list) and len(c) == 2 and isinstance(c[0], str) and isinstance(c[1], list)):
                    raise _field_error(source, f"context[{i}]", "must be [title, [sentences]]")
                sentences[c[0]] = c[1]
                pages.setdefault(c[0], " ".join(map(str, c[1])))
            support = [(t, k) for t, k in (f for f in facts if isinstance(f, list) and len(f) == 2) if t in sentences]
            titles = list(dict.fromkeys(t for t, _ in support))
            for t, k in support:
                sentence = str(sentences[t][k]) if isinstance(k, int) and 0 <= k < len(sentences[t]) else ""
                for other in titles:
                    if other != t and other in sentence and [t, "mentions", other] not in triples[t]:
                        triples[t].append([t, "mentions", other])
        else:
            raise ValueError(f"unknown record style {style!r} (musique, hotpotqa)")
    articles = []
    for title, text in pages.items():
        articles.append({"title": title, "text": text, "triples": triples.pop(title, []), "last_modified": date})
    for subject, ts in triples.items():  # a subject that is an answer, not a paragraph: a page of its triples
        articles.append({"title": subject, "text": " ".join(f"{s} {r.replace('_', ' ')} {o}." for s, r, o in ts),
                         "triples": ts, "last_modified": date})
    return articles, sum(len(a["triples"]) for a in articles)


def build_graph(articles):
    """{articles: title -> article, edges: subject -> [(relation, object)], relation_count: Counter}. Duplicate
    triples count once; duplicate titles are an error naming both lines."""
    by_title, edges, seen = {}, defaultdict(list), set()
    for a in articles:
        if a["title"] in by_title:
            raise ValueError(f"{a.get('_source', '?')}: title {a['title']!r} already defined at "
                             f"{by_title[a['title']].get('_source', '?')}")
        by_title[a["title"]] = a
        for s, r, o in a["triples"]:
            if (s, r, o) not in seen:
                seen.add((s, r, o))
                edges[s].append((r, o))
    relation_count = Counter(r for out in edges.values() for r, _ in out)
    return {"articles": by_title, "edges": dict(edges), "relation_count": relation_count}


def follow(graph, starts, relations):
    """The set of nodes reached from the set `starts` along `relations` in order (every edge of each relation)."""
    nodes = set(starts)
    for rel in relations:
        nodes = {o for n in nodes for r, o in graph["edges"].get(n, []) if r == rel}
    return nodes


# -----------------------------------------------------------------------------
# Heads: time window and semantic filter

GENERIC_CONCEPTS = {"capital", "country", "city", "town", "village", "person", "people", "human", "company",
                    "organization", "organisation", "university", "school", "product", "prize", "award", "year",
                    "language", "river", "mountain", "state", "nation", "government", "music", "film", "book",
                    "science", "history", "politics", "sport", "war", "religion", "animal", "plant", "species"}


def months_before(date, months):
    """The same day `months` calendar months earlier (clamped to the month's last day: Aug 31 - 6 -> Feb 28/29)."""
    y, m = divmod(date.year * 12 + date.month - 1 - months, 12)
    return datetime.date(y, m + 1, min(date.day, calendar.monthrange(y, m + 1)[1]))


def generic_reason(title):
    """Rule-based semantic filter: why `title` is not a specific entity worth asking about, or None."""
    t = title.strip()
    if t.lower() in GENERIC_CONCEPTS:
        return "generic concept"
    if t == t.lower() and not any(ch.isdigit() for ch in t):
        return "generic concept"  # a lower-case label ("capital city") is a concept, not a name
    if re.match(r"^(list|index|outline|timeline) of\b", t, re.I) or t.endswith("(disambiguation)"):
        return "list or disambiguation page"
    if re.fullmatch(r"[\d\s.,/:-]+", t):
        return "date or number"
    return None


HEAD_FILTER_PROMPT = """Is "{title}" a specific, named entity (a particular person, place, organisation, work, product or event) that a hard quiz question could start from, rather than a generic concept or category such as "capital" or "country"?
Page excerpt: {excerpt}
Reply with one line: "keep: yes" or "keep: no"."""


def parse_keep(text):
    """True / False from the last line starting with `keep:`; None when there is none (anchored, like the critic)."""
    found = re.findall(r"^[\s*_#>-]*keep[\s*_]*:[\s*_]*(yes|no)\b", text or "", flags=re.I | re.M)
    return None if not found else found[-1].lower() == "yes"


# -----------------------------------------------------------------------------
# Conditional random walks


def random_walk(graph, head, hops, rng, max_expansions=5000):
    """A walk of exactly `hops` edges from `head`, or None, and the longest partial walk seen (for messages).

    Conditions: no node visited twice; no relation used twice in one chain (relation diversity); every node
    but the last is an article (a literal value ends a walk). Preference for informative relations: the
    edges out of a node are tried in an order drawn with weight 1 / (how often the relation occurs in the
    graph) (Efraimidis-Spirakis keys u^(1/w)), so rare relations come first more often than common ones
    ("capital", "located_in" are common and say little). Depth-first with back-tracking, at most
    `max_expansions` nodes per walk. Returns ([(subject, relation, object), ...] or None, longest length)."""
    counts, best, expansions = graph["relation_count"], [0], [0]

    def extend(node, chain, visited, used):
        best[0] = max(best[0], len(chain))
        if len(chain) == hops:
            return chain
        expansions[0] += 1
        if expansions[0] > max_expansions or node not in graph["articles"]:
            return None
        keyed = [(rng.random() ** counts[r], r, o) for r, o in graph["edges"].get(node, [])]  # u^(1/w), w = 1/count
        for _, r, o in sorted(keyed, key=lambda k: -k[0]):
            if o in visited or r in used:
                continue
            found = extend(o, chain + [(node, r, o)], visited | {o}, used | {r})
            if found:
                return found
        return None
    return extend(head, [], {head}, set()), best[0]


# -----------------------------------------------------------------------------
# Questions: templates, obfuscation, checks


def noun_phrase(relation, x):
    if relation in toy_world.RELATIONS:
        return toy_world.RELATIONS[relation][3].format(x=x)
    if relation in toy_world.ATTRIBUTES:
        return toy_world.ATTRIBUTES[relation][2].format(x=x)
    return f"the {relation.replace('_', ' ')} of {x}"


def ask(relation, x):
    if relation in toy_world.RELATIONS:
        return toy_world.RELATIONS[relation][4].format(x=x)
    if relation in toy_world.ATTRIBUTES:
        return toy_world.ATTRIBUTES[relation][1].format(x=x)
    return f"What is the {relation.replace('_', ' ')} of {x}?"


def template_question(head_phrase, chain):
    """Nested noun phrases for every hop but the last, which is asked: [(s, born_in, c), (c, located_in, k)]
    -> "In which country is the birthplace of <head>?"."""
    phrase = head_phrase
    for _, rel, _ in chain[:-1]:
        phrase = noun_phrase(rel, phrase)
    return ask(chain[-1][1], phrase)


def _is_year(value):
    return bool(re.fullmatch(r"1\d{3}|20\d{2}", value))


def _feature(relation, obj):
    """What a description may say about a subject's edge: the object itself, or a year as its decade (a range)."""
    return (relation, "decade", int(obj) // 10 * 10) if _is_year(obj) else (relation, obj)


def describe_head(graph, head, chain, rng):
    """Obfuscation: a description of `head` that fits it alone in the graph, from its year attributes as a decade
    range ("birth year: 1950-1959": dates become ranges) and its other relations (not to a node of the chain).
    Returns (description, matching heads) or (None, None) when no combination of at most two is unique."""
    if "by_feature" not in graph:  # subjects per feature and per type, built once per graph
        graph["by_feature"], graph["by_type"] = defaultdict(set), defaultdict(set)
        for s, out in graph["edges"].items():
            for r, o in out:
                graph["by_feature"][_feature(r, o)].add(s)
        for t, a in graph["articles"].items():
            graph["by_type"][a.get("type", "entity")].add(t)
    chain_nodes = {head} | {o for _, _, o in chain}
    features = []
    for r, o in graph["edges"].get(head, []):
        if o in chain_nodes or r in {rel for _, rel, _ in chain} or not (_is_year(o) or o in graph["articles"]):
            continue
        key = _feature(r, o)
        text = f"{r.replace('_', ' ')}: " + (f"{key[2]}-{key[2] + 9}" if len(key) == 3 else o)
        features.append((text, key))
    rng.shuffle(features)
    kind = graph["articles"][head].get("type", "entity")
    candidates = [[f] for f in features] + [[f, g] for i, f in enumerate(features) for g in features[i + 1:]]
    for combo in candidates:
        matches = set(graph["by_type"][kind])
        for _, key in combo:
            matches &= graph["by_feature"][key]
        if matches == {head}:
            return f"the {kind} ({'; '.join(text for text, _ in combo)})", matches
    return None, None


def _mentions(text, name):
    names = [name]
    if name.isdigit():
        names.append(f"{int(name):,}")  # pages print numbers with thousands separators
    return any(re.search(rf"(?<!\w){re.escape(n.lower())}(?!\w)", text.lower()) for n in names)


def check_question(graph, question, heads, chain):
    """The checks of every synthesized question, in order; returns the first failing check's name or None.
    heads: the set of nodes the question's head description fits ({head} when it names the head).
      answer leaked:       the answer (or, for a number, its 1,234 form) appears in the question;
      intermediate named:  an intermediate node of the chain appears in it (that hop is given away);
      answer not unique:   following the chain's relations from the heads reaches more than the answer;
      shortcut edge:       an edge of the graph joins chain nodes i and j > i + 1 (a hop can be skipped);
      hop not necessary:   following the relations with one hop left out still reaches the answer."""
    nodes = [chain[0][0]] + [o for _, _, o in chain]
    answer, relations = nodes[-1], [r for _, r, _ in chain]
    if _mentions(question, answer):
        return "answer leaked"
    if any(_mentions(question, n) for n in nodes[1:-1]):
        return "intermediate named"
    if follow(graph, heads, relations) != {answer}:
        return "answer not unique"
    for i, n in enumerate(nodes):
        if any(o in nodes[i + 2:] for _, o in graph["edges"].get(n, [])):
            return "shortcut edge"
    for i in range(len(relations)):
        if answer in follow(graph, heads, relations[:i] + relations[i + 1:]):
            return "hop not necessary"
    return None


QUESTION_PROMPT = """Write one hard multi-hop quiz question from this chain of facts. Its answer must be "{answer}".
Chain (subject --relation--> object, with when each page was last updated):
{chain}
Rules: the question must need every link of the chain; do not write the answer or any of these names: {hidden}; you may describe "{head}" instead of naming it (write dates as ranges); one question ending in "?".
Reply with one line: "Question: <the question>"."""


def question_prompt(graph, chain):
    lines = []
    for s, r, o in chain:
        when = graph["articles"][s]["last_modified"]
        lines.append(f"{s} (updated {when}) --{r}--> {o}")
    hidden = [o for _, _, o in chain]
    return QUESTION_PROMPT.format(answer=chain[-1][2], chain="\n".join(lines), hidden=", ".join(hidden), head=chain[0][0])


def parse_question(text):
    """The last `Question: ...` line ending in one "?", or None."""
    found = re.findall(r"^\s*question\s*:\s*(.+?)\s*$", text or "", flags=re.I | re.M)
    q = found[-1] if found else ""
    return q if q.endswith("?") and q.count("?") == 1 else None


# -----------------------------------------------------------------------------
# The graph as the offline wiki the search agent's tools read

def world_from_graph(graph):
    """The graph as the world dict search_agent's LocalWiki searches (ids are slugs, as in the toy world)."""
    entities = []
    for a in graph["articles"].values():
        eid = slug(a["title"])
        entities.append({"id": eid, "type": a.get("type", "entity"), "title": a["title"],
                         "url": a.get("url", BASE_URL + eid), "article": a["text"], "last_modified": a["last_modified"],
                         "relations": {}, "attributes": {}})
    return {"entities": entities}


# -----------------------------------------------------------------------------
# Solution refinement and CoT reconstruction (paper 2.1.1): prompts and the review's verdict

CRITIQUE_PROMPT = """You review an answer for correctness, completeness and clarity.
Question: {question}
Answer: {answer}
List the concrete problems, then end with one line: "verdict: ok" if nothing needs to change, else "verdict: revise"."""

REVISE_PROMPT = """Rewrite the answer so that it fixes every problem the review found. Keep what is right.
Question: {question}
Answer: {answer}
Review: {critique}
Reply with the new answer only."""

COT_PROMPT = """Here is a question and its final, checked answer. Write the step-by-step reasoning that leads from the question to this answer, as a careful solver would think it through before answering. Do not mention that the answer was given.
Question: {question}
Final answer: {answer}
Reply with the reasoning only."""


def parse_review(text):
    found = re.findall(r"^[\s*_#>-]*verdict[\s*_]*:[\s*_]*(ok|revise)\b", text or "", flags=re.I | re.M)
    return None if not found else found[-1].lower()
