"""nanbeige41/checkpoint.py: round trip of weights / optimizer / RNG, HF-loadable directories with the tokenizer,
atomicity (a crash mid-save leaves the previous checkpoints and no half-written one), keep-last-K; a damaged newest
checkpoint skipped with a warning; bad model directories as one-line CheckpointErrors naming the path."""

import json
import os
import random

import numpy as np
import pytest
import torch

from nanbeige41 import checkpoint as ckpt
from nanbeige41.model import ModelConfig, Transformer
from nanbeige41.tokenizer import Tokenizer

TINY = dict(vocab_size=4096, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
            num_key_value_heads=1, head_dim=None)


def _model_and_optimizer(seed=0):
    torch.manual_seed(seed)
    model = Transformer(ModelConfig.preset("toy", **TINY))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    return model, optimizer


def _train_step(model, optimizer):
    ids = torch.randint(0, 4096, (2, 16))
    model(ids).float().logsumexp(-1).mean().backward()
    optimizer.step()
    optimizer.zero_grad()


pytestmark = pytest.mark.usefixtures("one_thread")


def test_round_trip_weights_optimizer_rng(tmp_path, tok):
    model, optimizer = _model_and_optimizer()
    _train_step(model, optimizer)
    random.seed(5), np.random.seed(5), torch.manual_seed(5)
    path = ckpt.save_checkpoint(str(tmp_path), 7, model, optimizer, tok, trainer_state=dict(rows_served=42))
    expected_rng = (random.random(), np.random.rand(), torch.rand(1).item())

    other, other_opt = _model_and_optimizer(seed=1)
    state = ckpt.load_checkpoint(path, other, other_opt)
    assert state["step"] == 7 and state["rows_served"] == 42
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == expected_rng
    for (n, a), (_, b) in zip(model.state_dict().items(), other.state_dict().items()):
        assert torch.equal(a, b), n
    # one more identical step on both gives identical weights: the optimizer state came back exactly
    torch.manual_seed(9)
    _train_step(model, optimizer)
    torch.manual_seed(9)
    _train_step(other, other_opt)
    for (n, a), (_, b) in zip(model.state_dict().items(), other.state_dict().items()):
        assert torch.equal(a, b), n


def test_checkpoint_is_a_hf_directory_with_tokenizer(tmp_path, tok):
    model, optimizer = _model_and_optimizer()
    path = ckpt.save_checkpoint(str(tmp_path), 1, model, optimizer, tok)
    loaded = Transformer.from_pretrained(path)
    ids = torch.randint(0, 4096, (1, 12))
    assert torch.allclose(loaded(ids), model(ids))
    assert Tokenizer.from_pretrained(path).encode("hello world") == tok.encode("hello world")
    # save_hf into a run directory keeps the run's other files
    (tmp_path / "metrics.jsonl").write_text("{}\n")
    ckpt.save_hf(model, tok, str(tmp_path))
    assert (tmp_path / "metrics.jsonl").read_text() == "{}\n"
    assert Transformer.from_pretrained(str(tmp_path)).config.hidden_size == 32
    assert not (tmp_path / ".tmp-hf").exists()


def test_crash_during_save_leaves_previous_checkpoint(tmp_path, tok, monkeypatch):
    model, optimizer = _model_and_optimizer()
    good = ckpt.save_checkpoint(str(tmp_path), 10, model, optimizer, tok)
    real_save = torch.save

    def crash_on_optimizer(obj, f, *a, **k):
        if str(f).endswith("optimizer.pt"):
            real_save({"partial": True}, f)
            raise OSError("disk full (simulated crash mid-save)")
        return real_save(obj, f, *a, **k)

    monkeypatch.setattr(torch, "save", crash_on_optimizer)
    with pytest.raises(OSError, match="simulated"):
        ckpt.save_checkpoint(str(tmp_path), 20, model, optimizer, tok)
    monkeypatch.setattr(torch, "save", real_save)
    assert os.path.isdir(tmp_path / "checkpoints" / ".tmp-step_00000020")  # the half-written one...
    assert ckpt.latest_checkpoint(str(tmp_path)) == good                  # ...is never picked up
    assert ckpt.list_checkpoints(str(tmp_path)) == [good]
    # the next save of that step replaces the leftover
    path = ckpt.save_checkpoint(str(tmp_path), 20, model, optimizer, tok)
    assert ckpt.latest_checkpoint(str(tmp_path)) == path
    assert not os.path.exists(tmp_path / "checkpoints" / ".tmp-step_00000020")


def test_keep_last_k(tmp_path):
    model, optimizer = _model_and_optimizer()
    for step in (5, 10, 15, 20):
        ckpt.save_checkpoint(str(tmp_path), step, model, optimizer, keep=2)
    names = [os.path.basename(p) for p in ckpt.list_checkpoints(str(tmp_path))]
    assert names == ["step_00000015", "step_00000020"]
    assert ckpt.latest_checkpoint(str(tmp_path / "nothing-here")) is None


# -----------------------------------------------------------------------------
# damaged checkpoints: resume falls back past them; bad model directories are one-line errors naming the path

def _cut(path, n=4096):
    path.write_bytes(path.read_bytes()[:n])


