"""The agent loop: scripted expert, 600-turn stress, what the model saw, bad calls, termination reasons,
token in / token out with a real (random) model, the endpoint policy and the CLI."""
import json
import os
import subprocess
import sys
import threading
import time
import tracemalloc
from http.server import ThreadingHTTPServer

import pytest
import torch

import search_agent as sa
from nanbeige41 import agent_policies, search_tools
from http_fakes import FakeHandler

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def toolbox(world):
    wiki = search_tools.LocalWiki(world)
    return search_tools.Toolbox(wiki, wiki)


def call(name, **arguments):
    return {"role": "assistant", "reasoning_content": f"Use {name}.", "content": "",
            "tool_calls": [{"type": "function", "function": {"name": name, "arguments": arguments}}]}


def answer(text):
    return {"role": "assistant", "reasoning_content": "Done.", "content": sa.format_answer(text)}


def replay(replies):
    return lambda messages, turn: replies[turn]


def run_episode(policy, question, tok, toolbox, config):
    """Drive one Episode by hand, keeping every request (what the model was given)."""
    ep = sa.Episode(question, tok, toolbox, config)
    requests = []
    while (req := ep.request()) is not None:
        requests.append(req)
        ep.step(policy.generate([req], config.max_new_tokens)[0])
    return ep, requests


def test_scripted_expert_solves_train_and_test_questions(tok, toolbox, world, questions):
    picked = [q for q in questions if q["split"] == "test"][:6] + [q for q in questions if q["hops"] == 4][:4]
    for q in picked:
        rec = sa.run_agent(agent_policies.ScriptedPolicy(sa.expert_script(q, world), tok), q, tok, toolbox)
        assert rec["termination"] == "answer" and rec["score"] == 1.0, q["id"]
        assert all(v is None or v["pass"] for v in rec["verdicts"]) and rec["verdicts"][-1] is None
        assert len(rec["segments"]) == 1  # short episodes never rewrite their context: one segment


def test_scores_of_a_wrong_answer_and_of_no_gold(tok, toolbox, questions):
    q = next(q for q in questions if q["split"] == "test")
    rec = sa.run_agent(agent_policies.ScriptedPolicy(replay([answer("Nowhere at all")]), tok), q, tok, toolbox)
    assert rec["termination"] == "answer" and rec["score"] == 0.0 and rec["scores"]["em"] == 0.0
    rec = sa.run_agent(agent_policies.ScriptedPolicy(replay([answer("Kessa")]), tok), "Where?", tok, toolbox)
    assert rec["score"] is None and rec["scores"] is None and rec["gold"] is None


def test_600_turns_stay_in_budget_with_a_complete_record_and_flat_memory(tok, toolbox, world):
    entities = world["entities"]

    def script(messages, turn):
        e = entities[(7 * turn) % len(entities)]
        return call("visit", url=e["url"]) if turn % 3 == 2 else call("search", query=e["title"] + " founded")

    config = sa.AgentConfig(max_turns=600, max_context_tokens=2048, max_new_tokens=64, keep_last_k=4,
                            rewrite_slack=4, obs_max_chars=600)
    ep = sa.Episode("Which company was founded first?", tok, toolbox, config)
    policy = agent_policies.ScriptedPolicy(script, tok)
    tracemalloc.start()
    memory = {}
    try:
        while (req := ep.request()) is not None:
            assert len(req["prompt_ids"]) + config.max_new_tokens <= config.max_context_tokens
            ep.step(policy.generate([req], config.max_new_tokens)[0])
            if len(ep.turns) % 150 == 0:
                memory[len(ep.turns)] = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    rec = ep.record()
    assert rec["termination"] == "max_turns" and len(rec["turns"]) == 600
    # the record is complete: every observation in full (uncapped), one tool message per call
    for turn in rec["turns"][::25]:
        name, arguments = turn["tool_calls"][0]["name"], turn["tool_calls"][0]["arguments"]
        assert turn["observations"] == [toolbox.call(name, arguments)[0]]
    assert len(rec["messages"]) == 2 + 2 * 600
    assert max(t["view"]["dropped"] for t in rec["turns"]) > 500  # old turns were dropped to fit
    # memory grows by the record only: the same amount per 150 turns, early and late (no per-turn growth
    # in the working set, e.g. a view or cache that gets longer with the episode)
    growth = [memory[k + 150] - memory[k] for k in (150, 300, 450)]
    assert max(growth) < 1.5 * min(growth) and max(growth) / 150 < 200_000, growth


