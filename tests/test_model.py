"""The model against transformers (weights both ways), packing, KV cache, checkpoint errors."""
import json
import os

import pytest
import torch
import transformers

from nanbeige41.distributed import checkpoint_blocks
from nanbeige41.model import ModelConfig, Transformer, document_mask, document_spans, rope_cos_sin
from nanbeige41.losses import chunked_cross_entropy, token_logprobs
from nanbeige41.generate import generate, sample_next

TINY = dict(vocab_size=300, hidden_size=64, intermediate_size=160, num_hidden_layers=3,
            num_attention_heads=4, num_key_value_heads=2, head_dim=16, rope_theta=7e7,
            max_position_embeddings=512, rms_norm_eps=1e-5)


def hf_model(seed=0, **over):
    torch.manual_seed(seed)
    cfg = transformers.LlamaConfig(**{**TINY, **over}, tie_word_embeddings=False, attention_bias=False)
    m = transformers.LlamaForCausalLM(cfg).eval()
    with torch.no_grad():  # HF inits norms to 1; randomise them so a name mix-up shows
        for name, p in m.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)
    return m


def test_hf_to_ours_logits(tmp_path):
    hf = hf_model()
    hf.save_pretrained(tmp_path)
    ours = Transformer.from_pretrained(tmp_path).eval()
    ids = torch.randint(0, 300, (2, 37))
    with torch.no_grad():
        diff = (ours(ids) - hf(ids).logits).abs().max().item()
    assert diff <= 1e-4, diff


def test_ours_to_hf_logits(tmp_path):
    torch.manual_seed(1)
    ours = Transformer(ModelConfig(**TINY)).eval()
    ours.save_pretrained(tmp_path)
    cfg = json.load(open(tmp_path / "config.json"))
    assert cfg["architectures"] == ["LlamaForCausalLM"] and cfg["rope_theta"] == 7e7
    hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    ids = torch.randint(0, 300, (2, 41))
    with torch.no_grad():
        diff = (ours(ids) - hf(ids).logits).abs().max().item()
    assert diff <= 1e-4, diff


def test_sharded_checkpoint_roundtrip_and_dtype(tmp_path):
    torch.manual_seed(2)
    ours = Transformer(ModelConfig(**TINY))
    ours.save_pretrained(tmp_path, max_shard_size=40_000)
    index = json.load(open(tmp_path / "model.safetensors.index.json"))
    assert len(set(index["weight_map"].values())) > 2
    back = Transformer.from_pretrained(tmp_path)
    for (k, a), (_, b) in zip(ours.state_dict().items(), back.state_dict().items()):
        assert torch.equal(a, b), k
    hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path)  # HF reads our shards too
    assert torch.equal(hf.lm_head.weight, ours.lm_head.weight)
    half = Transformer.from_pretrained(tmp_path, dtype=torch.bfloat16)
    assert half.lm_head.weight.dtype == torch.bfloat16


def test_packed_row_equals_documents_alone():
    torch.manual_seed(3)
    m = Transformer(ModelConfig(**TINY)).eval()
    docs = [torch.randint(0, 300, (n,)) for n in (7, 12, 5)]
    ids = torch.cat(docs)[None]
    pos = torch.cat([torch.arange(len(d)) for d in docs])[None]
    with torch.no_grad():
        packed = m(ids, pos)[0]
        alone = torch.cat([m(d[None])[0] for d in docs])
    assert (packed - alone).abs().max().item() <= 1e-5
    # without the positions the documents would see each other: the test can fail
    with torch.no_grad():
        unpacked = m(ids)[0]
    assert (unpacked - alone).abs().max().item() > 1e-3


