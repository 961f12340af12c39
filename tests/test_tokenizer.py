"""Tokenizer and chat format: parity with the family's template and transformers, loss masks, parsing, bad input.

The parity tests render a few hundred generated conversations (multi-turn with earlier reasoning, reasoning in
`reasoning_content` or inline `<think>`, tool calls with nested arguments, consecutive tool results, unicode,
with/without system and tools, generation prompt on/off, keep_all_think on/off) three ways and compare the strings:
`render`, the public 4.1 template text from the shared fixtures through transformers' `apply_chat_template(...,
chat_template=FIXTURE)` (its Jinja settings: trim_blocks, lstrip_blocks, its tojson), and our saved template loaded
back with `transformers.AutoTokenizer` (which also gives token ids and assistant masks). A hand-written golden string
pins the layout itself, independently of all renderers.
"""

import hashlib
import json
import os
import random
import subprocess
import sys

import pytest

from nanbeige41.tokenizer import (
    DEFAULT_SYSTEM_PROMPT,
    EMPTY_THINK,
    GENERATION_PROMPT,
    TOOL_SYSTEM_PROMPT,
    Tokenizer,
    toy_tokenizer_path,
    train_toy_tokenizer,
)

WORDS = [
    "hello", "world", "the", "answer", "is", "42", "3.14", "世界", "数据", "你好", "🙂", "🚀", "naïve", "café",
    "Ünïcode", "x = f(y);", "{{ braces }}", "{% raw %}", '"quoted"', "back\\slash", "tab\there", "  indented",
    "<b>bold</b>", "\u200bzero-width", "a,b;c", "ok.", "e\u0301",
]
CORPUS = [
    "The quick brown fox jumps over the lazy dog. 你好，世界！ def f(x):\n    return x * 2\n",
    '{"name": "search", "arguments": {"query": "weather in Paris", "top_k": 3}}\n',
    "Let me think step by step. First, compute 3 + 4 = 7. Then the answer is 7.\n",
] * 20


def random_text(rng, max_words=10, newlines=True):
    words = [rng.choice(WORDS) for _ in range(rng.randint(0, max_words))]
    if newlines:
        for _ in range(rng.randint(0, 3)):
            words.insert(rng.randint(0, len(words)), rng.choice(["\n", "\n\n"]))
    return " ".join(words)


