"""nanbeige41/data.py and data_synth.py: reading with file:line errors, conversation checks, best-fit-decreasing
packing with per-document positions, the mixture stream (determinism, skip, realised ratios), and the shipped toy
corpus (efficiency >= 0.97 at the toy lengths, byte-identical regeneration)."""

import filecmp
import json
import os
import subprocess
import sys

import pytest

from nanbeige41 import data
from nanbeige41.tokenizer import Tokenizer, toy_tokenizer_path

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOY_SFT = os.path.join(REPO, "data", "toy", "sft")
DOMAIN_FILES = ["code", "general", "search", "stem", "tool"]


def _ok(text="hi", answer="hello"):
    return {"messages": [{"role": "user", "content": text}, {"role": "assistant", "content": answer}]}


def _write(path, lines):
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return str(path)


@pytest.fixture(scope="module")
def toy_docs():
    tok = Tokenizer.from_pretrained(toy_tokenizer_path())
    records, skipped = data.load_conversations([os.path.join(TOY_SFT, f + ".jsonl") for f in DOMAIN_FILES])
    assert not skipped
    return data.tokenize(records, tok), tok


# -----------------------------------------------------------------------------
# reading and checking

def test_malformed_line_names_file_and_line(tmp_path):
    path = _write(tmp_path / "bad.jsonl", [json.dumps(_ok()), json.dumps(_ok()), '{"messages": [', json.dumps(_ok())])
    with pytest.raises(ValueError, match=r"bad\.jsonl:3: malformed JSON"):
        data.read_jsonl(path)


def test_non_object_line_and_empty_file(tmp_path):
    with pytest.raises(ValueError, match=r"list\.jsonl:2: expected a JSON object"):
        data.read_jsonl(_write(tmp_path / "list.jsonl", [json.dumps(_ok()), "[1, 2]"]))
    with pytest.raises(ValueError, match="empty data file"):
        data.read_jsonl(_write(tmp_path / "empty.jsonl", ["", "  "]))


def test_bad_conversations_are_counted_and_skipped(tmp_path):
    bad = [
        {"messages": [{"role": "user", "content": "no answer"}]},
        {"messages": [{"role": "user", "content": "x"}, {"role": "robot", "content": "y"}]},
        {"messages": [{"role": "user", "content": "x"}, {"role": "tool", "content": "result"},
                      {"role": "assistant", "content": "y"}]},
        {"messages": [{"role": "user", "content": "x"},
                      {"role": "assistant", "content": "", "tool_calls": [{"name": "f", "arguments": {}}]},
                      {"role": "tool", "content": "r1"}, {"role": "tool", "content": "r2"},  # one call, two results
                      {"role": "assistant", "content": "y"}]},
    ]
    path = _write(tmp_path / "mixed.jsonl", [json.dumps(_ok())] + [json.dumps(b) for b in bad] + [json.dumps(_ok())])
    logs = []
    records, skipped = data.load_conversations([path], log=logs.append)
    assert len(records) == 2
    assert skipped == {"no assistant turn": 1, "unknown role 'robot'": 1,
                       "tool message with no preceding tool call": 2}
    assert "skipped 4 conversation(s)" in logs[0]
    with pytest.raises(ValueError, match=r"mixed\.jsonl:2: no assistant turn"):
        data.load_conversations([path], strict=True)


def _two_turns(loss=None):
    second = {"role": "assistant", "content": "wrong turn"} if loss is None else \
        {"role": "assistant", "content": "wrong turn", "loss": loss}
    return {"messages": [{"role": "user", "content": "q1"}, {"role": "assistant", "content": "good turn"},
                         {"role": "user", "content": "q2"}, second,
                         {"role": "user", "content": "q3"}, {"role": "assistant", "content": "last turn"}]}


def test_loss_false_keeps_the_turn_in_context_and_out_of_the_loss(tmp_path):
    tok = Tokenizer.from_pretrained(toy_tokenizer_path())
    path = _write(tmp_path / "flags.jsonl", [json.dumps(_two_turns()), json.dumps(_two_turns(False)),
                                             json.dumps(_two_turns(True))])
    records, skipped = data.load_conversations([path])
    assert not skipped
    plain, flagged, explicit = data.tokenize(records, tok)
    assert flagged["ids"] == plain["ids"] == explicit["ids"] and explicit["mask"] == plain["mask"]
    trained = lambda d: tok.decode([i for i, m in zip(d["ids"], d["mask"]) if m])
    assert "wrong turn" in trained(plain) and "wrong turn" not in trained(flagged)
    assert "good turn" in trained(flagged) and "last turn" in trained(flagged)
    assert "wrong turn" in tok.decode(flagged["ids"])  # still in the context the later turns see
    # packing carries the flag through: the packed row trains on fewer targets
    rows, _ = data.pack([plain], 256)
    rows_flagged, _ = data.pack([flagged], 256)
    assert 0 < sum(rows_flagged[0]["loss_mask"]) < sum(rows[0]["loss_mask"])


