"""Bad input to the command-line scripts is one line naming what is wrong, never a traceback:

- a bad --init / --ckpt / --reward-model directory (missing, not the Llama layout, truncated weights, an embedding
  smaller than the tokenizer, not a reward model) in train_sft, train_grpo, reward_models, search_agent and
  nanbeige41.generate: exit status 1, one stderr line naming the path and the problem;
- counts that must be positive, rates that must be finite, and the training temperature are refused by argparse
  (nanbeige41/cli.py), before any model or data is loaded.

Three scripts run as subprocesses, as a user runs them (the stderr a user sees); the scripts with a main(argv) also
run in-process, where the SystemExit's message is what Python prints as that one line. The cases themselves (every
way a directory can be bad) are in tests/test_checkpoint.py."""

import argparse
import json
import os
import subprocess
import sys

import pytest
import torch

import reward_models
import search_agent
import train_grpo
from nanbeige41 import cli
from nanbeige41.model import ModelConfig, Transformer
from nanbeige41.tokenizer import Tokenizer, toy_tokenizer_path

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = dict(os.environ, OMP_NUM_THREADS="1")
TINY = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
            head_dim=None)


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli_dirs")
    tok = Tokenizer.from_pretrained(toy_tokenizer_path())

    def make(name, vocab_size=4096):
        torch.manual_seed(0)
        Transformer(ModelConfig.preset("toy", vocab_size=vocab_size, **TINY)).save_pretrained(root / name)
        tok.save_pretrained(root / name)
        return root / name

    make("good")
    make("small_vocab", vocab_size=1000)
    config = json.loads((make("gpt2") / "config.json").read_text())
    (root / "gpt2" / "config.json").write_text(json.dumps({**config, "model_type": "gpt2",
                                                           "architectures": ["GPT2LMHeadModel"]}))
    weights = make("cut_weights") / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:4096])
    return root


def run(*argv):
    return subprocess.run([sys.executable, *argv], capture_output=True, text=True, cwd=REPO, env=ENV, timeout=120)


def assert_one_line(stderr, *needles):
    assert "Traceback" not in stderr, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


# -----------------------------------------------------------------------------
# bad checkpoint directories

def test_generate_missing_ckpt(dirs):
    path = dirs / "missing"
    r = run("-m", "nanbeige41.generate", "--ckpt", str(path), "--prompt", "hi")
    assert r.returncode == 1
    assert_one_line(r.stderr, f"generate: --ckpt {path}: no such directory")


def test_train_sft_init_with_an_embedding_smaller_than_the_tokenizer(dirs, tmp_path):
    path = dirs / "small_vocab"
    r = run("train_sft.py", "--init", str(path), "--out", str(tmp_path / "out"))
    assert r.returncode == 1
    assert_one_line(r.stderr, f"train_sft: --init {path}: config.json vocab_size 1000 is smaller than the 4096 tokens")


def test_train_grpo_init_not_llama(dirs, tmp_path):
    path = dirs / "gpt2"
    r = run("train_grpo.py", "--stage", "code1", "--init", str(path), "--out", str(tmp_path / "out"))
    assert r.returncode == 1
    assert_one_line(r.stderr, f"train_grpo: --init {path}/config.json: model_type='gpt2'", "only Llama-layout")
    assert not (tmp_path / "out").exists()  # nothing was started


@pytest.mark.parametrize("argv, message", [
    (["score", "--kind", "point", "--ckpt", "{cut_weights}"],
     "reward_models: --ckpt {cut_weights}/model.safetensors: unreadable safetensors file"),
    (["score", "--kind", "point", "--ckpt", "{good}"],
     "reward_models: --ckpt {good}: no reward_head.json (not a reward-model checkpoint"),
    (["train", "--kind", "point", "--init", "{missing}", "--out", "{missing}-rm"],
     "reward_models: --init {missing}: no such directory"),
])
def test_reward_models_bad_checkpoints(dirs, argv, message):
    paths = {name: str(dirs / name) for name in ("cut_weights", "good", "missing")}
    with pytest.raises(SystemExit) as e:
        reward_models.main([a.format(**paths) for a in argv])
    assert isinstance(e.value.code, str) and "\n" not in e.value.code
    assert e.value.code.startswith(message.format(**paths)), e.value.code


def test_train_grpo_reward_model_that_is_not_one(dirs, tmp_path):
    good = str(dirs / "good")
    with pytest.raises(SystemExit) as e:
        train_grpo.main(["--stage", "point", "--init", good, "--reward-model", good, "--out", str(tmp_path / "o")])
    assert e.value.code.startswith(f"train_grpo: --reward-model {good}: no reward_head.json"), e.value.code