def random_json(rng, depth=0):
    kind = rng.choice(["dict", "list", "str", "int", "float", "bool", "null"] if depth < 3 else ["str", "int"])
    if kind == "dict":
        return {random_text(rng, 2, False) or "k": random_json(rng, depth + 1) for _ in range(rng.randint(0, 3))}
    if kind == "list":
        return [random_json(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {"str": random_text(rng, 4), "int": rng.randint(-5, 10**6), "float": rng.random(), "bool": True,
            "null": None}[kind]


def random_tool_call(rng):
    name = rng.choice(["search", "run_python", "get_weather", "查找"])
    arguments = {"query": random_text(rng, 4), "options": random_json(rng)}
    if rng.random() < 0.3:  # arguments given as a JSON string, compact or not: rendered verbatim
        arguments = json.dumps(arguments, ensure_ascii=rng.random() < 0.5, separators=rng.choice([None, (",", ":")]))
    if rng.random() < 0.7:
        return {"type": "function", "function": {"name": name, "arguments": arguments}}
    return {"name": name, "arguments": arguments}


def random_assistant(rng, calls=0):
    message = {"role": "assistant", "content": random_text(rng)}
    style = rng.random()
    if style < 0.5:
        message["reasoning_content"] = random_text(rng)
    elif style < 0.6:  # empty or blank reasoning: the template's truthiness decides whether a block is shown
        message["reasoning_content"] = rng.choice(["", "\n", "\n\n"])
    elif style < 0.75:  # reasoning left inline in the content
        message["content"] = f"{rng.choice(['<think>', ''])}{random_text(rng)}</think>{random_text(rng)}"
    if calls:
        message["tool_calls"] = [random_tool_call(rng) for _ in range(calls)]
        if rng.random() < 0.3:
            message["content"] = rng.choice([None, "", "\n"])
    return message


TOOLS = [
    {"type": "function", "function": {"name": "search", "description": "Web search 搜索",
                                      "parameters": {"type": "object", "properties": {"query": {"type": "string"}},
                                                     "required": ["query"]}}},
    {"type": "function", "function": {"name": "run_python", "description": 'Run "code" <safely>',
                                      "parameters": {"type": "object", "properties": {}}}},
]


def random_conversation(rng):
    messages = []
    if rng.random() < 0.5:
        messages.append({"role": "system", "content": random_text(rng)})
    for _ in range(rng.randint(1, 3)):
        query = random_text(rng)
        if rng.random() < 0.1:  # an old-style tool result sent as a user message: not a "query"
            query = f"<tool_response>\n{query}\n</tool_response>"
        messages.append({"role": "user", "content": query})
        for _ in range(rng.randint(0, 2)):  # agent steps: tool calls, then one result per call
            n_calls = rng.randint(1, 3)
            messages.append(random_assistant(rng, calls=n_calls))
            messages += [{"role": "tool", "content": random_text(rng)} for _ in range(n_calls)]
        if rng.random() < 0.8:
            messages.append(random_assistant(rng))
        if rng.random() < 0.05:
            messages.append({"role": "system", "content": random_text(rng)})
    tools = rng.choice([None, [], TOOLS[:1], TOOLS])
    return messages, tools


CONVERSATIONS = [random_conversation(random.Random(seed)) for seed in range(150)]


@pytest.fixture(scope="module")
def tok():
    return train_toy_tokenizer(CORPUS + [random_text(random.Random(i), 30) for i in range(50)], vocab_size=600)


@pytest.fixture(scope="module")
def hf_tok(tok, tmp_path_factory):
    transformers = pytest.importorskip("transformers")
    path = tmp_path_factory.mktemp("toy_tokenizer")
    tok.save_pretrained(path)
    return transformers.AutoTokenizer.from_pretrained(path)


# ---------------------------------------------------------------------- the tokenizer itself


def test_toy_tokenizer_layout(tok):
    assert tok.vocab_size == len(tok) == 600
    assert tok.pad_id == 0 and tok.decode([0]) == "<unk>"
    # the family's order, as the last seven ids (166100..166106 in the released vocabulary)
    chat_ids = [tok.im_start_id, tok.im_end_id, tok.endoftext_id, tok.think_id, tok.think_end_id,
                tok.tool_call_id, tok.tool_call_end_id]
    assert chat_ids == list(range(593, 600))
    assert tok.eos_id == tok.im_end_id
    # <|im_*|> and <|endoftext|> are special (skipped on request); <think> and <tool_call> are ordinary added tokens
    ids = tok.encode("<|im_start|>assistant\n<think>\nhm\n</think>\n\nhi<tool_call></tool_call><|im_end|><|endoftext|>")
    assert ids[0] == tok.im_start_id and ids[-2:] == [tok.im_end_id, tok.endoftext_id]
    assert tok.decode(ids, skip_special_tokens=True) == "assistant\n<think>\nhm\n</think>\n\nhi<tool_call></tool_call>"


def test_encode_adds_nothing_and_round_trips(tok):
    rng = random.Random(0)
    for _ in range(50):
        text = random_text(rng, 30)
        assert tok.decode(tok.encode(text)) == text
    assert tok.encode("") == []
    assert tok.encode("<|im_end|>") == [tok.im_end_id]


def test_training_is_deterministic(tmp_path):
    texts = CORPUS + ["zebra quagga 🦓 " * 5]
    first, second = tmp_path / "a", tmp_path / "b"
    train_toy_tokenizer(texts, vocab_size=600).save_pretrained(first)
    train_toy_tokenizer(texts, vocab_size=600).save_pretrained(second)
    data = (first / "tokenizer.json").read_bytes()
    assert data == (second / "tokenizer.json").read_bytes()
    # A fresh process has fresh hash seeds: the file must still be byte-identical.
    code = (
        "import sys, hashlib; from pathlib import Path; from nanbeige41.tokenizer import train_toy_tokenizer\n"
        f"texts = {texts!r}\n"
        "train_toy_tokenizer(texts, vocab_size=600).save_pretrained(sys.argv[1])\n"
        "print(hashlib.sha256(Path(sys.argv[1], 'tokenizer.json').read_bytes()).hexdigest())\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "c")], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == hashlib.sha256(data).hexdigest()
    # ...and different texts give a different tokenizer (the check above can fail)
    train_toy_tokenizer(texts[:3], vocab_size=600).save_pretrained(tmp_path / "d")
    assert (tmp_path / "d" / "tokenizer.json").read_bytes() != data


def test_chat_tokens_do_not_leak_into_bpe_merges(tok):
    # Training texts are rendered chats; their chat-token strings are cut out before the BPE sees them.
    texts = [tok.render(messages, tools) for messages, tools in CONVERSATIONS[:40]]
    trained = train_toy_tokenizer(texts, vocab_size=700)
    learned = trained._tokenizer.get_vocab(with_added_tokens=False)
    assert not [t for t in learned if "<|" in t or "|>" in t or "im_start" in t or "think>" in t]


def test_from_pretrained_round_trip(tok, tmp_path):
    tok.save_pretrained(tmp_path)
    assert {p.name for p in tmp_path.iterdir()} >= {"tokenizer.json", "tokenizer_config.json",
                                                   "special_tokens_map.json"}
    loaded = Tokenizer.from_pretrained(tmp_path)
    assert loaded.vocab_size == tok.vocab_size and loaded.pad_id == tok.pad_id
    messages, tools = CONVERSATIONS[3]
    assert loaded.encode_chat(messages, tools) == tok.encode_chat(messages, tools)


def test_from_pretrained_adds_missing_chat_tokens(tmp_path):
    # A plain byte-level BPE with no chat tokens at all, saved as a HF directory without tokenizer_config.json.
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import decoders, models, pre_tokenizers, trainers

    plain = HFTokenizer(models.BPE())
    plain.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    plain.decoder = decoders.ByteLevel()
    plain.train_from_iterator(CORPUS + ["a\n  b"] * 50, trainers.BpeTrainer(vocab_size=300, show_progress=False,
                                                          initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    plain.save(str(tmp_path / "tokenizer.json"))
    loaded = Tokenizer.from_pretrained(tmp_path)
    assert loaded.vocab_size == plain.get_vocab_size() + 7
    assert loaded.pad_id == loaded.endoftext_id  # no <unk> to pad with
    ids, mask = loaded.encode_chat([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}])
    assert ids.count(loaded.im_start_id) == 3 and ids.count(loaded.think_id) == 1
    assert loaded.decode([i for i, m in zip(ids, mask) if m]) == "<think>\n\n</think>\n\nyo<|im_end|>"
    # GPT-2's split pattern joins the generation prompt's last newline to the spaces that open an answer rendered
    # without a think block (a turn before the last query): the straddling token counts as assistant, the same rule
    # transformers applies to {% generation %} masks.
    transformers = pytest.importorskip("transformers")
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "reasoning_content": "r", "content": "  x"},
                {"role": "user", "content": "again"}]
    ids, mask = loaded.encode_chat(messages)
    loaded.save_pretrained(tmp_path / "saved")
    theirs = transformers.AutoTokenizer.from_pretrained(tmp_path / "saved").apply_chat_template(
        messages, tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
    assert (theirs["input_ids"], theirs["assistant_masks"]) == (ids, mask)
    assert loaded.decode([i for i, m in zip(ids, mask) if m]).startswith("\n  x<|im_end|>")
    with pytest.raises(FileNotFoundError, match="tokenizer.json"):
        Tokenizer.from_pretrained(tmp_path / "nowhere")


def test_toy_tokenizer_path():
    assert toy_tokenizer_path().parts[-3:] == ("data", "toy", "tokenizer")


# ---------------------------------------------------------------------- the layout, pinned by hand


def test_golden_layout(tok):
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi."},
        {"role": "assistant", "reasoning_content": "Greet back.", "content": "Hello."},  # before the last query
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "reasoning_content": "Need a lookup.", "content": "Checking.",
         "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
                        {"name": "get_weather", "arguments": '{"city":"Nice"}'}]},
        {"role": "tool", "content": "18C"},
        {"role": "tool", "content": "22C"},
        {"role": "assistant", "content": "", "tool_calls": [{"name": "get_weather", "arguments": {}}]},  # no reasoning
        {"role": "tool", "content": "?"},
        {"role": "assistant", "reasoning_content": "Compare.", "content": "Nice is warmer."},
    ]
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": {}}}
    expected = (
        "<|im_start|>system\nBe brief.\n\n# Tools\n\nYou may call one or more functions to assist with the user "
        "query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
        '{"type": "function", "function": {"name": "get_weather", "parameters": {}}}\n</tools>\n\n'
        "For each function call, return a json object with function name and arguments within "
        '<tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": '
        "<args-json-object>}\n</tool_call><|im_end|>\n"
        "<|im_start|>user\nHi.<|im_end|>\n"
        "<|im_start|>assistant\nHello.<|im_end|>\n"  # reasoning dropped: no think block at all
        "<|im_start|>user\nWeather?<|im_end|>\n"
        "<|im_start|>assistant\n<think>\nNeed a lookup.\n</think>\n\nChecking.\n"
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "get_weather", "arguments": {"city":"Nice"}}\n</tool_call><|im_end|>\n'
        "<|im_start|>user\n<tool_response>\n18C\n</tool_response>\n<tool_response>\n22C\n</tool_response>"
        "<|im_end|>\n"
        '<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": {}}\n</tool_call><|im_end|>\n'
        "<|im_start|>user\n<tool_response>\n?\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n<think>\nCompare.\n</think>\n\nNice is warmer.<|im_end|>\n"
    )
    assert tok.render(messages, tools=[tool]) == expected
    # keep_all_think: the first answer keeps its reasoning too; the intermediate turn without reasoning still has none
    kept = tok.render(messages, tools=[tool], keep_all_think=True)
    assert kept == expected.replace("assistant\nHello.", "assistant\n<think>\nGreet back.\n</think>\n\nHello.")
    # Without a system message: the identity prompt. The generation prompt does not open <think>: the model does.
    plain = tok.render([{"role": "user", "content": "hi"}], add_generation_prompt=True)
    assert plain == f"<|im_start|>system\n{DEFAULT_SYSTEM_PROMPT}<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n" \
                    "<|im_start|>assistant\n"
    assert GENERATION_PROMPT == "<|im_start|>assistant\n" and EMPTY_THINK == "<think>\n\n</think>\n\n"
    # With tools and no system message: the tool-calling prompt, glued to "# Tools".
    assert tok.render([{"role": "user", "content": "hi"}], tools=[tool]).startswith(
        f"<|im_start|>system\n{TOOL_SYSTEM_PROMPT}# Tools\n\n")
    # A final answer without reasoning shows an empty block (EMPTY_THINK); the same answer earlier shows none.
    answer = {"role": "assistant", "content": "yo"}
    assert tok.render([{"role": "user", "content": "hi"}, answer]).endswith(f"assistant\n{EMPTY_THINK}yo<|im_end|>\n")


