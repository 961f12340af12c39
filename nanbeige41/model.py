"""The Nanbeige4 decoder (Llama family) in one file.

Architecture (model-facts.md, the released config.json): RMSNorm, rotary position embedding
with theta 7e7, grouped-query attention (20 query heads over 4 KV heads), SwiGLU MLP, an
untied output head. Parameter names follow Hugging Face's `LlamaForCausalLM`
(`model.layers.N.self_attn.q_proj.weight`, ..., `lm_head.weight`) so a checkpoint loads with a
plain `load_state_dict`, and RoPE uses HF's `rotate_half` layout so no q/k permutation is needed.

What this file covers:
- `ModelConfig` with the presets `toy` (CPU, minutes), `small` (benchmarks) and `3b` (the release);
- packed rows: `position_ids` restart at 0 at each document start, and attention is causal
  *within* a document only (block-diagonal). Everything is derived from `position_ids`: on CPU one
  causal SDPA call per document (or, as the reference, one call with the block-diagonal mask), on
  GPU flex_attention with a BlockMask;
- `forward(..., return_hidden=True)` returns the final hidden states so the loss can chunk the
  output projection (nanbeige41/losses.py) instead of materialising [T, V] logits;
- a preallocated KV cache for generation (nanbeige41/generate.py), per-block activation
  checkpointing, construction on the meta device + `init_weights()`;
- `save_pretrained` / `from_pretrained` in the HF layout (config.json + safetensors, sharded
  with an index above a size threshold).
Parallelism (FSDP2) is applied from outside, by nanbeige41/distributed.py.
"""

import contextlib
import json
import os
from dataclasses import asdict, dataclass, fields

import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file


@dataclass
class ModelConfig:
    vocab_size: int = 4096
    hidden_size: int = 256
    intermediate_size: int = 704
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int | None = None  # None: hidden_size // num_attention_heads
    rms_norm_eps: float = 1e-5
    rope_theta: float = 1e5
    max_position_embeddings: int = 4096
    tie_word_embeddings: bool = False
    bos_token_id: int = 1
    eos_token_id: int = 2
    pad_token_id: int = 0
    initializer_range: float = 0.02

    def __post_init__(self):
        h, nh, nkv = self.hidden_size, self.num_attention_heads, self.num_key_value_heads
        if min(h, nh, nkv, self.num_hidden_layers, self.vocab_size) <= 0:
            raise ValueError(f"ModelConfig: sizes must be positive, got {self}")
        if h % nh != 0:
            raise ValueError(f"ModelConfig: hidden_size={h} is not divisible by num_attention_heads={nh}")
        if nh % nkv != 0:
            raise ValueError(f"ModelConfig: num_key_value_heads={nkv} must divide num_attention_heads={nh}")
        if self.head_dim is None:
            self.head_dim = h // nh
        if self.head_dim <= 0 or self.head_dim % 2 != 0:
            raise ValueError(f"ModelConfig: head_dim={self.head_dim} must be positive and even (rotary pairs)")

    @staticmethod
    def preset(name, **overrides):
        if name not in PRESETS:
            raise ValueError(f"unknown model preset {name!r}; choose one of {sorted(PRESETS)}")
        return ModelConfig(**{**PRESETS[name], **overrides})

    def num_params(self):
        h, kv = self.hidden_size, self.num_key_value_heads * self.head_dim
        attn = h * self.num_attention_heads * self.head_dim * 2 + h * kv * 2
        block = attn + 3 * h * self.intermediate_size + 2 * h
        embed = self.vocab_size * h * (1 if self.tie_word_embeddings else 2)
        return self.num_hidden_layers * block + embed + h

    def to_hf_dict(self, dtype="float32"):
        """config.json as the released Nanbeige4.1-3B writes it (LlamaForCausalLM)."""
        d = asdict(self)
        d.update(architectures=["LlamaForCausalLM"], model_type="llama", hidden_act="silu",
                 attention_bias=False, attention_dropout=0.0, mlp_bias=False, pretraining_tp=1,
                 rope_scaling=None, rope_parameters={"rope_type": "default", "rope_theta": self.rope_theta},
                 use_cache=True, torch_dtype=dtype, dtype=dtype)
        return d

    @staticmethod
    def from_hf_dict(d, source="config.json"):
        arch = d.get("architectures") or []
        if d.get("model_type") != "llama" and "LlamaForCausalLM" not in arch:
            raise ValueError(f"{source}: model_type={d.get('model_type')!r} architectures={arch}: "
                             "only Llama-layout checkpoints (LlamaForCausalLM) are supported")
        if d.get("hidden_act", "silu") != "silu" or d.get("attention_bias") or d.get("mlp_bias"):
            raise ValueError(f"{source}: hidden_act/attention_bias/mlp_bias differ from the Nanbeige4 architecture")
        rope = d.get("rope_parameters") or d.get("rope_scaling") or {}
        if rope.get("rope_type", rope.get("type", "default")) != "default":
            raise ValueError(f"{source}: rope scaling {rope} is not supported (Nanbeige4.1 uses plain RoPE)")
        theta = d.get("rope_theta", rope.get("rope_theta"))
        known = {f.name for f in fields(ModelConfig)}
        kw = {k: v for k, v in d.items() if k in known and v is not None}
        kw["rope_theta"] = float(theta if theta is not None else 10000.0)
        for k in ("bos_token_id", "eos_token_id"):  # HF allows a list of eos ids
            if isinstance(kw.get(k), list):
                kw[k] = kw[k][0]
        return ModelConfig(**kw)