def test_what_the_model_saw(tok, toolbox, world):
    """At every turn the prompt ids are exactly the rendered view: placeholders for old results, the last k
    verbatim, a note for dropped turns; appended turns extend their segment token for token."""
    entities = world["entities"][:60]
    replies = [call("search", query=e["title"]) for e in entities]
    config = sa.AgentConfig(max_turns=60, max_context_tokens=1200, max_new_tokens=64, keep_last_k=2,
                            rewrite_slack=2, obs_max_chars=300)
    ep, requests = run_episode(agent_policies.ScriptedPolicy(replay(replies), tok), "Find them all.", tok, toolbox, config)
    assert ep.termination == "max_turns"
    seen_placeholder = seen_drop = 0
    record = json.loads(json.dumps(ep.record()))  # a record read back from disk is enough to rebuild views
    for t, (turn, req) in enumerate(zip(ep.turns, requests)):
        view = sa.view_messages(record, t)
        assert req["prompt_ids"] == tok.encode(tok.render(view, tools=toolbox.schemas, add_generation_prompt=True))
        tool_texts = [m["content"] for m in view if m["role"] == "tool"]
        verbatim = [x for x in tool_texts if x != sa.PLACEHOLDER]
        assert 0 < len(verbatim) <= 4 or t == 0
        assert tool_texts[-min(2, len(tool_texts)):] == [search_tools._cap(o, 300) for tr in ep.turns[max(0, t - 2):t]
                                                         for o in tr["observations"]][-min(2, len(tool_texts)):]
        seen_placeholder += sa.PLACEHOLDER in tool_texts
        seen_drop += "earlier turns omitted" in view[2]["content"] if len(view) > 2 else 0
        assert view[:2] == ep.base  # system prompt and question always kept
    assert seen_placeholder > 10 and seen_drop > 10
    assert len(ep.segments) < len(ep.turns)  # some turns were appended, not re-rendered


def test_bad_calls_are_observations_and_the_loop_recovers(tok, toolbox):
    class Exploding:
        def search(self, query, k):
            raise RuntimeError("index on fire")

        def fetch(self, url):
            return toolbox.reader.fetch(url)

    tools = search_tools.Toolbox(Exploding(), toolbox.reader)
    script = [
        '<tool_call>\n{"name": "search", "arguments": {"query": "Kessa"\n</tool_call><|im_end|>',  # bad JSON
        call("browse", url="x"),                               # unknown tool
        call("visit", page="x"),                               # bad arguments
        call("search", query="Kessa"),                         # the tool raises
        "I think I know it.<|im_end|>",                        # neither a call nor an answer
        "Thinking about it " * 40,                             # cut off at max_new_tokens
        call("visit", url=toolbox.searcher.entities[0]["url"]),  # a good call resets the error count
        answer("Kessa"),
    ]
    policy = agent_policies.ScriptedPolicy(replay(script), tok)
    rec = sa.run_agent(policy, "Where?", tok, tools, sa.AgentConfig(max_new_tokens=64, max_consecutive_errors=6))
    obs = [t["observations"][0] if t["observations"] else None for t in rec["turns"]]
    assert "malformed tool call" in obs[0] and "invalid JSON" in obs[0]
    assert "unknown tool 'browse'" in obs[1]
    assert "bad arguments for visit" in obs[2]
    assert "RuntimeError" in obs[3] and "index on fire" in obs[3]
    assert obs[4] == sa.NO_CALL and obs[5] == sa.CUT_OFF
    assert rec["turns"][6]["ok"] == [True]
    assert rec["termination"] == "answer" and rec["final_answer"] == "Kessa"
    # the model sees its malformed text again in the next prompt, not a cleaned-up version
    assert '{"query": "Kessa"' in rec["messages"][2]["content"]
    assert [v["tool_call_accuracy"] for v in rec["verdicts"][:7]] == [0, 0, 0, 0, 0, 0, 1]


