r"""Tokenizer and chat format of the Nanbeige4.1 family.

What is here
- `Tokenizer`: a thin wrapper around a `tokenizers.Tokenizer` (a standard HF `tokenizer.json`) that knows the
  family's chat tokens and renders, encodes and parses conversations.
- `train_toy_tokenizer`: a deterministic byte-level BPE for the toy world, with the family's special tokens.
- `toy_tokenizer_path`: where the committed toy tokenizer lives (`data/toy/tokenizer`).

The chat format is the Nanbeige4.1-3B chat template (model-facts.md, "Chat format"; the template text is
`shared/fixtures/chat_templates/nanbeige4.1-3b.chat_template.RECONSTRUCTED.jinja`, see "Which template" below). A
conversation with tools, one tool-calling step and a generation prompt renders as

    <|im_start|>system
    {system prompt}

    # Tools
    ...<tools>
    {"type": "function", "function": {...}}        <- one tool schema per line
    </tools>
    ...</tool_call><|im_end|>
    <|im_start|>user
    {query}<|im_end|>
    <|im_start|>assistant
    <think>
    {reasoning}
    </think>

    {content}
    <tool_call>
    {"name": "search", "arguments": {"q": "..."}}
    </tool_call><|im_end|>
    <|im_start|>user
    <tool_response>
    {result 1}
    </tool_response>
    <tool_response>
    {result 2}
    </tool_response><|im_end|>
    <|im_start|>assistant
                                                   <- the generation prompt ends here; the model opens <think>

Rules of the template, all reproduced by `render`:
- No system message: a default one (the identity prompt; with tools, the Chinese tool-calling-expert prompt, which
  the template joins to `# Tools` with no separator). A non-leading system message is a plain turn.
- Tools go into the system turn: `# Tools`, one `tojson` schema per line inside `<tools></tools>`, the call format.
- The "last query" is the last user message that is not wrapped in `<tool_response>...</tool_response>`. Assistant
  turns up to it have NO think block (their reasoning is dropped). After it, a turn gets
  `<think>\n{reasoning}\n</think>\n\n` when it has reasoning or is the conversation's last message (then possibly
  an empty block); an intermediate turn without reasoning has none. `keep_all_think=True` applies the after-the-
  query rule to every turn.
- Reasoning comes from `reasoning_content` (or `thinking` / `reasoning`, which transformers copies into it), else
  from an inline `<think>...</think>` in the content (what precedes the first `</think>`).
- Tool calls follow the content, one per `<tool_call>\n{"name": "NAME", "arguments": ARGS}\n</tool_call>`, joined
  by newlines (and separated from non-empty content by one); ARGS is a string argument verbatim, else `tojson`.
  The template pastes NAME raw, so names that JSON would escape (quotes, backslashes, control characters) are
  rejected here instead of rendered as broken JSON.
- Consecutive `tool` messages share one `user` turn, each result as `\n<tool_response>\n{result}\n</tool_response>`.
- Generation prompt `<|im_start|>assistant\n`: the model writes `<think>` itself. The template has no switch for
  thinking off; `EMPTY_THINK` appended to the prompt is this project's way to ask for an answer without reasoning
  (it is what the template renders for a final turn with no reasoning).

Loss mask (encode_chat) and generation agree on one boundary: the header `<|im_start|>assistant\n` is prompt
(mask 0); everything the model writes after it -- `<think>`, reasoning, `</think>`, content, tool calls and the
closing `<|im_end|>` -- is mask 1; the `\n` after `<|im_end|>` is prompt again (generation stops at `<|im_end|>`),
and so are tool results, which sit in user turns. Every assistant turn is masked in the form it is rendered in: a
turn before the last query trains the answer without its reasoning (the template's form); to train on each turn's
own reasoning, call encode_chat on each prefix that ends with that turn. encode_chat tokenizes the whole rendered
conversation (ids == encode(render(messages)), as transformers does) and masks by character offsets. For SFT and RL
to see the same tokens, the ids before a final assistant turn must equal encode(render(prefix,
add_generation_prompt=True)): true when no token spans the newline that ends the generation prompt. The toy
tokenizer makes every newline its own pre-token, so it always holds there (tested); for other tokenizers it
depends on their split pattern (GPT-2's, for one, joins a newline to a following run of spaces).

Which template. The family's 2511 release (Nanbeige4-3B-Thinking-2511) publishes its template; the 4.1 page's
public copies show the same text with one line changed, the `keep_all_think` switch (also read from
`extra_body.keep_all_think`). We follow that 4.1 reconstruction, because this project reproduces 4.1; without
`keep_all_think` both render the same strings. tests/test_tokenizer.py renders varied conversations through the
fixture text with transformers' Jinja settings (`apply_chat_template(..., chat_template=FIXTURE)`) and checks that
`render` and our saved template give identical strings (skipped when the fixture directory is absent). The saved
template (CHAT_TEMPLATE) is written for this project rather than copied: it computes the same strings and marks the
assistant-written text with transformers' `{% generation %}` tag, so `return_assistant_tokens_mask=True` gives
encode_chat's mask; a Jinja engine without that extension will not parse it. List-of-parts (multimodal) content is
rejected; the family's text model only ever sees strings here.
"""

