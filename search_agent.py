"""Deep-search agent (paper section 2.2; the model card's deep-search tool table): a ReAct loop in the
family's chat format with search / visit / python tools, context management to 600 turns, token-in/token-out
records for RL, the turn-level critic, answer scoring, and scripted SFT trajectories over the toy world.

    python search_agent.py --question toy-0003 --scripted          # the scripted expert on a toy question
    python search_agent.py --question "In which country is ...?"   # the toy checkpoint (runs/toy/agent, else
                                                                   #   runs/toy/sft), offline wiki
    python search_agent.py --question "..." --endpoint http://127.0.0.1:8000/v1 --model NAME --backend web --json
    python data_synth.py world                                     # regenerate world, questions, SFT data
    python bench/bench_search_agent.py                             # loop turns/s, BM25 latency

Tools: search(query) -> ranked (title, url, snippet) ~ Serper google_search; visit(url, goal, part) -> a
goal-directed extract, or the page in parts ~ Jina scrape_and_extract_info; python(code) -> runs only in
code_judge.py's sandbox (offered only when code_judge imports). Backends: `local` (default, offline): BM25
in Python/numpy over the shipped world (nanbeige41/toy_world.py, data/toy/world.json); `web`: Serper- and
Jina-Reader-compatible clients over `requests`, keys from SERPER_API_KEY / JINA_API_KEY (never logged),
base URLs from SERPER_URL / JINA_URL, timeouts, retries with back-off; every failure is an observation.

Final-answer convention, used everywhere (SFT data, the loop, scoring): the final assistant turn has NO tool
calls and its content is `<answer>X</answer>`; `extract_answer` reads the last such tag.

Loop (Episode): tools dispatched by the parsed name; malformed JSON, unknown tools, bad arguments, tool
exceptions, HTTP errors, a reply with neither call nor answer, a reply cut off at the token limit: each is an
observation, and more than max_consecutive_errors failed turns in a row end the episode. Terminations:
answer, max_turns, context_limit (forced final answer), wall_clock, error. Context policy and token in /
token out: see Episode. rollout_group(policy, question, G, ...) is what the GRPO agent stage calls;
turn_samples(record) cuts a record into per-turn training samples. Policies: ModelPolicy (in-process,
nanbeige41.generate), EndpointPolicy (OpenAI-compatible), ScriptedPolicy (tests, CLI).

Turn-level judgment (2.2.1 "logical soundness, tool-call accuracy, informational gain"): RuleCritic (offline,
judges from the visible trajectory; `use_gold=True` is a privileged variant that reads the gold path) and
LLMCritic (fixed rubric, anchored parsing) share `judge(question, turns, gold=None) -> [verdict or None per
turn]`; a verdict holds the three scores in [0, 1] and `pass`. A failing turn stays in its SFT trajectory with
`"loss": false` (out of the loss, in the context) and is penalised or masked in GRPO.
Answer scoring: SQuAD-normalised exact match, token F1, the GAIA scorer's rules, an LLM judge.

Not covered / departures: the paper's LLM summarisation in visit (we extract sentences by term overlap); the
sandbox's file tools; multiple agent frameworks for trajectory synthesis (one scripted expert walks the gold
path); reasoning of earlier turns is kept inside the tool loop (the 4.1 chat format drops it only before the last
user query, so every turn after the question keeps it; a turn without reasoning is shown with no think block, and
the note or forced-answer request the context policy inserts are user queries too). Dropping whole old turns when the window is full is our choice; the paper does not say how it
fits 600 turns into 256k tokens.
"""
import argparse
import json
import os
import random
import re
import time
from collections import Counter
from dataclasses import asdict, dataclass

import requests

from nanbeige41 import paths, toy_world
from nanbeige41.checkpoint import CheckpointError, check_hf_checkpoint
from nanbeige41.cli import non_negative_float, non_negative_int, positive_float, positive_int
from nanbeige41.agent_policies import EndpointPolicy, ModelPolicy, ScriptedPolicy
from nanbeige41.openai_api import ApiError, endpoint_chat
from nanbeige41.qa_scoring import score_answer
from nanbeige41.model import Transformer
from nanbeige41.search_tools import DEFAULT_TOOLS, LocalWiki, Toolbox, ToolError, _cap, make_toolbox, split_sentences, terms
from nanbeige41.tokenizer import Tokenizer, toy_tokenizer_path

SYSTEM_PROMPT = ("You are a deep-search agent. Use the tools to find facts step by step. "
                 "When you know the answer, reply without tool calls as <answer>ANSWER</answer>.")




def format_answer(answer):
    return f"<answer>{answer}</answer>"


def extract_answer(content):
    """The final answer in an assistant content, or None: the text of the last <answer>...</answer>."""
    found = re.findall(r"<answer>(.*?)</answer>", content or "", flags=re.DOTALL)
    return found[-1].strip() if found else None


# -----------------------------------------------------------------------------
# Turn-level critic (paper 2.2.1): logical soundness, tool-call accuracy, information gain

DIMENSIONS = ("logical_soundness", "tool_call_accuracy", "information_gain")


def _calls_key(call):
    return json.dumps([call.get("name"), call.get("arguments")], sort_keys=True, ensure_ascii=False)


