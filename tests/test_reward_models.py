"""Reward models: loss values by hand, the swap term, checkpoints and reward functions, bad input, judges, and short
training runs (a point RM separating held-out repetitive answers; the swap regulariser cutting position bias)."""
import json
import math
import random
import threading
from http.server import HTTPServer

import pytest
import torch

import reward_models as rmod
from nanbeige41 import toy_chat
from nanbeige41.checkpoint import CheckpointError
from nanbeige41.model import ModelConfig, Transformer
from http_fakes import FakeHandler

# a backbone small enough to train in seconds on a busy CPU; the toy tokenizer's 4096 ids
TINY = dict(vocab_size=4096, hidden_size=64, intermediate_size=176, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, rope_theta=1e5, max_position_embeddings=2048)


@pytest.fixture(scope="module")
def tiny_init(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny_init")
    torch.manual_seed(0)
    Transformer(ModelConfig(**TINY)).save_pretrained(path)
    return str(path)


def tiny_rm(kind, max_len=1024, seed=0):
    torch.manual_seed(seed)
    rm = rmod.RewardModel(Transformer(ModelConfig(**TINY)), kind, max_len)
    torch.nn.init.normal_(rm.head.weight, std=0.5)  # visible scores from an untrained model
    return rm.eval()


def write_jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


# -----------------------------------------------------------------------------
# losses

def test_bt_loss_hand_values():
    # -log sigmoid(2) = log(1 + e^-2) = 0.126928; with margin 1: log(1 + e^-1) = 0.313262
    assert rmod.bt_loss(torch.tensor([2.0]), torch.tensor([0.0])).item() == pytest.approx(0.126928, abs=1e-6)
    assert rmod.bt_loss(torch.tensor([2.0]), torch.tensor([0.0]), 1.0).item() == pytest.approx(0.313262, abs=1e-6)
    # mean over the batch; a wrong order costs log(1 + e^3) = 3.048587
    loss = rmod.bt_loss(torch.tensor([2.0, -1.0]), torch.tensor([0.0, 2.0]), torch.tensor([0.0, 0.0]))
    assert loss.item() == pytest.approx((0.126928 + 3.048587) / 2, abs=1e-6)


def test_pair_loss_and_swap_term_hand_values():
    d_wl, d_lw = torch.tensor([1.0, 2.0]), torch.tensor([-0.5, 1.0])
    # swap-consistency = mean((d(A,B) - (-d(B,A)))^2) = ((1 - 0.5)^2 + (2 + 1)^2) / 2
    assert rmod.swap_consistency(d_wl, d_lw).item() == pytest.approx((0.25 + 9.0) / 2)
    assert rmod.swap_consistency(d_wl, -d_wl).item() == 0.0  # antisymmetric predictions carry no penalty
    # CE: winner-first rows want label 1 (log(1 + e^-d)), loser-first rows label 0 (log(1 + e^d))
    ce = 0.5 * ((math.log1p(math.exp(-1.0)) + math.log1p(math.exp(-2.0))) / 2
                + (math.log1p(math.exp(-0.5)) + math.log1p(math.exp(1.0))) / 2)
    loss, ce_t, swap = rmod.pair_loss(d_wl, d_lw, swap_weight=0.3)
    assert ce_t.item() == pytest.approx(ce, abs=1e-6) and swap.item() == pytest.approx(4.625)
    assert loss.item() == pytest.approx(ce + 0.3 * 4.625, abs=1e-6)
    assert rmod.pair_loss(d_wl, d_lw, 0.0)[0].item() == pytest.approx(ce, abs=1e-6)


# -----------------------------------------------------------------------------
# inputs, scoring, checkpoints

def test_encodings_end_at_im_end_and_normalise_think(tok):
    prompt = [{"role": "user", "content": "What is a velmora?"}]
    ids = rmod.encode_point(tok, prompt, "A velmora is a fish.")
    assert ids[-1] == tok.im_end_id
    # a rollout's decoded text (reasoning, </think>, <|im_end|>) encodes like the same answer given as a message
    assert rmod.encode_point(tok, prompt, "\n</think>\n\nA velmora is a fish.<|im_end|>") == ids
    ab = rmod.encode_pair(tok, prompt, "A velmora is a fish.", "Fish fish fish.")
    ba = rmod.encode_pair(tok, prompt, "Fish fish fish.", "A velmora is a fish.")
    assert ab[-1] == tok.im_end_id and ab != ba and sorted(ab) == sorted(ba)
    assert rmod.encode_pair(tok, prompt, "\n</think>\n\nA velmora is a fish.", "Fish fish fish.") == ab
    text = tok.decode(ab)
    assert text.index("response A\n<think>\n\n</think>\n\nA velmora") < text.index("response B\n<think>")


def test_scores_do_not_depend_on_batching_or_padding(tok):
    rm = tiny_rm("point")
    prefs = toy_chat.preference_pairs(5, 12)
    prompts = [r["prompt"] for r in prefs]
    responses = [r["rejected"][0]["content"] for r in prefs]  # lengths vary a lot (overlong vs format defects)
    one = rmod.point_rewards(rm, tok, prompts, responses, batch_size=1)
    many = rmod.point_rewards(rm, tok, prompts, responses, batch_size=12)
    assert max(abs(a - b) for a, b in zip(one, many)) < 1e-4
    assert max(one) - min(one) > 1e-3  # the scores are not all the same number


def test_checkpoint_roundtrip_and_pair_reward_functions(tmp_path, tok):
    prm = tiny_rm("pair", seed=1)
    rmod.save_reward_model(prm, tok, tmp_path / "rm")
    loaded = rmod.load_reward_model(tmp_path / "rm")
    assert loaded.kind == "pair" and loaded.max_len == 1024
    # the backbone is a plain HF checkpoint
    assert isinstance(Transformer.from_pretrained(tmp_path / "rm"), Transformer)
    rl = [r for r in toy_chat.rl_prompts(0, 0, 8)]
    prompts, refs, golds = [r["messages"] for r in rl], [r["reference"] for r in rl], [r["gold"] for r in rl]
    d_before = rmod.pair_logits(prm, tok, prompts, golds, refs)
    assert rmod.pair_logits(loaded, tok, prompts, golds, refs) == pytest.approx(d_before, abs=1e-5)
    p_gold = rmod.pair_win_probs(loaded, tok, prompts, golds, refs)
    p_ref = rmod.pair_win_probs(loaded, tok, prompts, refs, golds)
    # both-order averaging makes P(a beats b) + P(b beats a) = 1 exactly, whatever the model's position bias
    assert all(abs(a + b - 1) < 1e-6 for a, b in zip(p_gold, p_ref))
    rewards = rmod.pair_rewards(loaded, tok, prompts, golds, refs)
    assert rewards == [float(p > 0.5) for p in p_gold]
    with pytest.raises(ValueError, match="point-wise"):
        rmod.point_rewards(loaded, tok, prompts, golds)
    # the score CLI: both orders per record, from response + reference
    samples = write_jsonl(tmp_path / "s.jsonl", [{"messages": p, "response": g, "reference": r}
                                                  for p, g, r in zip(prompts, golds, refs)])
    rows = rmod.main(["score", "--kind", "pair", "--ckpt", str(tmp_path / "rm"), "--data", samples])
    assert [r["p_a_wins"] for r in rows] == pytest.approx(p_gold, abs=1e-5)
    assert [r["d_ab"] for r in rows] == pytest.approx(d_before, abs=1e-5)
    with pytest.raises(SystemExit, match="pair-wise reward model, not --kind point"):  # one line, no traceback
        rmod.main(["score", "--kind", "point", "--ckpt", str(tmp_path / "rm"), "--data", samples])
    Transformer(ModelConfig(**TINY)).save_pretrained(tmp_path / "lm")  # a language model, not a reward model
    tok.save_pretrained(tmp_path / "lm")
    with pytest.raises(CheckpointError, match="lm: no reward_head.json"):
        rmod.load_reward_model(tmp_path / "lm")


def test_bf16_backbone_scores_track_fp32(tmp_path, tok):
    rm = tiny_rm("point", seed=2)
    rmod.save_reward_model(rm, tok, tmp_path)
    rm16 = rmod.load_reward_model(tmp_path, dtype=torch.bfloat16)
    assert rm16.backbone.lm_head.weight.dtype == torch.bfloat16 and rm16.head.weight.dtype == torch.float32
    prefs = toy_chat.preference_pairs(6, 8)
    args = ([r["prompt"] for r in prefs], [r["chosen"][0]["content"] for r in prefs])
    s32, s16 = rmod.point_rewards(rm, tok, *args), rmod.point_rewards(rm16, tok, *args)
    spread = max(s32) - min(s32)
    assert all(isinstance(s, float) for s in s16)
    assert max(abs(a - b) for a, b in zip(s32, s16)) < 0.1 * spread + 0.02


def test_overlong_sequences_keep_their_tail_when_scoring(tok):
    rm = tiny_rm("point", max_len=24)
    prompt = [{"role": "user", "content": "What is a velmora? " * 20}]
    ids = rmod.encode_point(tok, prompt, "A fish.")
    assert len(ids) > 24
    direct = rm(torch.tensor([ids[-24:]]), torch.tensor([24])).item()
    assert rmod.point_rewards(rm, tok, [prompt], ["A fish."]) == pytest.approx([direct], abs=1e-5)


# -----------------------------------------------------------------------------
# bad input

def test_bad_records_are_counted_and_skipped_or_fail_under_strict(tmp_path, tok, tiny_init):
    good = toy_chat.preference_pairs(0, 40)
    bad = [{"prompt": [{"role": "user", "content": "hi"}], "chosen": "same", "rejected": "same"},
           {"prompt": [{"role": "user", "content": "hi"}], "chosen": "only chosen"},
           {"chosen": "a", "rejected": "b"},
           {"prompt": [{"role": "wizard", "content": "hi"}], "chosen": "a", "rejected": "b"},
           {"prompt": [{"role": "user", "content": "hi"}], "chosen": "fine", "rejected": "word " * 2000},
           {"prompt": [{"role": "user", "content": "hi"}], "strong": "a", "weak": "b"}]  # no checklist
    records = [{**r, "_source": f"x:{i}"} for i, r in enumerate(good + bad)]
    examples, skipped = rmod.prepare_examples(records, tok, "point", 512, log=lambda *a: None)
    assert len(examples) == 40
    assert dict(skipped) == {"identical": 1, "missing_field": 3, "bad_messages": 1, "overlong": 1}
    with pytest.raises(ValueError, match="--strict: 6 bad record"):
        rmod.prepare_examples(records, tok, "point", 512, strict=True, log=lambda *a: None)
    data = write_jsonl(tmp_path / "bad.jsonl", good + bad)
    with pytest.raises(ValueError, match="identical=1"):
        rmod.main(["train", "--kind", "point", "--data", data, "--init", tiny_init, "--out", str(tmp_path / "o"),
                   "--max-len", "512", "--strict"])


# -----------------------------------------------------------------------------
# judges and the checklist filter

def test_rule_checklist_filter_on_toy_pairs():
    records = toy_chat.strong_weak_pairs(0, 200)
    kept, counts = rmod.checklist_filter(records, toy_chat.rule_judge, log=lambda *a: None)
    assert counts["kept"] == len(kept) and sum(counts.values()) == 200
    assert counts["tie"] > 0 and counts["disagree"] > 0 and len(kept) > 150
    same = [r for r in records if r["weak_kind"] == "same"]
    assert same and not any(k["chosen"] == k["rejected"] for k in kept)  # weak == strong never survives


class _Judge(FakeHandler):
    """A fake OpenAI-compatible judge: every checklist item passes unless the response repeats itself; a response
    containing GARBAGE gets an unparseable reply."""
    requests = []

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _Judge.requests.append((self.path, self.headers.get("Authorization"), body))
        prompt = body["messages"][0]["content"]
        response = prompt.split("Response:\n")[1].split("\n\nChecklist:")[0]
        n = len(prompt.split("Checklist:\n")[1].split("\n\n")[0].split("\n"))
        verdict = "no" if toy_chat.is_repetitive(response) else "yes"
        content = "I cannot grade this" if "GARBAGE" in response else "Verdicts: " + json.dumps([verdict] * n)
        out = json.dumps({"choices": [{"message": {"role": "assistant", "content": content}}]}).encode()
        self.reply(out)



def test_endpoint_judge_against_a_local_server(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "k")
    server = HTTPServer(("127.0.0.1", 0), _Judge)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        judge = rmod.endpoint_judge(f"http://127.0.0.1:{server.server_port}/v1", "judge-model", retries=0)
        prompt = [{"role": "user", "content": "What colour is a droka?"}]
        checklist = [{"text": "Says green"}, {"text": "Is one word"}]
        clean, loop = "Green.", "Green. Green. Green. Green."
        records = [{"prompt": prompt, "strong": clean, "weak": loop, "checklist": checklist},   # agrees: kept
                   {"prompt": prompt, "strong": loop, "weak": clean, "checklist": checklist},   # disagrees: dropped
                   {"prompt": prompt, "strong": clean, "weak": "Green.!", "checklist": checklist},  # tie: dropped
                   {"prompt": prompt, "strong": "GARBAGE", "weak": clean, "checklist": checklist}]  # judge error
        kept, counts = rmod.checklist_filter(records, judge, log=lambda *a: None)
        assert dict(counts) == {"kept": 1, "disagree": 1, "tie": 1, "judge_error": 1}
        assert kept[0]["chosen"] == clean and kept[0]["rejected"] == loop
        path, auth, body = _Judge.requests[0]
        assert path == "/v1/chat/completions" and auth == "Bearer k"
        assert body["model"] == "judge-model" and body["temperature"] == 0
        assert "1. Says green\n2. Is one word" in body["messages"][0]["content"]
    finally:
        server.shutdown()
    dead = rmod.endpoint_judge(f"http://127.0.0.1:{server.server_port}/v1", "m", retries=0, timeout_s=2)
    with pytest.raises(rmod.JudgeError):
        dead(prompt, clean, checklist)


def test_parse_verdicts():
    assert rmod.parse_verdicts('["yes", "no", true]', 3) == [True, False, True]
    for bad in ('["yes"]', "yes, no", '["yes", "maybe"]'):
        with pytest.raises(rmod.JudgeError):
            rmod.parse_verdicts(bad, 2)


# -----------------------------------------------------------------------------
# training

@pytest.mark.slow
def test_point_rm_separates_held_out_repetitive_from_clean(tmp_path, tok, tiny_init):
    prefs = toy_chat.preference_pairs(0, 160)
    data = write_jsonl(tmp_path / "prefs.jsonl", prefs)
    out = str(tmp_path / "rm")
    # measured: held-out accuracy 1.0 on every defect from step 5 (batch 16, lr 2e-3)
    final = rmod.main(["train", "--kind", "point", "--data", data, "--init", tiny_init, "--out", out,
                       "--max-steps", "12", "--batch-size", "8", "--lr", "2e-3", "--log-every", "1000"])
    assert final["accuracy_repetition"] >= 0.9, final
    # fresh prompts (another seed): the clean answer against the same answer looping
    rng = random.Random(123)
    prompts, clean, loops = [], [], []
    for _ in range(48):
        e, history, q, a, _, _ = toy_chat.dialogue(rng)
        prompts.append(history + [{"role": "user", "content": q}])
        clean.append(a)
        loops.append(toy_chat.add_defect(a, "repetition", e, rng))
    rm = rmod.load_reward_model(out)
    s_clean, s_loop = rmod.point_rewards(rm, tok, prompts, clean), rmod.point_rewards(rm, tok, prompts, loops)
    accuracy = sum(c > l for c, l in zip(s_clean, s_loop)) / len(prompts)
    assert accuracy >= 0.9, accuracy
    rows = rmod.main(["score", "--kind", "point", "--ckpt", out, "--data", write_jsonl(tmp_path / "s.jsonl", prefs[:20])])
    assert len(rows) == 20 and all("score_b" in r for r in rows)


@pytest.mark.slow
def test_swap_regulariser_cuts_position_bias(tmp_path, tiny_init):
    data = write_jsonl(tmp_path / "pairs.jsonl", toy_chat.strong_weak_pairs(0, 200))
    common = ["train", "--kind", "pair", "--data", data, "--init", tiny_init, "--max-steps", "14", "--batch-size", "8",
              "--lr", "2e-3", "--log-every", "1000", "--eval-every", "1000", "--eval-frac", "0.2"]
    without = rmod.main(common + ["--swap-weight", "0", "--out", str(tmp_path / "a")])
    with_reg = rmod.main(common + ["--swap-weight", "1", "--out", str(tmp_path / "b")])
    # measured: 0.17 without the regulariser vs 0.007 with it (20 steps of 8 pairs); 0.6-1.5 vs 0.01-0.14 over
    # steps 10-60 with 16 pairs per step
    assert with_reg["position_bias"] * 4 <= without["position_bias"], (with_reg, without)


def test_score_rollouts_isolates_a_sample_the_rm_cannot_score(tiny_init, tok):
    """GRPO's point/pair scoring: one bad record (here a pair item without its reference) fails the batched call;
    the fallback scores the others one by one, exactly as alone, and gives the bad one 0 with a log line."""
    torch.manual_seed(0)
    rm = rmod.RewardModel(Transformer.from_pretrained(tiny_init), "pair", 256).eval()
    prompt = [{"role": "user", "content": "What colour is a droka?"}]
    items = [{"id": "a", "messages": prompt, "reference": "Green."}, {"id": "bad", "messages": prompt},
             {"id": "c", "messages": prompt, "reference": "Blue."}]
    texts = ["Green.", "Red.", "Green. Green. Green."]
    logged = []
    scores = rmod.score_rollouts(rm, tok, "pair", items, texts, logged.append)
    alone = [rmod.score_rollouts(rm, tok, "pair", [items[i]], [texts[i]], logged.append)[0] for i in (0, 2)]
    assert scores[1] == 0.0 and [scores[0], scores[2]] == alone
    assert any("scoring one by one" in line for line in logged) and any("bad" in line for line in logged)
