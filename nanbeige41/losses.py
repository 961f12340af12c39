"""Token log-probabilities and cross-entropy computed in chunks of the output projection.

With vocab 166144 and a 256k-token row, the logits alone would be 256k x 166k x 4 bytes
~ 162 GiB in fp32. So the loss never forms them at once: the final hidden states (N, H) are cut
into chunks of `chunk_size` rows, each chunk is projected, reduced to one number per token
(log p of the target, optionally the entropy) and dropped. Each chunk runs under activation
checkpointing, so the backward pass recomputes its logits instead of keeping them: peak memory
is one chunk's (chunk_size, V) logits, flat in N.

SFT uses `chunked_cross_entropy`; GRPO uses `token_logprobs` (it needs per-token values, at the
sampling temperature, for importance ratios and the KL term).
"""

import torch
from torch.utils.checkpoint import checkpoint


def _chunk_logprobs(hidden, weight, targets, inv_temperature):
    logits = (hidden @ weight.t()).float() * inv_temperature  # (n, V), fp32 for a stable logsumexp
    return logits.gather(-1, targets[:, None]).squeeze(-1) - logits.logsumexp(-1)


def _chunk_entropy(hidden, weight, inv_temperature):
    logp = ((hidden @ weight.t()).float() * inv_temperature).log_softmax(-1)
    return -(logp.exp() * logp).sum(-1)


def token_logprobs(hidden, weight, targets, chunk_size=1024, temperature=1.0, with_entropy=False):
    """hidden (N, H), weight (V, H), targets (N,) -> log p(target) (N,) in fp32 [, entropy (N,)].
    Differentiable w.r.t. hidden and weight; the entropy is for logging only (no gradient)."""
    inv_t = 1.0 / temperature
    parts, ents = [], []
    for i in range(0, hidden.shape[0], chunk_size):
        h, t = hidden[i:i + chunk_size], targets[i:i + chunk_size]
        if torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad):
            parts.append(checkpoint(_chunk_logprobs, h, weight, t, inv_t, use_reentrant=False))
        else:
            parts.append(_chunk_logprobs(h, weight, t, inv_t))
        if with_entropy:
            with torch.no_grad():
                ents.append(_chunk_entropy(h, weight, inv_t))
    logprobs = torch.cat(parts) if parts else hidden.new_zeros(0, dtype=torch.float32)
    if with_entropy:
        return logprobs, (torch.cat(ents) if ents else logprobs.detach().clone())
    return logprobs


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
