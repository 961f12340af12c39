"""Memory and throughput planner: what one GPU holds for a given model, sequence length and job size, and a layout
(FSDP x context-parallel degree, micro-batch, checkpointing) that fits.

    python -m nanbeige41.plan --config 3b --seq-len 262144 --gpus 64 --gpu-mem 80              # SFT, final stage
    python -m nanbeige41.plan --config 3b --seq-len 65536 --gpus 64 --gpu-mem 80 --stage grpo \\
        --rollout-batch 16 --rollout-len 40960

Every number is an estimate from the formulas below, per GPU, in GiB:
- weights, gradients, AdamW moments: fp32 master weights (4 B/param), fp32 gradients (4), two fp32 moments (8),
  all sharded by FSDP2 over every rank of the job (data x context ranks flattened into one mesh). Working copies that
  FSDP all-gathers: the root unit (embeddings, head: kept unsharded through forward and backward, see
  distributed.parallelize) and two blocks (the running one and the prefetched one) in the compute dtype, plus one
  block's unsharded fp32 gradient before its reduce-scatter.
- activations: bytes saved for backward per token per layer, counted from what autograd keeps for model.py's block
  (measured with saved_tensors_hooks, fp32 and bf16): the two RMSNorms' fp32 inputs, their outputs and the
  projections' flattened inputs (3h), o_proj's input, q and the attention output, rotated k and v, the four (i)-sized
  SwiGLU tensors, the attention log-sum-exp and the norms' rsqrt (RoPE keeps nothing: cos/sin need no gradient):
      2*h*f + 3*h*a + nh*hd*a + 2*nh*hd*a + 2*nkv*hd*a + 4*i*a + 4*nh + 8      (a = compute bytes, f = 4)
  = 248 KiB/token for the 3b block in fp32 (issue 17 measured 248 KiB in GRPO), 134 KiB in bf16.
  With per-block checkpointing only each block's input (h values) is kept, and one block is recomputed at a time.
  Backward workspace: the gradients in flight inside a block (autograd frees saved tensors as it goes): the residual
  stream's two fp32 (h) and one (i)-sized, per token.
- the chunked loss (nanbeige41/losses.py): one (chunk, V) fp32 logits buffer, the (V, H) fp32 weight-gradient
  accumulator and the (tokens, H) gradient of the hidden states. Its backward runs before the blocks', so the peak
  is the saved activations plus the larger of the loss buffers and one block's backward.
- GRPO: the rollout KV cache (2 * L * nkv * hd values per token per sequence of the generate() batch), the per-rank
  rollout copy of the policy (train_grpo.py generates with a plain synced copy at world > 1), and the frozen
  reference model, sharded like the policy.
A 10% reserve is kept for the CUDA caching allocator's fragmentation and NCCL buffers.

Throughput: model FLOPs per token = 6 * N_matmul (forward 2, backward 4, over every matrix: blocks and head, not the
embedding lookup) + attention 6 * L * nh * hd * S_eff, with S_eff the mean causal context (S / 2 for one document
filling the row; packed short documents cost less). Step time = tokens * FLOPs/token / (GPUs * peak * MFU): the
MFU is an assumption to state (default 35%), not a measurement. Activation checkpointing recomputes the forward
(8N instead of 6N hardware FLOPs); MFU counts model FLOPs only.

Validated on CPU against measured peak memory of small configs (tests/test_scale_out.py, bench/bench_scale_out.py;
numbers in the README). Not modelled: CUDA context (~0.5 GiB), compile workspaces, DCP save buffers.
"""

import argparse
import sys
from dataclasses import dataclass, replace

from nanbeige41.context_parallel import valid_degrees
from nanbeige41.model import ModelConfig

GIB = 2**30
RESERVE = 0.10  # share of GPU memory kept free for fragmentation and communication buffers
H100_BF16_TFLOPS = 989.0  # dense bf16 peak of an H100 SXM