PRESETS = {
    # a few million parameters; vocab sized to the toy BPE tokenizer (data/toy/tokenizer).
    # Departure from the release: theta 1e5, not 7e7, since toy contexts are ~1k tokens.
    "toy": dict(vocab_size=4096, hidden_size=256, intermediate_size=704, num_hidden_layers=4,
                num_attention_heads=4, num_key_value_heads=2, head_dim=64, rope_theta=1e5,
                max_position_embeddings=4096),
    # ~56M parameters, for benchmarks against transformers.
    "small": dict(vocab_size=32000, hidden_size=512, intermediate_size=1408, num_hidden_layers=8,
                  num_attention_heads=8, num_key_value_heads=4, head_dim=64, rope_theta=1e6,
                  max_position_embeddings=8192),
    # exactly the released Nanbeige4.1-3B config.json
    "3b": dict(vocab_size=166144, hidden_size=2560, intermediate_size=10496, num_hidden_layers=32,
               num_attention_heads=20, num_key_value_heads=4, head_dim=128, rms_norm_eps=1e-5,
               rope_theta=7e7, max_position_embeddings=262144, tie_word_embeddings=False,
               bos_token_id=166100, eos_token_id=166101, pad_token_id=0),
}


# -----------------------------------------------------------------------------
# building blocks

class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        # normalise in fp32 as HF does, then scale in the input dtype
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.to(x.dtype)


