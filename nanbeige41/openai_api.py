"""The one client for OpenAI-compatible servers (`POST {base}/chat/completions`) and the HTTP retry rule every
network call of the project uses (search and reader backends too).

- `request_with_retries`: retries timeouts, connection errors, 429 and 5xx with doubling back-off; a 4xx other
  than 429 is final. Failures raise ApiError with a message that holds no header (keys stay out of logs).
- `chat_completion(base_url, model, messages, **body)`: the first choice of the reply ({"message", ...}); the
  API key comes from the environment (`api_key_env`, default OPENAI_API_KEY), sent only when set.
- `endpoint_chat(base_url, model)`: a function messages -> reply text, what judges, critics and data synthesis
  take; `openai_messages`: this project's messages in the OpenAI wire format (tool-call ids paired).
"""
import hashlib
import json
import os
import time

import requests


class ApiError(Exception):
    """An HTTP call failed after its retries, or its reply is not the JSON the API promises."""


def request_with_retries(method, url, *, retries=3, backoff_s=0.5, timeout_s=15.0, what="request",
                         session=None, **kwargs):
    """One HTTP call with retries on timeouts, connection errors, 429 and 5xx (back-off doubles each
    time). Raises ApiError with a message that holds no header (the API key stays out of every log)."""
    session = session or requests
    last = ""
    for attempt in range(retries + 1):
        try:
            resp = session.request(method, url, timeout=timeout_s, **kwargs)
            if resp.status_code < 400:
                return resp
            last = f"HTTP {resp.status_code}"
            if resp.status_code != 429 and resp.status_code < 500:
                break  # a client error does not get better by asking again
        except requests.Timeout:
            last = f"timeout after {timeout_s:g}s"
        except requests.RequestException as e:
            last = f"connection error ({type(e).__name__})"
        if attempt < retries:
            time.sleep(backoff_s * 2 ** attempt)
    raise ApiError(f"{what} failed: {last} after {attempt + 1} attempt(s)")


def chat_completion(base_url, model, messages, *, api_key_env="OPENAI_API_KEY", what="chat", http=None, **body):
    """POST {base_url}/chat/completions {model, messages, **body}; returns the first choice (a dict with
    `message` and `finish_reason`). Raises ApiError when the call fails or the reply has no choice."""
    headers = {"Content-Type": "application/json"}
    if os.environ.get(api_key_env):
        headers["Authorization"] = "Bearer " + os.environ[api_key_env]
    resp = request_with_retries("POST", base_url.rstrip("/") + "/chat/completions", what=what, headers=headers,
                                json={"model": model, "messages": messages, **body}, **(http or {}))
    try:
        choice = resp.json()["choices"][0]
        if not isinstance(choice.get("message"), dict):
            raise TypeError("message is not an object")
        return choice
    except (ValueError, KeyError, IndexError, TypeError, AttributeError) as e:
        raise ApiError(f"{what} failed: the reply is not a chat completion ({type(e).__name__}: {e})") from None


def endpoint_chat(base_url, model, api_key_env="OPENAI_API_KEY", max_tokens=512, temperature=0.0, **http):
    """A chat function over an OpenAI-compatible endpoint: messages -> reply text ("" when the reply has none)."""
    def chat(messages):
        choice = chat_completion(base_url, model, messages, api_key_env=api_key_env, http=http,
                                 max_tokens=max_tokens, temperature=temperature)
        return choice["message"].get("content") or ""
    return chat


def openai_messages(messages):
    """Our messages in the OpenAI wire format: call ids paired with the tool results that answer them,
    arguments as JSON strings, reasoning left out (endpoints do not take it back)."""
    out, pending = [], []
    for i, m in enumerate(messages):
        if m["role"] == "assistant":
            calls = [{"id": f"call_{i}_{k}", "type": "function",
                      "function": {"name": c["function"]["name"], "arguments": json.dumps(c["function"]["arguments"])}}
                     for k, c in enumerate(m.get("tool_calls") or [])]
            pending = [c["id"] for c in calls]
            out.append({"role": "assistant", "content": m.get("content") or ""} | ({"tool_calls": calls} if calls else {}))
        elif m["role"] == "tool":
            out.append({"role": "tool", "content": m["content"], "tool_call_id": pending.pop(0) if pending else "none"})
        else:
            out.append({"role": m["role"], "content": m["content"]})
    return out


class CachedChat:
    """endpoint_chat (OpenAI-compatible, retries with back-off, key from $OPENAI_API_KEY) behind an
    on-disk cache keyed by sha256 of the request (endpoint, model, temperature, max_tokens, sample index,
    messages), so an interrupted or repeated run pays only for requests it has not made yet (that is how the
    LLM-backed steps resume). `sample` tells apart several samples of the same prompt."""

    def __init__(self, endpoint, model, cache_dir, temperature=0.0, max_tokens=1024):
        self.key_parts = [endpoint.rstrip("/"), model, temperature, max_tokens]
        self.chat = endpoint_chat(endpoint, model, max_tokens=max_tokens, temperature=temperature)
        self.cache_dir, self.hits, self.calls = cache_dir, 0, 0

    def __call__(self, messages, sample=0):
        blob = json.dumps(self.key_parts + [sample, messages], sort_keys=True, ensure_ascii=False)
        key = hashlib.sha256(blob.encode()).hexdigest()
        path = os.path.join(self.cache_dir, key[:2], key + ".json")
        if os.path.isfile(path):
            self.hits += 1
            with open(path, encoding="utf-8") as f:
                return json.load(f)["reply"]
        reply = self.chat(messages)  # raises on HTTP failure or a reply without choices[0].message
        if not isinstance(reply, str):
            raise ValueError(f"reply content is {type(reply).__name__}, not text")
        self.calls += 1
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            json.dump({"reply": reply}, f, ensure_ascii=False)
        os.replace(path + ".tmp", path)  # a half-written entry never counts as cached
        return reply

    def note(self):
        return f"endpoint calls {self.calls}, cache hits {self.hits}"
