"""Ulysses context parallelism: one packed row split over the ranks of a group, attention by an all-to-all over heads.

A 256k-token row does not fit one GPU's activations even with per-block checkpointing (issue 17 measured ~135 GB for
one 3b row), so the sequence dimension is sharded: each of the `degree` ranks of a context-parallel (CP) group holds
T / degree tokens of the row through every layer. Everything in a block is per-token except attention, where
DeepSpeed-Ulysses (Jacobs et al. 2023) swaps the split: an all-to-all turns (all heads, my tokens) into (my heads, all
tokens), attention runs on whole sequences for nh / degree heads, and a second all-to-all turns it back.

    ulysses = Ulysses(model.config)            # the CP group: every rank of the job, or a sub-group
    ulysses.apply(model)                       # after distributed.parallelize; the model code is unchanged
    local = ulysses.shard(batch)               # {"input_ids": (B, T), ...} -> this rank's (B, T / degree) tokens
    hidden = model(local["input_ids"], local["position_ids"], return_hidden=True)

- Load balance: causal attention over a row costs more at its end, so the row is cut into 2 * degree equal chunks and
  rank r holds chunks r and 2 * degree - 1 - r (the "head-tail" / zig-zag layout): every rank gets one cheap and one
  expensive chunk. Attention itself runs on the whole row (in natural order), so the layout only decides which
  tokens' projections, MLPs and loss each rank computes.
- Packed rows: document boundaries come from the *full* row's position_ids (they restart at 0 at every document), which
  a forward pre-hook all-gathers once per forward; attention is then exactly the single-rank block-diagonal causal
  attention (model.varlen_attention on CPU, flex_attention with a BlockMask on CUDA). RoPE needs only each token's own
  position, so it runs on the local shard.
- Heads: each rank takes nh / degree query heads and the KV heads they read. Valid degrees divide nh and either
  divide nkv or are a multiple of it (then each KV head is repeated degree / nkv times before the exchange). For the
  3b model (20 query heads, 4 KV heads): 1, 2, 4 or 20; 8 is not (`check_degree` says why).
- Gradients: the all-to-all is differentiable (its backward is the reverse all-to-all): all_to_all_single_autograd
  of torch.distributed._functional_collectives, the replacement of the deprecated torch.distributed.nn.functional
  all_to_all_single; both work on gloo, so the same code trains on CPU processes and GPUs. The loss of each rank
  covers its own tokens, divided by the global token count, and gradients are summed over all ranks (FSDP over the flattened
  data x context ranks with sum reduction, distributed.parallelize): nothing else changes in the trainer.

Not covered: PyTorch's own `torch.distributed.tensor.experimental.context_parallel` (ring attention over SDPA) is the
other GPU path — it shards the sequence without the heads limit, but has no CPU/gloo strategy, so it cannot be tested
here; Ulysses is what this repository runs and tests. Caveat of the pre-hook design: the document layout is per
forward, so a second forward of the same model between a forward and its backward (with activation checkpointing,
which recomputes attention in backward) would use the wrong layout; the trainers never do that.
"""

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed._functional_collectives import all_to_all_single_autograd, wait_tensor

from nanbeige41.model import document_spans, varlen_attention


def degree_problem(num_heads, num_kv_heads, degree):
    """Why `degree` cannot split the heads (a string), or None when it can."""
    if degree < 1:
        return f"context-parallel degree must be >= 1, got {degree}"
    if num_heads % degree:
        return (f"Ulysses degree {degree} does not divide the {num_heads} query heads (each rank takes "
                f"num_heads / degree of them)")
    if num_kv_heads % degree and degree % num_kv_heads:
        return (f"Ulysses degree {degree} neither divides the {num_kv_heads} KV heads nor is a multiple of them "
                f"(a rank's query heads must share whole KV heads)")
    return None


def valid_degrees(num_heads, num_kv_heads):
    """Every Ulysses degree the heads allow, e.g. [1, 2, 4, 20] for 20 query / 4 KV heads."""
    return [d for d in range(1, num_heads + 1) if degree_problem(num_heads, num_kv_heads, d) is None]


def check_degree(num_heads, num_kv_heads, degree):
    problem = degree_problem(num_heads, num_kv_heads, degree)
    if problem:
        raise ValueError(f"{problem}; valid degrees for {num_heads} query / {num_kv_heads} KV heads: "
                         f"{valid_degrees(num_heads, num_kv_heads)}")


def head_tail_order(seq_len, degree, device=None):
    """Global token indices in shard order (rank 0's tokens, then rank 1's, ...): of 2 * degree equal chunks,
    rank r holds chunks r and 2 * degree - 1 - r. Shape (seq_len,)."""
    if seq_len % (2 * degree):
        raise ValueError(f"context parallelism: seq_len {seq_len} must be divisible by 2 * degree = {2 * degree}")
    c = seq_len // (2 * degree)
    chunks = []
    for r in range(degree):
        chunks += [torch.arange(r * c, (r + 1) * c), torch.arange((2 * degree - 1 - r) * c, (2 * degree - r) * c)]
    return torch.cat(chunks).to(device)


def _all_to_all(x, group):
    """Equal blocks of dim 0 swapped between the ranks; differentiable (the backward is the reverse all-to-all)."""
    return wait_tensor(all_to_all_single_autograd(x, None, None, group))