class RuleCritic:
    """Rule-based judge for the offline world. A turn is a dict with `tool_calls` [{name, arguments}],
    `observations` [str], `ok` [bool per call], `parse_errors` [str], `final_answer` (str or None).
      tool_call_accuracy: fraction of calls that parsed, named a known tool with valid arguments and ran;
      logical_soundness:  0 for a repeated call, 0.5 for a call grounded in nothing seen so far (a query
                          sharing no word with the question and earlier observations, a url never shown);
      information_gain:   by default from the visible trajectory only, like the paper's critic model
                          (2.2.1): 0 when the observations share no word with what the call asked for (or
                          say "No results"), else the share of words never seen before, scaled (>= 0.3 -> 1).
    pass: every dimension >= threshold. The final-answer turn gets None (the answer score judges it).

    strict=True (train_grpo --critic strict) judges two slips the default lets pass, still from the visible
    trajectory only: a search naming an entity never seen (a capitalised query word in neither the question nor
    an earlier observation: a made-up name, the toy agent's usual slip) gets logical_soundness 0; and the final
    answer is judged too, logical_soundness 0 when a word of it is in no observation so far (a guess), else 1,
    the other two dimensions 1 (whether it is right stays the answer score's business). Without the second rule
    an agent whose only signal is turn penalties learns to answer at once (issue 13, README).

    use_gold=True is PRIVILEGED: information_gain is then 1 only when the observations first reveal an
    entity of the question's gold path, its page url or the answer, which no critic knows at test time.
    It is off by default (SFT data filtering, the agent stage, the CLI); a caller must ask for it."""

    def __init__(self, threshold=0.5, use_gold=False, strict=False):
        self.threshold, self.use_gold, self.strict = threshold, use_gold, strict

    def judge(self, question, turns, gold=None):
        # What the agent has seen so far, kept as sets so that judging n turns costs O(n), not O(n^2).
        seen_terms, seen_urls = set(terms(question)), set(_urls(question))
        seen_calls = set()
        gold_items = []
        if gold and self.use_gold:  # privileged: see the class docstring
            gold_items = [gold["answer"].lower()]
            if gold["answer"].isdigit():  # pages print numbers with thousands separators
                gold_items.append(f"{int(gold['answer']):,}")
            if gold.get("head"):
                gold_items.append((toy_world.BASE_URL + gold["head"]).lower())
            for hop in gold.get("path", []):
                gold_items.append(hop["title"].lower())
                if hop.get("entity"):
                    gold_items.append((toy_world.BASE_URL + hop["entity"]).lower())
        seen_gold = {g for g in gold_items if g in question.lower()}
        observed_so_far = set()  # the words of the observations only (an answer copied from the question is a guess)
        verdicts = []
        for turn in turns:
            calls = turn.get("tool_calls") or []
            if not calls and not turn.get("parse_errors") and turn.get("final_answer") is not None:
                if not self.strict:
                    verdicts.append(None)
                    continue
                words = set(terms(_plain_numbers(str(turn["final_answer"]))))
                grounded = float(bool(words) and words <= observed_so_far)
                verdicts.append({"logical_soundness": grounded, "tool_call_accuracy": 1.0, "information_gain": 1.0,
                                 "pass": grounded >= self.threshold, "judge": "rule"})
                continue
            n_ok = sum(bool(ok) for ok in turn.get("ok", []))
            accuracy = n_ok / max(len(calls) + len(turn.get("parse_errors") or []), 1)
            soundness = 1.0
            asked = set()  # the words of what the calls asked for (query, goal, url)
            for call in calls:
                args = call.get("arguments") if isinstance(call.get("arguments"), dict) else {}
                asked |= set(terms(" ".join(map(str, args.values()))))
                if _calls_key(call) in seen_calls:
                    soundness = 0.0
                elif call.get("name") == "visit" and str(args.get("url", "")).lower() not in seen_urls:
                    soundness = min(soundness, 0.5)
                elif self.strict and call.get("name") == "search" and invented_names(args.get("query", ""),
                                                                                     seen_terms):
                    soundness = 0.0  # it searches for a name nobody mentioned: a made-up entity
                elif call.get("name") == "search" and not set(terms(" ".join(map(str, args.values())))) & seen_terms:
                    soundness = min(soundness, 0.5)
                seen_calls.add(_calls_key(call))
            shown = [o for o, ok in zip(turn.get("observations", []), turn.get("ok", [])) if ok]
            observed = "\n".join(shown).lower()
            observed_terms = set(terms(observed))
            if gold_items:
                revealed = {g for g in gold_items if g not in seen_gold and g in observed}
                gain = float(bool(revealed))
                seen_gold |= revealed
            elif not observed_terms & asked or all(o.startswith("No results") for o in shown):
                gain = 0.0  # nothing about what was asked
            else:
                gain = min(1.0, len(observed_terms - seen_terms) / max(len(observed_terms), 1) / 0.3)
            seen_terms |= observed_terms
            if self.strict:  # only the strict critic judges answers against the observations
                observed_so_far |= set(terms(_plain_numbers(observed)))
            seen_urls.update(_urls(observed))
            scores = {"logical_soundness": soundness, "tool_call_accuracy": accuracy, "information_gain": gain}
            verdicts.append({**scores, "pass": all(v >= self.threshold for v in scores.values()),
                             "judge": "rule-gold" if gold_items else "rule"})
        return verdicts


def invented_names(query, seen_terms):
    """The capitalised words of a search query (names: "Zoran", "Minpo") that appear nowhere in `seen_terms`,
    the words of the question and of the observations so far. A query naming such an entity is made up: the
    agent cannot have learned the name from anything it was shown."""
    names = set(terms(" ".join(re.findall(r"\b[A-Z][A-Za-z0-9]*", str(query)))))
    return sorted(n for n in names if len(n) > 1 and n not in seen_terms)


def _plain_numbers(text):
    """1,234,567 -> 1234567: pages print numbers with thousands separators, answers without."""
    return re.sub(r"(?<=\d),(?=\d{3}\b)", "", text)


def _urls(text):
    return [u.rstrip(".,;)").lower() for u in re.findall(r"https?://[^\s|]+", text)]


CRITIC_RUBRIC = """You are a strict critic of one step of a search agent.
Question: {question}
Earlier steps (most recent last):
{history}
This step:
reasoning: {reasoning}
tool calls: {calls}
observations: {observations}

Score this step from 0 to 10 on each dimension:
- logical_soundness: does the step follow from the question and what is known so far (no repetition)?
- tool_call_accuracy: is the call well-formed, the right tool, with sensible arguments, and did it run?
- information_gain: did the observation bring new information needed for the answer?
Reply with exactly these four lines:
logical_soundness: <0-10>
tool_call_accuracy: <0-10>
information_gain: <0-10>
verdict: pass or fail"""


