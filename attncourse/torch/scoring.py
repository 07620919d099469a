"""Attention score functions a(q, k) in PyTorch (differentiable).

Every function maps queries (batch, num_queries, d_q) and keys
(batch, num_keys, d_k) to scores (batch, num_queries, num_keys), one number
per (query, key) pair. Weights are cast to the queries' dtype.
"""

import math

import torch

from attncourse import checks

__all__ = [
    "additive_score",
    "bilinear_score",
    "concat_score",
    "cosine_score",
    "dot_score",
    "scaled_dot_score",
]


def _prepare(queries, keys, same_feature_size=False):
    queries, keys = torch.as_tensor(queries), torch.as_tensor(keys)
    checks.check_float("queries", queries)
    checks.check_float("keys", keys)
    checks.check_same_dtype(queries=queries, keys=keys)
    checks.check_qkv(checks.shape_of(queries), checks.shape_of(keys),
                     same_feature_size=same_feature_size)
    return queries, keys


def _weight(name, w, expected, like):
    """Validate a weight and cast it to the inputs' dtype and device."""
    if isinstance(w, int | float):
        w = float(w)
    w = torch.as_tensor(w)
    checks.check_float(name, w)
    checks.check_weight(name, checks.shape_of(w), expected)
    return w.to(dtype=like.dtype, device=like.device)


def dot_score(queries, keys):
    """q . k for every pair: queries (b, nq, d), keys (b, nk, d) -> (b, nq, nk).

    Needs d_q == d_k.
    """
    queries, keys = _prepare(queries, keys, same_feature_size=True)
    return queries @ keys.transpose(-1, -2)


def scaled_dot_score(queries, keys):
    """q . k / sqrt(d_k): (b, nq, d), (b, nk, d) -> (b, nq, nk).

    For q and k with iid unit-variance entries, q . k has variance d_k; the
    division brings it back to 1, so the softmax does not saturate.
    """
    queries, keys = _prepare(queries, keys, same_feature_size=True)
    return queries @ keys.transpose(-1, -2) / math.sqrt(keys.shape[-1])


def additive_score(queries, keys, W_q, W_k, w_v):
    """Additive (Bahdanau) score w_v . tanh(q W_q + k W_k).

    queries (b, nq, d_q), keys (b, nk, d_k), W_q (d_q, h), W_k (d_k, h),
    w_v (h,) -> scores (b, nq, nk). d_q and d_k may differ.

    "Concatenate, linear, tanh, sum" is the same family: a linear map of the
    concatenation [q; k] with matrix W = [W_q; W_k] ((d_q + d_k, h)) splits as
    [q; k] W = q W_q + k W_k, so tanh(Linear([q; k])) = tanh(q W_q + k W_k);
    summing the h features is w_v = ones(h).
    """
    queries, keys = _prepare(queries, keys)
    W_q = _weight("W_q", W_q, (queries.shape[-1], None), queries)
    h = W_q.shape[-1]
    W_k = _weight("W_k", W_k, (keys.shape[-1], h), queries)
    w_v = _weight("w_v", w_v, (h,), queries)
    features = torch.tanh((queries @ W_q)[:, :, None, :] + (keys @ W_k)[:, None, :, :])
    return features @ w_v


def concat_score(queries, keys, w, b=None):
    """Linear map of the concatenation [q; k] to one number: [q; k] . w + b.

    queries (b, nq, d_q), keys (b, nk, d_k), w (d_q + d_k,), b a scalar or
    None -> scores (b, nq, nk). Computed as q . w[:d_q] + k . w[d_q:] + b.

    Beware: with no nonlinearity the query term q . w[:d_q] + b is the same
    for every key, and softmax over keys ignores constants, so the attention
    weights depend on the keys only -- every query attends the same way.
    """
    queries, keys = _prepare(queries, keys)
    d_q = queries.shape[-1]
    w = _weight("w", w, (d_q + keys.shape[-1],), queries)
    scores = (queries @ w[:d_q])[:, :, None] + (keys @ w[d_q:])[:, None, :]
    if b is not None:
        scores = scores + _weight("b", b, (), queries)
    return scores


def bilinear_score(queries, keys, W):
    """Bilinear (Luong "general") score q W k^T.

    queries (b, nq, d_q), keys (b, nk, d_k), W (d_q, d_k) -> (b, nq, nk).
    """
    queries, keys = _prepare(queries, keys)
    W = _weight("W", W, (queries.shape[-1], keys.shape[-1]), queries)
    return (queries @ W) @ keys.transpose(-1, -2)


def cosine_score(queries, keys, eps=1e-8):
    """Cosine similarity q . k / (max(|q|, eps) max(|k|, eps)), in [-1, 1].

    queries (b, nq, d), keys (b, nk, d) -> (b, nq, nk). eps keeps zero
    vectors finite (score 0, finite gradient).
    """
    queries, keys = _prepare(queries, keys, same_feature_size=True)
    return _unit(queries, eps) @ _unit(keys, eps).transpose(-1, -2)


def _unit(x, eps):
    sq = torch.sum(x * x, dim=-1, keepdim=True)
    return x / torch.sqrt(torch.clamp(sq, min=eps * eps))
