"""Rollouts through an OpenAI-compatible completions server that returns token ids and log-probs, with weight sync.

At 3B scale GRPO should generate with an inference engine (vLLM, SGLang) and only push weights to it; the trainer
then needs from each completion the sampled token ids and their log-probs under the behaviour policy (the old
log-probs of the importance ratio). This module is both sides of that contract, small enough to test on CPU:

    python -m nanbeige41.rollout_server --ckpt runs/toy/sft --port 8000      # a server backed by our own model

    client = RemoteRollout("http://127.0.0.1:8000")
    outs = client.generate(prompts, max_new_tokens=64, temperature=1.0, eos_ids=[tok.im_end_id], seed=0)
    client.push_weights(model, tokenizer, "/shared/run/rollout_weights")   # after an optimizer step (collective)

The wire format is vLLM's: POST /v1/completions with `prompt` as a list of token ids (or a list of such lists),
`logprobs: 0`, `return_tokens_as_token_ids: true` (tokens come back as "token_id:N") and `stop_token_ids`;
choices carry `logprobs.tokens` / `logprobs.token_logprobs` and finish_reason "stop" | "length". vLLM's log-probs are
those of the raw logits unless it is started with `--logprobs-mode processed_logprobs` (temperature applied), which
is what GRPO's ratio needs; our server returns log_softmax(logits / T) (nanbeige41.generate). Weight sync is
SGLang's `POST /update_weights_from_disk {"model_path": DIR}`: the trainer writes an HF checkpoint (rank 0,
atomically, checkpoint.save_hf) and the server reloads it; with vLLM the same directory can be loaded through its
collective-RPC / reload hooks (not tested here). NCCL weight broadcast (no disk) is the faster production path and
is not implemented. Our server generates one request at a time (a lock), and samples with `seed` exactly like the
in-process generator, so a test can compare the two token for token.
"""

import argparse
import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import torch
import torch.distributed as dist

from nanbeige41.checkpoint import save_hf
from nanbeige41.generate import generate
from nanbeige41.model import Transformer
from nanbeige41.openai_api import ApiError, request_with_retries


class RemoteRollout:
    """Client: generate() with the signature and return value of nanbeige41.generate.generate (minus the model)."""

    def __init__(self, base_url, model="policy", timeout=600):
        self.base_url, self.model, self.timeout = base_url.rstrip("/"), model, timeout

    def _post(self, path, body):
        # the project's one HTTP rule (retries on timeouts, 429, 5xx; ApiError otherwise), as for chat endpoints
        resp = request_with_retries("POST", self.base_url + path, what=f"rollout server {path}", json=body,
                                    timeout_s=self.timeout)
        try:
            return resp.json()
        except ValueError:
            raise ApiError(f"rollout server {path}: the reply is not JSON") from None

    def generate(self, prompts, max_new_tokens=256, temperature=1.0, top_p=1.0, top_k=0, eos_ids=None, seed=None):
        body = dict(model=self.model, prompt=[list(p) for p in prompts], max_tokens=max_new_tokens,
                    temperature=temperature, top_p=top_p, top_k=top_k if top_k else -1, logprobs=0,
                    return_tokens_as_token_ids=True, stop_token_ids=list(eos_ids or []))
        if seed is not None:
            body["seed"] = seed
        choices = sorted(self._post("/v1/completions", body)["choices"], key=lambda c: c["index"])
        return [dict(tokens=[int(t.removeprefix("token_id:")) for t in c["logprobs"]["tokens"]],
                     logprobs=[float(x) for x in c["logprobs"]["token_logprobs"]],
                     finish_reason="eos" if c["finish_reason"] == "stop" else "length") for c in choices]

    def push_weights(self, model, tokenizer, path):
        """Write the policy (gathered if sharded; collective) as an HF checkpoint at `path` and have the server load
        it. Every rank calls this; rank 0 sends the request; all ranks return once the server has the weights."""
        save_hf(model, tokenizer, path)
        reply = {}
        if not dist.is_initialized() or dist.get_rank() == 0:
            reply = self._post("/update_weights_from_disk", dict(model_path=os.path.abspath(path)))
            if not reply.get("success"):
                raise RuntimeError(f"rollout server refused the weights: {reply}")
        if dist.is_initialized():
            dist.barrier()
        return reply


# -----------------------------------------------------------------------------
# the server

def make_server(ckpt, host="127.0.0.1", port=0, device="cpu"):
    """An HTTP server (not started) serving the HF checkpoint `ckpt`. port 0: any free port (server.server_port)."""
    state = dict(model=Transformer.from_pretrained(ckpt, device=device).eval(), path=ckpt)
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            """Quiet: no per-request access log."""

        def _reply(self, code, obj):
            data = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path == "/v1/models":
                models = [dict(id="policy", object="model", root=state["path"])]
                return self._reply(200, dict(object="list", data=models))
            self._reply(404, dict(error=f"no route {self.path}"))

        def do_POST(self):
            try:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                if self.path == "/v1/completions":
                    return self._reply(200, completions(body))
                if self.path == "/update_weights_from_disk":
                    from nanbeige41.checkpoint import read_pretrained
                    read_pretrained(body["model_path"])  # a bad directory is refused before anything changes
                    with lock:
                        new = Transformer.from_pretrained(body["model_path"], device=device)
                        state["model"].load_state_dict(new.state_dict())
                        state["path"] = body["model_path"]
                    return self._reply(200, dict(success=True, message=f"loaded {body['model_path']}"))
                self._reply(404, dict(error=f"no route {self.path}"))
            except (ValueError, KeyError, TypeError) as e:
                self._reply(400, dict(error=dict(message=str(e), type="invalid_request_error"), success=False))

    def completions(body):
        prompts = body["prompt"]
        if prompts and isinstance(prompts[0], int):
            prompts = [prompts]
        if not prompts or not all(isinstance(p, list) and p and all(isinstance(t, int) for t in p) for p in prompts):
            raise ValueError("prompt must be a list of token ids or a list of such lists (text prompts: no tokenizer)")
        n = int(body.get("n", 1))
        prompts = [p for p in prompts for _ in range(n)]
        top_k = int(body.get("top_k", -1))
        stop = body.get("stop_token_ids") or None
        with lock, torch.no_grad():
            outs = generate(state["model"], prompts, int(body.get("max_tokens", 16)),
                            float(body.get("temperature", 1.0)), float(body.get("top_p", 1.0)),
                            top_k if top_k > 0 else 0, eos_ids=stop, seed=body.get("seed"))
        return dict(object="text_completion", model=body.get("model", "policy"), choices=[
            dict(index=i, text="", finish_reason="stop" if o["finish_reason"] == "eos" else "length",
                 logprobs=dict(tokens=[f"token_id:{t}" for t in o["tokens"]], token_logprobs=o["logprobs"]))
            for i, o in enumerate(outs)])

    return ThreadingHTTPServer((host, port), Handler)


def main(argv=None):
    p = argparse.ArgumentParser(description="OpenAI-compatible completions server over a nanbeige41 checkpoint")
    p.add_argument("--ckpt", required=True)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000, help="0: any free port (printed)")
    p.add_argument("--device", default="cpu")
    args = p.parse_args(argv)
    server = make_server(args.ckpt, args.host, args.port, args.device)
    print(f"listening on {args.host}:{server.server_port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