def test_reasoning_dropped_before_last_query(tok):
    messages = [
        {"role": "user", "content": "q1"},
        {"role": "assistant", "reasoning_content": "r1", "content": "a1"},
        {"role": "user", "content": "q2"},
        {"role": "assistant", "reasoning_content": "r2", "content": "a2", "tool_calls": [
            {"name": "f", "arguments": {}}]},
        {"role": "tool", "content": "t"},
        {"role": "user", "content": "<tool_response>\nold-style result\n</tool_response>"},  # not a query
        {"role": "assistant", "content": "<think>\nr3\n</think>\n\na3"},  # reasoning inline in content
    ]
    text = tok.render(messages)
    assert "<|im_start|>assistant\na1<|im_end|>" in text and "r1" not in text
    assert "<think>\nr2\n</think>\n\na2\n<tool_call>" in text
    assert "<think>\nr3\n</think>\n\na3<|im_end|>" in text
    assert "<|im_start|>assistant\n<think>\nr1\n</think>\n\na1<|im_end|>" in tok.render(messages, keep_all_think=True)


# ---------------------------------------------------------------------- parity with the family's template

FIXTURE_DIR = "/work/shared/fixtures/chat_templates"
FIXTURE_41 = os.path.join(FIXTURE_DIR, "nanbeige4.1-3b.chat_template.RECONSTRUCTED.jinja")  # what we follow
FIXTURE_2511 = os.path.join(FIXTURE_DIR, "nanbeige4-3b-thinking-2511.chat_template.jinja")
needs_fixtures = pytest.mark.skipif(not os.path.exists(FIXTURE_41) or not os.path.exists(FIXTURE_2511),
                                    reason=f"shared chat-template fixtures not present ({FIXTURE_DIR})")


