"""Who writes the search agent's turns (search_agent.py's Episode asks them): each policy answers
`generate(requests, max_new_tokens) -> [{tokens, logprobs, finish_reason}]`, one request per live episode.

- ModelPolicy: this project's model in-process (nanbeige41.generate), token in / token out with the sampling
  log-probs RL needs; `chat` lets it serve as a judge or critic.
- EndpointPolicy: any OpenAI-compatible server (a strong model for trajectory synthesis); the reply goes back
  into the family's text layout and is re-tokenised: SFT data, not RL.
- ScriptedPolicy: a function of the messages (tests, the CLI's scripted expert).
"""
import json

from nanbeige41.generate import generate
from nanbeige41.openai_api import chat_completion, openai_messages


def assistant_text(tokenizer, message):
    """What a model writes after the generation prompt for `message`, in render's layout (<think>, reasoning,
    </think>, content, tool calls, <|im_end|>). Rendered as the last turn after a user query, so its think block is
    always there (empty when the message has no reasoning), as the model generates it."""
    probe = [{"role": "user", "content": "."}]
    head = tokenizer.render(probe, add_generation_prompt=True)
    return tokenizer.render(probe + [message])[len(head):].rstrip("\n")


class ModelPolicy:
    """This project's model in-process, through nanbeige41.generate's batched KV-cache sampling."""

    def __init__(self, model, tokenizer, temperature=1.0, top_p=1.0, top_k=0, seed=None):
        self.model, self.tok = model, tokenizer
        self.temperature, self.top_p, self.top_k, self.seed = temperature, top_p, top_k, seed
        self.calls = 0

    def generate(self, requests, max_new_tokens):
        self.calls += 1
        seed = None if self.seed is None else self.seed + self.calls  # fresh noise each turn, reproducible
        return generate(self.model, [r["prompt_ids"] for r in requests], max_new_tokens,
                        temperature=self.temperature, top_p=self.top_p, top_k=self.top_k,
                        eos_ids=[self.tok.im_end_id], seed=seed)

    def chat(self, messages, max_new_tokens=256):
        """messages -> reply content, greedy: lets this model serve as LLMCritic / llm_judge."""
        prompt = self.tok.encode(self.tok.render(messages, add_generation_prompt=True))
        out = generate(self.model, [prompt], max_new_tokens, temperature=0.0, eos_ids=[self.tok.im_end_id])
        return self.tok.parse_assistant(self.tok.decode(out[0]["tokens"]))["content"] or ""


class EndpointPolicy:
    """Any OpenAI-compatible /chat/completions endpoint (a strong model for data synthesis). The reply
    message is put back into this family's text layout and tokenised with our tokenizer, so records look
    the same as in-process ones; log-probs are not available (zeros) and the ids are a re-tokenisation,
    fine for SFT data, not for RL."""

    def __init__(self, url, model, tokenizer, api_key_env="OPENAI_API_KEY", temperature=0.7, **http):
        self.url, self.model, self.tok = url.rstrip("/"), model, tokenizer
        self.api_key_env, self.temperature, self.http = api_key_env, temperature, http

    def generate(self, requests, max_new_tokens):
        out = []
        for r in requests:
            tools = {"tools": r["tools"]} if r["tools"] else {}  # an empty list is an error to some servers
            choice = chat_completion(self.url, self.model, openai_messages(r["messages"]), what="policy",
                                     api_key_env=self.api_key_env, http=self.http, max_tokens=max_new_tokens,
                                     temperature=self.temperature, **tools)
            msg = choice["message"]
            calls, content = [], msg.get("content") or ""
            for c in msg.get("tool_calls") or []:
                name, args = c["function"]["name"], c["function"].get("arguments", "{}")
                try:
                    calls.append({"name": name, "arguments": json.loads(args) if isinstance(args, str) else args})
                except json.JSONDecodeError:  # written out as the model sent it, so parse_assistant reports it
                    content += f'<tool_call>\n{{"name": {json.dumps(name)}, "arguments": {args}}}\n</tool_call>'
            message = {"role": "assistant", "content": content,
                       "reasoning_content": msg.get("reasoning_content") or msg.get("reasoning") or "",
                       "tool_calls": calls}
            tokens = self.tok.encode(assistant_text(self.tok, message))
            out.append({"tokens": tokens, "logprobs": [0.0] * len(tokens),
                        "finish_reason": "length" if choice.get("finish_reason") == "length" else "eos"})
        return out


class ScriptedPolicy:
    """For tests and the CLI without a model: `script(messages, turn_index) -> assistant message dict or
    raw generated text`; ids are the tokenisation of that text, log-probs zeros."""

    def __init__(self, script, tokenizer):
        self.script, self.tok = script, tokenizer
        self.turn = 0

    def generate(self, requests, max_new_tokens):
        out = []
        for r in requests:
            reply = self.script(r["messages"], self.turn)
            text = reply if isinstance(reply, str) else assistant_text(self.tok, reply)
            tokens = self.tok.encode(text)
            finish = "eos" if tokens and tokens[-1] == self.tok.im_end_id else "length"
            tokens = tokens[:max_new_tokens]
            out.append({"tokens": tokens, "logprobs": [0.0] * len(tokens), "finish_reason": finish})
        self.turn += 1
        return out
