"""Attention pooling in PyTorch: turn scores into weights, average values.

queries (batch, num_queries, d_q), keys (batch, num_keys, d_k), values
(batch, num_keys, d_v) -> outputs (batch, num_queries, d_v) and weights
(batch, num_queries, num_keys). Differentiable with autograd.
"""

import torch

from attncourse import checks

from .masking import masked_softmax, sequence_mask
from .scoring import dot_score, scaled_dot_score

__all__ = [
    "hard_attention",
    "key_value_attention",
    "scaled_dot_product_attention",
    "soft_attention",
]


def _tensors(*xs, device=None):
    """Tensors from the arguments (None stays None), on ``device`` if given."""
    return tuple(None if x is None else torch.as_tensor(x, device=device) for x in xs)


def soft_attention(scores, values, mask=None):
    """Soft attention from ready-made scores: the last two of the three steps.

    1. scores (batch, num_queries, num_keys) -- computed by the caller;
    2. weights = masked_softmax(scores, mask), mask bool (True = attend)
       broadcastable to the scores;
    3. outputs = weights @ values, values (batch, num_keys, d_v): each output
       is a weighted average of the values.

    Returns (outputs (batch, num_queries, d_v), weights). Fully masked rows get
    zero weights and therefore zero outputs.
    """
    scores, values = _tensors(scores, values)
    checks.soft_attention_inputs(scores, values)
    weights = masked_softmax(scores, mask)  # (batch, num_queries, num_keys)
    return weights @ values, weights  # (batch, num_queries, d_v)


def _with_lengths(mask, valid_lens, num_keys):
    """mask AND sequence_mask(valid_lens, num_keys); either may be None."""
    if valid_lens is None:
        return mask
    lens_mask = sequence_mask(valid_lens, num_keys)
    return lens_mask if mask is None else mask & lens_mask


def scaled_dot_product_attention(
    queries, keys, values, mask=None, valid_lens=None, scale=None
):
    """softmax(q k^T * scale) v, with masking.

    queries (b, nq, d), keys (b, nk, d), values (b, nk, d_v); mask bool
    broadcastable to (b, nq, nk), True = attend (same polarity as the bool
    attn_mask of torch.nn.functional.scaled_dot_product_attention); valid_lens
    (b,) or (b, nq) masks keys at index >= length; both given -> combined with
    AND. scale defaults to 1/sqrt(d). Returns (outputs (b, nq, d_v), weights
    (b, nq, nk)). Unlike F.scaled_dot_product_attention, a fully masked row
    gives zero outputs, not NaN.
    """
    queries, keys, values = _tensors(queries, keys, values)
    mask, valid_lens = _tensors(mask, valid_lens, device=queries.device)
    checks.attention_inputs(
        queries, keys, values, mask, valid_lens, same_feature_size=True
    )
    if scale is None:
        scores = scaled_dot_score(queries, keys)  # (b, nq, nk)
    else:
        scores = dot_score(queries, keys) * scale
    mask = _with_lengths(mask, valid_lens, keys.shape[1])
    return soft_attention(scores, values, mask)


def key_value_attention(queries, keys, values, score_fn, mask=None, valid_lens=None):
    """Attention with any score function: softmax(score_fn(q, k)) v.

    queries (b, nq, d_q), keys (b, nk, d_k), values (b, nk, d_v);
    score_fn(queries, keys) -> scores (b, nq, nk), e.g. a lambda around
    additive_score with its weights. mask / valid_lens as in
    scaled_dot_product_attention. Returns (outputs (b, nq, d_v), weights).

    "Normal mode" is keys = values = X: the same vectors are compared with
    the query and averaged (as in keras.layers.Attention without a key).
    """
    queries, keys, values, mask, valid_lens = _checked_inputs(
        queries, keys, values, mask, valid_lens
    )
    scores = _checked_scores(score_fn(queries, keys), queries, values)  # (b, nq, nk)
    mask = _with_lengths(mask, valid_lens, keys.shape[1])
    return soft_attention(scores, values, mask)


def _checked_inputs(queries, keys, values, mask, valid_lens):
    """key_value_attention's inputs as tensors (masks on the queries' device),
    their shapes checked."""
    queries, keys, values = _tensors(queries, keys, values)
    mask, valid_lens = _tensors(mask, valid_lens, device=queries.device)
    checks.attention_inputs(queries, keys, values, mask, valid_lens)
    return queries, keys, values, mask, valid_lens


def _checked_scores(scores, queries, values):
    """A score function's result as a tensor of shape (b, nq, nk)."""
    scores = torch.as_tensor(scores)
    checks.check_scores_shape(
        checks.shape_of(scores), (values.shape[0], queries.shape[1], values.shape[1])
    )
    return scores


def hard_attention(weights, values, mode="argmax", generator=None):
    """Hard attention: each query takes ONE value instead of an average.

    weights (b, nq, nk) non-negative (e.g. from masked_softmax), values
    (b, nk, d_v). mode="argmax" picks the largest weight; mode="sample" draws
    key j with probability weights[j] (Gumbel-max trick), using the explicit
    torch.Generator ``generator`` (required). Returns
    (outputs (b, nq, d_v) -- the chosen values; indices (b, nq) int64;
    log_probs (b, nq) -- log weight of the chosen key).

    The choice is not differentiable: outputs carry no gradient to the
    weights, only log_probs does -- which is what REINFORCE needs. Rows with
    all-zero weights (fully masked) give output 0, index 0 and log_prob 0.
    """
    weights, values = _tensors(weights, values)
    checks.hard_attention_inputs(
        weights, values, mode, generator, torch.Generator, "torch.Generator"
    )
    positive = weights > 0
    logw = torch.log(torch.where(positive, weights, torch.ones_like(weights)))
    with torch.no_grad():
        if mode == "argmax":
            indices = torch.argmax(weights, dim=-1)
        else:
            u = torch.rand(
                weights.shape,
                generator=generator,
                dtype=weights.dtype,
                device=generator.device,
            )
            u = u.to(weights.device).clamp(min=torch.finfo(weights.dtype).tiny)
            noisy = torch.where(positive, logw + -torch.log(-torch.log(u)), -torch.inf)
            indices = torch.argmax(noisy, dim=-1)
    valid = positive.any(dim=-1)
    batch = torch.arange(values.shape[0], device=values.device)[:, None]
    chosen = values[batch, indices]
    outputs = torch.where(valid[..., None], chosen, torch.zeros_like(chosen))
    log_probs = torch.gather(logw, -1, indices[..., None])[..., 0]
    return outputs, indices, torch.where(valid, log_probs, torch.zeros_like(log_probs))