def rope_cos_sin(position_ids, head_dim, theta):
    """cos/sin of shape (B, T, head_dim) in fp32, indexed by per-token positions (packing-safe).
    Angles are formed in fp32: in bf16, position 262143 * inv_freq would be off by O(1) radians."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64,
                                             device=position_ids.device) / head_dim))
    angles = position_ids.float()[..., None] * inv_freq.float()  # (B, T, hd/2)
    angles = torch.cat([angles, angles], dim=-1)  # HF rotate_half layout: [f0..f_{d/2}, f0..f_{d/2}]
    return angles.cos(), angles.sin()


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


def apply_rope(x, cos, sin):
    # x (B, nh, T, hd); cos/sin (B, T, hd) fp32. Rotate in fp32, return in x's dtype.
    xf = x.float()
    out = xf * cos[:, None] + rotate_half(xf) * sin[:, None]
    return out.to(x.dtype)


def document_mask(position_ids):
    """Block-diagonal causal mask (B, 1, T, T), True = may attend, from positions that restart at
    0 at every document start: doc_id = running count of zeros, and token i sees token j iff
    same document and j <= i."""
    doc = (position_ids == 0).cumsum(-1)  # (B, T)
    T = position_ids.shape[-1]
    causal = torch.ones(T, T, dtype=torch.bool, device=position_ids.device).tril()
    return (doc[:, :, None] == doc[:, None, :]) & causal  # (B, T, T)


def document_spans(position_ids):
    """(row, start, end) of every document of packed rows, from positions that restart at 0 (the
    same documents as document_mask: tokens before a row's first 0 count as one document)."""
    spans = []
    for b, row in enumerate(position_ids.tolist()):
        starts = sorted({0} | {i for i, p in enumerate(row) if p == 0})
        spans += [(b, s, e) for s, e in zip(starts, starts[1:] + [len(row)])]
    return tuple(spans)


def varlen_attention(q, k, v, spans, enable_gqa):
    """Packed attention as one causal SDPA call per document (CPU "varlen"). Exact, like the
    block-diagonal mask, but its cost grows with sum(doc_len^2) instead of T^2: a 1024-token row
    of 13 GRPO rollouts does ~1/13 of the mask path's attention work."""
    rows = [[] for _ in range(q.shape[0])]
    for b, s, e in spans:
        rows[b].append(F.scaled_dot_product_attention(q[b:b + 1, :, s:e], k[b:b + 1, :, s:e], v[b:b + 1, :, s:e],
                                                      is_causal=True, enable_gqa=enable_gqa))
    return torch.cat([torch.cat(r, dim=2) for r in rows], dim=0)


class KVCache:
    """Preallocated per-layer keys/values (B, n_kv, max_len, hd) for generation, plus which slots
    hold real tokens (left-padded prompts leave some empty)."""

    def __init__(self, config, batch_size, max_len, device, dtype):
        shape = (batch_size, config.num_key_value_heads, max_len, config.head_dim)
        self.k = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(config.num_hidden_layers)]
        self.v = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(config.num_hidden_layers)]
        self.valid = torch.zeros(batch_size, max_len, dtype=torch.bool, device=device)
        self.pos = 0  # next free slot

    def update(self, layer, k, v):
        T = k.shape[2]
        self.k[layer][:, :, self.pos:self.pos + T] = k
        self.v[layer][:, :, self.pos:self.pos + T] = v
        return self.k[layer][:, :, :self.pos + T], self.v[layer][:, :, :self.pos + T]

    def attention_mask(self, valid_new):
        """Mark the T new slots (valid_new: (B, T) bool) and return the (B, 1, T, pos+T) mask for
        them: causal over slots, real keys only, and each query sees itself (so a pad query row is
        never empty, which would give NaN)."""
        B, T = valid_new.shape
        self.valid[:, self.pos:self.pos + T] = valid_new
        L = self.pos + T
        q_slot = torch.arange(self.pos, L, device=valid_new.device)
        k_slot = torch.arange(L, device=valid_new.device)
        causal = k_slot[None, :] <= q_slot[:, None]  # (T, L)
        mask = causal[None] & self.valid[:, None, :L]
        mask = mask | (k_slot[None, None, :] == q_slot[None, :, None])
        return mask[:, None]

    def advance(self, T):
        self.pos += T