import itertools
import json
import re
from collections.abc import Iterable
from pathlib import Path

from tokenizers import AddedToken, Regex, decoders, models, pre_tokenizers, trainers
from tokenizers import Tokenizer as HFTokenizer

# The family's chat tokens, in the released id order (166100..166106); `<unk>` (id 0) doubles as pad.
UNK, IM_START, IM_END, ENDOFTEXT = "<unk>", "<|im_start|>", "<|im_end|>", "<|endoftext|>"
THINK, THINK_END, TOOL_CALL, TOOL_CALL_END = "<think>", "</think>", "<tool_call>", "</tool_call>"
SPECIAL_TOKENS = [IM_START, IM_END, ENDOFTEXT]  # special: dropped by decode(skip_special_tokens=True)
ADDED_TOKENS = [THINK, THINK_END, TOOL_CALL, TOOL_CALL_END]  # ordinary added tokens: always decoded

DEFAULT_SYSTEM_PROMPT = "你是南北阁，一款由BOSS直聘自主研发并训练的专业大语言模型。"
TOOL_SYSTEM_PROMPT = (
    "你是一位工具函数调用专家，你会得到一个问题和一组可能的工具函数。根据问题，你需要进行一个或多个函数/工具调用以实现目的，"
    "请尽量尝试探索通过工具解决问题。\n如果没有一个函数可以使用，请直接使用自然语言回复用户。\n"
    "如果给定的问题缺少函数所需的参数，请使用自然语言进行提问，向用户询问必要信息。\n"
    "如果调用结果已经足够回答用户问题，请对历史结果进行总结，使用自然语言回复用户。"
)
TOOLS_HEADER = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
)
TOOLS_FOOTER = (
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    '<tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n'
    "</tool_call>"
)
GENERATION_PROMPT = f"{IM_START}assistant\n"  # the 4.1 template's: the model opens <think> itself
# An empty think block: what the template renders for a final assistant turn with no reasoning. Appended to the
# generation prompt it asks for an answer without reasoning (the template itself has no thinking-off switch).
EMPTY_THINK = f"{THINK}\n\n{THINK_END}\n\n"
ROLES = ("system", "user", "assistant", "tool")
# transformers copies reasoning given under these older names into `reasoning_content` before templating; we do
# the same so both renderers see the same conversation.
REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")


def _tojson(value) -> str:
    # What transformers' `tojson` filter does (no HTML escaping, no ASCII escaping, ", " and ": " separators).
    return json.dumps(value, ensure_ascii=False)