def fixture_render(hf_tok, path, messages, tools, **kwargs):
    """The fixture template's string, rendered by transformers exactly as for a Hub template."""
    with open(path, encoding="utf-8") as f:
        template = f.read()
    return hf_tok.apply_chat_template(messages, tools=tools, tokenize=False, chat_template=template, **kwargs)


@needs_fixtures
@pytest.mark.parametrize("index", range(0, len(CONVERSATIONS), 25))
def test_render_matches_the_41_template(tok, hf_tok, index):
    # render, the fixture template and our saved template: one string, for every option combination
    for messages, tools in CONVERSATIONS[index : index + 25]:
        for add_generation_prompt in (False, True):
            for keep_all_think in (False, True):
                kwargs = dict(add_generation_prompt=add_generation_prompt, keep_all_think=keep_all_think)
                ours = tok.render(messages, tools=tools, **kwargs)
                assert ours == fixture_render(hf_tok, FIXTURE_41, messages, tools, **kwargs)
                assert ours == hf_tok.apply_chat_template(messages, tools=tools, tokenize=False, **kwargs)


@needs_fixtures
def test_41_template_differs_from_2511_only_by_keep_all_think(tok, hf_tok):
    # The 2511 template renders the same strings as long as keep_all_think is off; the switch (also accepted as
    # extra_body.keep_all_think) is the 4.1 line, and it changes multi-turn conversations with earlier reasoning.
    changed = 0
    for messages, tools in CONVERSATIONS[:60]:
        assert tok.render(messages, tools) == fixture_render(hf_tok, FIXTURE_2511, messages, tools)
        kept = tok.render(messages, tools, keep_all_think=True)
        assert kept == fixture_render(hf_tok, FIXTURE_41, messages, tools, extra_body={"keep_all_think": True})
        assert kept == hf_tok.apply_chat_template(messages, tools=tools, tokenize=False,
                                                  extra_body={"keep_all_think": True})
        changed += kept != fixture_render(hf_tok, FIXTURE_2511, messages, tools, keep_all_think=True)
    assert changed >= 5


