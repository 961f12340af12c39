"""Atomic training checkpoints: HF-format weights + tokenizer + everything an exact resume needs.

Layout of one checkpoint, `OUT/checkpoints/step_00000120/`:
    config.json, model.safetensors        the model in the Hugging Face Llama layout (Transformer.save_pretrained),
                                          loadable by `Transformer.from_pretrained` and by transformers
    tokenizer.json, tokenizer_config.json the tokenizer (so the directory also works with nanbeige41.generate)
    optimizer.pt                          the *full* (gathered) optimizer state, keyed by parameter name
    trainer_state.json                    step, data-order state, schedule, anything the trainer passes
    rng_rank{r}.pt                        python / numpy / torch (and CUDA) RNG states of rank r

Atomicity: everything is written into `OUT/checkpoints/.tmp-step_00000120/`, each file fsync'ed, and only then is the
directory renamed to `step_00000120` (a rename within one directory is atomic on POSIX). A crash at any moment leaves
either the previous complete checkpoints or a `.tmp-*` directory that `latest_checkpoint` ignores and the next save of
that step replaces. After a save, only the newest `keep` checkpoints are kept. A step directory damaged after the fact
(a truncated copy, a file deleted by hand) is caught by `checkpoint_problem`, and `latest_checkpoint` falls back past
it to the newest complete one, with a warning naming it.

Bad model directories: `read_pretrained` checks an HF directory from config.json and the safetensors headers alone,
and `check_hf_checkpoint` adds the tokenizer's fit; both raise CheckpointError("PATH: what is wrong"), which every
command-line script prints as its one-line error.

Sharded (FSDP2) models: the weights and the optimizer state are gathered to rank 0 through
`torch.distributed.checkpoint.state_dict` (full_state_dict=True, cpu_offload=True) and loaded back by broadcasting from
rank 0. Our call: a gathered optimizer state makes a checkpoint independent of the world size (resume on a different
number of GPUs works) and keeps one code path for 1 and N processes; the price is rank 0 holding the full fp32
optimizer state in CPU memory at save time (~31 GB for the 3b model, fine on a training node). The ranks write their
RNG files into the same directory, so multi-node runs need a shared filesystem for OUT.

Sharded checkpoints (`sharded=True`, the trainers' --sharded-checkpoints; the way to go at 3.9B): instead of
model.safetensors + optimizer.pt, the checkpoint holds `dcp/`, written through `torch.distributed.checkpoint` (DCP):
every rank writes its own shards of the weights and the AdamW state in parallel (`__{rank}_0.distcp`) and rank 0 the
`.metadata` that maps them to global tensors, so nothing is gathered. DCP reshards on load: a checkpoint written by 2
ranks resumes on 1 or 4 (tests/test_scale_out.py). config.json, the tokenizer, trainer_state.json and the RNG files
are as above, and `save_hf(..., dtype=torch.bfloat16)` exports the release checkpoint (consolidated on rank 0) at the
end. The same temp-directory + rename makes it atomic. (DCP's async_save could overlap the write with training; it is
not used: a save every few hundred steps is a small share of a step budget.)
"""

import json
import os
import random
import shutil
import warnings
import zipfile

import numpy as np
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict, get_optimizer_state_dict,
                                                     get_state_dict, set_optimizer_state_dict, set_state_dict)

from nanbeige41.distributed import full_state_dict, is_sharded, load_full_state_dict
from nanbeige41.model import CheckpointError, Transformer, read_pretrained  # noqa: F401 (CheckpointError: re-exported)
from nanbeige41.tokenizer import Tokenizer

CHECKPOINT_DIR = "checkpoints"


def _barrier():
    if dist.is_initialized():
        dist.barrier()


def _rank():
    return dist.get_rank() if dist.is_initialized() else 0


def _fsync_tree(path):
    """fsync every file under path, then the directories, so a rename publishes data that is on disk."""
    for root, dirs, files in os.walk(path):
        for name in files:
            with open(os.path.join(root, name), "rb") as f:
                os.fsync(f.fileno())
        _fsync_dir(root)