# Our own Jinja rendering of the 4.1 template, written to reproduce `Tokenizer.render` exactly (and so the fixture
# template's strings). The {% generation %} blocks mark the assistant-produced text, so transformers'
# return_assistant_tokens_mask gives the same mask as encode_chat. Kept in a raw string: the `\n` escapes are
# Jinja's to interpret.
CHAT_TEMPLATE = (
    r"""{#- Nanbeige4.1 chat format, written for nanbeige41 (nanbeige41/tokenizer.py documents it). -#}
{%- set default_system = '""" + DEFAULT_SYSTEM_PROMPT + r"""' -%}
{%- set tool_system = '""" + TOOL_SYSTEM_PROMPT.replace("\n", r"\n") + r"""' -%}
{%- set has_system = messages and messages[0].role == 'system' -%}
{{- '<|im_start|>system\n' -}}
{%- if tools -%}
    {{- (messages[0].content + '\n\n') if has_system else tool_system -}}
    {{- '""" + TOOLS_HEADER.replace("\n", r"\n") + r"""' -}}
    {%- for tool in tools -%}
        {{- '\n' + (tool | tojson) -}}
    {%- endfor -%}
    {{- '""" + TOOLS_FOOTER.replace("\n", r"\n") + r"""' -}}
{%- else -%}
    {{- messages[0].content if has_system else default_system -}}
{%- endif -%}
{{- '<|im_end|>\n' -}}
{%- set keep_all = keep_all_think or (extra_body is defined and extra_body.keep_all_think) -%}
{#- The last real user query: assistant turns up to it are rendered without their reasoning. -#}
{%- set ns = namespace(last_query=(messages | length) - 1, found=false) -%}
{%- for message in messages | reverse -%}
    {%- if not ns.found and message.role == 'user' and message.content is string
          and not (message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) -%}
        {%- set ns.last_query = (messages | length) - 1 - loop.index0 -%}
        {%- set ns.found = true -%}
    {%- endif -%}
{%- endfor -%}
{%- for message in messages -%}
    {%- set content = message.content if message.content is string else '' -%}
    {%- if message.role == 'user' or (message.role == 'system' and not loop.first) -%}
        {{- '<|im_start|>' + message.role + '\n' + content + '<|im_end|>\n' -}}
    {%- elif message.role == 'assistant' -%}
        {%- if message.reasoning_content is string -%}
            {%- set reasoning = message.reasoning_content -%}
        {%- elif '</think>' in content -%}
            {%- set reasoning = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') -%}
            {%- set content = content.split('</think>')[-1].lstrip('\n') -%}
        {%- else -%}
            {%- set reasoning = '' -%}
        {%- endif -%}
        {{- '<|im_start|>assistant\n' -}}
        {%- generation -%}
        {%- if (loop.index0 > ns.last_query or keep_all) and (loop.last or reasoning) -%}
            {{- '<think>\n' + reasoning.strip('\n') + '\n</think>\n\n' + content.lstrip('\n') -}}
        {%- else -%}
            {{- content -}}
        {%- endif -%}
        {%- for call in message.tool_calls or [] -%}
            {%- set call = call.function if call.function is defined else call -%}
            {%- if not loop.first or content -%}
                {{- '\n' -}}
            {%- endif -%}
            {{- '<tool_call>\n{"name": "' + call.name + '", "arguments": ' -}}
            {{- call.arguments if call.arguments is string else (call.arguments | tojson) -}}
            {{- '}\n</tool_call>' -}}
        {%- endfor -%}
        {{- '<|im_end|>' -}}
        {%- endgeneration -%}
        {{- '\n' -}}
    {%- elif message.role == 'tool' -%}
        {%- if loop.first or loop.previtem.role != 'tool' -%}
            {{- '<|im_start|>user' -}}
        {%- endif -%}
        {{- '\n<tool_response>\n' + content + '\n</tool_response>' -}}
        {%- if loop.last or loop.nextitem.role != 'tool' -%}
            {{- '<|im_end|>\n' -}}
        {%- endif -%}
    {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- '<|im_start|>assistant\n' -}}
{%- endif -%}
"""
)