def test_conversations_cover_the_template_branches(tok):
    # The parity tests above are only as good as the conversations: check they reach every branch.
    seen = {"system": 0, "tools": 0, "reasoning_content": 0, "inline_think": 0, "blank_reasoning": 0,
            "several_calls": 0, "consecutive_results": 0, "dropped_reasoning": 0, "intermediate_no_block": 0}
    for messages, tools in CONVERSATIONS:
        text = tok.render(messages, tools)
        kept = tok.render(messages, tools, keep_all_think=True)
        seen["system"] += messages[0]["role"] == "system"
        seen["tools"] += bool(tools)
        seen["dropped_reasoning"] += kept != text
        seen["consecutive_results"] += "</tool_response>\n<tool_response>" in text
        seen["intermediate_no_block"] += "<|im_start|>assistant\n<tool_call>" in text
        for m in messages:
            seen["reasoning_content"] += bool(m.get("reasoning_content", "").strip())
            seen["blank_reasoning"] += m.get("reasoning_content", "x").strip() == ""
            seen["inline_think"] += "</think>" in (m.get("content") or "")
            seen["several_calls"] += len(m.get("tool_calls", [])) > 1
    assert min(seen.values()) >= 5, seen


# ---------------------------------------------------------------------- parity with transformers (our template)


