"""Process groups, FSDP2 sharding and the few collectives the trainers need. The model knows nothing of these.

    python train_sft.py ...                                   # one plain process, no process group
    torchrun --nproc_per_node 8 train_sft.py ...              # one process per GPU (nccl), or per CPU slot (gloo)

- `setup()` reads torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK); gloo on CPU, nccl on GPU.
- `parallelize(model, ...)` applies, from outside the model as torchtitan does, per-block activation checkpointing
  and FSDP2 `fully_shard` on every transformer block, then on the root (embeddings, final norm, head), with the
  mixed precision of `mixed_precision_policy(device)` (bf16 compute, fp32 reduce and master weights on GPU).
  One flat mesh over all ranks: with context parallelism (nanbeige41/context_parallel.py) the data x context ranks
  are flattened into it (a 2-D mesh given to fully_shard would mean HSDP, replicating across one dimension).
- `all_reduce_sum` / `all_reduce_max`: global token counts and "did any rank see a NaN" flags.
- `load_full_state_dict(model, state)` / `full_state_dict(model)`: move a plain (unsharded) state dict into a sharded
  model from rank 0, and gather one back on rank 0 (checkpoint.py uses these for HF weights).

Gradient reduction: the trainers normalise their loss by the *global* token count already, so FSDP's default
averaging over ranks would divide a second time; `parallelize` sets the divide factor to 1 (gradients are summed).
"""

import gc
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict, set_model_state_dict
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
from torch.utils.checkpoint import checkpoint


@dataclass
class Dist:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")

    @property
    def is_main(self):
        return self.rank == 0

    @property
    def enabled(self):
        return self.world_size > 1 or dist.is_initialized()


def setup(device=None):
    """Initialise from torchrun's environment, or a plain single process when there is none.
    device: "cpu" / "cuda" to force one; default cuda when available. Returns a Dist."""
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        dev = torch.device("cuda", 0) if device == "cuda" else torch.device("cpu")
        if dev.type == "cuda":
            torch.cuda.set_device(dev)
        return Dist(device=dev)
    rank, world, local = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ.get("LOCAL_RANK", 0))
    if device == "cuda":
        dev = torch.device("cuda", local)
        torch.cuda.set_device(dev)
        # NCCL for CUDA tensors, gloo for the CPU ones (the metric all-reduces of Python numbers,
        # broadcast_object): with NCCL alone those fail ("No backend type associated with ... cpu")
        dist.init_process_group("cpu:gloo,cuda:nccl", rank=rank, world_size=world, device_id=dev)
    else:
        dev = torch.device("cpu")
        dist.init_process_group("gloo", rank=rank, world_size=world)
    return Dist(rank=rank, world_size=world, local_rank=local, device=dev)


def cleanup():
    """Barrier, then destroy the process group. Collect garbage first: an FSDP2 model that is only
    kept alive by reference cycles still holds the group, and if it were freed during interpreter
    shutdown instead, gloo's threads could abort the process (seen once in CI)."""
    if dist.is_initialized():
        gc.collect()
        dist.barrier()
        dist.destroy_process_group()


def print0(*args, **kwargs):
    """print on rank 0 only (every rank runs the same script)."""
    if not dist.is_initialized() or dist.get_rank() == 0:
        print(*args, **kwargs, flush=True)


def all_reduce_sum(value, device=None):
    """Sum of a Python number (or a tensor) over ranks; returned as the same kind. Identity without a group."""
    if not dist.is_initialized():
        return value
    t = value.detach().clone() if isinstance(value, torch.Tensor) else torch.tensor(float(value), dtype=torch.float64)
    if device is not None:
        t = t.to(device)
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t if isinstance(value, torch.Tensor) else type(value)(t.item())