class Ulysses:
    """All-to-all attention over the ranks of `group` (default: all ranks). See the module docstring."""

    def __init__(self, config, group=None):
        self.group = group if group is not None else dist.group.WORLD
        self.degree, self.rank = dist.get_world_size(self.group), dist.get_rank(self.group)
        self.nh, self.nkv = config.num_attention_heads, config.num_key_value_heads
        check_degree(self.nh, self.nkv, self.degree)
        self.kv_repeat = max(1, self.degree // self.nkv)
        self.order = self.inverse = self.mask = None  # set per forward by set_positions

    def local_indices(self, seq_len, device=None):
        """This rank's token indices into a row of seq_len tokens (head-tail layout), (seq_len / degree,)."""
        n = seq_len // self.degree
        return head_tail_order(seq_len, self.degree, device)[self.rank * n:(self.rank + 1) * n]

    def shard(self, batch):
        """A dict of (B, T, ...) tensors -> the same dict of this rank's (B, T / degree, ...) tokens."""
        T = next(iter(batch.values())).shape[1]
        idx = self.local_indices(T, next(iter(batch.values())).device)
        return {k: v.index_select(1, idx) for k, v in batch.items()}

    @torch.no_grad()
    def set_positions(self, local_position_ids):
        """All-gather the row's positions (B, T / degree) -> the document layout of the whole row."""
        shards = [torch.empty_like(local_position_ids) for _ in range(self.degree)]
        dist.all_gather(shards, local_position_ids.contiguous(), group=self.group)
        in_shard_order = torch.cat(shards, dim=1)  # (B, T)
        T = in_shard_order.shape[1]
        self.order = head_tail_order(T, self.degree, in_shard_order.device)
        self.inverse = torch.argsort(self.order)  # natural token t sits at shard position inverse[t]
        positions = in_shard_order.index_select(1, self.inverse)  # (B, T) natural order
        if not bool((positions[:, 1:] == 0).any()):
            self.mask = None  # one document per row: plain causal attention
        elif positions.is_cuda:
            from nanbeige41.model import _packed_block_mask
            self.mask = _packed_block_mask(positions)
        else:
            self.mask = document_spans(positions)

    def _to_head_shards(self, x):
        """(B, H, T/d, hd) all heads of my tokens -> (B, H/d, T, hd) my heads of all tokens, natural order."""
        B, H, Tl, hd = x.shape
        d = self.degree
        x = x.transpose(0, 1).contiguous()  # (H, B, Tl, hd): the i-th block of H/d heads goes to rank i
        out = _all_to_all(x, self.group)  # block j: rank j's tokens, my heads
        out = out.view(d, H // d, B, Tl, hd).permute(2, 1, 0, 3, 4).reshape(B, H // d, d * Tl, hd)  # shard order
        return out.index_select(2, self.inverse)

    def _to_token_shards(self, y):
        """(B, H/d, T, hd) natural order -> (B, H, T/d, hd): the inverse of _to_head_shards."""
        B, Hl, T, hd = y.shape
        d = self.degree
        y = y.index_select(2, self.order).view(B, Hl, d, T // d, hd).permute(2, 1, 0, 3, 4).contiguous()
        out = _all_to_all(y, self.group)  # block j: my tokens, rank j's heads
        return out.view(d * Hl, B, T // d, hd).transpose(0, 1)

    def __call__(self, q, k, v):
        """q (B, nh, T/d, hd), k and v (B, nkv, T/d, hd), rotated, of this rank's tokens -> attention output
        (B, nh, T/d, hd) of the same tokens, equal to slicing the single-rank attention of the whole row."""
        if self.order is None:
            raise RuntimeError("Ulysses: no positions for this forward (call apply(model) and pass position_ids)")
        if self.kv_repeat > 1:  # fewer KV heads than ranks: each rank needs a whole copy of its KV head
            k, v = k.repeat_interleave(self.kv_repeat, dim=1), v.repeat_interleave(self.kv_repeat, dim=1)
        q, k, v = self._to_head_shards(q), self._to_head_shards(k), self._to_head_shards(v)
        gqa = q.shape[1] != k.shape[1]
        if isinstance(self.mask, tuple):
            y = varlen_attention(q, k, v, self.mask, gqa)
        elif self.mask is not None:
            from nanbeige41 import model as model_module
            y = model_module._flex_attention(q, k, v, block_mask=self.mask, enable_gqa=gqa)
        else:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
        return self._to_token_shards(y)

    def apply(self, model):
        """Route every attention layer of `model` (a Transformer, sharded or not) through this object, and gather
        the row's positions before each forward. Call after distributed.parallelize."""
        for block in model.model.layers:
            block.self_attn.context_parallel = self

        def gather_positions(module, args, kwargs):
            position_ids = kwargs.get("position_ids", args[1] if len(args) > 1 else None)
            if position_ids is None:
                raise ValueError("a context-parallel forward needs the local shard's position_ids")
            self.set_positions(position_ids)
        model.register_forward_pre_hook(gather_positions, with_kwargs=True)
        return model


def setup(config, degree):
    """The trainers' entry point: (Ulysses or None, data-parallel rank, data-parallel size) for a job whose
    consecutive groups of `degree` ranks each split one row (ranks 0..d-1 the first, d..2d-1 the next, ...; put
    them on one node: the all-to-all is the traffic that wants NVLink). degree 1: no context parallelism."""
    world = dist.get_world_size() if dist.is_initialized() else 1
    rank = dist.get_rank() if dist.is_initialized() else 0
    check_degree(config.num_attention_heads, config.num_key_value_heads, degree)
    if world % degree:
        raise ValueError(f"context-parallel degree {degree} does not divide the {world} ranks")
    if degree == 1:
        return None, rank, world
    group, _ = dist.new_subgroups(group_size=degree)
    return Ulysses(config, group), rank // degree, world // degree