def test_too_many_consecutive_errors_end_with_error(tok, toolbox):
    policy = agent_policies.ScriptedPolicy(lambda m, t: call("nope"), tok)
    rec = sa.run_agent(policy, "Where?", tok, toolbox, sa.AgentConfig(max_consecutive_errors=3))
    assert rec["termination"] == "error" and len(rec["turns"]) == 4 and "4 failed turns" in rec["error"]


def test_context_limit_forces_an_answer(tok, toolbox, world):
    long_page = max(world["entities"], key=lambda e: len(e["article"]))
    script = [call("visit", url=long_page["url"]), answer("Kessa")]
    roomy = sa.AgentConfig(max_new_tokens=64, obs_max_chars=5000)
    ep, requests = run_episode(agent_policies.ScriptedPolicy(replay(script), tok), "Where?", tok, toolbox, roomy)
    first, second = (len(r["prompt_ids"]) for r in requests)
    assert ep.termination == "answer"
    # a window that holds the question but not the page: the model is asked for its answer, seeing less of it
    config = sa.AgentConfig(max_context_tokens=second + 64 - 1, max_new_tokens=64, obs_max_chars=5000)
    ep, requests = run_episode(agent_policies.ScriptedPolicy(replay(script), tok), "Where?", tok, toolbox, config)
    assert ep.termination == "context_limit" and ep.final_answer == "Kessa"
    view = ep.turns[-1]["view"]
    assert view["forced"] and view["obs_cap"] < 5000 and sa.FORCE_ANSWER in json.dumps(requests[-1]["messages"])
    assert all(len(r["prompt_ids"]) + 64 <= config.max_context_tokens for r in requests)
    # a window too small for anything after the question: the episode ends without an answer
    config = sa.AgentConfig(max_context_tokens=first + 64 + 5, max_new_tokens=64, obs_max_chars=5000)
    ep, _ = run_episode(agent_policies.ScriptedPolicy(replay(script), tok), "Where?", tok, toolbox, config)
    assert ep.termination == "context_limit" and ep.final_answer is None and len(ep.turns) == 1


def test_wall_clock(tok, toolbox):
    def slow(messages, turn):
        time.sleep(0.05)
        return call("search", query=f"Kessa {turn}")
    rec = sa.run_agent(agent_policies.ScriptedPolicy(slow, tok), "Where?", tok, toolbox, sa.AgentConfig(wall_clock_s=0.2))
    assert rec["termination"] == "wall_clock" and 1 <= len(rec["turns"]) <= 5  # 0.2 s / 0.05 s per turn


def test_rollout_groups_batch_every_live_episode(tok, toolbox, world, questions):
    picked = [q for q in questions if q["split"] == "train"][:3]
    scripts = {q["question"]: sa.expert_script(q, world) for q in picked}
    batch_sizes = []

    class Expert:  # one generate call per turn, over every live episode of every question
        def generate(self, requests, max_new_tokens):
            batch_sizes.append(len(requests))
            texts = [agent_policies.assistant_text(tok, scripts[r["messages"][1]["content"]](r["messages"], len(batch_sizes) - 1))
                     for r in requests]
            return [{"tokens": tok.encode(t), "logprobs": None, "finish_reason": "eos"} for t in texts]

    groups = sa.rollout_groups(Expert(), picked, 2, tok, toolbox)
    assert [len(g) for g in groups] == [2, 2, 2] and batch_sizes[0] == 6
    assert batch_sizes == sorted(batch_sizes, reverse=True)  # questions with fewer hops finish first
    for q, group in zip(picked, groups):
        assert all(r["final_answer"] == q["answer"] and r["scores"]["correct"] for r in group)


def test_policy_failure_ends_the_group_with_error(tok, toolbox):
    class Down:
        def generate(self, requests, max_new_tokens):
            raise search_tools.ToolError("policy failed: HTTP 500 after 3 attempt(s)")
    recs = sa.rollout_group(Down(), "Where?", 3, tok, toolbox)
    assert [r["termination"] for r in recs] == ["error"] * 3 and "HTTP 500" in recs[0]["error"]