def _fsync_dir(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _hf_model(config, state):
    """A Transformer holding `state` without copying it (meta build + assign), for save_pretrained."""
    with torch.device("meta"):
        module = Transformer(config)
    module.load_state_dict(state, strict=True, assign=True)
    return module


def rng_state():
    state = dict(python=random.getstate(), numpy=np.random.get_state(), torch=torch.get_rng_state())
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state):
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def optimizer_state(model, optimizer):
    """The full optimizer state dict, keyed by parameter FQN, on rank 0 ({} elsewhere when sharded). Collective."""
    return get_optimizer_state_dict(model, optimizer, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def load_optimizer_state(model, optimizer, state):
    opts = StateDictOptions(full_state_dict=True, broadcast_from_rank0=is_sharded(model))
    set_optimizer_state_dict(model, optimizer, optim_state_dict=state, options=opts)


def save_hf(model, tokenizer, path, dtype=None):
    """The model (gathered if sharded) in the HF layout + the tokenizer, into `path`, which may already hold other
    files (the run's metrics). dtype: cast the weights (torch.bfloat16 for a release: half the bytes). Files are
    written to `path/.tmp-hf` and moved in one by one with os.replace, so each file is either the old or the new
    version. Collective when sharded; rank 0 writes."""
    state = full_state_dict(model)
    if dtype is not None:
        state = {k: v.to(dtype) for k, v in state.items()}
    if _rank() == 0:
        tmp = os.path.join(path, ".tmp-hf")
        shutil.rmtree(tmp, ignore_errors=True)
        _hf_model(model.config, state).save_pretrained(tmp)
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp)
        _fsync_tree(tmp)
        for name in sorted(os.listdir(tmp)):
            os.replace(os.path.join(tmp, name), os.path.join(path, name))
        os.rmdir(tmp)
        _fsync_dir(path)
    _barrier()


def save_sharded(path, model, optimizer):
    """Weights and optimizer state through torch.distributed.checkpoint into the directory `path`: each rank writes
    its own shards, nothing is gathered. Collective. Works without a process group too (one writer)."""
    model_state, optim_state = get_state_dict(model, optimizer)
    with warnings.catch_warnings():  # one process: DCP warns that it "assumes" what no_dist already says
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=path, no_dist=not dist.is_initialized())


def load_sharded(path, model, optimizer=None):
    """Load what save_sharded wrote into `model` (and `optimizer`), at any world size: DCP reads, for each rank, the
    pieces of the saved global tensors that its shards cover. Collective."""
    if optimizer is None:
        state = {"model": get_model_state_dict(model)}
    else:
        model_state, optim_state = get_state_dict(model, optimizer)  # initialises the AdamW state to load into
        state = {"model": model_state, "optim": optim_state}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        dcp.load(state, checkpoint_id=path, no_dist=not dist.is_initialized())
    set_state_dict(model, optimizer if optimizer is not None else [], model_state_dict=state["model"],
                   optim_state_dict=state.get("optim", {}))