@pytest.mark.parametrize("index", range(0, len(CONVERSATIONS), 10))
def test_render_matches_transformers(tok, hf_tok, index):
    # Our saved template through apply_chat_template: strings and ids (runs without the shared fixtures too).
    # Each parametrised case checks ten conversations, so a failure names a small range.
    for messages, tools in CONVERSATIONS[index : index + 10]:
        for add_generation_prompt in (False, True):
            for keep_all_think in (False, True):
                kwargs = dict(add_generation_prompt=add_generation_prompt, keep_all_think=keep_all_think)
                ours = tok.render(messages, tools=tools, **kwargs)
                assert ours == hf_tok.apply_chat_template(messages, tools=tools, tokenize=False, **kwargs)
                their_ids = hf_tok.apply_chat_template(messages, tools=tools, tokenize=True, return_dict=True,
                                                       **kwargs)["input_ids"]
                assert their_ids == tok.encode(ours)


def test_masks_match_transformers(tok, hf_tok):
    # The template marks assistant text with {% generation %}, so transformers computes the same loss mask.
    for messages, tools in CONVERSATIONS:
        for keep_all_think in (False, True):
            ids, mask = tok.encode_chat(messages, tools, keep_all_think=keep_all_think)
            theirs = hf_tok.apply_chat_template(messages, tools=tools, tokenize=True, return_dict=True,
                                                return_assistant_tokens_mask=True, keep_all_think=keep_all_think)
            assert theirs["input_ids"] == ids
            assert theirs["assistant_masks"] == mask


def test_saved_directory_loads_in_transformers(hf_tok, tok):
    assert hf_tok.eos_token == "<|im_end|>" and hf_tok.eos_token_id == tok.im_end_id
    assert hf_tok.pad_token_id == tok.pad_id == 0
    assert len(hf_tok) == tok.vocab_size
    assert hf_tok.convert_tokens_to_ids(["<think>", "</tool_call>"]) == [tok.think_id, tok.tool_call_end_id]


def test_reasoning_under_other_names_matches_transformers(tok, hf_tok):
    # transformers copies `thinking` / `reasoning` into `reasoning_content`; render does the same.
    for key in ("thinking", "reasoning"):
        messages = [{"role": "user", "content": "q"}, {"role": "assistant", key: "because", "content": "a"}]
        ours = tok.render(messages)
        assert "<think>\nbecause\n</think>\n\na<|im_end|>" in ours
        assert ours == hf_tok.apply_chat_template(messages, tokenize=False)


# ---------------------------------------------------------------------- loss mask