@dataclass
class Layout:
    world: int = 1             # ranks (GPUs); FSDP shards over all of them
    cp: int = 1                # context-parallel degree (ranks sharing one row)
    micro_rows: int = 1        # rows per rank per micro-step
    seq_len: int = 4096        # tokens per row
    checkpointing: bool = True
    compute_bytes: int = 2     # bf16 compute (GPU); 4 for the fp32 CPU runs
    sharded: bool = True       # FSDP2 (False: one plain process)
    loss_chunk: int = 1024
    stage: str = "sft"
    rollout_batch: int = 0     # GRPO: sequences per generate() call
    rollout_len: int = 0       # GRPO: prompt + max_new_tokens
    kv_bytes: int = 2          # GRPO: KV cache dtype
    reference: bool = True     # GRPO: frozen reference model for the KL term


def param_counts(c):
    """(total, one block, root unit = embeddings + head + final norm, matmul params for FLOPs)."""
    h, q, kv = c.hidden_size, c.num_attention_heads * c.head_dim, c.num_key_value_heads * c.head_dim
    block = 2 * h * q + 2 * h * kv + 3 * h * c.intermediate_size + 2 * h
    embed = c.vocab_size * h
    head = 0 if c.tie_word_embeddings else c.vocab_size * h
    root = embed + head + h
    matmul = c.num_hidden_layers * (block - 2 * h) + c.vocab_size * h
    return c.num_hidden_layers * block + root, block, root, matmul


def activation_bytes_per_token_layer(c, a, f=4):
    """Bytes one block saves for backward per token (see the module docstring); a = compute bytes, f = 4."""
    h, q, kv, i = c.hidden_size, c.num_attention_heads * c.head_dim, c.num_key_value_heads * c.head_dim, \
        c.intermediate_size
    return 2 * h * f + 3 * h * a + q * a + 2 * q * a + 2 * kv * a + 4 * i * a + 4 * c.num_attention_heads + 8


def memory(c, lay):
    """Per-GPU bytes by component for model config `c` and Layout `lay`; 'total' is the estimated peak."""
    n, block, root, _ = param_counts(c)
    shards = lay.world if lay.sharded else 1
    a = lay.compute_bytes
    m = dict(weights=4 * n / shards, grads=4 * n / shards, optimizer=8 * n / shards)
    # FSDP working copies (none for one plain process, whose weights are the working copy)
    m["gathered"] = (root * a + 2 * block * a + 4 * block) if lay.sharded and lay.world > 1 else 0
    tokens = lay.micro_rows * lay.seq_len // lay.cp  # this rank's tokens per micro-step
    h = c.hidden_size
    per_layer = activation_bytes_per_token_layer(c, a) * tokens
    residual = h * a * tokens  # a block's input (bf16 under the GPU policy, fp32 on CPU)
    other = tokens * (4 * h + a * h + 8 * c.head_dim)  # final norm's fp32 input and output, RoPE cos/sin
    if lay.checkpointing:  # only each block's input is kept; backward recomputes one block at a time
        m["activations"] = c.num_hidden_layers * residual + other
        m["recomputed_block"] = per_layer
    else:
        m["activations"] = c.num_hidden_layers * per_layer + other
        m["recomputed_block"] = 0
    # gradients in flight in a block's backward: the residual stream's and one (i)-sized
    m["backward_workspace"] = tokens * (2 * 4 * h + a * c.intermediate_size)
    # one (chunk, V) fp32 logits buffer, the (V, H) fp32 weight-gradient accumulator, the hidden states' gradient
    m["loss"] = min(lay.loss_chunk, tokens) * c.vocab_size * 4 + 4 * c.vocab_size * h + 4 * tokens * h
    # the loss's backward runs before the blocks', so its buffers and a block's backward are not alive together
    train = m["activations"] + max(m["loss"], m["recomputed_block"] + m["backward_workspace"])
    if lay.stage == "grpo":
        kv_per_token = 2 * c.num_hidden_layers * c.num_key_value_heads * c.head_dim * lay.kv_bytes
        m["rollout_kv_cache"] = kv_per_token * lay.rollout_batch * lay.rollout_len
        m["rollout_model"] = n * a if lay.world > 1 else 0  # the per-rank copy generate() runs on
        m["reference"] = (n * a / shards + (root + block) * a) if lay.reference else 0
        # rollouts and the update do not overlap: the KV cache is freed before the training forward
        m["peak_phase"] = "rollout" if m["rollout_kv_cache"] > train else "update"
        transient = max(m["rollout_kv_cache"], train)
    else:
        transient = train
    persistent = sum(v for k, v in m.items() if k in ("weights", "grads", "optimizer", "gathered", "rollout_model",
                                                        "reference"))
    m["total"] = persistent + transient
    return m