def test_flex_backend_matches_sdpa_mask():
    torch.manual_seed(4)
    m = Transformer(ModelConfig(**TINY)).eval()
    docs = [torch.randint(0, 300, (n,)) for n in (40, 50, 38)]  # 128 = one flex block
    ids = torch.cat(docs)[None]
    pos = torch.cat([torch.arange(len(d)) for d in docs])[None]
    with torch.no_grad():
        ref = m(ids, pos)
        m.attn_backend = "sdpa_mask"
        assert (m(ids, pos) - ref).abs().max().item() <= 1e-5
        m.attn_backend = "flex"
        flex = m(ids, pos)
    assert (ref - flex).abs().max().item() <= 1e-4


def test_per_document_sdpa_matches_mask_forward_and_grad():
    """The default CPU packed path (one causal SDPA call per document) against the block-diagonal
    mask, on 2 rows whose first starts mid-document; logits and every parameter's gradient."""
    torch.manual_seed(5)
    cfg = ModelConfig(**TINY)
    ids = torch.randint(0, 300, (2, 30))
    pos = torch.cat([torch.tensor([[3, 4, 5, 6] + list(range(9)) + list(range(17))]),
                     torch.cat([torch.arange(n) for n in (1, 20, 9)])[None]])
    out = {}
    for backend in ("sdpa", "sdpa_mask"):
        torch.manual_seed(6)
        m = Transformer(cfg)
        m.attn_backend = backend
        logits = m(ids, pos)
        logits.square().mean().backward()
        out[backend] = (logits.detach(), {n: p.grad for n, p in m.named_parameters()})
    assert (out["sdpa"][0] - out["sdpa_mask"][0]).abs().max().item() <= 1e-5
    for name, g in out["sdpa"][1].items():
        assert torch.allclose(g, out["sdpa_mask"][1][name], atol=1e-6, rtol=1e-4), name
    assert document_spans(pos) == ((0, 0, 4), (0, 4, 13), (0, 13, 30), (1, 0, 1), (1, 1, 21), (1, 21, 30))


def test_document_mask_from_positions():
    pos = torch.tensor([[0, 1, 2, 0, 1, 0]])
    mask = document_mask(pos)[0]
    assert mask[2].tolist() == [True, True, True, False, False, False]
    assert mask[4].tolist() == [False, False, False, True, True, False]
    assert mask[5].tolist() == [False] * 5 + [True]


def test_rope_angles_fp32_at_256k():
    pos = torch.tensor([[262143]])
    cos, sin = rope_cos_sin(pos, 128, 7e7)
    inv = 1.0 / (7e7 ** (torch.arange(0, 128, 2, dtype=torch.float64) / 128))
    ref = torch.cat([262143 * inv] * 2).cos()
    assert (cos[0, 0].double() - ref).abs().max().item() < 0.05
    # what bf16 angles would give: O(1) errors, the reason the tables stay fp32
    bf = (torch.tensor(262143.0, dtype=torch.bfloat16) * inv.to(torch.bfloat16)).double()
    assert (torch.cat([bf] * 2).cos() - ref).abs().max().item() > 0.5


def test_kv_cache_matches_full_forward_with_left_padding():
    torch.manual_seed(5)
    m = Transformer(ModelConfig(**TINY)).eval()
    prompts = [torch.randint(0, 300, (n,)).tolist() for n in (9, 4, 13)]
    outs = generate(m, prompts, max_new_tokens=6, temperature=0, eos_ids=[299])
    for p, o in zip(prompts, outs):
        full = torch.tensor(p + o["tokens"])[None]
        with torch.no_grad():
            logp = m(full)[0].log_softmax(-1)
        n = len(p)
        expected = logp[n - 1:n - 1 + len(o["tokens"])].gather(-1, torch.tensor(o["tokens"])[:, None]).squeeze(-1)
        assert torch.allclose(torch.tensor(o["logprobs"]), expected, atol=1e-4)
        # greedy: each token is the argmax of the full forward
        assert o["tokens"] == logp[n - 1:n - 1 + len(o["tokens"])].argmax(-1).tolist()