def parse_critic_reply(text, threshold=0.5):
    """Anchored, case-insensitive parse of the rubric's four lines; the last occurrence of each wins.
    Returns a verdict dict, or one with pass False and `parse_error` when a score is missing."""
    scores = {}
    for dim in DIMENSIONS:
        found = re.findall(rf"^[\s*_#>-]*{dim}[\s*_]*:[\s*_]*(\d+(?:\.\d+)?)", text or "", flags=re.I | re.M)
        if found:
            scores[dim] = min(float(found[-1]), 10.0) / 10.0
    verdict = re.findall(r"^[\s*_#>-]*verdict[\s*_]*:[\s*_]*(pass|fail)\b", text or "", flags=re.I | re.M)
    if len(scores) < len(DIMENSIONS):
        return {**{d: scores.get(d, 0.0) for d in DIMENSIONS}, "pass": False, "judge": "llm",
                "parse_error": "missing " + ", ".join(d for d in DIMENSIONS if d not in scores)}
    by_scores = all(v >= threshold for v in scores.values())
    # the stated verdict can only make the judgment stricter: a "pass" with a failing score still fails
    passed = by_scores and (not verdict or verdict[-1].lower() == "pass")
    return {**scores, "pass": passed, "judge": "llm"}


class LLMCritic:
    """The same interface as RuleCritic, judged by a language model through `chat(messages) -> text`
    (endpoint_chat, or this project's model through search_agent's ModelPolicy.chat)."""

    def __init__(self, chat, threshold=0.5, history_turns=4, obs_chars=600):
        self.chat, self.threshold = chat, threshold
        self.history_turns, self.obs_chars = history_turns, obs_chars

    def judge(self, question, turns, gold=None):
        verdicts, history = [], []
        for turn in turns:
            calls = turn.get("tool_calls") or []
            if not calls and not turn.get("parse_errors") and turn.get("final_answer") is not None:
                verdicts.append(None)
                continue
            calls_text = json.dumps(calls, ensure_ascii=False) if calls else "none; " + "; ".join(
                turn.get("parse_errors") or ["no tool call and no answer"])
            observations = _cap(" || ".join(turn.get("observations", [])), self.obs_chars)
            prompt = CRITIC_RUBRIC.format(question=question, history="\n".join(history[-self.history_turns:])
                                          or "(none)", reasoning=_cap(turn.get("reasoning") or "", 400),
                                          calls=calls_text, observations=observations or "(none)")
            try:
                verdict = parse_critic_reply(self.chat([{"role": "user", "content": prompt}]), self.threshold)
            except (ToolError, ApiError) as e:
                verdict = {**{d: 0.0 for d in DIMENSIONS}, "pass": False, "judge": "llm", "parse_error": str(e)}
            verdicts.append(verdict)
            history.append(f"- {calls_text} -> {_cap(observations, 150)}")
        return verdicts


# -----------------------------------------------------------------------------
# Scripted expert trajectories for SFT (paper 2.2.1 "trajectory synthesis", one expert instead of many)

def _sentence_naming(observation, targets):
    """The first sentence of a snippet or extract that names one of `targets` (result header lines, which
    only list a page, do not count: a page titled X is no evidence of the fact)."""
    for line in observation.split("\n"):
        if re.match(r"^(\d+\. )?.* \| \S+( \(.*\))?$", line):
            continue
        for sentence in split_sentences(line):
            if any(t in sentence for t in targets):
                return sentence.strip()
    return None


def sft_trajectories(world, questions, seed=0, critic=None, toolbox=None, max_chars=3000, first_query="keywords"):
    """OpenAI-messages records solving `questions` by search/visit hops along each gold path.

    The expert searches "<known entity> <relation words>" (with first_query="question", its first search is
    the question itself, verbatim: a model copies that by matching the question's own words, where a query that
    starts with the entity's name needs it to pick the name's first token with nothing to match on; README,
    "Issue 13's chain"); when the result snippets already name the next
    entity it moves on, otherwise it visits the known entity's page with a goal. Observations come from the
    real tools, so the data matches what the agent sees in RL. A turn the critic fails stays in the
    trajectory with `"loss": false` on its assistant message (the paper's turn-level filtering, 2.2.1 and
    Figure 2: the turn "does not participate in model training"; later turns still see it). Trajectories
    whose path the tools cannot resolve are dropped, and so are records over `max_chars` of JSON (messages
    + tools): a toy model's context is ~1k tokens, and the toy
    4096-vocab BPE gives 3.1-3.9 characters per token here, so 3000 stays under ~900 tokens (measured
    with the shipped toy tokenizer: max 842, mean 679)."""
    rng = random.Random(seed)
    toolbox = toolbox or Toolbox(LocalWiki(world), None, top_k=3)
    toolbox.reader = toolbox.reader or toolbox.searcher
    critic = critic or RuleCritic()
    index = {e["id"]: e for e in world["entities"]}
    records = []
    for q in questions:
        messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": q["question"]}]
        turns, known, reasoning = [], index[q["head"]], None
        solved = True
        for hop in q["path"]:
            target = hop["title"]
            targets = [target, f"{int(target):,}"] if target.isdigit() else [target]
            need = (toy_world.RELATIONS[hop["relation"]][3] if hop["relation"] in toy_world.RELATIONS
                    else toy_world.ATTRIBUTES[hop["relation"]][2]).format(x=known["title"])
            step_reasoning = (reasoning + " " if reasoning else "") + f"I need {need}."
            keywords = toy_world.SEARCH_KEYWORDS[hop["relation"]]
            goal = need if rng.random() < 0.5 else f"{keywords} {known['title']}"  # two phrasings, for variety
            name, args = "search", {"query": f"{known['title']} {keywords}"}
            if first_query == "question" and not turns:
                step_reasoning, args = "I search for the question itself.", {"query": q["question"]}
            found_sentence = None
            for attempt in range(3):
                obs, ok = toolbox.call(name, args)
                turns.append({"tool_calls": [{"name": name, "arguments": args}], "observations": [obs], "ok": [ok],
                              "reasoning": step_reasoning if attempt == 0 else f"Not there yet; {need} is still needed."})
                messages.append({"role": "assistant", "reasoning_content": turns[-1]["reasoning"], "content": "",
                                 "tool_calls": [{"type": "function", "function": {"name": name, "arguments": args}}]})
                messages.append({"role": "tool", "content": obs})
                found_sentence = _sentence_naming(obs, targets)
                if found_sentence or name == "visit":
                    break
                if known["url"] in obs:  # the right page is listed but its snippet is about something else
                    name, args = "visit", {"url": known["url"], "goal": goal}
                elif attempt == 0:       # the page is not listed: search for the entity itself
                    name, args = "search", {"query": known["title"]}
                else:
                    break
            if found_sentence is None:
                solved = False
                break
            reasoning = _cap(found_sentence, 200)
            known = index[hop["entity"]] if hop.get("entity") else known
        if not solved:
            continue
        answer = q["answer"]
        turns.append({"tool_calls": [], "observations": [], "ok": [], "final_answer": answer})
        messages.append({"role": "assistant", "reasoning_content": f"{reasoning} So the answer is {answer}.",
                         "content": format_answer(answer)})
        verdicts = critic.judge(q["question"], turns, q)
        assistant = [m for m in messages if m["role"] == "assistant"]  # one per turn, in order
        for m, v in zip(assistant, verdicts):
            if v is not None and not v["pass"]:
                m["loss"] = False
        record = {"messages": messages, "tools": DEFAULT_TOOLS, "domain": "search",
                  "id": q["id"], "answer": answer}
        size = len(json.dumps(messages, ensure_ascii=False)) + len(json.dumps(record["tools"]))
        if size <= max_chars:
            records.append(record)
    return records