def save_checkpoint(out_dir, step, model, optimizer, tokenizer=None, trainer_state=None, keep=3, sharded=False):
    """Write OUT/checkpoints/step_{step:08d} atomically (see the module docstring) and prune to the newest `keep`.
    sharded: weights and optimizer through DCP (dcp/), nothing gathered; else gathered HF weights + optimizer.pt.
    Every rank must call it (collective). Returns the checkpoint path."""
    root = os.path.join(out_dir, CHECKPOINT_DIR)
    name = f"step_{step:08d}"
    final, tmp = os.path.join(root, name), os.path.join(root, ".tmp-" + name)
    rank = _rank()
    if not sharded:
        model_state = full_state_dict(model)          # collective under FSDP
        optim_state = optimizer_state(model, optimizer)  # collective under FSDP
    if rank == 0:
        os.makedirs(root, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)  # a leftover of a crash during an earlier save of this step
        os.makedirs(tmp)
        if sharded:
            with open(os.path.join(tmp, "config.json"), "w") as f:
                json.dump(model.config.to_hf_dict(), f, indent=2)
        else:
            _hf_model(model.config, model_state).save_pretrained(tmp)
            torch.save(optim_state, os.path.join(tmp, "optimizer.pt"))
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp)
        with open(os.path.join(tmp, "trainer_state.json"), "w") as f:
            json.dump(dict(trainer_state or {}, step=step), f, indent=2)
    _barrier()  # tmp exists before the other ranks write into it
    if sharded:
        save_sharded(os.path.join(tmp, "dcp"), model, optimizer)  # every rank writes its shards
    torch.save(rng_state(), os.path.join(tmp, f"rng_rank{rank}.pt"))
    _barrier()
    if rank == 0:
        _fsync_tree(tmp)
        if os.path.exists(final):  # re-saving a step (e.g. the final step after a resume): replace it
            shutil.rmtree(final)
        os.rename(tmp, final)
        _fsync_dir(root)
        for old in list_checkpoints(out_dir)[:-keep] if keep > 0 else []:
            # never the one just written: after a resume past a damaged newer checkpoint, that one still sorts last
            if old != final:
                shutil.rmtree(old, ignore_errors=True)
    _barrier()
    return final


# -----------------------------------------------------------------------------
# Checking model directories before anything is built from them

def check_hf_checkpoint(path, tokenizer_dir=None):
    """Check a model directory before a script builds anything from it: read_pretrained (config.json and the
    safetensors headers, cheap at 3B), then load the tokenizer of `tokenizer_dir`, if given, and check that its ids
    fit the embedding. Returns (config, tokenizer or None). Raises CheckpointError "PATH: what is wrong". Every rank
    of a torchrun job can call it, so a bad path fails on all of them before the first collective instead of
    hanging the others."""
    config, _ = read_pretrained(path)
    if tokenizer_dir is None:
        return config, None
    tokenizer_file = os.path.join(tokenizer_dir, "tokenizer.json")
    if not os.path.isfile(tokenizer_file):
        raise CheckpointError(f"{tokenizer_dir}: no tokenizer.json")
    try:
        tokenizer = Tokenizer.from_pretrained(tokenizer_dir)
    except Exception as e:  # noqa: BLE001 — the tokenizers library raises a bare Exception for a corrupt file
        raise CheckpointError(f"{tokenizer_file}: unreadable ({e})") from None
    # Ids past the embedding would index out of range. The other way round is normal: the release pads its
    # embedding to 166144 rows, past its tokenizer's last id 166106.
    if len(tokenizer) > config.vocab_size:
        raise CheckpointError(f"{path}: config.json vocab_size {config.vocab_size} is smaller than the "
                              f"{len(tokenizer)} tokens of {tokenizer_file} (ids >= {config.vocab_size} have no "
                              "embedding row)")
    return config, tokenizer


# -----------------------------------------------------------------------------
# Finding the checkpoint to resume from

def _step_dirs(out_dir):
    """Every OUT/checkpoints/step_* directory, complete or not, oldest first."""
    root = os.path.join(out_dir, CHECKPOINT_DIR)
    if not os.path.isdir(root):
        return []
    names = [n for n in os.listdir(root) if n.startswith("step_") and n[5:].isdigit()]
    return [os.path.join(root, n) for n in sorted(names, key=lambda n: int(n[5:]))]


def list_checkpoints(out_dir):
    """Checkpoints under OUT/checkpoints that have their trainer_state.json, oldest first (temporary `.tmp-*`
    directories are not listed). What `keep` prunes; `latest_checkpoint` also checks the other files."""
    return [p for p in _step_dirs(out_dir) if os.path.isfile(os.path.join(p, "trainer_state.json"))]


