"""Attention score functions a(q, k) in PyTorch (differentiable).

Every function maps queries (batch, num_queries, d_q) and keys
(batch, num_keys, d_k) to scores (batch, num_queries, num_keys), one number
per (query, key) pair. Parameters are cast to the queries' dtype.
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


def _tensors(*xs):
    """Tensors from the arguments (a Python number becomes a float)."""
    return tuple(
        torch.as_tensor(float(x) if isinstance(x, int | float) else x) for x in xs
    )


def _like(queries, *params):
    """The parameters cast to the queries' dtype and device."""
    return tuple(p.to(dtype=queries.dtype, device=queries.device) for p in params)


def dot_score(queries, keys):
    """q . k for every pair: queries (b, nq, d), keys (b, nk, d) -> (b, nq, nk).

    Needs d_q == d_k.
    """
    queries, keys = _tensors(queries, keys)
    checks.score_inputs(queries, keys, same_feature_size=True)
    return queries @ keys.transpose(-1, -2)


def scaled_dot_score(queries, keys):
    """q . k / sqrt(d_k): (b, nq, d), (b, nk, d) -> (b, nq, nk).

    For q and k with iid unit-variance entries, q . k has variance d_k; the
    division brings it back to 1, so the softmax does not saturate.
    """
    queries, keys = _tensors(queries, keys)
    checks.score_inputs(queries, keys, same_feature_size=True)
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
    queries, keys, W_q, W_k, w_v = _tensors(queries, keys, W_q, W_k, w_v)
    checks.additive_score_inputs(queries, keys, W_q, W_k, w_v)
    W_q, W_k, w_v = _like(queries, W_q, W_k, w_v)
    features = torch.tanh(
        (queries @ W_q)[:, :, None, :]  # (b, nq, 1, h)
        + (keys @ W_k)[:, None, :, :]
    )  # (b, 1, nk, h)
    return features @ w_v  # (b, nq, nk)


def concat_score(queries, keys, w, b=None):
    """Linear map of the concatenation [q; k] to one number: [q; k] . w + b.

    queries (b, nq, d_q), keys (b, nk, d_k), w (d_q + d_k,), b a scalar or
    None -> scores (b, nq, nk). Computed as q . w[:d_q] + k . w[d_q:] + b.

    Beware: with no nonlinearity the query term q . w[:d_q] + b is the same
    for every key, and softmax over keys ignores constants, so the attention
    weights depend on the keys only -- every query attends the same way.
    """
    queries, keys, w = _tensors(queries, keys, w)
    b = None if b is None else _tensors(b)[0]
    checks.concat_score_inputs(queries, keys, w, b)
    (w,) = _like(queries, w)
    d_q = queries.shape[-1]
    scores = (queries @ w[:d_q])[:, :, None] + (keys @ w[d_q:])[:, None, :]
    return scores if b is None else scores + _like(queries, b)[0]


def bilinear_score(queries, keys, W):
    """Bilinear (Luong "general") score q W k^T.

    queries (b, nq, d_q), keys (b, nk, d_k), W (d_q, d_k) -> (b, nq, nk).
    """
    queries, keys, W = _tensors(queries, keys, W)
    checks.bilinear_score_inputs(queries, keys, W)
    (W,) = _like(queries, W)
    return (queries @ W) @ keys.transpose(-1, -2)


def cosine_score(queries, keys, eps=1e-8):
    """Cosine similarity q . k / (max(|q|, eps) max(|k|, eps)), in [-1, 1].

    queries (b, nq, d), keys (b, nk, d) -> (b, nq, nk). eps keeps zero
    vectors finite (score 0, finite gradient).
    """
    queries, keys = _tensors(queries, keys)
    checks.score_inputs(queries, keys, same_feature_size=True)
    return _unit(queries, eps) @ _unit(keys, eps).transpose(-1, -2)


def _unit(x, eps):
    sq = torch.sum(x * x, dim=-1, keepdim=True)
    return x / torch.sqrt(torch.clamp(sq, min=eps * eps))