def test_generate_stops_at_eos_and_reports_length():
    torch.manual_seed(6)
    m = Transformer(ModelConfig(**TINY)).eval()
    first = generate(m, [[1, 2, 3]], max_new_tokens=5, temperature=0)[0]
    eos = first["tokens"][2]
    out = generate(m, [[1, 2, 3]], max_new_tokens=5, temperature=0, eos_ids=[eos])[0]
    assert out["tokens"] == first["tokens"][:first["tokens"].index(eos) + 1] and out["finish_reason"] == "eos"
    assert first["finish_reason"] == "length" and len(first["tokens"]) == 5


def test_sampling_matches_the_distribution():
    """Empirical frequencies of sample_next over 200k rows against softmax(logits / T), zero-mass
    tokens included (top-k cut): within 4 standard errors for every token."""
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0, -9.0, 0.5]])
    g = torch.Generator().manual_seed(1)
    n = 200_000
    for T, top_k in ((1.0, 0), (0.7, 0), (1.0, 4)):
        z = logits / T
        if top_k:
            z = z.masked_fill(z < z.topk(top_k).values[:, -1:], float("-inf"))
        p = z.softmax(-1)[0].double()
        counts = torch.bincount(sample_next(logits.repeat(n, 1), T, top_k=top_k, generator=g), minlength=6)
        freq = counts.double() / n
        assert ((freq - p).abs() <= 4 * (p * (1 - p) / n).sqrt() + 1e-12).all(), (T, top_k, freq, p)
        assert (counts[p == 0] == 0).all()


def test_sampling_top_k_top_p():
    logits = torch.tensor([[3.0, 2.0, 1.0, -5.0]]).repeat(2000, 1)
    g = torch.Generator().manual_seed(0)
    assert set(sample_next(logits, 1.0, top_k=2, generator=g).tolist()) == {0, 1}
    p = logits[0].softmax(-1)  # 0.665, 0.245, 0.09: top_p 0.7 keeps the first two
    assert set(sample_next(logits, 1.0, top_p=0.7, generator=g).tolist()) == {0, 1}
    assert set(sample_next(logits, 1.0, top_p=0.5, generator=g).tolist()) == {0}
    assert p[0] > 0.5


def test_meta_init_and_gradient_checkpointing():
    with torch.device("meta"):
        m = Transformer(ModelConfig(**TINY))
    assert m.lm_head.weight.is_meta
    m.to_empty(device="cpu")
    torch.manual_seed(7)
    m.init_weights()
    assert abs(m.lm_head.weight.std().item() - 0.02) < 0.002
    ids = torch.randint(0, 300, (2, 16))
    calls = []  # the MLP of block 0 runs once per forward, and once more in backward when its block is recomputed
    m.model.layers[0].mlp.register_forward_pre_hook(lambda *_: calls.append(1))  # pre: recompute stops early
    grads, runs = [], []
    for ckpt in (False, True):
        m.zero_grad()
        if ckpt:
            checkpoint_blocks(m)  # from outside the model, as parallelize(activation_checkpointing=True) does
        m.train()
        calls.clear()
        m(ids).float().logsumexp(-1).sum().backward()
        grads.append(m.model.layers[0].self_attn.q_proj.weight.grad.clone())
        runs.append(len(calls))
    assert runs == [1, 2]
    assert torch.allclose(grads[0], grads[1], atol=1e-6)
    assert set(m.state_dict()) == set(Transformer(ModelConfig(**TINY)).state_dict())  # keys unchanged
    with torch.no_grad():  # generation: no recompute, same numbers
        calls.clear()
        m.eval()
        m(ids)
        assert len(calls) == 1