def toy_tokenizer_path() -> Path:
    """The committed toy tokenizer directory, `data/toy/tokenizer` at the repository root."""
    return Path(__file__).resolve().parent.parent / "data" / "toy" / "tokenizer"


class Tokenizer:
    """The family's tokenizer: encode/decode plus the chat format (render, encode_chat, parse_assistant)."""

    def __init__(self, tokenizer: HFTokenizer, pad_token: str | None = None):
        # Add whichever chat tokens the vocabulary lacks (a plain BPE such as GPT-2's has none of them).
        missing_special = [t for t in SPECIAL_TOKENS if tokenizer.token_to_id(t) is None]
        tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in missing_special])
        missing_added = [t for t in ADDED_TOKENS if tokenizer.token_to_id(t) is None]
        tokenizer.add_tokens([AddedToken(t, special=False, normalized=False) for t in missing_added])
        self._tokenizer = tokenizer
        # Tokens the tokenizer knows, added ones included; the released model pads its embedding to 166144.
        self.vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)
        self.im_start_id = tokenizer.token_to_id(IM_START)
        self.im_end_id = tokenizer.token_to_id(IM_END)
        self.eos_id = self.im_end_id  # generation stops at <|im_end|> (the model card passes eos_token_id=166101)
        self.endoftext_id = tokenizer.token_to_id(ENDOFTEXT)
        self.think_id = tokenizer.token_to_id(THINK)
        self.think_end_id = tokenizer.token_to_id(THINK_END)
        self.tool_call_id = tokenizer.token_to_id(TOOL_CALL)
        self.tool_call_end_id = tokenizer.token_to_id(TOOL_CALL_END)
        # Pad is <unk> (id 0) in the released family; fall back to <|endoftext|> for vocabularies without <unk>.
        if pad_token is None or tokenizer.token_to_id(pad_token) is None:
            pad_token = UNK if tokenizer.token_to_id(UNK) is not None else ENDOFTEXT
        self.pad_token = pad_token
        self.pad_id = tokenizer.token_to_id(pad_token)

    def __len__(self) -> int:
        return self.vocab_size

    # ------------------------------------------------------------------ files

    @classmethod
    def from_pretrained(cls, path) -> "Tokenizer":
        """Load a HF tokenizer directory (tokenizer.json, optionally tokenizer_config.json)."""
        path = Path(path)
        tokenizer_file = path / "tokenizer.json"
        if not tokenizer_file.is_file():
            raise FileNotFoundError(f"{tokenizer_file} not found: Tokenizer.from_pretrained needs a tokenizer.json")
        pad_token = None
        config_file = path / "tokenizer_config.json"
        if config_file.is_file():
            pad = json.loads(config_file.read_text(encoding="utf-8")).get("pad_token")
            pad_token = pad["content"] if isinstance(pad, dict) else pad
        return cls(HFTokenizer.from_file(str(tokenizer_file)), pad_token=pad_token)

    def save_pretrained(self, path) -> None:
        """Write tokenizer.json, tokenizer_config.json (with our chat_template) and special_tokens_map.json.

        Any chat template the loaded directory carried is replaced by ours; the result loads with
        `transformers.AutoTokenizer.from_pretrained(path)`.
        """
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        self._tokenizer.save(str(path / "tokenizer.json"))
        special_map = {"eos_token": IM_END, "pad_token": self.pad_token}
        if self._tokenizer.token_to_id(UNK) is not None:
            special_map["unk_token"] = UNK
        added = self._tokenizer.get_added_tokens_decoder()
        config = {
            "tokenizer_class": "PreTrainedTokenizerFast",
            **special_map,
            "bos_token": None,  # nothing is prepended: every sequence starts with <|im_start|> from the template
            "add_bos_token": False,
            "add_eos_token": False,
            "clean_up_tokenization_spaces": False,
            "model_max_length": 262144,
            "chat_template": CHAT_TEMPLATE,
            "added_tokens_decoder": {
                str(i): {
                    "content": tok.content,
                    "lstrip": tok.lstrip,
                    "normalized": tok.normalized,
                    "rstrip": tok.rstrip,
                    "single_word": tok.single_word,
                    "special": tok.special,
                }
                for i, tok in sorted(added.items())
            },
        }
        (path / "tokenizer_config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n", "utf-8")
        (path / "special_tokens_map.json").write_text(json.dumps(special_map, indent=2) + "\n", "utf-8")

    # ------------------------------------------------------------------ text <-> ids

    def encode(self, text: str) -> list[int]:
        """Token ids of `text`. Adds no BOS/EOS; special-token strings in the text become their ids."""
        return self._tokenizer.encode(text, add_special_tokens=False).ids

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        return self._tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)

    # ------------------------------------------------------------------ chat format

    def render(self, messages, tools=None, add_generation_prompt: bool = False, keep_all_think: bool = False) -> str:
        """The conversation as the model reads it (see the module docstring for the layout). keep_all_think: keep
        the reasoning of assistant turns before the last user query too (the 4.1 template's switch)."""
        segments = self._segments(messages, tools, add_generation_prompt, keep_all_think)
        return "".join(text for text, _ in segments)

    def encode_chat(self, messages, tools=None, keep_all_think: bool = False) -> tuple[list[int], list[int]]:
        """Token ids of `render(messages, tools)` and a loss mask: 1 on what the assistant wrote, else 0.

        The mask of each assistant turn starts right after its `<|im_start|>assistant\\n` header (so it includes
        the `<think>` the model opens itself) and ends with its `<|im_end|>` (included). Tool results (user turns)
        are 0. Turns before the last user query are masked too, in the form they are rendered in (no think block);
        to train on each turn's own reasoning, call encode_chat on each prefix that ends with that assistant turn.
        An assistant message with `"loss": false` stays in the ids with mask 0 (the chat template's
        {% generation %} marks do not know this flag: the mask is encode_chat's).
        """
        segments = self._segments(messages, tools, False, keep_all_think)
        # Character spans of the assistant-written text, in order.
        spans, position = [], 0
        for text, is_assistant in segments:
            if is_assistant:
                spans.append((position, position + len(text)))
            position += len(text)
        # Tokenize the whole conversation once (ids == encode(render(...)), as transformers does) and mark each token
        # that overlaps an assistant span: transformers' rule for {% generation %} masks. A token straddling a
        # boundary would count as assistant; the boundaries here are a newline before and <|im_end|> at the end.
        encoding = self._tokenizer.encode("".join(text for text, _ in segments), add_special_tokens=False)
        mask, k = [], 0
        for start, end in encoding.offsets:
            while k < len(spans) and spans[k][1] <= start:
                k += 1
            mask.append(int(k < len(spans) and spans[k][0] < end))
        return encoding.ids, mask

    def _segments(self, messages, tools, add_generation_prompt, keep_all_think) -> list[tuple[str, bool]]:
        """The rendered conversation as (text, written_by_assistant) pieces; CHAT_TEMPLATE mirrors this."""
        messages = [_check_message(i, m) for i, m in enumerate(_check_list("messages", messages))]
        if not messages:
            raise ValueError("messages: empty conversation")
        tools = [_check_tool(i, t) for i, t in enumerate(_check_list("tools", tools or []))]

        has_system = messages[0]["role"] == "system"
        system = "<|im_start|>system\n"
        if tools:
            system += messages[0]["content"] + "\n\n" if has_system else TOOL_SYSTEM_PROMPT
            system += TOOLS_HEADER + "".join("\n" + _tojson(tool) for tool in tools) + TOOLS_FOOTER
        else:
            system += messages[0]["content"] if has_system else DEFAULT_SYSTEM_PROMPT
        segments = [(system + f"{IM_END}\n", False)]

        # Reasoning is kept only after the last real user query; a user message that merely carries
        # <tool_response> blocks (older agent formats) does not count as a query.
        last_query = len(messages) - 1
        for i in reversed(range(len(messages))):
            content = messages[i]["content"]
            if messages[i]["role"] == "user" and not (
                content.startswith("<tool_response>") and content.endswith("</tool_response>")
            ):
                last_query = i
                break

        for i, message in enumerate(messages):
            role, content = message["role"], message["content"] or ""
            if role == "user" or (role == "system" and i > 0):
                segments.append((f"{IM_START}{role}\n{content}{IM_END}\n", False))
            elif role == "assistant":
                reasoning = message["reasoning_content"]
                if reasoning is None:
                    reasoning = ""
                    if THINK_END in content:  # reasoning left inline in the content, as some datasets store it
                        reasoning = content.split(THINK_END)[0].rstrip("\n").split(THINK)[-1].lstrip("\n")
                        content = content.split(THINK_END)[-1].lstrip("\n")
                # The template's rule: a think block after the last query, and there only for a turn with
                # reasoning or the final message (which then shows an empty block).
                if (i > last_query or keep_all_think) and (i == len(messages) - 1 or reasoning):
                    shown_reasoning, shown_content = reasoning.strip("\n"), content.lstrip("\n")
                    written = f"{THINK}\n{shown_reasoning}\n{THINK_END}\n\n{shown_content}"
                else:
                    written = content
                for k, call in enumerate(message["tool_calls"]):
                    if k > 0 or content:  # a newline separates calls from (unstripped) content and each other
                        written += "\n"
                    arguments = call["arguments"]
                    arguments = arguments if isinstance(arguments, str) else _tojson(arguments)  # strings verbatim
                    written += f'{TOOL_CALL}\n{{"name": "{call["name"]}", "arguments": {arguments}}}\n{TOOL_CALL_END}'
                segments += [(GENERATION_PROMPT, False), (written + IM_END, message["loss"]), ("\n", False)]
            elif role == "tool":
                text = f"\n<tool_response>\n{content}\n</tool_response>"
                if i == 0 or messages[i - 1]["role"] != "tool":
                    text = f"{IM_START}user" + text
                if i == len(messages) - 1 or messages[i + 1]["role"] != "tool":
                    text += f"{IM_END}\n"
                segments.append((text, False))
        if add_generation_prompt:
            segments.append((GENERATION_PROMPT, False))
        return segments

    def parse_assistant(self, text: str) -> dict:
        """Split generated assistant text into reasoning, content and tool calls. Never raises on bad output.

        `text` is what follows the generation prompt: `<think>\\nreasoning\\n</think>\\n\\ncontent...<|im_end|>`, or
        content with no think block (the form of a turn before the last query); text that starts inside the
        reasoning (no `<think>`, then `</think>`) is accepted too. Returns dict(reasoning, content,
        tool_calls=[{name, arguments}], errors=[str]). reasoning is None when no think block was written; a
        `<think>` that never closes (e.g. truncated) is an error, with the unfinished reasoning as reasoning.
        """
        errors = []
        for stop in (IM_END, ENDOFTEXT):  # generation stops at the first end-of-turn; ignore anything after it
            text = text.split(stop)[0]
        reasoning = None
        if THINK_END in text:
            before, _, text = text.partition(THINK_END)
            reasoning = before.split(THINK)[-1].strip("\n")
            text = text.lstrip("\n")
            if THINK_END in text:
                errors.append("more than one </think>")
        elif text.lstrip("\n").startswith(THINK):
            errors.append("<think> block never closed")
            reasoning, text = text.split(THINK, 1)[1].strip("\n"), ""

        start = text.find(TOOL_CALL)
        if start == -1:
            return dict(reasoning=reasoning, content=text, tool_calls=[], errors=errors)
        content = text[:start]
        content = content[:-1] if content.endswith("\n") else content  # the separator render puts before a call
        tool_calls = []
        rest = text[start:]
        position = 0
        pattern = re.escape(TOOL_CALL) + r"(.*?)" + re.escape(TOOL_CALL_END)
        for k, match in enumerate(re.finditer(pattern, rest, re.DOTALL)):
            if rest[position : match.start()].strip():
                errors.append(f"text between tool calls ignored: {rest[position:match.start()].strip()[:80]!r}")
            position = match.end()
            call, error = _parse_tool_call(match.group(1))
            if error:
                errors.append(f"tool_call {k}: {error}")
            else:
                tool_calls.append(call)
        leftover = rest[position:].strip()
        if leftover.startswith(TOOL_CALL):
            errors.append("<tool_call> never closed")
        elif leftover:
            errors.append(f"text after tool calls ignored: {leftover[:80]!r}")
        return dict(reasoning=reasoning, content=content, tool_calls=tool_calls, errors=errors)