def test_search_agent_ckpt_with_an_embedding_smaller_than_the_tokenizer(dirs):
    path = str(dirs / "small_vocab")
    with pytest.raises(SystemExit) as e:
        search_agent.main(["--question", "Who?", "--ckpt", path])
    assert e.value.code.startswith(f"search_agent: --ckpt {path}: config.json vocab_size 1000"), e.value.code


# -----------------------------------------------------------------------------
# counts, rates and temperature refused by argparse

def test_train_grpo_group_size_zero_is_refused_by_argparse():
    r = run("train_grpo.py", "--stage", "code1", "--group-size", "0")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines()[-1].endswith("error: argument --group-size: expected an integer >= 1, got '0'")


def test_train_sft_save_every_zero_is_refused_by_argparse(tmp_path):
    # it used to load the data and the model, train one step and die on `step % 0`
    r = run("train_sft.py", "--out", str(tmp_path / "out"), "--save-every", "0")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines()[-1].endswith("error: argument --save-every: expected an integer >= 1, got '0'")


@pytest.mark.parametrize("flag, value, expected", [
    ("--group-size", "1", "expected an integer >= 2, got 1"),  # a group of one has no advantage
    ("--group-size", "-8", "expected an integer >= 1"),
    ("--temperature", "0", "expected a finite number > 0"),
    ("--temperature", "-0.7", "expected a finite number > 0"),
    ("--temperature", "nan", "expected a finite number > 0"),
    ("--lr", "inf", "expected a finite number > 0"),
    ("--max-steps", "-1", "expected an integer >= 0"),
    ("--prompts-per-step", "0", "expected an integer >= 1"),
    ("--max-new-tokens", "0", "expected an integer >= 1"),
    ("--rollout-batch", "0", "expected an integer >= 1"),
    ("--minibatches", "0", "expected an integer >= 1"),
    ("--epochs", "2.5", "expected an integer >= 1"),
    ("--save-every", "0", "expected an integer >= 1"),
    ("--filter-n", "-8", "expected an integer >= 1"),
    ("--kl-coef", "-0.1", "expected a finite number >= 0"),
    ("--w-time", "nan", "expected a finite number"),
    ("--test-time-s", "0", "expected a finite number > 0"),
])
def test_train_grpo_refuses_bad_counts_and_rates(flag, value, expected, capsys):
    with pytest.raises(SystemExit) as e:
        train_grpo.parse_args(["--stage", "code1", flag, value])
    assert e.value.code == 2
    assert f"error: argument {flag}: {expected}" in capsys.readouterr().err


def test_train_grpo_accepts_the_edges():
    args = train_grpo.parse_args(["--stage", "code1", "--group-size", "2", "--temperature", "0.05", "--max-steps", "0",
                                  "--top-k", "0", "--eval-every", "0", "--w-time", "-0.5"])
    assert (args.group_size, args.temperature, args.max_steps, args.w_time) == (2, 0.05, 0, -0.5)


@pytest.mark.parametrize("main, argv, flag", [
    (reward_models.main, ["train", "--kind", "point", "--batch-size", "0"], "--batch-size"),
    (reward_models.main, ["score", "--kind", "pair", "--batch-size", "-1"], "--batch-size"),
    (search_agent.main, ["--question", "q", "--max-turns", "0"], "--max-turns"),
    (search_agent.main, ["--question", "q", "--temperature", "-1"], "--temperature"),
])
def test_other_clis_refuse_bad_counts(main, argv, flag, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2 and f"argument {flag}: expected" in capsys.readouterr().err


def test_argparse_types():
    good = [(cli.positive_int, "3", 3), (cli.non_negative_int, "0", 0), (cli.positive_float, "1e-5", 1e-5),
            (cli.non_negative_float, "0", 0.0), (cli.finite_float, "-2.5", -2.5)]
    for parse, text, value in good:
        assert parse(text) == value
    bad = [(cli.positive_int, "0"), (cli.positive_int, "1.5"), (cli.positive_int, "x"), (cli.non_negative_int, "-1"),
           (cli.positive_float, "0"), (cli.positive_float, "nan"), (cli.positive_float, "inf"),
           (cli.non_negative_float, "-1e-9"), (cli.finite_float, "-inf"), (cli.finite_float, "nan")]
    for parse, text in bad:
        with pytest.raises(argparse.ArgumentTypeError, match="expected"):
            parse(text)