# ----------------------------------------------------------------------------- token in / token out

def test_loss_mask_covers_exactly_the_generated_tokens(tok, toolbox):
    script = [call("search", query="Kessa mayor"), call("visit", url=toolbox.searcher.entities[3]["url"], goal="mayor"),
              call("search", query="Velmoria capital"), answer("Kessa")]
    rec = sa.run_agent(agent_policies.ScriptedPolicy(replay(script), tok), "Who?", tok, toolbox)
    generated = [tok.encode(agent_policies.assistant_text(tok, m)) for m in script]
    seg = rec["segments"][0]
    assert len(rec["segments"]) == 1 and seg["turns"] == [0, 1, 2, 3]
    masked = [i for i, m in zip(seg["completion_ids"], seg["loss_mask"]) if m]
    assert masked == sum(generated, [])
    for turn, ids in zip(rec["turns"], generated):
        assert seg["completion_ids"][turn["span"][0]:turn["span"][1]] == ids
        assert all(seg["loss_mask"][turn["span"][0]:turn["span"][1]])
    unmasked = tok.decode([i for i, m in zip(seg["completion_ids"], seg["loss_mask"]) if not m])
    # unmasked: tool results (in user turns) and generation prompts, which end before the <think> the model writes
    assert unmasked.count("<tool_response>") == 3 and unmasked.count("<|im_start|>assistant\n") == 3
    assert "<think>" not in unmasked and tok.decode(masked).count("<think>") == 4
    # one conversation, two ways: the segment is what encode_chat gives for the same messages
    ids, mask = tok.encode_chat(rec["messages"], toolbox.schemas)
    assert ids[-1:] == tok.encode("\n") and mask[-1] == 0  # encode_chat closes the last turn with a newline
    assert seg["prompt_ids"] + seg["completion_ids"] == ids[:-1]
    assert [0] * len(seg["prompt_ids"]) + seg["loss_mask"] == mask[:-1]
    samples = sa.turn_samples(rec)
    assert [s["response_ids"] for s in samples] == generated and samples[-1]["turn_ok"] is None


def test_model_rollouts_keep_exact_ids_and_logprobs(tok, toolbox):
    from nanbeige41.model import ModelConfig, Transformer
    torch.manual_seed(0)
    model = Transformer(ModelConfig.preset("toy", vocab_size=len(tok), num_hidden_layers=2))
    model.init_weights()
    policy = agent_policies.ModelPolicy(model, tok, temperature=1.0, seed=0)
    config = sa.AgentConfig(max_turns=3, max_new_tokens=12, max_consecutive_errors=10)
    recs = sa.rollout_group(policy, "Where was Ada born?", 2, tok, toolbox, config)
    assert len(recs) == 2 and all(r["termination"] == "max_turns" for r in recs)
    assert recs[0]["turns"][0]["generated_ids"] != recs[1]["turns"][0]["generated_ids"]  # sampled independently
    for rec in recs:
        for seg in rec["segments"]:
            ids = seg["prompt_ids"] + seg["completion_ids"]
            with torch.no_grad():
                logits = model(torch.tensor([ids]))[0].float()  # (T, V)
            logp = logits.log_softmax(-1)
            offset = len(seg["prompt_ids"])
            for k, (m, stored) in enumerate(zip(seg["loss_mask"], seg["logprobs"])):
                if m:  # the stored sampling log-prob is the model's log-prob of that exact token in that context
                    assert stored == pytest.approx(logp[offset + k - 1, ids[offset + k]].item(), abs=2e-4)
            assert sum(seg["loss_mask"]) == sum(len(rec["turns"][t]["generated_ids"]) for t in seg["turns"])


# ----------------------------------------------------------------------------- endpoint policy

class FakeOpenAI(FakeHandler):
    """/v1/chat/completions: first a tool call, then the answer once a tool result is in the messages."""
    bodies = []


    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        FakeOpenAI.bodies.append((body, self.headers.get("Authorization")))
        broken = "broken" in body["messages"][1]["content"]
        if any(m["role"] == "tool" for m in body["messages"]):
            message = {"role": "assistant", "content": "<answer>Ulpelestan</answer>", "reasoning_content": "Found."}
        else:
            message = {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function",
                       "function": {"name": "search", "arguments": '{"query": "Mien' if broken else
                                    json.dumps({"query": "Mienveholm city in"})}}]}
        data = json.dumps({"choices": [{"message": message, "finish_reason": "stop"}]}).encode()
        self.reply(data)