def _parse_tool_call(body: str) -> tuple[dict | None, str | None]:
    """One `<tool_call>` body -> ({name, arguments}, None) or (None, reason)."""
    try:
        call = json.loads(body)
    except json.JSONDecodeError as e:
        return None, f"invalid JSON ({e.msg} at char {e.pos}): {body.strip()[:80]!r}"
    if not isinstance(call, dict):
        return None, f"expected a JSON object, got {type(call).__name__}"
    name, arguments = call.get("name"), call.get("arguments")
    if not isinstance(name, str) or not name:
        return None, "missing or non-string 'name'"
    if isinstance(arguments, str):  # arguments double-encoded as a JSON string: accept if it holds an object
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return None, f"'arguments' of {name!r} is a string that is not JSON"
    if not isinstance(arguments, dict):
        return None, f"'arguments' of {name!r} must be a JSON object"
    return {"name": name, "arguments": arguments}, None


# ---------------------------------------------------------------------- input checks


def _check_list(field, value) -> list:
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"{field}: expected a list, got {type(value).__name__}")
    return list(value)


def _check_tool(index, tool) -> dict:
    if not isinstance(tool, dict):
        raise ValueError(f"tools[{index}]: expected a dict (a JSON schema), got {type(tool).__name__}")
    try:
        json.dumps(tool)
    except (TypeError, ValueError) as e:
        raise ValueError(f"tools[{index}]: not JSON-serialisable ({e})") from None
    return tool