def all_reduce_max(value, device=None):
    """Max of a Python number over ranks (e.g. a 0/1 'bad loss' flag): every rank takes the same decision."""
    if not dist.is_initialized():
        return value
    t = torch.tensor(float(value), dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return type(value)(t.item())


def broadcast_object(obj):
    """rank 0's Python object on every rank."""
    if not dist.is_initialized():
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def checkpoint_blocks(model):
    """Activation checkpointing, applied from outside the model: each transformer block's forward is wrapped so that
    its activations are recomputed in the backward pass instead of kept (torch.utils.checkpoint, non-reentrant).
    The module tree and the state-dict keys stay as they are; without gradients (generation) blocks run plainly."""
    for block in model.model.layers:
        if getattr(block, "checkpointed", False):
            continue

        def forward(*args, _forward=block.forward, **kwargs):
            if torch.is_grad_enabled():
                return checkpoint(_forward, *args, use_reentrant=False, **kwargs)
            return _forward(*args, **kwargs)
        block.forward, block.checkpointed = forward, True
    return model


def mixed_precision_policy(device):
    """FSDP2's mixed precision for `device`: on GPU, parameters all-gathered and computed in bf16, gradients
    reduce-scattered in fp32; the sharded parameters that AdamW updates stay fp32 (the master weights, so small
    updates are not rounded away). On CPU None: fp32 throughout, as the CPU tests compare against fp32 runs."""
    if torch.device(device).type != "cuda":
        return None
    return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)


def parallelize(model, activation_checkpointing=False, mp_policy=None, reshard_after_forward=True):
    """Shard `model` (a Transformer, possibly still on the meta device) with FSDP2 and/or turn on activation
    checkpointing. Without a process group only the checkpointing applies.

    Each transformer block is one FSDP unit (its parameters are all-gathered just before it runs and freed after),
    the root unit holds embed_tokens, the final norm and lm_head. Activation checkpointing recomputes each block in
    the backward pass (checkpoint_blocks, before sharding, as torchtitan orders them)."""
    if activation_checkpointing:
        checkpoint_blocks(model)
    if not dist.is_initialized():
        return model
    kwargs = dict(mp_policy=mp_policy) if mp_policy is not None else {}
    for block in model.model.layers:
        fully_shard(block, reshard_after_forward=reshard_after_forward, **kwargs)
    # The root keeps its parameters unsharded after forward (FSDP2's default for the root): the chunked loss
    # multiplies the hidden states by model.lm_head.weight *outside* the forward, which must then be the full
    # tensor, and its gradient is reduce-scattered by the root's post-backward like any other.
    fully_shard(model, **kwargs)
    for unit in [*model.model.layers, model]:  # each unit reduces its own gradients: sum them (the loss is
        unit.set_gradient_divide_factor(1.0)   # already divided by the global token count), with a plain SUM
        unit.set_force_sum_reduction_for_comms(True)  # collective (gloo has no PREMUL_SUM)
    model.set_force_sum_reduction_for_comms(True)  # plain SUM: gloo has no PREMUL_SUM
    return model


def is_sharded(model):
    return isinstance(model, FSDPModule)


def load_full_state_dict(model, state):
    """Load a full (unsharded) state dict held by rank 0 into `model`, sharded or not. Other ranks pass {}.
    The model may have been materialised with to_empty(); every parameter is overwritten."""
    if not is_sharded(model):
        model.load_state_dict(state, strict=True)
        return
    set_model_state_dict(model, state, options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True))


def full_state_dict(model):
    """The full model state dict on CPU, on rank 0 ({} elsewhere for a sharded model). Collective when sharded."""
    if not is_sharded(model):
        return {k: v.detach().cpu() for k, v in model.state_dict().items()}
    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def all_gather_list(values):
    """Concatenate every rank's Python list (rank order). Identity without a process group."""
    if not dist.is_initialized():
        return list(values)
    boxes = [None] * dist.get_world_size()
    dist.all_gather_object(boxes, list(values))
    return [v for box in boxes for v in box]


def sync_rollout_model(model, rollout_model):
    """Copy the (possibly FSDP-sharded) policy's full weights into the plain per-rank copy used for
    generation — what an RL system does when it pushes weights to its inference engine. Without
    sharding the policy generates itself and nothing is copied."""
    if rollout_model is model:
        return
    state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))
    rollout_model.load_state_dict({k: v.full_tensor() if hasattr(v, "full_tensor") else v for k, v in state.items()})