DAMAGE = {  # what can be left of a step directory after a copy that did not finish, or a file deleted by hand
    "weights cut short": (lambda d: _cut(d / "model.safetensors"), "model.safetensors: unreadable safetensors file"),
    "no weights": (lambda d: os.remove(d / "model.safetensors"), "no model.safetensors"),
    "optimizer cut short": (lambda d: _cut(d / "optimizer.pt"), "optimizer.pt: truncated"),
    "no optimizer": (lambda d: os.remove(d / "optimizer.pt"), "no optimizer.pt"),
    "no rng state": (lambda d: os.remove(d / "rng_rank0.pt"), "no rng_rank0.pt"),
    "trainer state cut short": (lambda d: _cut(d / "trainer_state.json", 5), "trainer_state.json: unreadable"),
    "config cut short": (lambda d: _cut(d / "config.json", 20), "config.json: malformed JSON"),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_latest_checkpoint_skips_a_damaged_newest_one_with_a_warning(tmp_path, tok, damage):
    model, optimizer = _model_and_optimizer()
    good = ckpt.save_checkpoint(str(tmp_path), 10, model, optimizer, tok)
    newest = ckpt.save_checkpoint(str(tmp_path), 20, model, optimizer, tok)
    assert ckpt.latest_checkpoint(str(tmp_path)) == newest and ckpt.checkpoint_problem(newest) is None
    harm, message = DAMAGE[damage]
    harm(tmp_path / "checkpoints" / "step_00000020")
    warnings = []
    assert ckpt.latest_checkpoint(str(tmp_path), warn=warnings.append) == good
    assert len(warnings) == 1 and warnings[0].startswith(f"warning: skipping the half-written checkpoint {newest}")
    assert message in warnings[0], warnings
    state = ckpt.load_checkpoint(good, *_model_and_optimizer(seed=1))
    assert state["step"] == 10
    # nothing complete left: None, each one named
    harm(tmp_path / "checkpoints" / "step_00000010")
    warnings.clear()
    assert ckpt.latest_checkpoint(str(tmp_path), warn=warnings.append) is None and len(warnings) == 2


def test_keep_never_prunes_the_checkpoint_just_written(tmp_path):
    """keep=1 after a resume past a damaged step 20 (from step 10): saving step 15 must not prune step 15 itself,
    which sorts before the damaged step 20, or no complete checkpoint would be left."""
    model, optimizer = _model_and_optimizer()
    for step in (10, 20):
        ckpt.save_checkpoint(str(tmp_path), step, model, optimizer, keep=1)
    _cut(tmp_path / "checkpoints" / "step_00000020" / "model.safetensors")
    path = ckpt.save_checkpoint(str(tmp_path), 15, model, optimizer, keep=1)
    assert ckpt.latest_checkpoint(str(tmp_path)) == path


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory, tok):
    """HF directories: a good one, and one per way of being bad."""
    root = tmp_path_factory.mktemp("model_dirs")

    def make(name, **over):
        torch.manual_seed(0)
        Transformer(ModelConfig.preset("toy", **{**TINY, **over})).save_pretrained(root / name)
        tok.save_pretrained(root / name)
        return root / name

    make("good")
    make("padded_vocab", vocab_size=4160)  # more embedding rows than tokens, as the release pads to 166144
    make("small_vocab", vocab_size=1000)
    config = json.loads((make("gpt2") / "config.json").read_text())
    (root / "gpt2" / "config.json").write_text(json.dumps({**config, "model_type": "gpt2",
                                                           "architectures": ["GPT2LMHeadModel"]}))
    _cut(make("cut_weights") / "model.safetensors")
    os.remove(make("no_weights") / "model.safetensors")
    os.remove(make("no_tokenizer") / "tokenizer.json")
    (root / "a_file").write_text("not a directory")
    return root


@pytest.mark.parametrize("name, problem", [
    ("missing", "no such directory"),
    ("a_file", "not a directory"),
    ("gpt2", "config.json: model_type='gpt2' architectures=['GPT2LMHeadModel']: only Llama-layout"),
    ("cut_weights", "model.safetensors: unreadable safetensors file"),
    ("no_weights", "no model.safetensors or model.safetensors.index.json"),
    ("no_tokenizer", "no tokenizer.json"),
    ("small_vocab", "config.json vocab_size 1000 is smaller than the 4096 tokens of"),
])
def test_check_hf_checkpoint_names_the_path_and_the_problem(model_dirs, name, problem):
    path = str(model_dirs / name)
    with pytest.raises(ckpt.CheckpointError) as e:
        ckpt.check_hf_checkpoint(path, tokenizer_dir=path)
    message = str(e.value)
    assert message.startswith(path) and problem in message and "\n" not in message, message


def test_check_hf_checkpoint_accepts_good_and_padded_vocab(model_dirs):
    for name, vocab in (("good", 4096), ("padded_vocab", 4160)):
        config, tok = ckpt.check_hf_checkpoint(str(model_dirs / name), tokenizer_dir=str(model_dirs / name))
        assert config.vocab_size == vocab and len(tok) == 4096
    with pytest.raises(ckpt.CheckpointError, match="cut_weights/model.safetensors: unreadable"):
        Transformer.from_pretrained(model_dirs / "cut_weights")  # the loader raises the same error