def _check_message(index, message) -> dict:
    """Validate one OpenAI-style message; return it normalised to {role, content, reasoning_content, tool_calls}."""
    where = f"messages[{index}]"
    if not isinstance(message, dict):
        raise ValueError(f"{where}: expected a dict, got {type(message).__name__}")
    role = message.get("role")
    if role not in ROLES:
        raise ValueError(f"{where}.role: unknown role {role!r} (expected one of {', '.join(ROLES)})")
    content = message.get("content")
    if role == "assistant":
        if content is not None and not isinstance(content, str):
            raise ValueError(f"{where}.content: expected a string or None, got {type(content).__name__}")
    elif not isinstance(content, str):
        raise ValueError(f"{where}.content: expected a string, got {type(content).__name__}")
    reasoning = next((message[k] for k in REASONING_FIELDS if message.get(k) is not None), None)
    tool_calls = message.get("tool_calls") or []
    if role != "assistant":
        if reasoning is not None:
            raise ValueError(f"{where}.reasoning_content: only assistant messages carry reasoning")
        if tool_calls:
            raise ValueError(f"{where}.tool_calls: only assistant messages carry tool calls")
    if reasoning is not None and not isinstance(reasoning, str):
        raise ValueError(f"{where}.reasoning_content: expected a string, got {type(reasoning).__name__}")
    calls = []
    for k, call in enumerate(_check_list(f"{where}.tool_calls", tool_calls)):
        field = f"{where}.tool_calls[{k}]"
        if isinstance(call, dict) and "function" in call:
            call, field = call["function"], field + ".function"
        if not isinstance(call, dict):
            raise ValueError(f"{field}: expected a dict with 'name' and 'arguments'")
        name, arguments = call.get("name"), call.get("arguments")
        if not isinstance(name, str) or not name:
            raise ValueError(f"{field}.name: expected a non-empty string, got {name!r}")
        if _tojson(name) != f'"{name}"':  # the template pastes the name between quotes unescaped
            raise ValueError(f"{field}.name: {name!r} holds a character JSON would escape (quote, backslash, control)")
        if isinstance(arguments, str):
            try:
                parsed = json.loads(arguments)
            except json.JSONDecodeError as e:
                raise ValueError(f"{field}.arguments: string is not valid JSON ({e.msg})") from None
            if not isinstance(parsed, dict):
                raise ValueError(f"{field}.arguments: JSON string must hold an object")
        elif isinstance(arguments, dict):
            try:
                json.dumps(arguments)
            except (TypeError, ValueError) as e:
                raise ValueError(f"{field}.arguments: not JSON-serialisable ({e})") from None
        else:
            raise ValueError(f"{field}.arguments: expected a dict or a JSON string, got {type(arguments).__name__}")
        calls.append({"name": name, "arguments": arguments})
    # "loss": false on an assistant message keeps the turn in the context but out of the SFT loss (the paper's
    # turn-level filtering, section 2.2.1: a turn the critic fails "does not participate in model training")
    loss = message.get("loss", True)
    if not isinstance(loss, bool):
        raise ValueError(f"{where}.loss: expected true or false, got {loss!r}")
    if role != "assistant" and "loss" in message:
        raise ValueError(f"{where}.loss: only assistant messages are trained on")
    return {"role": role, "content": content, "reasoning_content": reasoning, "tool_calls": calls, "loss": loss}


