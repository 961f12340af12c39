"""Worker for tests/test_scale_out.py::test_ulysses_*: run under `torchrun --nproc_per_node 2` (gloo).

Every rank computes the single-rank reference itself (same seed, whole row), then the context-parallel version on its
own shard, and asserts that outputs and gradients match. Prints one line per check with the max error."""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from nanbeige41.context_parallel import Ulysses  # noqa: E402
from nanbeige41.distributed import cleanup, parallelize, print0, setup  # noqa: E402
from nanbeige41.losses import chunked_cross_entropy  # noqa: E402
from nanbeige41.model import ModelConfig, Transformer, document_spans, varlen_attention  # noqa: E402

TOL = 1e-5  # fp32; measured max errors are ~1e-7 (outputs) to ~1e-6 (gradients of a 2-layer model)


def packed_positions(doc_lens_per_row):
    return torch.tensor([[p for n in row for p in range(n)] for row in doc_lens_per_row])


# documents cross the shard boundaries (T = 48, chunks of 12 with 2 ranks)
DOCS = [[10, 20, 18], [5, 7, 13, 23]]


def check_attention(nh, nkv):
    T, hd = 48, 8
    config = ModelConfig(vocab_size=64, hidden_size=nh * hd, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=nh, num_key_value_heads=nkv)
    ulysses = Ulysses(config)
    g = torch.Generator().manual_seed(0)
    positions = packed_positions(DOCS)
    q = torch.randn(2, nh, T, hd, generator=g, requires_grad=True)
    k = torch.randn(2, nkv, T, hd, generator=g, requires_grad=True)
    v = torch.randn(2, nkv, T, hd, generator=g, requires_grad=True)
    w = torch.randn(2, nh, T, hd, generator=g)
    y_ref = varlen_attention(q, k, v, document_spans(positions), enable_gqa=nh != nkv)
    (y_ref * w).sum().backward()

    idx = ulysses.local_indices(T)
    ql, kl, vl = (t.detach()[:, :, idx].clone().requires_grad_() for t in (q, k, v))
    ulysses.set_positions(positions[:, idx])
    y = ulysses(ql, kl, vl)
    (y * w[:, :, idx]).sum().backward()
    errors = dict(out=float((y - y_ref[:, :, idx]).abs().max()), dq=float((ql.grad - q.grad[:, :, idx]).abs().max()),
                  dk=float((kl.grad - k.grad[:, :, idx]).abs().max()), dv=float((vl.grad - v.grad[:, :, idx]).abs().max()))
    print0(f"attention nh={nh} nkv={nkv}: " + " ".join(f"{k} {e:.2e}" for k, e in errors.items()))
    assert all(e < TOL for e in errors.values()), errors


def check_model():
    """A whole 2-layer model, FSDP-sharded over the same 2 ranks that split the row: loss and every gradient equal
    the unsharded single-rank model's on the whole batch."""
    config = ModelConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, rope_theta=1e4)
    torch.manual_seed(0)
    ref = Transformer(config)
    g = torch.Generator().manual_seed(1)
    positions = packed_positions(DOCS)
    batch = dict(input_ids=torch.randint(0, 64, positions.shape, generator=g), position_ids=positions,
                 targets=torch.randint(0, 64, positions.shape, generator=g),
                 loss_mask=(torch.rand(positions.shape, generator=g) < 0.7).long())
    n_tokens = int(batch["loss_mask"].sum())
    hidden = ref(batch["input_ids"], batch["position_ids"], return_hidden=True)
    loss_ref, _ = chunked_cross_entropy(hidden, ref.lm_head.weight, batch["targets"], batch["loss_mask"], 16)
    (loss_ref / n_tokens).backward()

    model = Transformer(config)
    model.load_state_dict(ref.state_dict())
    parallelize(model, activation_checkpointing=True)  # FSDP2 over the 2 ranks + recompute in backward
    ulysses = Ulysses(config)
    ulysses.apply(model)
    local = ulysses.shard(batch)
    loss = model(local["input_ids"], local["position_ids"],
                 head_fn=lambda h, w: chunked_cross_entropy(h, w, local["targets"], local["loss_mask"], 16)[0])
    (loss / n_tokens).backward()
    total = loss.detach().clone()
    torch.distributed.all_reduce(total)
    grads = {n: p.grad.full_tensor() for n, p in model.named_parameters()}
    worst = max((grads[n] - p.grad).abs().max() / p.grad.abs().max() for n, p in ref.named_parameters())
    print0(f"model: loss {float(total) / n_tokens:.6f} vs {float(loss_ref) / n_tokens:.6f}, "
           f"worst relative grad error {float(worst):.2e}")
    assert abs(float(total) - float(loss_ref)) <= 1e-5 * abs(float(loss_ref)), (float(total), float(loss_ref))
    assert worst < 1e-4, worst


def main():
    setup("cpu")
    check_attention(4, 2)  # each rank: 2 query heads over 1 KV head
    check_attention(4, 1)  # fewer KV heads than ranks: the KV head is repeated
    check_model()


main()
cleanup()