def fresh_world_trajectories(world_seeds, questions_per_world=60, hop_weights=None, seed=0, first_query="keywords"):
    """sft_trajectories over freshly generated worlds, each searched with its own tools: entity names do not
    repeat across worlds, so a model cannot write a memorised name into its query and be right; copying the
    name from the question (first hop) or the last observation (later hops) is the only thing that works.
    This is what makes the toy agent learnable (README, "The agent stage"). Never the shipped world (seed 0),
    whose test questions are the held-out evaluation."""
    if 0 in world_seeds:
        raise ValueError("world seed 0 is the shipped world: its test questions are held out")
    records = []
    for world_seed in world_seeds:
        world = toy_world.fresh_world(world_seed)
        questions = toy_world.synthesize_questions(world, questions_per_world, seed=world_seed + seed,
                                                   hop_weights=hop_weights or {1: 2, 2: 3, 3: 2, 4: 1},
                                                   test_fraction=0.0)
        for r in sft_trajectories(world, questions, seed=world_seed + seed, first_query=first_query):
            records.append({**r, "id": f"w{world_seed}-{r['id']}"})
    return records


def trajectory_text(record):
    """An expert trajectory (an `sft_trajectories` record) as plain text, without the system prompt and the JSON of
    the chat format: the question, then per turn the thought, the call and the tool's result, then the answer.
    Pretraining text for the toy base model (README, "The agent stage"): a search agent's two copying skills, the
    question's entity into the first query and a result's sentence into the next thought, at ~300 tokens a
    question where the chat-format trajectory spends ~750."""
    lines = [f"Question: {record['messages'][1]['content']}"]
    for m in record["messages"][2:]:
        if m["role"] == "tool":
            lines.append(f"Result:\n{m['content']}")
            continue
        lines.append(f"Thought: {m['reasoning_content']}")
        for call in m.get("tool_calls", []):
            name, args = call["function"]["name"], call["function"]["arguments"]
            lines.append(f"Search: {args['query']}" if name == "search"
                         else f"Visit: {args['url']} (goal: {args.get('goal', '')})")
        if not m.get("tool_calls"):
            lines.append(f"Answer: {record['answer']}")
    return "\n".join(lines)


def worked_search_docs(world_seeds, questions_per_world=150, seed=0):
    """`trajectory_text` of the expert's trajectories over fresh worlds, as {"text", "domain": "pretrain"} records
    (nanbeige41/data.py), one to a document."""
    return [{"text": trajectory_text(r), "domain": "pretrain"}
            for r in fresh_world_trajectories(world_seeds, questions_per_world, seed=seed)]


# -----------------------------------------------------------------------------
# The agent loop: ReAct in the family's chat format, context policy, token in / token out

@dataclass
class AgentConfig:
    max_turns: int = 600             # tool-call turns (the paper's figure)
    max_context_tokens: int = 4096   # the model's window: prompt + max_new_tokens never exceeds it
    max_new_tokens: int = 256        # per turn
    keep_last_k: int = 5             # tool results shown verbatim; older ones become PLACEHOLDER
    rewrite_slack: int = 5           # let up to k + slack verbatim results accumulate before rewriting
    obs_max_chars: int = 1500        # cap per observation as the model sees it (the record keeps it whole)
    max_consecutive_errors: int = 5  # failed turns in a row before the episode ends with "error"
    wall_clock_s: float = 0.0        # 0: no limit
    drop_to: float = 0.75            # when over the window, drop oldest turns until the prompt is this full


PLACEHOLDER = "[older tool result omitted]"
FORCE_ANSWER = "Stop searching: the context is full. Reply now without tool calls as <answer>ANSWER</answer>."
NO_CALL = "Error: no tool call and no <answer>...</answer>. Call a tool, or give the final answer."
CUT_OFF = "Error: the reply was cut off at the token limit. Be brief; call a tool or answer."


def build_view(base, turns, dropped, verbatim_from, forced, obs_cap):
    """The messages the model reads: base (system, question), a note when the oldest `dropped` turns are
    left out, then each turn's assistant message and its tool results — verbatim (capped at obs_cap) from
    result number `verbatim_from` on, PLACEHOLDER before — and the forced-answer request when `forced`."""
    messages = list(base)
    if dropped:
        messages.append({"role": "user", "content": f"[{dropped} earlier turns omitted to fit the context]"})
    result_index = sum(len(t["observations"]) for t in turns[:dropped])
    for turn in turns[dropped:]:
        messages.append(turn["message"])
        for obs in turn["observations"]:
            shown = _cap(obs, obs_cap) if result_index >= verbatim_from else PLACEHOLDER
            messages.append({"role": "tool", "content": shown})
            result_index += 1
    if forced:
        messages.append({"role": "user", "content": FORCE_ANSWER})
    return messages