# ---------------------------------------------------------------------- toy tokenizer


def train_toy_tokenizer(texts: Iterable[str], vocab_size: int = 4096) -> Tokenizer:
    """Train a deterministic byte-level BPE with the family's chat tokens.

    Layout: id 0 `<unk>` (also pad), then the learned byte-level vocabulary, then `<|im_start|>`, `<|im_end|>`,
    `<|endoftext|>` (special) and `<think>`, `</think>`, `<tool_call>`, `</tool_call>` (ordinary added tokens) as
    the last seven ids -- the released family's order, at the end of the vocabulary as there. `vocab_size` counts
    all of them (fewer if the texts run out of merges). The chat format's fixed strings (default system prompts,
    the # Tools instructions) are added to the training texts so that they compress in the toy world too.
    Same texts => byte-identical tokenizer.json: the BPE trainer breaks ties by pair id, not hash order.
    """
    n_chat_tokens = len(SPECIAL_TOKENS) + len(ADDED_TOKENS)
    if vocab_size < 256 + 1 + n_chat_tokens:
        raise ValueError(f"vocab_size={vocab_size}: need at least 256 bytes + <unk> + {n_chat_tokens} chat tokens")
    tokenizer = HFTokenizer(models.BPE(unk_token=UNK))
    # Newlines are pre-tokens of their own: the boundary after the generation prompt's `<think>\n` can then never
    # be merged into the reasoning's first token, so encode_chat's piecewise ids equal encode(render(...)).
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(r"\n"), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - n_chat_tokens,
        special_tokens=[UNK],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    # The trainer does not know the chat tokens (they are added afterwards), so cut them out of the texts: the BPE
    # then learns merges only from the text between them, which is all that encode() ever hands it.
    chat_token = re.compile("|".join(re.escape(t) for t in [UNK, *SPECIAL_TOKENS, *ADDED_TOKENS]))
    fixed_texts = [DEFAULT_SYSTEM_PROMPT, TOOL_SYSTEM_PROMPT, TOOLS_HEADER, TOOLS_FOOTER]
    pieces = (piece for text in itertools.chain(fixed_texts, texts) for piece in chat_token.split(text) if piece)
    tokenizer.train_from_iterator(pieces, trainer=trainer)
    return Tokenizer(tokenizer, pad_token=UNK)
