"""The search agent's tools and their backends (paper section 2.2; the model card's deep-search tool table).

- search(query) -> ranked (title, url, snippet), like Serper google_search; visit(url, goal, part) -> a
  goal-directed extract (sentences ranked by term overlap) or the page in parts, like Jina
  scrape_and_extract_info; python(code) -> runs only in the code judge's sandbox (nanbeige41/sandbox.py).
- Backends: `local` (default, offline): BM25 in Python/numpy over the toy world (nanbeige41/toy_world.py,
  data/toy/world.json); `web`: Serper- and Jina-Reader-compatible clients over `requests`, keys from
  SERPER_API_KEY / JINA_API_KEY (never logged), base URLs from SERPER_URL / JINA_URL, timeouts and retries
  with back-off (nanbeige41.openai_api.request_with_retries).
- `Toolbox.call(name, arguments) -> (observation, ok)`: bad arguments, unknown tools, backend failures and tool
  exceptions come back as an error observation the model reads, never as an exception.
"""
import json
import math
import os
import re
from collections import Counter

import numpy as np

from nanbeige41 import paths, toy_world
from nanbeige41.openai_api import ApiError, request_with_retries
from nanbeige41.sandbox import Limits, run_tests


def _tool(name, description, properties, required):
    # Property descriptions are left out: the names say enough and the toy context is ~1k tokens.
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": {k: {"type": t} for k, t in properties.items()}, "required": required}}}


SEARCH_TOOL = _tool("search", "Web search: ranked results with title, url, snippet.", {"query": "string"}, ["query"])
VISIT_TOOL = _tool("visit", "Read a page: the sentences relevant to goal, or part N of its text.",
                   {"url": "string", "goal": "string", "part": "integer"}, ["url"])
PYTHON_TOOL = _tool("python", "Run Python code in a sandbox; returns its output.", {"code": "string"}, ["code"])
# The default tool set (the SFT data's and the loop's when code_judge is importable): the toy questions need
# no python, but offering it keeps the SFT prompt identical to the one the agent sees in RL and evaluation.
DEFAULT_TOOLS = [SEARCH_TOOL, VISIT_TOOL, PYTHON_TOOL]


# -----------------------------------------------------------------------------
# BM25 over the offline world

STOPWORDS = set("a an the of in on at to for by and or is was are were be what which who whom whose where "
                "when how did does do with from as it its this that".split())


def terms(text):
    return [t for t in re.findall(r"[a-z0-9]+", text.lower()) if t not in STOPWORDS]


def split_sentences(text):
    return [s for s in re.split(r"(?<=[.!?])\s+", text.strip()) if s]


class BM25:
    """Okapi BM25: score(d, q) = sum_t idf(t) * tf(t,d) (k1+1) / (tf(t,d) + k1 (1 - b + b |d| / avgdl)),
    idf(t) = ln(1 + (N - df + 0.5) / (df + 0.5)). Postings per term as numpy arrays, so a query costs
    O(sum of its terms' document frequencies)."""

    def __init__(self, docs, k1=1.5, b=0.75):
        self.k1, self.b = k1, b
        counts = [Counter(terms(d)) for d in docs]
        self.n_docs = len(docs)
        self.doc_len = np.array([sum(c.values()) for c in counts], dtype=np.float64)
        postings = {}
        for doc_id, c in enumerate(counts):
            for term, tf in c.items():
                postings.setdefault(term, ([], []))
                postings[term][0].append(doc_id)
                postings[term][1].append(tf)
        self.postings = {t: (np.array(d, dtype=np.int64), np.array(f, dtype=np.float64))
                         for t, (d, f) in postings.items()}
        self.idf = {t: math.log(1 + (self.n_docs - len(d) + 0.5) / (len(d) + 0.5))
                    for t, (d, _) in self.postings.items()}
        # per-document length normaliser k1 (1 - b + b |d| / avgdl), precomputed once
        self.norm = k1 * (1 - b + b * self.doc_len / max(self.doc_len.mean(), 1e-9))

    def scores(self, query):
        scores = np.zeros(self.n_docs)
        for term in set(terms(query)):
            if term in self.postings:
                doc_ids, tf = self.postings[term]
                scores[doc_ids] += self.idf[term] * tf * (self.k1 + 1) / (tf + self.norm[doc_ids])
        return scores

    def top(self, query, k):
        scores = self.scores(query)
        order = np.argsort(-scores, kind="stable")[:k]  # stable: ties keep document order (deterministic)
        return [(int(i), float(scores[i])) for i in order if scores[i] > 0]


