"""train_sft.py: chunked loss = unchunked loss (value and every parameter gradient) at the train-step level;
gradient-accumulation invariance; exact resume after SIGKILL; resume past a damaged newest checkpoint; NaN/inf steps skipped then abort with the last good
checkpoint untouched; bad input fails with file:line; a tiny run's loss falls and its metrics have the promised keys.
Every run uses a tiny model (the toy preset with hidden 32, 2 layers) on a slice of the shipped corpus."""

import hashlib
import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch
import torch.nn.functional as F

from nanbeige41 import data
from nanbeige41.checkpoint import checkpoint_problem, latest_checkpoint
from nanbeige41.losses import chunked_cross_entropy
from nanbeige41.model import ModelConfig, Transformer
from nanbeige41.tokenizer import Tokenizer, toy_tokenizer_path

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOY_SFT = os.path.join(REPO, "data", "toy", "sft")
TINY_MODEL = ["--hidden-size", "32", "--intermediate-size", "64", "--num-layers", "2", "--num-heads", "2",
              "--num-kv-heads", "1"]
# one thread: tiny models gain nothing from more, and OpenMP threads spin-waiting on a busy 2-core machine make
# every step many times slower
ENV = dict(os.environ, OMP_NUM_THREADS="1")
TINY = dict(vocab_size=4096, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
            num_key_value_heads=1, head_dim=None)


pytestmark = pytest.mark.usefixtures("one_thread")


def tiny_args(corpus, out, steps, *extra):
    return [*TINY_MODEL, "--data", str(corpus / "stem.jsonl"), str(corpus / "code.jsonl"),
            "--eval-data", str(corpus / "eval.jsonl"), "--mixture", "stem=1,code=1", "--seq-len", "128",
            "--batch-tokens", "512", "--max-steps", str(steps), "--lr", "1e-2", "--warmup-steps", "2",
            "--quiet", "--out", str(out), *extra]