def flops_per_token(c, seq_len, causal_fraction=0.5):
    """Model FLOPs per trained token: 6 * N_matmul + 6 * L * nh * hd * (causal_fraction * seq_len)."""
    _, _, _, matmul = param_counts(c)
    attention = 6 * c.num_hidden_layers * c.num_attention_heads * c.head_dim * causal_fraction * seq_len
    return 6 * matmul, attention


def peak_memory_bytes(device):
    """This process's peak memory so far: the CUDA allocator's peak on GPU, the peak resident size (VmHWM) on
    Linux CPU (None elsewhere). The trainers log it beside the planner's estimate."""
    import torch
    if torch.device(device).type == "cuda":
        return torch.cuda.max_memory_allocated(device)
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))
    except (OSError, StopIteration):
        return None


def mfu(c, seq_len, tokens_per_second_per_gpu, peak_tflops=H100_BF16_TFLOPS):
    """Model-FLOPs utilisation of a measured throughput, attention counted as one document per row (an upper
    bound of the attention work of packed rows, so of the MFU too)."""
    dense, attention = flops_per_token(c, seq_len)
    return tokens_per_second_per_gpu * (dense + attention) / (peak_tflops * 1e12)


def propose(c, seq_len, gpus, gpu_mem_gib, stage="sft", tokens_per_step=None, **grpo):
    """The first layout that fits, in order of preference: the smallest context-parallel degree (the all-to-all is
    communication on the critical path), without checkpointing if that fits, then the most rows per micro-step.
    The global batch must split: tokens_per_step / seq_len rows over gpus / cp data-parallel ranks. GRPO: the
    rollout batch is halved until its KV cache fits. Returns (Layout, memory dict, notes) or (None, None, notes)."""
    budget = gpu_mem_gib * GIB * (1 - RESERVE)
    rows = max(1, tokens_per_step // seq_len) if tokens_per_step else None
    notes = []
    for cp in valid_degrees(c.num_attention_heads, c.num_key_value_heads):
        if gpus % cp or seq_len % (2 * cp):
            continue
        dp = gpus // cp
        if rows is not None and rows % dp:
            notes.append(f"cp {cp}: {rows} rows per step do not split over {dp} data-parallel ranks")
            continue
        for ckpt in (False, True):
            lay = Layout(world=gpus, cp=cp, seq_len=seq_len, checkpointing=ckpt, stage=stage, **grpo)
            while stage == "grpo" and memory(c, lay)["total"] > budget and lay.rollout_batch > 1:
                lay = replace(lay, rollout_batch=lay.rollout_batch // 2)
            m = memory(c, lay)
            if m["total"] > budget:
                notes.append(f"cp {cp}, checkpointing {'on' if ckpt else 'off'}: {m['total'] / GIB:.0f} GiB")
                continue
            per_rank = rows // dp if rows is not None else 64
            while (per_rank % (lay.micro_rows * 2) == 0
                   and memory(c, replace(lay, micro_rows=lay.micro_rows * 2))["total"] <= budget):
                lay = replace(lay, micro_rows=lay.micro_rows * 2)
            if stage == "grpo" and lay.rollout_batch < grpo.get("rollout_batch", 0):
                notes.append(f"rollout batch {grpo['rollout_batch']} -> {lay.rollout_batch}: the KV cache of "
                             f"{grpo['rollout_batch']} x {lay.rollout_len} tokens does not fit")
            return lay, memory(c, lay), notes
    return None, None, notes


def main(argv=None):
    p = argparse.ArgumentParser(description="per-GPU memory and throughput plan (estimates)")
    p.add_argument("--config", default="3b", choices=["toy", "small", "3b"])
    p.add_argument("--seq-len", type=int, default=262144, help="tokens per row (GRPO: per packed micro-batch row)")
    p.add_argument("--gpus", type=int, default=64)
    p.add_argument("--gpu-mem", type=float, default=80, help="GiB per GPU")
    p.add_argument("--stage", default="sft", choices=["sft", "grpo"])
    p.add_argument("--rollout-batch", type=int, default=64, help="GRPO: sequences per generate() call")
    p.add_argument("--rollout-len", type=int, default=None, help="GRPO: prompt + max new tokens (default seq-len)")
    p.add_argument("--tokens-per-step", type=int, default=2 * 2**20, help="global batch, for the step time")
    p.add_argument("--mfu", type=float, default=0.35, help="assumed model-FLOPs utilisation")
    p.add_argument("--peak-tflops", type=float, default=H100_BF16_TFLOPS, help="per-GPU dense bf16 peak")
    args = p.parse_args(argv)
    c = ModelConfig.preset(args.config)
    grpo = {}
    if args.stage == "grpo":
        grpo = dict(rollout_batch=args.rollout_batch, rollout_len=args.rollout_len or args.seq_len)
    n = param_counts(c)[0]
    degrees = valid_degrees(c.num_attention_heads, c.num_key_value_heads)
    print(f"{args.config}: {n / 1e9:.2f}B parameters, {c.num_hidden_layers} layers, {c.num_attention_heads} query / "
          f"{c.num_key_value_heads} KV heads (Ulysses degrees {degrees}); "
          f"{args.stage} at {args.seq_len} tokens on {args.gpus} x {args.gpu_mem:g} GiB")
    # the two reference points: no context parallelism, with and without checkpointing
    for ckpt in (False, True):
        m = memory(c, Layout(world=args.gpus, seq_len=args.seq_len, checkpointing=ckpt, stage=args.stage, **grpo))
        print(f"  cp 1, {'with' if ckpt else 'no  '} checkpointing: {m['total'] / GIB:8.1f} GiB per GPU "
              f"(activations {m['activations'] / GIB:.1f})")
    # SFT rows are the global batch split over data-parallel ranks; GRPO packs however many rollouts a step has
    lay, m, notes = propose(c, args.seq_len, args.gpus, args.gpu_mem, args.stage,
                            args.tokens_per_step if args.stage == "sft" else None, **grpo)
    for note in notes:
        print(f"  ({note})")
    if lay is None:
        print(f"no layout fits {args.tokens_per_step:,} tokens per step of {args.seq_len}-token rows on "
              f"{args.gpus} GPUs: change --tokens-per-step or --gpus")
        return 1
    dp = lay.world // lay.cp
    rows = max(1, args.tokens_per_step // args.seq_len)
    steps = f"{rows} rows of {lay.seq_len} per step: " if args.stage == "sft" else ""
    print(f"plan: FSDP over {lay.world} ranks = data-parallel {dp} x context-parallel {lay.cp}; {steps}"
          f"{lay.micro_rows} row(s) per micro-step"
          + (f", {rows // dp // lay.micro_rows} micro-step(s)" if args.stage == "sft" else "")
          + f"; activation checkpointing {'on' if lay.checkpointing else 'off'}"
          + (f"; rollout batch {lay.rollout_batch}" if args.stage == "grpo" else "")
          + f"; budget {args.gpu_mem * (1 - RESERVE):.1f} GiB")
    for k, v in m.items():
        if k != "total" and not isinstance(v, str) and v:
            print(f"  {k:20s} {v / GIB:8.2f} GiB")
    print(f"  {'total':20s} {m['total'] / GIB:8.2f} GiB" + (f" (peak in the {m['peak_phase']} phase)"
                                                            if "peak_phase" in m else ""))
    dense, attn = flops_per_token(c, args.seq_len)
    per_token = dense + attn
    tok_per_gpu_s = args.peak_tflops * 1e12 * args.mfu / per_token
    step = args.tokens_per_step / (tok_per_gpu_s * args.gpus)
    print(f"throughput (estimate at {args.mfu:.0%} MFU of {args.peak_tflops:g} TFLOP/s): "
          f"{per_token / 1e9:.1f} GFLOP/token ({dense / 1e9:.1f} dense 6N + {attn / 1e9:.1f} attention, one "
          f"document per row), {tok_per_gpu_s:,.0f} tokens per GPU-second, {step:.1f} s per step of "
          f"{args.tokens_per_step:,} tokens")
    return 0


if __name__ == "__main__":
    sys.exit(main())