def checkpoint_problem(path):
    """What makes a checkpoint written by save_checkpoint unusable for a resume ("PATH...: what is wrong"), or None
    when it is complete. Cheap: trainer_state.json, the safetensors headers and the zip directories of the .pt files;
    no tensor is read."""
    try:
        with open(os.path.join(path, "trainer_state.json")) as f:
            state = json.load(f)
    except FileNotFoundError:
        return f"{path}: no trainer_state.json"
    except (OSError, ValueError) as e:
        return f"{path}/trainer_state.json: unreadable ({e})"
    if not isinstance(state, dict) or not isinstance(state.get("step"), int):
        return f"{path}/trainer_state.json: no integer 'step'"
    if os.path.isdir(os.path.join(path, "dcp")):  # a sharded checkpoint: DCP's rank 0 writes .metadata last
        if not os.path.isfile(os.path.join(path, "dcp", ".metadata")):
            return f"{path}/dcp: no .metadata (an incomplete distributed checkpoint)"
        files = ["rng_rank0.pt"]
    else:
        try:
            read_pretrained(path)
        except CheckpointError as e:
            return str(e)
        files = ["optimizer.pt", "rng_rank0.pt"]
    for name in files:
        file = os.path.join(path, name)
        if not os.path.isfile(file):
            return f"{path}: no {name}"
        # torch.save writes a zip archive whose central directory comes last, so a truncated file has none
        if not zipfile.is_zipfile(file):
            return f"{file}: truncated or not a torch.save file"
    return None


def latest_checkpoint(out_dir, warn=None):
    """Path of the newest complete checkpoint of a run directory, or None. Newer step directories that are not
    complete (see checkpoint_problem) are skipped; `warn`, if given, is called with a line naming each one, and each
    `.tmp-*` directory a crash mid-save left behind."""
    root = os.path.join(out_dir, CHECKPOINT_DIR)
    if warn is not None and os.path.isdir(root):
        for name in sorted(os.listdir(root)):
            if name.startswith(".tmp-"):
                warn(f"warning: ignoring {os.path.join(root, name)}: a save that did not finish")
    for path in reversed(_step_dirs(out_dir)):
        problem = checkpoint_problem(path)
        if problem is None:
            return path
        if warn is not None:
            warn(f"warning: skipping the half-written checkpoint {problem}")
    return None


def load_checkpoint(path, model, optimizer=None):
    """Restore weights, optimizer and this rank's RNG state from a checkpoint written by save_checkpoint; return the
    trainer_state dict. `model` may be sharded (then every rank must call this; rank 0 reads and broadcasts, or with
    a DCP checkpoint every rank reads its own shards).
    RNG states are restored only when the checkpoint has a file for this rank (same world size)."""
    rank = _rank()
    if os.path.isdir(os.path.join(path, "dcp")):  # sharded (DCP) checkpoint, written at any world size
        load_sharded(os.path.join(path, "dcp"), model, optimizer)
    else:
        reads = rank == 0 or not is_sharded(model)  # rank 0 reads, broadcasting to the others' shards
        load_full_state_dict(model, Transformer.from_pretrained(path).state_dict() if reads else {})
        if optimizer is not None:
            optim = torch.load(os.path.join(path, "optimizer.pt"), weights_only=True) if reads else {}
            load_optimizer_state(model, optimizer, optim)
    rng_file = os.path.join(path, f"rng_rank{rank}.pt")
    if os.path.isfile(rng_file):
        set_rng_state(torch.load(rng_file, weights_only=False))  # our own file: numpy's state is not a tensor
    with open(os.path.join(path, "trainer_state.json")) as f:
        return json.load(f)


def truncate_metrics(path, step):
    """After a resume from `step`: drop the metrics.jsonl lines of steps the killed run logged after its last
    checkpoint, so every step appears once (the resumed run logs them again)."""
    if not os.path.isfile(path):
        return
    with open(path, encoding="utf-8") as f:
        kept = [line for line in f if line.strip() and json.loads(line)["step"] <= step]
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(kept)