def run_sft(args, check=True, **kw):
    r = subprocess.run([sys.executable, os.path.join(REPO, "train_sft.py"), *args], capture_output=True, text=True,
                       cwd=REPO, env=ENV, **kw)
    if check and r.returncode != 0:
        raise AssertionError(f"train_sft failed ({r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    return r


def metrics(out):
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


# -----------------------------------------------------------------------------
# the loss

def test_chunked_loss_gradient_equals_unchunked_at_train_step():
    """One train step's loss and the gradient of every parameter: chunked (chunks of 37 supervised tokens, a size
    that does not divide anything) vs plain cross-entropy over the full [B, T, V] logits with the same mask."""
    tok = Tokenizer.from_pretrained(toy_tokenizer_path())
    records, _ = data.load_conversations([os.path.join(TOY_SFT, "stem.jsonl"), os.path.join(TOY_SFT, "code.jsonl")])
    rows, _ = data.pack(data.tokenize(records[:40], tok), 256)
    batch = {k: torch.tensor([r[k] for r in rows[:3]]) for k in ("input_ids", "position_ids", "targets", "loss_mask")}
    assert (batch["position_ids"][:, 1:] == 0).any()  # really packed: several documents per row

    torch.manual_seed(0)
    model = Transformer(ModelConfig.preset("toy", **TINY))
    hidden = model(batch["input_ids"], batch["position_ids"], return_hidden=True)
    loss_sum, n = chunked_cross_entropy(hidden, model.lm_head.weight, batch["targets"], batch["loss_mask"], 37)
    (loss_sum / n).backward()
    chunked = {k: p.grad.clone() for k, p in model.named_parameters()}
    model.zero_grad()

    logits = model(batch["input_ids"], batch["position_ids"])  # (B, T, V) all at once
    keep = batch["loss_mask"].bool()
    naive = F.cross_entropy(logits[keep], batch["targets"][keep])
    naive.backward()
    assert n == int(keep.sum()) and n > 100
    assert torch.allclose(loss_sum / n, naive, rtol=1e-6)
    for k, p in model.named_parameters():
        assert torch.allclose(chunked[k], p.grad, rtol=1e-4, atol=1e-7), k


def test_accumulation_invariance(corpus, tmp_path):
    """4 rows per step as 4 micro-steps of 1 row vs one micro-batch of 4 rows: same losses, gradient norms and
    final weights (the loss is normalised by the whole step's assistant-token count, not per micro-batch)."""
    run_sft(tiny_args(corpus, tmp_path / "once", 3))
    run_sft(tiny_args(corpus, tmp_path / "accum", 3, "--micro-batch-tokens", "128"))
    a, b = metrics(tmp_path / "once"), metrics(tmp_path / "accum")
    for x, y in zip(a, b):
        assert x["loss"] == pytest.approx(y["loss"], rel=1e-6)
        assert x["grad_norm"] == pytest.approx(y["grad_norm"], rel=1e-5)
    wa = Transformer.from_pretrained(str(tmp_path / "once")).state_dict()
    wb = Transformer.from_pretrained(str(tmp_path / "accum")).state_dict()
    # Adam's step is ~lr = 1e-2 an element whatever the gradient's scale, so float32 summation-order noise in an
    # element whose gradient is near zero moves it by a little: measured max |diff| 1.7e-5 after 3 steps (AMD EPYC,
    # 2026-11-25; < 1e-5 on the earlier machine). 1e-4 is 1% of one step's move; a real mismatch moves ~1e-2.
    for k in wa:
        assert torch.allclose(wa[k], wb[k], atol=1e-4), k


# -----------------------------------------------------------------------------
# resume, NaN, bad input

def test_resume_after_sigkill_is_exact(corpus, tmp_path):
    steps = 30
    run_sft(tiny_args(corpus, tmp_path / "straight", steps, "--save-every", "4"))
    killed = tmp_path / "killed"
    proc = subprocess.Popen([sys.executable, os.path.join(REPO, "train_sft.py"),
                             *tiny_args(corpus, killed, steps, "--save-every", "4")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO, env=ENV)
    deadline = time.time() + 120
    while time.time() < deadline:
        path = latest_checkpoint(str(killed))
        if path is not None and int(os.path.basename(path).split("_")[1]) >= 8:
            break
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL  # killed mid-training, not finished
    resumed_from = int(os.path.basename(latest_checkpoint(str(killed))).split("_")[1])
    assert resumed_from < steps
    run_sft(tiny_args(corpus, killed, steps, "--save-every", "4", "--resume"))
    straight, again = metrics(tmp_path / "straight"), metrics(killed)
    assert [m["step"] for m in again] == list(range(1, steps + 1))  # lines after the checkpoint were replaced
    after = [(m["step"], m["loss"], m["grad_norm"]) for m in again if m["step"] > resumed_from]
    assert after == [(m["step"], m["loss"], m["grad_norm"]) for m in straight if m["step"] > resumed_from]
    assert [m.get("eval_loss") for m in again][-1] == [m.get("eval_loss") for m in straight][-1]


def test_resume_skips_a_damaged_newest_checkpoint(corpus, tmp_path):
    """Checkpoints at steps 2 and 4; step 4's weights are then cut short (a copy that did not finish) and a crash
    mid-save of step 6 left its temporary directory. --resume warns naming both, resumes from step 2 (step 3's loss
    equals the first run's, so the weights and data order are step 2's), and the resumed run replaces both."""
    out = tmp_path / "run"
    run_sft(tiny_args(corpus, out, 4, "--save-every", "2", "--eval-every", "0"))
    first = metrics(out)
    root = out / "checkpoints"
    weights = root / "step_00000004" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:4096])
    (root / ".tmp-step_00000006").mkdir()
    r = run_sft(tiny_args(corpus, out, 6, "--save-every", "2", "--eval-every", "0", "--resume"))
    assert f"warning: skipping the half-written checkpoint {weights}: unreadable safetensors file" in r.stderr
    assert f"warning: ignoring {root / '.tmp-step_00000006'}: a save that did not finish" in r.stderr
    assert f"resume: {root / 'step_00000002'} (step 2," in r.stdout and "Traceback" not in r.stderr
    again = metrics(out)
    assert [m["step"] for m in again] == [1, 2, 3, 4, 5, 6]
    assert again[2]["loss"] == first[2]["loss"]
    assert latest_checkpoint(str(out)) == str(root / "step_00000006")
    assert checkpoint_problem(str(root / "step_00000004")) is None  # re-saved whole
    assert not (root / ".tmp-step_00000006").exists()


def test_nonfinite_steps_are_skipped_then_abort_keeps_last_good_checkpoint(corpus, tmp_path):
    """lr 1e30 sends the weights to ~1e30 after step 1; from step 2 on the RMSNorm squares overflow, the loss is
    NaN, the steps are skipped and logged, and after 3 in a row the run aborts. Step 1's checkpoint stays as is."""
    out = tmp_path / "nan"
    r = run_sft(tiny_args(corpus, out, 20, "--lr", "1e30", "--warmup-steps", "0", "--save-every", "1",
                          "--max-bad-steps", "3", "--eval-every", "0"), check=False)
    assert r.returncode == 1, r.stderr[-2000:]
    assert "3 consecutive non-finite steps" in r.stdout
    lines = metrics(out)
    assert [m["step"] for m in lines] == [1, 2, 3, 4]
    assert not lines[0].get("skipped") and all(m["skipped"] for m in lines[1:])
    good = latest_checkpoint(str(out))
    assert os.path.basename(good) == "step_00000001"
    digest = hashlib.sha256(open(os.path.join(good, "model.safetensors"), "rb").read()).hexdigest()
    saved = json.load(open(os.path.join(good, "trainer_state.json")))
    assert saved["step"] == 1
    assert digest == hashlib.sha256(open(os.path.join(good, "model.safetensors"), "rb").read()).hexdigest()


