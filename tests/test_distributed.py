"""2 CPU processes under torchrun (gloo, FSDP2 per block) train exactly like 1 process on the same global batch:
losses, gradient norms and eval losses within 3e-5 relative. The gradient norm is the sharp check: AdamW barely
notices a gradient scaled by the world size, the norm does. A checkpoint written by 2 ranks resumes on 1."""

import json
import os
import shutil
import subprocess
import sys

import pytest


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOY_SFT = os.path.join(REPO, "data", "toy", "sft")
STEPS = 4


def args(corpus, out, *extra):
    return ["--hidden-size", "32", "--intermediate-size", "64", "--num-layers", "2", "--num-heads", "2",
            "--num-kv-heads", "1", "--data", str(corpus / "stem.jsonl"), str(corpus / "code.jsonl"),
            "--eval-data", str(corpus / "eval.jsonl"), "--mixture", "stem=1,code=1", "--seq-len", "128",
            "--batch-tokens", "512", "--max-steps", str(STEPS), "--lr", "1e-2", "--warmup-steps", "1",
            "--eval-every", "2", "--save-every", "2", "--device", "cpu", "--quiet", "--out", str(out), *extra]


def run(cmd):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=env, timeout=300)
    assert r.returncode == 0, f"{cmd[:3]} failed:\n{r.stdout[-3000:]}\n{r.stderr[-4000:]}"
    return r


def metrics(out):
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


def close(a, b, rel=3e-5):
    # fp32 sums reduced in another order (2 ranks, 2 micro-steps): measured up to 1.1e-5 relative on the grad norm
    # with the issue-13 toy corpus and tokenizer (below 1e-5 with the earlier one)
    return abs(a - b) <= rel * max(abs(a), abs(b))


@pytest.mark.slow
def test_two_process_fsdp_equals_one_process(corpus, tmp_path):
    # 1 process: the 4 rows of a step in one micro-batch. 2 processes: 2 rows each, as 2 micro-steps of 1 row
    # (accumulation and sharding at once).
    run([sys.executable, os.path.join(REPO, "train_sft.py"), *args(corpus, tmp_path / "one")])
    r = run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
             os.path.join(REPO, "train_sft.py"), *args(corpus, tmp_path / "two", "--micro-batch-tokens", "128")])
    assert "world 2 on cpu (FSDP2)" in r.stdout
    one, two = metrics(tmp_path / "one"), metrics(tmp_path / "two")
    assert len(one) == len(two) == STEPS
    for a, b in zip(one, two):
        assert close(a["loss"], b["loss"]), (a["step"], a["loss"], b["loss"])
        assert close(a["grad_norm"], b["grad_norm"]), (a["step"], a["grad_norm"], b["grad_norm"])
        assert a["loss_tokens"] == b["loss_tokens"]
        if "eval_loss" in a:
            assert close(a["eval_loss"], b["eval_loss"])
    assert sorted(os.listdir(tmp_path / "two" / "checkpoints" / "step_00000002")) == [
        "config.json", "model.safetensors", "optimizer.pt", "rng_rank0.pt", "rng_rank1.pt", "special_tokens_map.json",
        "tokenizer.json", "tokenizer_config.json", "trainer_state.json"]

    # the gathered checkpoint of the 2-rank run at step 2 resumes on 1 process and continues like the 1-process run
    resumed = tmp_path / "resumed"
    shutil.copytree(tmp_path / "two", resumed)
    shutil.rmtree(resumed / "checkpoints" / "step_00000004")
    run([sys.executable, os.path.join(REPO, "train_sft.py"), *args(corpus, resumed, "--resume")])
    for a, b in zip(one[2:], metrics(resumed)[2:]):
        assert close(a["loss"], b["loss"]) and close(a["grad_norm"], b["grad_norm"]), (a, b)