def test_endpoint_policy(tok, toolbox, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeOpenAI)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        policy = agent_policies.EndpointPolicy(url, "strong-model", tok)
        rec = sa.run_agent(policy, "In which country is Mienveholm?", tok, toolbox)
        broken = sa.run_agent(policy, "A broken question?", tok, toolbox)
    finally:
        server.shutdown()
    assert rec["termination"] == "answer" and rec["final_answer"] == "Ulpelestan"
    assert rec["turns"][0]["tool_calls"] == [{"name": "search", "arguments": {"query": "Mienveholm city in"}}]
    # arguments that are not JSON reach the loop as a malformed call, like a local model's would
    assert broken["turns"][0]["parse_errors"] and "invalid JSON" in broken["turns"][0]["observations"][0]
    assert broken["termination"] == "answer"
    second, auth = FakeOpenAI.bodies[-3]
    assert auth == "Bearer sk-test" and second["model"] == "strong-model" and second["tools"] == toolbox.schemas
    assistant, tool = second["messages"][2], second["messages"][3]
    assert tool["tool_call_id"] == assistant["tool_calls"][0]["id"]
    assert json.loads(assistant["tool_calls"][0]["function"]["arguments"]) == {"query": "Mienveholm city in"}


# ----------------------------------------------------------------------------- command line

def test_cli_scripted_json():
    out = subprocess.run([sys.executable, "search_agent.py", "--question", "toy-0003", "--scripted", "--json",
                          "--no-python"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    rec = json.loads(out.stdout)
    assert rec["termination"] == "answer" and rec["score"] == 1.0 and rec["config"]["max_turns"] == 600


def test_turn_without_reasoning_starts_a_new_segment(tok, toolbox):
    # The model writes an empty think block; the 4.1 template shows an intermediate turn without reasoning with no
    # block at all. The next prompt then cannot extend the token-in/token-out segment: it is rendered afresh.
    script = [dict(call("search", query="Kessa mayor"), reasoning_content=""), answer("Kessa")]
    rec = sa.run_agent(agent_policies.ScriptedPolicy(replay(script), tok), "Who?", tok, toolbox)
    assert rec["final_answer"] == "Kessa" and [s["turns"] for s in rec["segments"]] == [[0], [1]]
    assert tok.decode(rec["segments"][0]["completion_ids"]).startswith("<think>\n\n</think>\n\n<tool_call>")
    view = sa.view_messages(rec, 1)
    assert rec["segments"][1]["prompt_ids"] == tok.encode(tok.render(view, tools=toolbox.schemas,
                                                                     add_generation_prompt=True))
    assert "<|im_start|>assistant\n<tool_call>" in tok.decode(rec["segments"][1]["prompt_ids"])


def test_evaluate_agent_reports_accuracy_turns_terminations_and_copying(tok, toolbox, questions):
    """evaluate_agent on a random toy model: the report's fields are consistent with its records."""
    from nanbeige41.model import ModelConfig, Transformer
    torch.manual_seed(0)
    model = Transformer(ModelConfig.preset("toy", vocab_size=len(tok), num_hidden_layers=1))
    model.init_weights()
    rows = questions[:3]
    config = sa.AgentConfig(max_turns=2, max_new_tokens=6, max_consecutive_errors=10)
    ev = sa.evaluate_agent(model, tok, rows, toolbox, config, batch=2)
    assert ev["n"] == 3 and len(ev["records"]) == 3
    assert ev["accuracy"] == 0.0 and ev["first_query_copies_head"] == 0.0  # six random tokens solve nothing
    assert sum(ev["terminations"].values()) == 3 and ev["terminations"].get("max_turns") == 3
    assert ev["turns"] == 2.0 and ev["turn_fail_rate"] == 1.0  # nothing parsed: every turn fails the critic
    assert set(ev["accuracy_by_hops"]) == {q["hops"] for q in rows}