class Attention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.nh, self.nkv, self.hd = config.num_attention_heads, config.num_key_value_heads, config.head_dim
        h = config.hidden_size
        self.q_proj = nn.Linear(h, self.nh * self.hd, bias=False)
        self.k_proj = nn.Linear(h, self.nkv * self.hd, bias=False)
        self.v_proj = nn.Linear(h, self.nkv * self.hd, bias=False)
        self.o_proj = nn.Linear(self.nh * self.hd, h, bias=False)
        # set from outside by nanbeige41/context_parallel.py (Ulysses): attention of this rank's share of a row
        self.context_parallel = None

    def forward(self, x, cos, sin, mask, layer, cache):
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.nh, self.hd).transpose(1, 2)   # (B, nh, T, hd)
        k = self.k_proj(x).view(B, T, self.nkv, self.hd).transpose(1, 2)  # (B, nkv, T, hd)
        v = self.v_proj(x).view(B, T, self.nkv, self.hd).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if cache is not None:
            k, v = cache.update(layer, k, v)  # (B, nkv, pos+T, hd)
        # GQA: each KV head serves nh/nkv query heads; SDPA broadcasts them (enable_gqa) instead of
        # copying K/V nh/nkv times, which in decoding would copy the whole cache every step
        gqa = self.nkv != self.nh
        if self.context_parallel is not None and cache is None:  # the row is split over ranks: see context_parallel
            y = self.context_parallel(q, k, v)
        elif isinstance(mask, tuple):  # document spans (packed rows, CPU)
            y = varlen_attention(q, k, v, mask, gqa)
        elif mask is not None and not isinstance(mask, torch.Tensor):  # flex BlockMask (GPU packed path)
            y = _flex_attention(q, k, v, block_mask=mask, enable_gqa=gqa)
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None, enable_gqa=gqa)
        return self.o_proj(y.transpose(1, 2).reshape(B, T, self.nh * self.hd))


class MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        h, i = config.hidden_size, config.intermediate_size
        self.gate_proj = nn.Linear(h, i, bias=False)
        self.up_proj = nn.Linear(h, i, bias=False)
        self.down_proj = nn.Linear(i, h, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))  # SwiGLU


class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = Attention(config)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = MLP(config)

    def forward(self, x, cos, sin, mask, layer=0, cache=None):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask, layer, cache)
        return x + self.mlp(self.post_attention_layernorm(x))


class Decoder(nn.Module):
    """HF's `model.` prefix: embed_tokens, layers, norm."""

    def __init__(self, config):
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(Block(config) for _ in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)


_flex_attention = None  # compiled lazily on first GPU use


def training_attention_kernels(device):
    """Context for the blocks of a training forward. On CUDA, SDPA may use the flash, memory-efficient and cuDNN
    kernels only: where none applies (e.g. unsupported dtype or mask) PyTorch would otherwise fall back *silently* to
    the math kernel, which materialises the (T, T) scores (O(T^2) memory: ~320 GiB for a 64k-token row); without it
    the call raises, naming why each kernel was rejected. CPU: unchanged (the math kernel is the CPU's own path)."""
    if device.type != "cuda":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel
    return sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION])


def _packed_block_mask(position_ids):
    """flex_attention BlockMask for packed rows (GPU path): same document and causal."""
    global _flex_attention
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    if _flex_attention is None:  # compiled on GPU; eager (forward only, slow) elsewhere, for tests
        _flex_attention = (torch.compile(flex_attention, dynamic=False)
                           if position_ids.device.type == "cuda" else flex_attention)
    doc = (position_ids == 0).cumsum(-1)
    B, T = position_ids.shape

    def same_doc_causal(b, h, q, k):
        return (doc[b, q] == doc[b, k]) & (k <= q)
    return create_block_mask(same_doc_causal, B, None, T, T, device=position_ids.device)


# -----------------------------------------------------------------------------
# the model

