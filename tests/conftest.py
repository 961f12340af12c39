"""Fixtures shared by the test files: the shipped toy tokenizer, world and questions, a small SFT corpus cut from
the shipped one, and one-thread torch for tests that compare runs number for number."""
import os

import pytest
import torch

from nanbeige41 import data, paths, toy_world
from nanbeige41.tokenizer import Tokenizer


@pytest.fixture(scope="session")
def tok():
    """The committed toy tokenizer (data/toy/tokenizer)."""
    return Tokenizer.from_pretrained(paths.TOY_TOKENIZER)


@pytest.fixture(scope="session")
def world():
    return toy_world.load_world(paths.TOY_WORLD)


@pytest.fixture(scope="session")
def questions():
    return toy_world.load_questions(paths.TOY_QUESTIONS)


@pytest.fixture(scope="module")
def one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="session")
def corpus(tmp_path_factory):
    """A few dozen stem and code conversations and a small eval file, cut from the shipped corpus."""
    d = tmp_path_factory.mktemp("corpus")
    for name, n in (("stem", 60), ("code", 30)):
        records = data.read_jsonl(os.path.join(paths.TOY_SFT_DATA, f"{name}.jsonl"))[:n]
        data.write_jsonl(str(d / f"{name}.jsonl"), [{k: v for k, v in r.items() if k != "_source"} for r in records])
    records = data.read_jsonl(os.path.join(paths.TOY_SFT_DATA, "eval.jsonl"))
    data.write_jsonl(str(d / "eval.jsonl"), [{k: v for k, v in r.items() if k != "_source"}
                                             for r in records if r["domain"] in ("stem", "code")][:8])
    return d