def mask_spans(mask):
    spans, start = [], None
    for i, m in enumerate(mask + [0]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            spans.append((start, i))
            start = None
    return spans


def expected_turn(message, after_last_query, is_last):
    """(reasoning, content, tool_calls) that parse_assistant should recover from a rendered assistant turn, from the
    rules of model-facts.md: a think block only after the last query, and there only with reasoning or as the last
    message; reasoning None when no block is shown."""
    content, reasoning = message.get("content") or "", message.get("reasoning_content")
    if reasoning is None:
        reasoning = ""
        if "</think>" in content:
            reasoning = content.split("</think>")[0].split("<think>")[-1].strip("\n")
            content = content.split("</think>")[-1].lstrip("\n")
    calls = []
    for call in message.get("tool_calls", []):
        call = call.get("function", call)
        arguments = call["arguments"]
        calls.append({"name": call["name"], "arguments": json.loads(arguments) if isinstance(arguments, str)
                      else arguments})
    if after_last_query and (is_last or reasoning):
        return reasoning.strip("\n"), content.lstrip("\n"), calls
    return None, content, calls


def last_query_index(messages):
    for i in reversed(range(len(messages))):
        content = messages[i]["content"]
        if messages[i]["role"] == "user" and not (content.startswith("<tool_response>")
                                                  and content.endswith("</tool_response>")):
            return i
    return len(messages) - 1


def test_mask_covers_exactly_the_assistant_text(tok):
    blocks = 0
    for messages, tools in CONVERSATIONS:
        ids, mask = tok.encode_chat(messages, tools)
        assert len(ids) == len(mask) and set(mask) <= {0, 1}
        assert ids == tok.encode(tok.render(messages, tools))  # piecewise == whole, for the toy tokenizer
        assistant = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
        spans = mask_spans(mask)
        assert len(spans) == len(assistant)
        last_query = last_query_index(messages)
        for (start, end), index in zip(spans, assistant):
            # every span follows the generation prompt and ends with <|im_end|>; tool results are never in it
            assert tok.decode(ids[:start]).endswith(GENERATION_PROMPT)
            assert ids[end - 1] == tok.im_end_id and (end == len(ids) or tok.decode(ids[end:end + 1]) == "\n")
            assert "<tool_response>" not in tok.decode(ids[start:end])
            parsed = tok.parse_assistant(tok.decode(ids[start:end]))
            assert parsed["errors"] == []
            got = (parsed["reasoning"], parsed["content"], parsed["tool_calls"])
            assert got == expected_turn(messages[index], index > last_query, index == len(messages) - 1)
            # a shown think block is written by the model, its opening <think> included
            assert (ids[start] == tok.think_id) == (got[0] is not None)
            blocks += got[0] is not None
    assert blocks > 100


def test_sft_and_rollout_see_the_same_tokens(tok):
    # For a conversation ending with an assistant turn, encode_chat == prompt ids a rollout would feed
    # (render(..., add_generation_prompt=True)) followed by the ids of the text the model wrote.
    checked = 0
    for messages, tools in CONVERSATIONS:
        if messages[-1]["role"] != "assistant":
            continue
        ids, mask = tok.encode_chat(messages, tools)
        start, end = mask_spans(mask)[-1]
        prompt = tok.render(messages[:-1], tools, add_generation_prompt=True)
        assert ids[:start] == tok.encode(prompt)
        completion = tok.render(messages, tools)[len(prompt):]
        assert ids[start:end] == tok.encode(completion.removesuffix("\n")) and end == len(ids) - 1
        checked += 1
    assert checked > 50


# ---------------------------------------------------------------------- parse_assistant


def test_parse_assistant_round_trip(tok):
    generated = "Let me see.\n</think>\n\nHere you go.\n" \
                '<tool_call>\n{"name": "search", "arguments": {"q": "天气", "n": [1, {"deep": null}]}}\n</tool_call>\n' \
                '<tool_call>\n{"name": "run_python", "arguments": "{\\"code\\": \\"print(1)\\"}"}\n</tool_call>' \
                "<|im_end|>"
    parsed = tok.parse_assistant(generated)
    assert parsed == {"reasoning": "Let me see.", "content": "Here you go.", "errors": [], "tool_calls": [
        {"name": "search", "arguments": {"q": "天气", "n": [1, {"deep": None}]}},
        {"name": "run_python", "arguments": {"code": "print(1)"}}]}
    # a full turn with its opening <think> parses the same; anything after <|im_end|> is ignored
    assert tok.parse_assistant("<think>\n" + generated + "junk") == parsed
    # no think block at all: the form of an answer before the last query
    assert tok.parse_assistant("Just text.<|im_end|>") == {"reasoning": None, "content": "Just text.",
                                                           "tool_calls": [], "errors": []}


@pytest.mark.parametrize("text, error", [
    ('r\n</think>\n\n<tool_call>\n{"name": "f", "arguments": {"a": 1}\n</tool_call>', "tool_call 0: invalid JSON"),
    ("r\n</think>\n\n<tool_call>\n[1, 2]\n</tool_call>", "expected a JSON object"),
    ('r\n</think>\n\n<tool_call>\n{"arguments": {}}\n</tool_call>', "missing or non-string 'name'"),
    ('r\n</think>\n\n<tool_call>\n{"name": "f", "arguments": [1]}\n</tool_call>', "must be a JSON object"),
    ('r\n</think>\n\n<tool_call>\n{"name": "f"}\n</tool_call>', "must be a JSON object"),
    ('r\n</think>\n\n<tool_call>\n{"name": "f", "arguments": "{oops"}\n</tool_call>', "string that is not JSON"),
    ('r\n</think>\n\n<tool_call>\n{"name": "f", "arguments": {}}', "<tool_call> never closed"),
    ('r\n</think>\n\n<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call> trailing', "text after tool calls"),
    ("<think>\nstill thinking when the budget ran out", "<think> block never closed"),
    ("a\n</think>\n\nb\n</think>\n\nc", "more than one </think>"),
])
def test_parse_assistant_malformed(tok, text, error):
    parsed = tok.parse_assistant(text)
    assert any(error in e for e in parsed["errors"]), parsed["errors"]
    # a bad call is dropped; only the trailing-text case has a well-formed call to keep
    assert len(parsed["tool_calls"]) == (1 if "trailing" in text else 0)


def test_parse_assistant_keeps_good_calls_next_to_bad_ones(tok):
    text = ('</think>\n\n<tool_call>\n{"name": "a", "arguments": {}}\n</tool_call>\n'
            '<tool_call>\nnot json\n</tool_call>\n<tool_call>\n{"name": "c", "arguments": {"x": 1}}\n</tool_call>')
    parsed = tok.parse_assistant(text)
    assert [c["name"] for c in parsed["tool_calls"]] == ["a", "c"]
    assert len(parsed["errors"]) == 1 and parsed["errors"][0].startswith("tool_call 1: invalid JSON")


def test_parse_assistant_never_raises(tok):
    # Any cut of rendered conversations (what a truncated rollout looks like) parses without an exception.
    rng = random.Random(1)
    for messages, tools in CONVERSATIONS[:60]:
        text = tok.render(messages, tools)
        for _ in range(5):
            a, b = sorted(rng.randrange(len(text) + 1) for _ in range(2))
            parsed = tok.parse_assistant(text[a:b])
            assert set(parsed) == {"reasoning", "content", "tool_calls", "errors"}


# ---------------------------------------------------------------------- bad input


@pytest.mark.parametrize("messages, match", [
    ([], r"messages: empty"),
    ("hi", r"messages: expected a list"),
    ([{"role": "user", "content": "a"}, "b"], r"messages\[1\]: expected a dict"),
    ([{"role": "user", "content": "a"}, {"role": "robot", "content": "b"}], r"messages\[1\]\.role: unknown role 'robot'"),
    ([{"content": "a"}], r"messages\[0\]\.role: unknown role None"),
    ([{"role": "user"}], r"messages\[0\]\.content: expected a string"),
    ([{"role": "user", "content": [{"type": "text", "text": "a"}]}], r"messages\[0\]\.content: expected a string"),
    ([{"role": "tool", "content": None}], r"messages\[0\]\.content"),
    ([{"role": "user", "content": "a", "reasoning_content": "r"}], r"messages\[0\]\.reasoning_content: only assistant"),
    ([{"role": "user", "content": "a", "tool_calls": [{"name": "f", "arguments": {}}]}], r"messages\[0\]\.tool_calls"),
    ([{"role": "assistant", "content": "a", "reasoning_content": 3}], r"messages\[0\]\.reasoning_content: expected"),
    ([{"role": "assistant", "content": 5}], r"messages\[0\]\.content: expected a string or None"),
    ([{"role": "assistant", "content": "", "tool_calls": [{"arguments": {}}]}], r"tool_calls\[0\]\.name"),
    ([{"role": "assistant", "content": "", "tool_calls": [{"name": 'say"hi', "arguments": {}}]}],
     r"tool_calls\[0\]\.name: .* JSON would escape"),
    ([{"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "f",
                                                                                             "arguments": "{x"}}]}],
     r"messages\[0\]\.tool_calls\[0\]\.function\.arguments: string is not valid JSON"),
    ([{"role": "assistant", "content": "", "tool_calls": [{"name": "f", "arguments": "[1]"}]}], r"must hold an object"),
    ([{"role": "assistant", "content": "", "tool_calls": [{"name": "f", "arguments": [1]}]}], r"arguments: expected"),
    ([{"role": "assistant", "content": "", "tool_calls": [{"name": "f", "arguments": {"x": {1, 2}}}]}],
     r"arguments: not JSON-serialisable"),
    ([{"role": "assistant", "content": "", "tool_calls": "f()"}], r"messages\[0\]\.tool_calls: expected a list"),
])
def test_bad_messages_raise(tok, messages, match):
    with pytest.raises(ValueError, match=match):
        tok.render(messages)
    with pytest.raises(ValueError, match=match):
        tok.encode_chat(messages)


def test_bad_tools_raise(tok):
    messages = [{"role": "user", "content": "a"}]
    with pytest.raises(ValueError, match=r"tools: expected a list"):
        tok.render(messages, tools={"name": "f"})
    with pytest.raises(ValueError, match=r"tools\[1\]: expected a dict"):
        tok.render(messages, tools=[TOOLS[0], "search"])