def view_messages(record, turn_index):
    """What the model saw at `turn_index` of a trajectory record (rollout_group's output, or JSON of it)."""
    v = record["turns"][turn_index]["view"]
    return build_view(record["messages"][:2], record["turns"][:turn_index], v["dropped"], v["verbatim_from"],
                      v["forced"], v["obs_cap"])


class Episode:
    """One rollout as a state machine: `request()` gives the next prompt (or None when done), `step()`
    takes the policy's generation. Batched rollouts drive many episodes in lockstep (rollout_group).

    Context policy, applied to the view the model reads (the record keeps everything):
    - system prompt and question always; the last keep_last_k..keep_last_k+rewrite_slack tool results
      verbatim (capped at obs_max_chars), older ones replaced by PLACEHOLDER — the slack lets the prompt
      grow by appending for a few turns before a rewrite;
    - over the window, the oldest whole turns are dropped (a note says how many) until the prompt is
      drop_to full; when even the newest turn alone cannot fit, the model is asked for its answer with
      the observations shown shorter until the prompt fits (termination `context_limit`).
    Token in / token out: while the view only grows by appending, the next prompt is the previous prompt
    + the exact generated ids + the rendered tool results, all in one training segment; a rewrite starts a
    new segment whose prompt is the freshly rendered view. Loss mask 1 exactly on generated ids.
    """

    def __init__(self, question, tokenizer, toolbox, config, system_prompt=SYSTEM_PROMPT):
        self.tok, self.toolbox, self.config = tokenizer, toolbox, config
        self.base = [{"role": "system", "content": system_prompt}, {"role": "user", "content": question}]
        self.turns, self.segments = [], []
        self.dropped, self.verbatim_from, self.n_results = 0, 0, 0
        self.forced, self.obs_cap = False, config.obs_max_chars
        self.termination, self.final_answer, self.error = None, None, None
        self.consecutive_errors = 0
        self.started = time.monotonic()
        self._pending = None  # the view state of the prompt handed out by request(), for the turn record

    def view(self, dropped, verbatim_from, forced, obs_cap):
        return build_view(self.base, self.turns, dropped, verbatim_from, forced, obs_cap)

    def _render_ids(self, messages):
        return self.tok.encode(self.tok.render(messages, tools=self.toolbox.schemas, add_generation_prompt=True))

    # -- one turn --------------------------------------------------------------------------------
    def request(self):
        """The next prompt as {prompt_ids, messages, tools}, or None when the episode has ended."""
        cfg = self.config
        if self.termination:
            return None
        if cfg.wall_clock_s and time.monotonic() - self.started > cfg.wall_clock_s:
            return self._end("wall_clock")
        if len(self.turns) >= cfg.max_turns and not self.forced:
            return self._end("max_turns")
        budget = cfg.max_context_tokens - cfg.max_new_tokens
        if self.n_results - self.verbatim_from > cfg.keep_last_k + cfg.rewrite_slack:
            self.verbatim_from = self.n_results - cfg.keep_last_k
        state = (self.dropped, self.verbatim_from, self.forced, self.obs_cap)
        messages = self.view(*state)
        seg = self.segments[-1] if self.segments else None
        ids = None
        if seg is not None and seg["state"] == state and self.turns:
            # append-only since the last prompt: extend the segment with the text render puts after the last
            # assistant turn -- provided the template shows that turn exactly as the model wrote it (the 4.1
            # template shows an intermediate turn without reasoning with no think block, while the model may have
            # written an empty one; a rollout must see what deployment would render). Rendered on a two-message
            # probe: a turn's and a tool result's layout do not depend on what came before them, and this keeps
            # the cost per turn independent of the context length.
            probe = [{"role": "user", "content": "."}] + messages[-1 - len(self.turns[-1]["observations"]):]
            last_gen = self.turns[-1]["generated_ids"]
            closing = [] if last_gen and last_gen[-1] == self.tok.im_end_id else [self.tok.im_end_id]
            before = self.tok.render(probe[:1], add_generation_prompt=True) + self.tok.decode(last_gen + closing)
            after = self.tok.render(probe, add_generation_prompt=True)
            if after.startswith(before):
                appended = closing + self.tok.encode(after[len(before):])
                if len(seg["prompt_ids"]) + len(seg["completion_ids"]) + len(appended) <= budget:
                    ids = appended
        if ids is not None:
            seg["completion_ids"] += ids
            seg["logprobs"] += [0.0] * len(ids)
            seg["loss_mask"] += [0] * len(ids)
            prompt_len = len(seg["prompt_ids"]) + len(seg["completion_ids"])
        else:
            prompt_ids = self._render_ids(messages)
            while len(prompt_ids) > budget and self.dropped < len(self.turns) - 1:
                # drop whole oldest turns, estimating how many from the average turn length
                per_turn = max(1, len(prompt_ids) // max(len(self.turns) - self.dropped, 1))
                excess = len(prompt_ids) - int(cfg.drop_to * budget)
                self.dropped = min(len(self.turns) - 1, self.dropped + max(1, excess // per_turn))
                self.verbatim_from = max(self.verbatim_from,
                                         sum(len(t["observations"]) for t in self.turns[:self.dropped]))
                state = (self.dropped, self.verbatim_from, self.forced, self.obs_cap)
                messages = self.view(*state)
                prompt_ids = self._render_ids(messages)
            if len(prompt_ids) > budget and not self.forced:
                self.forced = True  # the newest turn alone overflows the window: ask for the final answer
                return self.request()
            while len(prompt_ids) > budget and self.obs_cap >= 80:
                self.obs_cap //= 2  # forced prompt: show less of the observations until it fits
                state = (self.dropped, self.verbatim_from, self.forced, self.obs_cap)
                messages = self.view(*state)
                prompt_ids = self._render_ids(messages)
            if len(prompt_ids) > budget:  # not even the question fits: nothing left to ask
                return self._end("context_limit")
            self.segments.append({"prompt_ids": prompt_ids, "completion_ids": [], "logprobs": [], "loss_mask": [],
                                  "turns": [], "state": state})
            prompt_len = len(prompt_ids)
        self._pending = {"dropped": state[0], "verbatim_from": state[1], "forced": state[2], "obs_cap": state[3],
                         "prompt_tokens": prompt_len, "segment": len(self.segments) - 1,
                         "appended": ids is not None}
        seg = self.segments[-1]
        return {"prompt_ids": seg["prompt_ids"] + seg["completion_ids"], "messages": messages,
                "tools": self.toolbox.schemas}

    def step(self, generation):
        """Take the policy's output {tokens, logprobs, finish_reason} for the last request and run tools."""
        view, seg = self._pending, self.segments[-1]
        ids = list(generation["tokens"])
        logprobs = list(generation.get("logprobs") or [0.0] * len(ids))
        start = len(seg["completion_ids"])
        seg["completion_ids"] += ids
        seg["logprobs"] += logprobs
        seg["loss_mask"] += [1] * len(ids)
        seg["turns"].append(len(self.turns))
        text = self.tok.decode(ids)
        parsed = self.tok.parse_assistant(text)
        reasoning, content = parsed["reasoning"] or "", parsed["content"] or ""
        calls, errors = parsed["tool_calls"], list(parsed["errors"])
        turn = {"index": len(self.turns), "generated_ids": ids, "span": [start, start + len(ids)],
                "segment": view["segment"], "view": view, "finish_reason": generation.get("finish_reason"),
                "raw_text": text, "reasoning": reasoning, "content": content, "tool_calls": calls,
                "parse_errors": errors, "observations": [], "ok": [], "final_answer": None}
        cut_off = generation.get("finish_reason") == "length" and not calls
        if cut_off:
            errors.append("cut off at max_new_tokens")
        if errors:  # show the model its own malformed attempt, run nothing, say what was wrong
            turn["tool_calls"] = []
            raw = text.split(self.tok.decode([self.tok.im_end_id]))[0]
            turn["message"] = {"role": "assistant", "reasoning_content": reasoning,
                               "content": raw.split("</think>", 1)[-1].lstrip("\n"), "tool_calls": []}
            reason = CUT_OFF if cut_off else "Error: malformed tool call: " + "; ".join(errors)
            turn["observations"], turn["ok"] = [_cap(reason, 600)], [False]
        else:
            turn["message"] = {"role": "assistant", "reasoning_content": reasoning, "content": content,
                               "tool_calls": [{"type": "function", "function": c} for c in calls]}
            if calls:
                for call in calls:
                    obs, ok = self.toolbox.call(call["name"], call["arguments"])
                    turn["observations"].append(obs)
                    turn["ok"].append(ok)
            elif extract_answer(content) is not None:
                turn["final_answer"] = extract_answer(content)
            else:
                turn["observations"], turn["ok"] = [NO_CALL], [False]
        self.turns.append(turn)
        self.n_results += len(turn["observations"])
        if turn["final_answer"] is not None:
            self.final_answer = turn["final_answer"]
            return self._end("context_limit" if view["forced"] else "answer")
        if view["forced"]:  # the forced final turn did not answer
            return self._end("context_limit")
        self.consecutive_errors = 0 if any(turn["ok"]) else self.consecutive_errors + 1
        if self.consecutive_errors > self.config.max_consecutive_errors:
            self.error = f"{self.consecutive_errors} failed turns in a row"
            return self._end("error")

    def _end(self, reason, error=None):
        self.termination = reason
        self.error = error or self.error
        return None

    def record(self):
        """The whole trajectory as plain JSON-able data (see rollout_group)."""
        messages = list(self.base)
        for t in self.turns:
            messages.append(t["message"])
            messages += [{"role": "tool", "content": o} for o in t["observations"]]
        segments = [{k: v for k, v in s.items() if k != "state"} for s in self.segments]
        return {"question": self.base[1]["content"], "termination": self.termination,
                "final_answer": self.final_answer, "error": self.error, "turns": self.turns, "segments": segments,
                "messages": messages, "seconds": round(time.monotonic() - self.started, 3)}


# -----------------------------------------------------------------------------
# What the GRPO agent stage calls

def rollout_group(policy, question, G, tokenizer, toolbox, config=None, critic=None, score_method="gaia",
                  judge_chat=None, system_prompt=SYSTEM_PROMPT):
    """G rollouts of one question in lockstep (one batched generate call per turn).

    question: a row of data/toy/search_questions.jsonl ({question, answer, path, head, ...}) or a string.
    Returns G trajectory records, each with
      segments: [{prompt_ids, completion_ids, logprobs, loss_mask, turns}] — train on
                prompt_ids + completion_ids with loss where loss_mask == 1 (exactly the generated ids);
      turns:    per turn its segment, span [start, end) of its generated ids inside completion_ids, tool
                calls, full observations, view state (view_messages(record, i) rebuilds what the model
                saw; the exact prompt ids are segment prompt_ids + completion_ids[:start]), final_answer;
      verdicts: the critic's per-turn verdict ({logical_soundness, tool_call_accuracy, information_gain,
                pass}, None for the final-answer turn);
      termination (answer | max_turns | context_limit | wall_clock | error), final_answer,
      score: 1.0 / 0.0 by `score_method` (None without a gold answer), scores: {em, f1, gaia, correct[, llm]}.
    """
    return rollout_groups(policy, [question], G, tokenizer, toolbox, config, critic, score_method, judge_chat,
                          system_prompt)[0]


def rollout_groups(policy, questions, G, tokenizer, toolbox, config=None, critic=None, score_method="gaia",
                   judge_chat=None, system_prompt=SYSTEM_PROMPT):
    """rollout_group for many questions at once: all len(questions) * G episodes advance in lockstep, so
    each turn is one generate call over every live episode. Returns one list of G records per question.
    `toolbox` may be a function of the question row (questions of several worlds, each searched in its own)."""
    config = config or AgentConfig()
    critic = critic or RuleCritic()
    rows = [q if isinstance(q, dict) else {"question": q} for q in questions]
    episodes = [[Episode(row["question"], tokenizer, toolbox(row) if callable(toolbox) else toolbox, config,
                         system_prompt) for _ in range(G)] for row in rows]
    flat = [ep for group in episodes for ep in group]
    while True:
        live = [(ep, ep.request()) for ep in flat]
        live = [(ep, req) for ep, req in live if req is not None]
        if not live:
            break
        try:
            generations = policy.generate([req for _, req in live], config.max_new_tokens)
        except (ToolError, ApiError, requests.RequestException, KeyError, ValueError) as e:
            for ep, _ in live:  # the policy itself failed (endpoint down, bad reply): end these rollouts
                ep._end("error", f"policy failed: {type(e).__name__}: {_cap(str(e), 200)}")
            break
        for (ep, _), generation in zip(live, generations):
            ep.step(generation)
    results = []
    for row, group in zip(rows, episodes):
        records = []
        for ep in group:
            rec = ep.record()
            rec["gold"] = row.get("answer")
            rec["verdicts"] = critic.judge(row["question"], ep.turns, row if "path" in row else None)
            rec["scores"] = (score_answer(ep.final_answer, row["answer"], score_method, row["question"], judge_chat)
                             if "answer" in row else None)
            rec["score"] = None if rec["scores"] is None else float(rec["scores"]["correct"])
            records.append(rec)
        results.append(records)
    return results


def evaluate_agent(model, tokenizer, questions, toolbox, config, critic=None, batch=16, group_size=1,
                   temperature=0.0, seed=0):
    """Held-out accuracy of an in-process model: `group_size` rollouts per question (greedy by default), in
    lockstep batches of `batch` questions. Returns accuracy (mean score), the turns used, the termination
    reasons, the rate of tool turns the critic fails, and how often the first search query contains the
    question's head entity (copied from the question: the skill a toy model must learn first)."""
    critic = critic or RuleCritic()
    policy = ModelPolicy(model, tokenizer, temperature=temperature, seed=seed)
    records = []
    for i in range(0, len(questions), batch):
        for q, group in zip(questions[i:i + batch], rollout_groups(policy, questions[i:i + batch], group_size,
                                                                    tokenizer, toolbox, config, critic)):
            for rec in group:
                first = next((c for t in rec["turns"] for c in t["tool_calls"] if c["name"] == "search"), None)
                query = str((first or {}).get("arguments", {}).get("query", "")) if first else ""
                rec["copied_head"] = "head_title" in q and q["head_title"].lower() in query.lower()
                rec["hops"] = q.get("hops")
                records.append(rec)
    n = max(len(records), 1)
    verdicts = [v for r in records for v in r["verdicts"] if v is not None]
    return {"n": len(records), "accuracy": sum(r["score"] or 0.0 for r in records) / n,
            "turns": sum(len(r["turns"]) for r in records) / n,
            "terminations": dict(Counter(r["termination"] for r in records)),
            "turn_fail_rate": sum(not v["pass"] for v in verdicts) / max(len(verdicts), 1),
            "first_query_copies_head": sum(r["copied_head"] for r in records) / n,
            "accuracy_by_hops": {h: sum(r["score"] or 0.0 for r in records if r["hops"] == h)
                                 / max(1, sum(r["hops"] == h for r in records))
                                 for h in sorted({r["hops"] for r in records if r["hops"] is not None})},
            "records": records}


def run_agent(policy, question, tokenizer, toolbox, config=None, critic=None, **kwargs):
    return rollout_group(policy, question, 1, tokenizer, toolbox, config, critic, **kwargs)[0]


def expert_script(question_row, world):
    """A scripted policy's script that replays the SFT expert on a toy question (no length filter)."""
    records = sft_trajectories(world, [question_row], max_chars=10**9, critic=_PassAll())
    if not records:
        raise ValueError(f"the scripted expert cannot solve {question_row['id']}")
    replies = [m for m in records[0]["messages"] if m["role"] == "assistant"]
    return lambda messages, turn: replies[min(turn, len(replies) - 1)]


class _PassAll:
    def judge(self, question, turns, gold=None):
        return [None] * len(turns)


def turn_samples(record):
    """One training sample per tool-call or answer turn of a rollout_group record: the exact context the
    policy saw (prompt_ids), what it generated (response_ids, logprobs, all in the loss) and the critic's
    verdict. Turns of one segment share a prefix; training on `segments` instead packs them once."""
    samples = []
    for turn, verdict in zip(record["turns"], record["verdicts"]):
        seg = record["segments"][turn["segment"]]
        start, end = turn["span"]
        samples.append({"turn": turn["index"], "prompt_ids": seg["prompt_ids"] + seg["completion_ids"][:start],
                        "response_ids": seg["completion_ids"][start:end], "logprobs": seg["logprobs"][start:end],
                        "loss_mask": seg["loss_mask"][start:end], "verdict": verdict,
                        "turn_ok": None if verdict is None else verdict["pass"],
                        "finish_reason": turn["finish_reason"]})
    return samples


# -----------------------------------------------------------------------------
# Command line

TOY_CHECKPOINTS = [paths.toy_run("agent"), paths.toy_run("sft")]


def find_toy_question(text):
    for q in toy_world.load_questions(paths.TOY_QUESTIONS):
        if q["question"].strip().lower() == text.strip().lower() or q["id"] == text.strip():
            return q
    return None


def print_record(rec):
    for turn, verdict in zip(rec["turns"], rec["verdicts"]):
        calls = turn["tool_calls"] or ([{"name": "(answer)", "arguments": turn["final_answer"]}]
                                       if turn["final_answer"] is not None else [{"name": "(no call)", "arguments": ""}])
        for call, obs in zip(calls, turn["observations"] or [""]):
            print(f"turn {turn['index']:>3} [{call['name']}] {json.dumps(call['arguments'], ensure_ascii=False)}")
            if turn["reasoning"]:
                print(f"      think: {_cap(turn['reasoning'], 200)}")
            for line in _cap(obs, 400).split("\n") if obs else []:
                print(f"      | {line}")
        if verdict:
            print("      critic: " + " ".join(f"{d}={verdict[d]:.2f}" for d in DIMENSIONS)
                  + (" pass" if verdict["pass"] else " FAIL"))
    print(f"termination: {rec['termination']}" + (f" ({rec['error']})" if rec["error"] else ""))
    print(f"final answer: {rec['final_answer']}")
    if rec["scores"] is not None:
        print(f"gold: {rec['gold']}  correct: {rec['scores']['correct']}  em={rec['scores']['em']:.0f} "
              f"f1={rec['scores']['f1']:.2f}")


def main(argv=None):

    p = argparse.ArgumentParser(description="Run the deep-search agent on one question and print the trajectory.")
    p.add_argument("--question", required=True, help="question text, or a toy question id such as toy-0003")
    # Policy
    p.add_argument("--ckpt", help="HF-format checkpoint directory (in-process model)")
    p.add_argument("--endpoint", help="OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1")
    p.add_argument("--model", default="default", help="model name sent to --endpoint")
    p.add_argument("--scripted", action="store_true", help="the scripted expert (toy questions only)")
    p.add_argument("--tokenizer", help="tokenizer directory (default: the checkpoint's, else the toy one)")
    p.add_argument("--temperature", type=non_negative_float, default=0.0)
    p.add_argument("--top-p", type=positive_float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    # Tools
    p.add_argument("--backend", choices=["local", "web"], default="local")
    p.add_argument("--world", default=paths.TOY_WORLD)
    p.add_argument("--no-python", action="store_true", help="do not offer the python tool")
    # Context policy
    defaults = AgentConfig()
    p.add_argument("--max-turns", type=positive_int, default=defaults.max_turns)
    p.add_argument("--max-context-tokens", type=positive_int, default=defaults.max_context_tokens)
    p.add_argument("--max-new-tokens", type=positive_int, default=defaults.max_new_tokens)
    p.add_argument("--keep-last-k", type=non_negative_int, default=defaults.keep_last_k)
    p.add_argument("--rewrite-slack", type=non_negative_int, default=defaults.rewrite_slack)
    p.add_argument("--obs-max-chars", type=positive_int, default=defaults.obs_max_chars)
    p.add_argument("--wall-clock", type=non_negative_float, default=0.0, help="seconds; 0 = no limit")
    # Judging and output
    p.add_argument("--critic", choices=["rule", "llm"], default="rule", help="llm: judged by --endpoint")
    p.add_argument("--score", choices=["gaia", "em", "f1", "llm"], default="gaia")
    p.add_argument("--json", action="store_true", help="print the whole record as JSON")
    args = p.parse_args(argv)

    row = find_toy_question(args.question) or {"question": args.question}
    ckpt = args.ckpt
    if not (ckpt or args.endpoint or args.scripted):
        ckpt = next((c for c in TOY_CHECKPOINTS if os.path.isfile(os.path.join(c, "config.json"))), None)
        if ckpt is None:
            print("search_agent: no --ckpt/--endpoint given and no toy checkpoint in " + " or ".join(TOY_CHECKPOINTS)
                  + ".\nMake one with:  python train_sft.py --config toy --out runs/toy/sft\n"
                  "(then optionally: torchrun --standalone --nproc_per_node 1 train_grpo.py --stage agent), "
                  "or add --scripted to watch the scripted expert on a toy question.")
            return 2
        print(f"search_agent: using the toy checkpoint {ckpt}")
    tok_dir = args.tokenizer or (ckpt if ckpt and os.path.isfile(os.path.join(ckpt, "tokenizer.json"))
                                 else toy_tokenizer_path())
    if ckpt and not args.scripted:  # a bad --ckpt is one line naming the directory and what is wrong
        try:
            _, tokenizer = check_hf_checkpoint(ckpt, tokenizer_dir=tok_dir)
        except CheckpointError as e:
            raise SystemExit(f"search_agent: --ckpt {e}") from None
    else:
        tokenizer = Tokenizer.from_pretrained(tok_dir)
    if args.scripted:
        if "path" not in row:
            p.error("--scripted follows a toy question's gold path: pass a question of data/toy/search_questions.jsonl")
        policy = ScriptedPolicy(expert_script(row, toy_world.load_world(args.world)), tokenizer)
    elif args.endpoint and not ckpt:
        policy = EndpointPolicy(args.endpoint, args.model, tokenizer, temperature=args.temperature)
    else:
        policy = ModelPolicy(Transformer.from_pretrained(ckpt), tokenizer, args.temperature, args.top_p, seed=args.seed)
    toolbox = make_toolbox(args.backend, args.world, with_python=not args.no_python)
    judge_chat = endpoint_chat(args.endpoint, args.model) if args.endpoint else (
        policy.chat if isinstance(policy, ModelPolicy) else None)
    if (args.critic == "llm" or args.score == "llm") and judge_chat is None:
        p.error("--critic llm / --score llm need --endpoint or a model")
    critic = LLMCritic(judge_chat) if args.critic == "llm" else RuleCritic()
    config = AgentConfig(max_turns=args.max_turns, max_context_tokens=args.max_context_tokens,
                         max_new_tokens=args.max_new_tokens, keep_last_k=args.keep_last_k,
                         rewrite_slack=args.rewrite_slack, obs_max_chars=args.obs_max_chars,
                         wall_clock_s=args.wall_clock)
    rec = run_agent(policy, row, tokenizer, toolbox, config, critic, score_method=args.score, judge_chat=judge_chat)
    if args.json:
        print(json.dumps({**rec, "config": asdict(config)}, ensure_ascii=False))
    else:
        print_record(rec)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
