"""Token log-probabilities and cross-entropy computed in chunks of the output projection.

With vocab 166144 and a 256k-token row, the logits alone would be 256k x 166k x 4 bytes
~ 162 GiB in fp32. So the loss never forms them at once: the final hidden states (N, H) are cut
into chunks of `chunk_size` rows, each chunk is projected, reduced to one number per token
(log p of the target, optionally the entropy) and dropped. The backward pass (a custom autograd
Function) recomputes each chunk's logits and adds that chunk's share of the weight gradient into
one (V, H) buffer in place: peak memory is one chunk's (chunk_size, V) logits plus the weight
gradient every loss needs, flat in N. (Plain activation checkpointing per chunk would recompute
too, but autograd would then materialise a full (V, H) weight-gradient temporary per chunk.)

SFT uses `chunked_cross_entropy`; GRPO uses `token_logprobs` (it needs per-token values, at the
sampling temperature, for importance ratios and the KL term).
"""

import torch


class _ChunkedLogprobs(torch.autograd.Function):
    """log p(target) = z_target - logsumexp(z), z = (h @ W^T) / T, chunk by chunk over rows.
    Backward: d logp / d z = onehot(target) - softmax(z), so for a chunk with upstream grad g (n,),
        G = (onehot - softmax(z)) * g[:, None] / T      (n, V)
        dL/dh = G @ W,   dL/dW += G^T @ h   (accumulated in place).
    With want_entropy it also returns each row's entropy (no gradient) from the same logits:
    with zs = z - max and e = exp(zs), S = sum(e):  H = -sum p log p = log S - sum(e * zs) / S."""

    @staticmethod
    def forward(ctx, hidden, weight, targets, chunk_size, inv_temperature, want_entropy):
        out = torch.empty(hidden.shape[0], dtype=torch.float32, device=hidden.device)
        lse = torch.empty_like(out)
        entropy = torch.empty_like(out) if want_entropy else None
        for i in range(0, hidden.shape[0], chunk_size):
            z = _logits(hidden[i:i + chunk_size], weight, inv_temperature)  # (n, V) fp32, the one big buffer
            picked = z.gather(-1, targets[i:i + chunk_size, None]).squeeze(-1)
            m = z.max(-1).values
            z.sub_(m[:, None])
            if want_entropy:  # needs zs and e at once: one more (n, V) buffer
                e = z.exp()
                S = e.sum(-1)
                ez = torch.linalg.vecdot(e, z)  # sum(e * zs); 5x faster than bmm on CPU
                entropy[i:i + chunk_size] = S.log() - ez / S
            else:
                S = z.exp_().sum(-1)  # in place: no second (n, V)
            lse[i:i + chunk_size] = m + S.log()
            out[i:i + chunk_size] = picked - lse[i:i + chunk_size]
        ctx.save_for_backward(hidden, weight, targets, lse)
        ctx.chunk_size, ctx.inv_temperature = chunk_size, inv_temperature
        if not want_entropy:
            return out
        ctx.mark_non_differentiable(entropy)
        return out, entropy

    @staticmethod
    def backward(ctx, grad_out, grad_entropy=None):
        hidden, weight, targets, lse = ctx.saved_tensors
        need_h, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        grad_h = torch.empty_like(hidden) if need_h else None
        grad_w = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) if need_w else None
        for i in range(0, hidden.shape[0], ctx.chunk_size):
            h, t = hidden[i:i + ctx.chunk_size], targets[i:i + ctx.chunk_size]
            g = grad_out[i:i + ctx.chunk_size].float() * ctx.inv_temperature  # (n,)
            # G = (onehot - softmax(z)) * g, built in place in the recomputed logits buffer
            G = _logits(h, weight, ctx.inv_temperature).sub_(lse[i:i + ctx.chunk_size, None]).exp_().mul_(-g[:, None])
            G.scatter_add_(-1, t[:, None], g[:, None])
            if need_h:
                grad_h[i:i + ctx.chunk_size] = (G.to(weight.dtype) @ weight).to(hidden.dtype)
            if need_w:
                grad_w.addmm_(G.t(), h.float())
        return grad_h, (grad_w.to(weight.dtype) if need_w else None), None, None, None, None


def _logits(hidden, weight, inv_temperature):
    z = (hidden @ weight.t()).float()
    return z.mul_(inv_temperature) if inv_temperature != 1.0 else z


def token_logprobs(hidden, weight, targets, chunk_size=1024, temperature=1.0, with_entropy=False):
    """hidden (N, H), weight (V, H), targets (N,) -> log p(target) (N,) in fp32 [, entropy (N,)].
    Differentiable w.r.t. hidden and weight; the entropy is for logging only (no gradient)."""
    return _ChunkedLogprobs.apply(hidden, weight, targets, chunk_size, 1.0 / temperature, with_entropy)


def chunked_cross_entropy(hidden, weight, targets, loss_mask, chunk_size=1024):
    """Sum of -log p(target) over tokens with loss_mask == 1, and that token count.
    hidden (B, T, H) or (N, H); targets/loss_mask the matching (B, T) or (N,).
    Returns the *sum* so the caller can normalise by the token count of the whole global batch
    (across micro-batches and ranks) — a per-micro-batch mean would weight short batches up."""
    hidden = hidden.reshape(-1, hidden.shape[-1])
    keep = loss_mask.reshape(-1).bool()
    # only the supervised rows go through the projection: prompt tokens cost nothing
    h, t = hidden[keep], targets.reshape(-1)[keep]
    logprobs = token_logprobs(h, weight, t, chunk_size=chunk_size)
    return -logprobs.sum(), int(keep.sum())


def packed_logprobs(model, samples, temperature, chunk_size=1024, with_entropy=False):
    """GRPO's log-probs (and entropies) of every response token of `samples` (each with token lists `.prompt` and
    `.response`), all packed into one row
    with per-sample position ids (no padding; documents do not attend to each other). The output
    projection is chunked (losses.token_logprobs), so memory stays flat in the vocabulary size."""
    device = model.lm_head.weight.device
    ids, pos, where, targets = [], [], [], []
    for s in samples:
        seq = s.prompt + s.response
        # the hidden state at position p predicts token p+1: the response is predicted from
        # positions len(prompt)-1 .. len(seq)-2 of this sample
        where.extend(range(len(ids) + len(s.prompt) - 1, len(ids) + len(seq) - 1))
        ids.extend(seq)
        pos.extend(range(len(seq)))
        targets.extend(s.response)
    ids = torch.tensor(ids, device=device)[None]
    pos = torch.tensor(pos, device=device)[None]
    where = torch.tensor(where, device=device)
    targets = torch.tensor(targets, device=device)

    def head(hidden, weight):  # runs inside model.forward (FSDP2 has the full lm_head there)
        out = token_logprobs(hidden[0, where], weight, targets, chunk_size, temperature, with_entropy)
        # one output tensor: FSDP2 hooks its backward on forward's outputs, and a (logprobs, entropy)
        # tuple measurably broke gradient accumulation across micro-batches on 2 ranks
        return torch.stack(out) if with_entropy else out
    out = model(ids, pos, head_fn=head)
    lp, ent = (out[0], out[1].detach()) if with_entropy else (out, None)
    sizes = [len(s.response) for s in samples]
    return lp.split(sizes), (ent.split(sizes) if ent is not None else None)