def test_chunked_loss_gradient_equals_full():
    torch.manual_seed(8)
    h = torch.randn(50, 32, requires_grad=True)
    w = torch.randn(97, 32, requires_grad=True)
    t = torch.randint(0, 97, (50,))
    mask = (torch.rand(50) > 0.3).long()
    loss, n = chunked_cross_entropy(h, w, t, mask, chunk_size=7)
    (loss / n).backward()
    g_h, g_w = h.grad.clone(), w.grad.clone()
    h.grad = w.grad = None
    full = torch.nn.functional.cross_entropy(h @ w.t(), t, reduction="none")
    (full * mask).sum().div(mask.sum()).backward()
    assert torch.allclose(loss / n, (full * mask).sum() / mask.sum(), atol=1e-5)
    assert torch.allclose(h.grad, g_h, atol=1e-6) and torch.allclose(w.grad, g_w, atol=1e-6)
    lp, ent = token_logprobs(h.detach(), w.detach(), t, chunk_size=9, temperature=0.7, with_entropy=True)
    ref = (h @ w.t() / 0.7).log_softmax(-1)
    assert torch.allclose(lp, ref.gather(-1, t[:, None]).squeeze(-1), atol=1e-5)
    assert torch.allclose(ent, -(ref.exp() * ref).sum(-1), atol=1e-4)


@pytest.mark.parametrize("bad, message", [
    (dict(hidden_size=65), "not divisible"),
    (dict(num_key_value_heads=3), "must divide"),
])
def test_config_errors(bad, message):
    with pytest.raises(ValueError, match=message):
        ModelConfig(**{**TINY, "head_dim": None, **bad})


def test_unknown_preset():
    with pytest.raises(ValueError, match="unknown model preset 'tiny'"):
        ModelConfig.preset("tiny")


def test_3b_preset_matches_release():
    c = ModelConfig.preset("3b")
    assert (c.hidden_size, c.intermediate_size, c.num_hidden_layers, c.num_attention_heads,
            c.num_key_value_heads, c.head_dim, c.rope_theta, c.max_position_embeddings,
            c.vocab_size) == (2560, 10496, 32, 20, 4, 128, 7e7, 262144, 166144)
    assert 3.8e9 < c.num_params() < 4.0e9  # model-facts.md: about 3.9B in all
    with torch.device("meta"):
        m = Transformer(c)
    assert sum(p.numel() for p in m.parameters()) == c.num_params()


def test_checkpoint_errors(tmp_path):
    torch.manual_seed(9)
    Transformer(ModelConfig(**TINY)).save_pretrained(tmp_path / "ok")
    cfg = json.load(open(tmp_path / "ok" / "config.json"))
    other = tmp_path / "gpt2"
    other.mkdir()
    json.dump({**cfg, "model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]}, open(other / "config.json", "w"))
    with pytest.raises(ValueError, match="only Llama-layout"):
        Transformer.from_pretrained(other)
    from safetensors.torch import load_file, save_file
    state = load_file(tmp_path / "ok" / "model.safetensors")
    bad = tmp_path / "bad"
    bad.mkdir()
    json.dump(cfg, open(bad / "config.json", "w"))
    save_file({k: v for k, v in state.items() if "layers.1.mlp.up_proj" not in k}, bad / "model.safetensors")
    with pytest.raises(ValueError, match="missing 1 tensor.*layers.1.mlp.up_proj"):
        Transformer.from_pretrained(bad)
    save_file({**state, "model.layers.0.mlp.up_proj.weight": torch.zeros(3, 3)}, bad / "model.safetensors")
    with pytest.raises(ValueError, match=r"layers.0.mlp.up_proj.weight.*shape \(3, 3\)"):
        Transformer.from_pretrained(bad)
    save_file({**state, "model.vision_tower.weight": torch.zeros(3)}, bad / "model.safetensors")
    with pytest.raises(ValueError, match="unexpected tensor 'model.vision_tower.weight'"):
        Transformer.from_pretrained(bad)
    with pytest.raises(ValueError, match="nowhere: no such directory"):  # a CheckpointError
        Transformer.from_pretrained(tmp_path / "nowhere")
    with pytest.raises(ValueError, match="bad: no config.json"):
        os.remove(bad / "config.json")
        Transformer.from_pretrained(bad)
