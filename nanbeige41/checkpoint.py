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
that step replaces. After a save, only the newest `keep` checkpoints are kept.

Sharded (FSDP2) models: the weights and the optimizer state are gathered to rank 0 through
`torch.distributed.checkpoint.state_dict` (full_state_dict=True, cpu_offload=True) and loaded back by broadcasting from
rank 0. Our call: a gathered optimizer state makes a checkpoint independent of the world size (resume on a different
number of GPUs works) and keeps one code path for 1 and N processes; the price is rank 0 holding the full fp32
optimizer state in CPU memory at save time (~31 GB for the 3b model, fine on a training node). The ranks write their
RNG files into the same directory, so multi-node runs need a shared filesystem for OUT.
"""

import json
import os
import random
import shutil

import numpy as np
import torch
import torch.distributed as dist

from nanbeige41.distributed import full_state_dict, is_sharded, load_full_state_dict

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
    from nanbeige41.model import Transformer
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
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict
    return get_optimizer_state_dict(model, optimizer, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def load_optimizer_state(model, optimizer, state):
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict
    opts = StateDictOptions(full_state_dict=True, broadcast_from_rank0=is_sharded(model))
    set_optimizer_state_dict(model, optimizer, optim_state_dict=state, options=opts)


def save_hf(model, tokenizer, path):
    """The model (gathered if sharded) in the HF layout + the tokenizer, into `path`, which may already hold other
    files (the run's metrics). Files are written to `path/.tmp-hf` and moved in one by one with os.replace, so each
    file is either the old or the new version. Collective when sharded; rank 0 writes."""
    state = full_state_dict(model)
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


def save_checkpoint(out_dir, step, model, optimizer, tokenizer=None, trainer_state=None, keep=3):
    """Write OUT/checkpoints/step_{step:08d} atomically (see the module docstring) and prune to the newest `keep`.
    Every rank must call it (gathering is collective). Returns the checkpoint path."""
    root = os.path.join(out_dir, CHECKPOINT_DIR)
    name = f"step_{step:08d}"
    final, tmp = os.path.join(root, name), os.path.join(root, ".tmp-" + name)
    model_state = full_state_dict(model)          # collective under FSDP
    optim_state = optimizer_state(model, optimizer)  # collective under FSDP
    rank = _rank()
    if rank == 0:
        os.makedirs(root, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)  # a leftover of a crash during an earlier save of this step
        _hf_model(model.config, model_state).save_pretrained(tmp)
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp)
        torch.save(optim_state, os.path.join(tmp, "optimizer.pt"))
        with open(os.path.join(tmp, "trainer_state.json"), "w") as f:
            json.dump(dict(trainer_state or {}, step=step), f, indent=2)
    _barrier()  # tmp exists before the other ranks write into it
    torch.save(rng_state(), os.path.join(tmp, f"rng_rank{rank}.pt"))
    _barrier()
    if rank == 0:
        _fsync_tree(tmp)
        if os.path.exists(final):  # re-saving a step (e.g. the final step after a resume): replace it
            shutil.rmtree(final)
        os.rename(tmp, final)
        _fsync_dir(root)
        for old in list_checkpoints(out_dir)[:-keep] if keep > 0 else []:
            shutil.rmtree(old, ignore_errors=True)
    _barrier()
    return final


def list_checkpoints(out_dir):
    """Complete checkpoints under OUT/checkpoints, oldest first (temporary `.tmp-*` directories are not listed)."""
    root = os.path.join(out_dir, CHECKPOINT_DIR)
    if not os.path.isdir(root):
        return []
    names = [n for n in os.listdir(root) if n.startswith("step_")
             and os.path.isfile(os.path.join(root, n, "trainer_state.json"))]
    return [os.path.join(root, n) for n in sorted(names, key=lambda n: int(n.split("_")[1]))]


def latest_checkpoint(out_dir):
    """Path of the newest complete checkpoint of a run directory, or None."""
    ckpts = list_checkpoints(out_dir)
    return ckpts[-1] if ckpts else None


def load_checkpoint(path, model, optimizer=None):
    """Restore weights, optimizer and this rank's RNG state from a checkpoint written by save_checkpoint; return the
    trainer_state dict. `model` may be sharded (then every rank must call this; rank 0 reads and broadcasts).
    RNG states are restored only when the checkpoint has a file for this rank (same world size)."""
    from nanbeige41.model import Transformer
    rank = _rank()
    state = {}
    if rank == 0 or not is_sharded(model):
        state = Transformer.from_pretrained(path).state_dict()
    load_full_state_dict(model, state)
    if optimizer is not None:
        optim = torch.load(os.path.join(path, "optimizer.pt"), weights_only=True) if (rank == 0 or not is_sharded(model)) else {}
        load_optimizer_state(model, optimizer, optim)
    rng_file = os.path.join(path, f"rng_rank{rank}.pt")
    if os.path.isfile(rng_file):
        set_rng_state(torch.load(rng_file, weights_only=False))  # our own file: numpy's state is not a tensor
    with open(os.path.join(path, "trainer_state.json")) as f:
        return json.load(f)