class Transformer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.model = Decoder(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        # packed rows: "sdpa" (one causal SDPA call per document), "sdpa_mask" (one call with the
        # block-diagonal mask: T^2 work, the reference) or "flex" (BlockMask, compiled on CUDA)
        self.attn_backend = "sdpa"
        if self.lm_head.weight.device.type != "meta":
            self.init_weights()

    @torch.no_grad()
    def init_weights(self):
        """Explicit init, so a model built on the meta device can be materialised (to_empty) and
        initialised after sharding. Normal(0, initializer_range) as HF Llama; norms to 1."""
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, mean=0.0, std=self.config.initializer_range)
            elif isinstance(m, RMSNorm):
                nn.init.ones_(m.weight)

    def forward(self, input_ids, position_ids=None, return_hidden=False, cache=None, valid=None, head_fn=None):
        """input_ids (B, T). position_ids (B, T): restart at 0 at each packed document start;
        None means one document per row. With `cache`, positions are absolute and `valid` (B, T)
        says which new tokens are real (left padding). Returns logits (B, T, V), or the final
        normalised hidden states (B, T, H) when return_hidden, or head_fn(hidden, lm_head.weight)
        when head_fn is given: a chunked loss runs there, *inside* forward, because under FSDP2 the
        output matrix is only gathered (unsharded) while the model's forward is running."""
        B, T = input_ids.shape
        if position_ids is None:
            position_ids = torch.arange(T, device=input_ids.device).expand(B, T)
        if cache is not None:
            mask = cache.attention_mask(valid if valid is not None else torch.ones_like(input_ids, dtype=torch.bool))
        elif not bool((position_ids[:, 1:] == 0).any()):
            mask = None  # one document per row: plain causal attention (fast kernel)
        elif self.attn_backend == "flex":
            mask = _packed_block_mask(position_ids)
        elif self.attn_backend == "sdpa_mask":
            mask = document_mask(position_ids)[:, None]  # (B, 1, T, T)
        else:
            mask = document_spans(position_ids)
        cos, sin = rope_cos_sin(position_ids, self.config.head_dim, self.config.rope_theta)
        x = self.model.embed_tokens(input_ids)  # (B, T, H)
        training = self.training and cache is None
        with training_attention_kernels(input_ids.device) if training else contextlib.nullcontext():
            for i, block in enumerate(self.model.layers):
                x = block(x, cos, sin, mask, i, cache)
        if cache is not None:
            cache.advance(T)
        x = self.model.norm(x)
        if head_fn is not None:
            return head_fn(x, self.lm_head.weight)
        return x if return_hidden else self.lm_head(x)

    # -------------------------------------------------------------------------
    # Hugging Face checkpoints

    def save_pretrained(self, path, max_shard_size=5 * 2**30):
        """config.json + model.safetensors (or model-0000i-of-0000n.safetensors and
        model.safetensors.index.json when the weights exceed max_shard_size bytes)."""
        os.makedirs(path, exist_ok=True)
        state = {k: v.detach().contiguous().cpu() for k, v in self.state_dict().items()}
        if self.config.tie_word_embeddings:
            state.pop("lm_head.weight", None)
        dtype = str(next(iter(state.values())).dtype).removeprefix("torch.")
        with open(os.path.join(path, "config.json"), "w") as f:
            json.dump(self.config.to_hf_dict(dtype), f, indent=2)
        shards, current, size = [], {}, 0
        for name, t in state.items():
            nbytes = t.numel() * t.element_size()
            if current and size + nbytes > max_shard_size:
                shards.append(current)
                current, size = {}, 0
            current[name] = t
            size += nbytes
        shards.append(current)
        if len(shards) == 1:
            save_file(shards[0], os.path.join(path, "model.safetensors"), metadata={"format": "pt"})
            return
        weight_map = {}
        for i, shard in enumerate(shards):
            fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
            save_file(shard, os.path.join(path, fname), metadata={"format": "pt"})
            weight_map.update({name: fname for name in shard})
        total = sum(t.numel() * t.element_size() for t in state.values())
        with open(os.path.join(path, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)

    @staticmethod
    def from_pretrained(path, dtype=None, device="cpu"):
        """Load any HF Llama-layout checkpoint directory (single or sharded safetensors) in its
        stored dtype, or `dtype` if given. Everything wrong with the directory
        (read_pretrained, below) is a CheckpointError naming the path, raised before any
        tensor is read."""
        config, tensors_by_file = read_pretrained(path)
        with torch.device("meta"):
            model = Transformer(config)
        state = {}
        for fname, names in tensors_by_file.items():
            with safe_open(os.path.join(path, fname), framework="pt", device=str(device)) as f:
                for name in names:
                    t = f.get_tensor(name)
                    state[name] = t.to(dtype) if dtype is not None else t
        model.load_state_dict(state, strict=False, assign=True)
        if config.tie_word_embeddings:
            model.lm_head.weight = model.model.embed_tokens.weight
        return model


# -----------------------------------------------------------------------------
# Checking a Hugging Face model directory before loading it

class CheckpointError(ValueError):
    """A model directory that cannot be used. The message is "PATH: what is wrong", short enough for the command-line
    scripts to print as their one-line error."""


def read_pretrained(path):
    """Check an HF Llama-layout checkpoint directory from config.json and the safetensors headers alone (no tensor
    data is read, so it is cheap at 3B): returns (config, {file: [tensor names to load]}); Transformer.from_pretrained
    loads what it returns. Raises CheckpointError for a missing directory, a missing or malformed config.json, an
    architecture other than the Llama layout, missing weight files, a truncated or corrupt safetensors file (its
    header no longer covers the file), and a missing, unexpected or mis-shaped tensor."""
    if not os.path.isdir(path):
        raise CheckpointError(f"{path}: " + ("not a directory" if os.path.exists(path) else "no such directory"))
    cfg_path = os.path.join(path, "config.json")
    if not os.path.isfile(cfg_path):
        raise CheckpointError(f"{path}: no config.json (not a Hugging Face checkpoint directory)")
    try:
        with open(cfg_path) as f:
            d = json.load(f)
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError: a truncated or foreign file
        raise CheckpointError(f"{cfg_path}: malformed JSON ({e})") from None
    if not isinstance(d, dict):
        raise CheckpointError(f"{cfg_path}: expected a JSON object, got {type(d).__name__}")
    try:
        config = ModelConfig.from_hf_dict(d, source=cfg_path)
    except (ValueError, TypeError) as e:  # not the Llama layout (the message names cfg_path), impossible sizes
        msg = str(e)
        raise CheckpointError(msg if msg.startswith(str(cfg_path)) else f"{cfg_path}: {msg}") from None
    index = os.path.join(path, "model.safetensors.index.json")
    if os.path.isfile(index):
        try:
            with open(index) as f:
                files = sorted(set(json.load(f)["weight_map"].values()))
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise CheckpointError(f"{index}: malformed index ({type(e).__name__}: {e})") from None
    elif os.path.isfile(os.path.join(path, "model.safetensors")):
        files = ["model.safetensors"]
    else:
        raise CheckpointError(f"{path}: no model.safetensors or model.safetensors.index.json")
    with torch.device("meta"):
        expected = {k: tuple(v.shape) for k, v in Transformer(config).state_dict().items()}
    if config.tie_word_embeddings:
        expected.pop("lm_head.weight")
    tensors_by_file, found = {}, set()
    for fname in files:
        fpath = os.path.join(path, fname)
        try:  # safe_open checks that the header's offsets cover the file: a truncated copy fails here
            with safe_open(fpath, framework="pt") as f:
                shapes = {name: tuple(f.get_slice(name).get_shape()) for name in f.keys()}
        except (SafetensorError, OSError) as e:
            raise CheckpointError(f"{fpath}: unreadable safetensors file ({e})") from None
        names = []
        for name, shape in shapes.items():
            if name not in expected:
                if name.endswith("rotary_emb.inv_freq"):  # old HF checkpoints store it; we recompute
                    continue
                raise CheckpointError(f"{fpath}: unexpected tensor {name!r} (not a Llama-layout weight)")
            if shape != expected[name]:
                raise CheckpointError(f"{fpath}: tensor {name!r} has shape {shape}, config.json implies "
                                      f"{expected[name]}")
            names.append(name)
        tensors_by_file[fname] = names
        found.update(names)
    missing = sorted(set(expected) - found)
    if missing:
        raise CheckpointError(f"{path}: checkpoint is missing {len(missing)} tensor(s), e.g. {missing[:3]}")
    return config, tensors_by_file