@pytest.mark.parametrize("message, error", [
    ({"role": "assistant", "content": "x", "loss": "false"}, r'flags\.jsonl:2: messages\[1\]\.loss: expected true or false, got "false"'),
    ({"role": "assistant", "content": "x", "loss": 0}, r"flags\.jsonl:2: messages\[1\]\.loss: expected true or false, got 0"),
    ({"role": "assistant", "content": "x", "loss": None}, r"flags\.jsonl:2: messages\[1\]\.loss: expected true or false, got null"),
])
def test_a_non_bool_loss_flag_is_an_error_naming_file_and_line(tmp_path, message, error):
    bad = {"messages": [{"role": "user", "content": "q"}, message]}
    path = _write(tmp_path / "flags.jsonl", [json.dumps(_ok()), json.dumps(bad)])
    for strict in (False, True):  # an error either way: skipping would silently change what is trained on
        with pytest.raises(ValueError, match=error):
            data.load_conversations([path], strict=strict)


def test_loss_flag_only_on_assistant_and_not_on_every_turn(tmp_path):
    on_user = {"messages": [{"role": "user", "content": "q", "loss": False}, {"role": "assistant", "content": "a"}]}
    with pytest.raises(ValueError, match=r"u\.jsonl:1: messages\[0\]\.loss: only assistant"):
        data.load_conversations([_write(tmp_path / "u.jsonl", [json.dumps(on_user)])])
    nothing = {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a", "loss": False}]}
    records, skipped = data.load_conversations([_write(tmp_path / "n.jsonl", [json.dumps(_ok()), json.dumps(nothing)])],
                                               log=lambda *a: None)
    assert len(records) == 1 and skipped == {"every assistant turn has loss false": 1}


def test_text_records_are_pretraining_documents_trained_on_every_token(tmp_path):
    tok = Tokenizer.from_pretrained(toy_tokenizer_path())
    path = _write(tmp_path / "pre.jsonl", [json.dumps({"text": "Kessa is a city in Velmoria."}), json.dumps(_ok()),
                                           json.dumps({"text": "  "})])
    records, skipped = data.load_conversations([path], log=lambda *a: None)
    assert skipped == {"empty or non-string text": 1}
    pre, chat = data.tokenize(records, tok)
    assert pre["domain"] == "pretrain" and chat["domain"] == "general"
    assert pre["ids"] == tok.encode("Kessa is a city in Velmoria.") + [tok.endoftext_id] and all(pre["mask"])


def test_valid_tool_conversation_passes_check():
    record = {"messages": [{"role": "user", "content": "x"},
                           {"role": "assistant", "content": "", "tool_calls": [{"name": "f", "arguments": {}},
                                                                              {"name": "g", "arguments": {}}]},
                           {"role": "tool", "content": "r1"}, {"role": "tool", "content": "r2"},
                           {"role": "assistant", "content": "y"}]}
    assert data.check_conversation(record) is None


def test_parse_data_spec():
    assert data.parse_data_spec("code:data/x.jsonl:27") == ("code", "data/x.jsonl", 27.0)
    assert data.parse_data_spec("data/x.jsonl") == (None, "data/x.jsonl", None)
    with pytest.raises(ValueError, match="not a number"):
        data.parse_data_spec("code:x.jsonl:lots")


# -----------------------------------------------------------------------------
# packing

def _doc(n, domain="stem", start=0):
    ids = list(range(start, start + n))
    return dict(ids=ids, mask=[i % 2 for i in range(n)], domain=domain)


def test_pack_rows_are_exact_documents_with_restarting_positions():
    docs = [_doc(n, start=1000 * k) for k, n in enumerate([50, 30, 70, 20, 64, 10, 5, 33])]
    rows, stats = data.pack(docs, seq_len=100)
    assert stats["rows"] == len(rows) and stats["documents"] == len(docs)
    seen = []
    for r in rows:
        assert all(len(r[k]) == 100 for k in ("input_ids", "position_ids", "targets", "loss_mask"))
        starts = [i for i in range(r["real_tokens"]) if r["position_ids"][i] == 0]
        bounds = starts + [r["real_tokens"]]
        for a, b in zip(bounds, bounds[1:]):
            ids = r["input_ids"][a:b]
            doc = next(d for d in docs if d["ids"] == ids)
            seen.append(ids[0])
            assert r["position_ids"][a:b] == list(range(b - a))
            assert r["targets"][a:b - 1] == ids[1:]  # next token inside the document
            assert r["loss_mask"][a:b - 1] == doc["mask"][1:] and r["loss_mask"][b - 1] == 0  # no cross-doc target
        assert sum(r["loss_mask"][r["real_tokens"]:]) == 0  # padding predicts nothing
    assert sorted(seen) == sorted(d["ids"][0] for d in docs)
    # best fit decreasing: 70+30, 64+33, 50+20+10+5 -> 3 rows
    assert stats["rows"] == 3


def test_pack_overflow_is_counted_never_silent():
    docs = [_doc(150), _doc(40), _doc(90)]
    rows, stats = data.pack(docs, 100, overflow="truncate")
    assert stats["truncated"] == 1 and stats["dropped"] == 0 and stats["real_tokens"] == 230
    rows, stats = data.pack(docs, 100, overflow="drop")
    assert stats["dropped"] == 1 and stats["truncated"] == 0 and stats["real_tokens"] == 130


def test_shipped_corpus_packing_efficiency(toy_docs):
    """Goal of the issue: >= 0.97 on the shipped corpus at the toy lengths; naive padding gives far less."""
    docs, _ = toy_docs
    for seq_len in (512, 1024):
        fitting = [d for d in docs if len(d["ids"]) <= seq_len]
        _, stats = data.pack(fitting, seq_len)
        _, _, naive = data.naive_rows(fitting, seq_len)
        assert stats["efficiency"] >= 0.97, (seq_len, stats["efficiency"])
        assert naive < 0.5 * stats["efficiency"], naive


@pytest.mark.parametrize("seq_len,mixture", [(256, dict(code=45, stem=25, general=20, tool=10)),
                                             (1024, dict(code=27, search=26, stem=23, tool=13, general=10))])
def test_mixture_stream_efficiency_and_realised_ratios(toy_docs, seq_len, mixture):
    docs, _ = toy_docs
    docs = [d for d in docs if len(d["ids"]) <= seq_len]
    total = sum(mixture.values())
    for unit, which in (("tokens", 1), ("docs", 0)):
        stream = data.MixtureStream(docs, mixture, seq_len, seed=3, unit=unit)
        rows = [stream.next_row() for _ in range(300)]
        efficiency = sum(r["real_tokens"] for r in rows) / (len(rows) * seq_len)
        # Shares of documents at 256 (not the default): nearly half the documents are ~150-token code problems, one
        # per row, and the short documents drawn barely fill the gaps, so the fill depends on the draw (0.92-0.98
        # over seeds 1-5 on the shipped corpus). What the stream guarantees there is its tail_fill (0.9) per row.
        floor = 0.9 if (unit, seq_len) == ("docs", 256) else 0.97
        assert efficiency >= floor, (unit, efficiency)
        for domain, shares in stream.realised().items():
            assert abs(shares[which] - mixture[domain] / total) < 0.04, (unit, domain, shares)


def test_mixture_stream_is_deterministic_and_skip_resumes_exactly(toy_docs):
    docs, _ = toy_docs
    mix = dict(code=1, stem=1, general=1)
    a = data.MixtureStream(docs, mix, 256, seed=7, pool_rows=8)
    first = [a.next_row()["input_ids"] for _ in range(30)]
    b = data.MixtureStream(docs, mix, 256, seed=7, pool_rows=8)
    b.skip(17)
    assert [b.next_row()["input_ids"] for _ in range(13)] == first[17:]
    c = data.MixtureStream(docs, mix, 256, seed=8, pool_rows=8)
    assert [c.next_row()["input_ids"] for _ in range(5)] != first[:5]


def test_mixture_missing_domain_is_an_error(toy_docs):
    docs, _ = toy_docs
    with pytest.raises(ValueError, match="asks for domain"):
        data.MixtureStream([d for d in docs if d["domain"] != "search"], dict(search=1, stem=1), 1024, seed=0)


# -----------------------------------------------------------------------------
# the shipped corpus

def test_shipped_corpus_has_every_domain_and_assistant_masks(toy_docs):
    docs, tok = toy_docs
    assert {d["domain"] for d in docs} == set(data.DOMAINS)
    assert tok.vocab_size == 4096
    for d in docs[:200]:
        assert 0 < sum(d["mask"]) < len(d["ids"])
        assert d["ids"][max(i for i, m in enumerate(d["mask"]) if m)] == tok.im_end_id  # mask ends on <|im_end|>
    eval_records = data.read_jsonl(os.path.join(TOY_SFT, "eval.jsonl"))
    assert {r["domain"] for r in eval_records} == set(data.DOMAINS)


@pytest.mark.slow
def test_data_synth_toy_regenerates_identical_bytes(tmp_path):
    subprocess.run([sys.executable, os.path.join(REPO, "data_synth.py"), "toy", "--out-dir", str(tmp_path)],
                   check=True, capture_output=True, cwd=REPO)
    for name in DOMAIN_FILES + ["eval"]:
        assert filecmp.cmp(tmp_path / "sft" / f"{name}.jsonl", os.path.join(TOY_SFT, f"{name}.jsonl"), shallow=False), name
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        assert filecmp.cmp(tmp_path / "tokenizer" / name, toy_tokenizer_path() / name, shallow=False), name