def best_sentences(text, query, n, idf=None):
    """The n sentences of `text` sharing the most (idf-weighted) terms with `query`, in page order."""
    wanted = set(terms(query))
    sentences = split_sentences(text)
    ranked = []
    for i, s in enumerate(sentences):
        overlap = sum((idf or {}).get(t, 1.0) for t in wanted & set(terms(s)))
        if overlap > 0:
            ranked.append((-overlap, i))
    keep = sorted(i for _, i in sorted(ranked)[:n])
    return [sentences[i] for i in keep]


def _cap(text, limit):
    return text if len(text) <= limit else text[: limit - 3].rstrip() + "..."


class ToolError(Exception):
    """A tool failure the model should see as an observation (never a crash of the loop)."""


class LocalWiki:
    """Offline search engine over the toy world: search via BM25, pages by URL, slug or exact title."""

    def __init__(self, world):
        self.entities = world["entities"]
        self.by_slug = {e["id"]: e for e in self.entities}
        self.by_title = {e["title"].lower(): e for e in self.entities}
        # the title twice: a query naming an entity should rank that entity's own page first
        self.index = BM25([f"{e['title']} {e['title']} {e['article']}" for e in self.entities])

    @classmethod
    def load(cls, path=paths.TOY_WORLD):
        return cls(toy_world.load_world(path))

    def search(self, query, k):
        hits = self.index.top(query, k)
        return [{"title": self.entities[i]["title"], "url": self.entities[i]["url"],
                 "snippet": " ".join(best_sentences(self.entities[i]["article"], query, 1, self.index.idf))}
                for i, _ in hits]

    def fetch(self, url):
        key = url.strip().split("/wiki/")[-1].split("#")[0]
        e = self.by_slug.get(key) or self.by_title.get(key.replace("_", " ").lower())
        if e is None:
            raise ToolError(f"page not found: {url}")
        page = f"{e['article']} Last modified on {e['last_modified']}."
        return e["title"], e["url"], page


# -----------------------------------------------------------------------------
# Web backends (Serper / Jina Reader compatible) over requests

class SerperSearch:
    """POST {base}/search {"q", "num"} with header X-API-KEY; reads `organic` [{title, link, snippet}]."""

    def __init__(self, base_url=None, api_key_env="SERPER_API_KEY", **http):
        self.base_url = (base_url or os.environ.get("SERPER_URL", "https://google.serper.dev")).rstrip("/")
        self.api_key_env, self.http = api_key_env, http

    def search(self, query, k):
        key = os.environ.get(self.api_key_env)
        if not key:
            raise ToolError(f"search unavailable: {self.api_key_env} is not set")
        resp = request_with_retries("POST", self.base_url + "/search", what="search", json={"q": query, "num": k},
                                    headers={"X-API-KEY": key, "Content-Type": "application/json"}, **self.http)
        try:
            organic = resp.json().get("organic", [])
        except ValueError:
            raise ToolError("search failed: response is not JSON")
        return [{"title": r.get("title", ""), "url": r.get("link", ""), "snippet": r.get("snippet", "")}
                for r in organic[:k]]


class JinaReader:
    """GET {base}/{url} with Accept: application/json; reads data.{title, url, content} (plain text too)."""

    def __init__(self, base_url=None, api_key_env="JINA_API_KEY", **http):
        self.base_url = (base_url or os.environ.get("JINA_URL", "https://r.jina.ai")).rstrip("/")
        self.api_key_env, self.http = api_key_env, http

    def fetch(self, url):
        headers = {"Accept": "application/json"}
        if os.environ.get(self.api_key_env):  # Jina Reader also answers without a key, at a lower rate
            headers["Authorization"] = "Bearer " + os.environ[self.api_key_env]
        resp = request_with_retries("GET", f"{self.base_url}/{url}", what="visit", headers=headers, **self.http)
        try:
            data = resp.json().get("data") or {}
            return data.get("title", ""), data.get("url", url), data.get("content", "")
        except ValueError:
            return "", url, resp.text


# -----------------------------------------------------------------------------
# Tools