def test_bad_input_fails_clearly(corpus, tmp_path):
    """The script turns data errors into one line naming file:line (the cases themselves: tests/test_data.py)."""
    bad = tmp_path / "bad.jsonl"
    bad.write_text(open(corpus / "stem.jsonl").readline() + '{"messages": [\n')
    r = run_sft(tiny_args(corpus, tmp_path / "o1", 2) + ["--data", str(bad)], check=False)
    assert r.returncode == 1 and f"train_sft: {bad}:2: malformed JSON" in r.stderr and "Traceback" not in r.stderr
    # a conversation with no assistant turn is an error under --strict (skipped and counted without it)
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text(open(corpus / "stem.jsonl").read()
                     + json.dumps({"messages": [{"role": "user", "content": "hi"}], "domain": "stem"}) + "\n")
    r = run_sft(tiny_args(corpus, tmp_path / "o2", 1) + ["--data", str(mixed), "--strict"], check=False)
    assert r.returncode == 1 and f"{mixed}:61: no assistant turn" in r.stderr


def test_loss_flags_reach_the_training_loss(corpus, tmp_path):
    """train_sft.py trains on exactly the assistant tokens not flagged `"loss": false`: the same corpus with the
    final assistant turn of every conversation flagged has fewer loss tokens in step 1 (same packing, same rows),
    and a non-bool flag stops the run with file:line."""
    records = [{k: v for k, v in r.items() if k != "_source"} for r in data.read_jsonl(str(corpus / "stem.jsonl"))]
    two_turns = [dict(r, messages=r["messages"] + [{"role": "user", "content": "Say it again."},
                                                    dict(r["messages"][-1])]) for r in records]
    flagged = [dict(r, messages=r["messages"][:-1] + [dict(r["messages"][-1], loss=False)]) for r in two_turns]
    data.write_jsonl(str(tmp_path / "plain.jsonl"), two_turns)
    data.write_jsonl(str(tmp_path / "flagged.jsonl"), flagged)
    tok = Tokenizer.from_pretrained(toy_tokenizer_path())
    loss_tokens = {}
    for name in ("plain", "flagged"):
        args = [*TINY_MODEL, "--data", str(tmp_path / f"{name}.jsonl"), "--seq-len", "2048", "--batch-tokens", "2048",
                "--max-steps", "1", "--eval-data", "--quiet", "--out", str(tmp_path / name)]
        run_sft(args)
        loss_tokens[name] = metrics(tmp_path / name)[0]["loss_tokens"]
    docs = {n: data.tokenize(data.load_conversations([str(tmp_path / f"{n}.jsonl")])[0], tok) for n in loss_tokens}
    assert all(a["ids"] == b["ids"] for a, b in zip(docs["plain"], docs["flagged"]))  # same context, same packing
    assert 0 < loss_tokens["flagged"] < loss_tokens["plain"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(two_turns[0]) + "\n" + json.dumps(dict(flagged[1], messages=flagged[1]["messages"][:-1]
                   + [dict(flagged[1]["messages"][-1], loss="no")])) + "\n")
    r = run_sft(tiny_args(corpus, tmp_path / "o", 1) + ["--data", str(bad)], check=False)
    assert r.returncode == 1 and f"train_sft: {bad}:2: messages[3].loss: expected true or false" in r.stderr


def test_tiny_run_loss_falls_and_logs_metrics(corpus, tmp_path):
    out = tmp_path / "run"
    r = run_sft(tiny_args(corpus, out, 40, "--eval-every", "20"))
    lines = metrics(out)
    for key in ("step", "loss", "lr", "grad_norm", "tokens", "tok_per_s", "packing_efficiency", "mixture"):
        assert key in lines[0], key
    first, last = lines[0]["loss"], sum(m["loss"] for m in lines[-5:]) / 5
    assert last < 0.6 * first, (first, last)
    assert lines[19]["eval_loss"] > lines[39]["eval_loss"]
    assert "realised mixture" in r.stdout
    assert Tokenizer.from_pretrained(str(out)).vocab_size == 4096  # OUT is a HF dir with the tokenizer
    assert Transformer.from_pretrained(str(out)).config.hidden_size == 32


def test_mixture_flag_sets_the_last_curriculum_stage_only(corpus, tmp_path):
    """--mixture is the 256k stage's mixture in the paper (27/26/23/13/10); the earlier stages keep their own. Here the
    toy curriculum (256 -> 512 -> 1024) with --mixture stem=1: stages 1-2 mix code and stem in their built-in ratios,
    stage 3 draws stem only."""
    out = tmp_path / "curriculum"
    run_sft([*TINY_MODEL, "--data", str(corpus / "stem.jsonl"), str(corpus / "code.jsonl"), "--eval-data",
             str(corpus / "eval.jsonl"), "--mixture", "stem=1", "--batch-tokens", "1024", "--max-steps", "6",
             "--eval-every", "0", "--quiet", "--out", str(out)])
    by_stage = {}
    for m in metrics(out):
        if "mixture" in m:
            by_stage.setdefault(m["stage"], []).append(m["mixture"])
    assert sorted(by_stage) == ["1024", "256", "512"]
    # realised shares of documents; the toy stages ask code 50 : stem 20 (256) and 50 : 15 (512) of the tokens
    assert by_stage["256"][-1].get("code", 0) > 0.1 and by_stage["512"][-1].get("code", 0) > 0.1  # measured 0.47, 0.29
    assert set(by_stage["1024"][-1]) == {"stem"}