class Toolbox:
    """Dispatch by name; `call` returns (observation, ok). Bad arguments and backend failures come back
    as an error observation with ok=False, never as an exception."""

    def __init__(self, searcher, reader, python_runner=None, top_k=3, snippet_chars=160, part_chars=1500,
                 extract_sentences=3, extract_chars=500):
        self.searcher, self.reader, self.python_runner = searcher, reader, python_runner
        self.top_k, self.snippet_chars, self.part_chars = top_k, snippet_chars, part_chars
        self.extract_sentences, self.extract_chars = extract_sentences, extract_chars
        self.schemas = [SEARCH_TOOL, VISIT_TOOL] + ([PYTHON_TOOL] if python_runner else [])
        self.names = [t["function"]["name"] for t in self.schemas]

    def call(self, name, arguments):
        if name not in self.names:
            return f"Error: unknown tool '{name}'. Available tools: {', '.join(self.names)}.", False
        if not isinstance(arguments, dict):
            return f"Error: arguments of {name} must be a JSON object.", False
        schema = next(t for t in self.schemas if t["function"]["name"] == name)["function"]["parameters"]
        missing = [k for k in schema["required"] if k not in arguments]
        unknown = [k for k in arguments if k not in schema["properties"]]
        if missing or unknown:
            return (f"Error: bad arguments for {name}: missing {missing}, unknown {unknown}; "
                    f"expected {list(schema['properties'])}."), False
        try:
            return getattr(self, "_" + name)(**arguments), True
        except (ToolError, ApiError) as e:  # ApiError: a web backend failed after its retries
            return f"Error: {e}", False
        except Exception as e:  # a tool bug must not kill a 600-turn rollout; the model sees it and moves on
            return f"Error: {name} raised {type(e).__name__}: {_cap(str(e), 200)}", False

    def _search(self, query):
        if not isinstance(query, str) or not query.strip():
            raise ToolError("search needs a non-empty query string")
        results = self.searcher.search(query, self.top_k)
        if not results:
            return f"No results for '{_cap(query, 100)}'."
        return "\n".join(f"{i}. {r['title']} | {r['url']}\n{_cap(r['snippet'], self.snippet_chars)}"
                         for i, r in enumerate(results, 1))

    def _visit(self, url, goal="", part=1):
        if not isinstance(url, str) or not url.strip():
            raise ToolError("visit needs a url string")
        title, url, text = self.reader.fetch(url)
        parts = [text[i:i + self.part_chars] for i in range(0, max(len(text), 1), self.part_chars)]
        if goal:
            idf = self.reader.index.idf if isinstance(self.reader, LocalWiki) else None
            extract = best_sentences(text, goal, self.extract_sentences, idf)
            if extract:
                return f"{title} | {url}\n" + _cap(" ".join(extract), self.extract_chars)
        if type(part) is not int or not 1 <= part <= len(parts):
            raise ToolError(f"part must be an integer from 1 to {len(parts)}")
        note = "" if not goal else f"Nothing on '{_cap(goal, 80)}' found; "
        return f"{title} | {url} ({note}part {part} of {len(parts)})\n{parts[part - 1]}"

    def _python(self, code):
        if not isinstance(code, str):
            raise ToolError("python needs a code string")
        return self.python_runner(code)


def sandboxed_python(time_s=10.0):
    """The python tool: the code judge's sandbox (nanbeige41.sandbox.run_tests), one run with empty stdin;
    model-written code never runs anywhere else."""
    def runner(code):
        runs, _features = run_tests(code, [""], limits=Limits(time_s=time_s))
        run = runs[0]
        output = run.output if isinstance(run.output, str) else json.dumps(run.output)
        status = "" if run.status == "ok" else f"[{run.status}: {run.detail}]\n"
        return _cap(status + (output.strip() or "(no output)"), 2000)
    return runner


def make_toolbox(backend="local", world_path=paths.TOY_WORLD, with_python=True, **kwargs):
    if backend == "local":
        wiki = LocalWiki.load(world_path)
        searcher = reader = wiki
    elif backend == "web":
        searcher, reader = SerperSearch(), JinaReader()
    else:
        raise ValueError(f"unknown backend {backend!r} (local, web)")
    return Toolbox(searcher, reader, sandboxed_python() if with_python else None, **kwargs)
