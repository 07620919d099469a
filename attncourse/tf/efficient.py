"""Tiled (FlashAttention-style) attention in TensorFlow, with tf.custom_gradient.

flash_attention computes softmax(q k^T * scale) v one (block_q, block_k) tile
of the scores at a time and never holds the (num_queries, num_keys) table.
For each block of queries it walks the key blocks and keeps, per query, the
running maximum m of the scores seen so far, the running sum l of exp(score -
m), and the unnormalised output acc = sum exp(score - m) v (online softmax).
A new tile with a larger maximum rescales l and acc by exp(m_old - m_new).
At the end outputs = acc / l and logsumexp = m + log(l), the one number per
query that the backward pass needs to recompute the weights of any tile:
p = exp(score - logsumexp).

The gradient (tf.custom_gradient) keeps queries, keys, values, outputs and
logsumexp -- never the (b, nq, nk) weights -- and is flash_attention_backward,
the FlashAttention-2 backward pass: D = rowsum(dO * O), then per tile P =
exp(S - logsumexp), dV += P^T dO, dP = dO V^T, dS = P * (dP - D), dQ += dS K *
scale, dK += dS^T Q * scale. Works eagerly and inside tf.function (the tile
loops are Python loops over the static shapes, unrolled when traced).

causal=True is top-left aligned by default, like causal_mask(num_queries,
num_keys): key j is visible from query i iff j <= i. align="bottom_right"
shifts the diagonal by num_keys - num_queries (j <= i + nk - nq), for queries
that are the last positions of the keys' sequence (a KV-cache step), as
FlashAttention >= 2.1 aligns it; with nq == nk both agree. Key blocks entirely
above the diagonal are skipped (never computed); only tiles that straddle it
are masked. A fully
masked row (no visible key) gets output 0, logsumexp -inf and zero gradients.
"""

import math

import numpy as np
import tensorflow as tf

from attncourse import checks
from attncourse._tiles import _diagonal, _key_stop

from .masking import causal_mask

__all__ = ["attention_logsumexp", "flash_attention", "flash_attention_backward"]


def _as_3d(mask):
    """A mask broadcastable to (b, nq, nk) with leading size-1 axes added."""
    if mask is None:
        return None
    return tf.reshape(mask, (1,) * (3 - mask.shape.rank) + tuple(mask.shape))


def _visible(mask, diagonal, start_q, end_q, start_k, end_k):
    """Which scores of the tile (queries start_q:end_q, keys start_k:end_k) are
    kept: a bool tensor broadcastable to (b, bq, bk), or None for all of them.
    The causal part is built only for a tile that straddles the diagonal."""
    tile = None
    if mask is not None:  # a size-1 axis is shared by every tile
        rows = slice(start_q, end_q) if mask.shape[1] > 1 else slice(None)
        cols = slice(start_k, end_k) if mask.shape[2] > 1 else slice(None)
        tile = mask[:, rows, cols]  # (b | 1, bq | 1, bk | 1)
    if diagonal is not None and end_k - 1 > start_q + diagonal:  # straddles it
        rows = tf.range(start_q, end_q)[:, None] + diagonal  # (bq, 1)
        below = tf.range(start_k, end_k) <= rows  # (bq, bk)
        tile = below if tile is None else tile & below  # (b | 1, bq, bk)
    return tile


def _inputs(*xs):
    """Tensors from the arguments (None stays None)."""
    return tuple(None if x is None else tf.convert_to_tensor(x) for x in xs)


def _scale(scale, d):
    return 1 / math.sqrt(d) if scale is None else float(scale)


def _join(tiles, empty):
    """The tiles joined along axis 1; ``empty`` (length 0) when there are none."""
    return tf.concat(tiles, axis=1) if tiles else empty


def _tiled_forward(queries, keys, values, mask, causal, block_q, block_k, scale, align):
    """The tile loops of flash_attention (mask already 3-D, scale a float)."""
    (b, nq, _), (nk, d_v) = queries.shape, values.shape[1:]
    diagonal = _diagonal(causal, align, nq, nk)  # None, or the causal shift
    neg_inf = tf.constant(-np.inf, queries.dtype)
    outputs, logsumexp = [], []  # one (b, bq, d_v) and one (b, bq) per block
    for start_q in range(0, nq, block_q):
        end_q = min(start_q + block_q, nq)
        q = queries[:, start_q:end_q]  # (b, bq, d)
        m = tf.fill((b, end_q - start_q), neg_inf)  # (b, bq) running max
        l = tf.zeros((b, end_q - start_q), queries.dtype)  # (b, bq) running sum
        acc = tf.zeros((b, end_q - start_q, d_v), queries.dtype)  # (b, bq, d_v)
        for start_k in range(0, _key_stop(end_q, nk, diagonal), block_k):
            end_k = min(start_k + block_k, nk)
            k, v = keys[:, start_k:end_k], values[:, start_k:end_k]  # (b, bk, .)
            s = tf.matmul(q, k, transpose_b=True) * scale  # (b, bq, bk) scores
            visible = _visible(mask, diagonal, start_q, end_q, start_k, end_k)
            if visible is not None:
                s = tf.where(visible, s, neg_inf)  # (b, bq, bk)
            m_new = tf.maximum(m, tf.reduce_max(s, axis=-1))  # (b, bq)
            shift = tf.where(m_new == neg_inf, tf.zeros_like(m_new), m_new)
            p = tf.exp(s - shift[..., None])  # (b, bq, bk) unnormalised weights
            rescale = tf.exp(m - shift)  # (b, bq) exp(m_old - m_new)
            l = rescale * l + tf.reduce_sum(p, axis=-1)  # (b, bq)
            acc = rescale[..., None] * acc + tf.matmul(p, v)  # (b, bq, d_v)
            m = m_new
        seen = l > 0  # (b, bq) rows with at least one visible key
        l_safe = tf.where(seen, l, tf.ones_like(l))
        outputs.append(acc / l_safe[..., None])  # (b, bq, d_v)
        logsumexp.append(tf.where(seen, m + tf.math.log(l_safe), neg_inf))
    empty = tf.zeros((b, 0, d_v), queries.dtype)  # no query: nothing to join
    return _join(outputs, empty), _join(logsumexp, empty[..., 0])


def flash_attention(
    queries,
    keys,
    values,
    mask=None,
    causal=False,
    block_q=64,
    block_k=64,
    scale=None,
    align="top_left",
):
    """softmax(q k^T * scale) v computed tile by tile with an online softmax.

    queries (b, nq, d), keys (b, nk, d), values (b, nk, d_v); mask bool
    broadcastable to (b, nq, nk), True = attend, combined with causal by AND;
    block_q, block_k: tile sizes (they need not divide nq and nk); scale
    defaults to 1/sqrt(d); align: where the causal diagonal sits, "top_left"
    (j <= i) or "bottom_right" (j <= i + nk - nq), as in causal_mask. Returns
    (outputs (b, nq, d_v), logsumexp (b, nq)) in the inputs' dtype; equal to
    scaled_dot_product_attention and attention_logsumexp. Differentiable
    (outputs only; logsumexp carries no gradient): the gradient is
    flash_attention_backward.
    """
    queries, keys, values, mask = _inputs(queries, keys, values, mask)
    checks.flash_attention_inputs(
        queries, keys, values, mask, causal, block_q, block_k, scale, align
    )
    scale = _scale(scale, queries.shape[-1])
    options = (mask, causal, block_q, block_k, scale, align)

    @tf.custom_gradient
    def attend(queries, keys, values):
        # Inputs seen through stop_gradient: an eager outer tape would otherwise
        # record (and keep alive) every tile op; the gradient is grad below.
        outputs, logsumexp = _tiled_forward(
            *(tf.stop_gradient(x) for x in (queries, keys, values)),
            _as_3d(mask),
            *options[1:],
        )

        def grad(grad_outputs, grad_logsumexp):  # logsumexp has no gradient
            return flash_attention_backward(
                queries, keys, values, outputs, logsumexp, grad_outputs, *options
            )

        return (outputs, logsumexp), grad

    outputs, logsumexp = attend(queries, keys, values)
    return outputs, tf.stop_gradient(logsumexp)


def flash_attention_backward(
    queries,
    keys,
    values,
    outputs,
    logsumexp,
    grad_outputs,
    mask=None,
    causal=False,
    block_q=64,
    block_k=64,
    scale=None,
    align="top_left",
):
    """Gradients of flash_attention's outputs, recomputing the weights per tile.

    queries, keys, values, mask, causal, block sizes, scale and align as given
    to flash_attention; outputs (b, nq, d_v) and logsumexp (b, nq) as it returned
    them; grad_outputs (b, nq, d_v) = dLoss/dOutputs. Returns (grad_queries
    (b, nq, d), grad_keys (b, nk, d), grad_values (b, nk, d_v)). The same key
    blocks are skipped as in the forward pass.
    """
    tensors = _inputs(queries, keys, values, outputs, logsumexp, grad_outputs)
    queries, keys, values, outputs, logsumexp, grad_outputs = tensors
    (mask,) = _inputs(mask)
    checks.flash_backward_inputs(*tensors, mask, causal, block_q, block_k, scale, align)
    nq, d, nk = queries.shape[1], queries.shape[2], keys.shape[1]
    diagonal = _diagonal(causal, align, nq, nk)  # None, or the causal shift
    scale, mask = _scale(scale, d), _as_3d(mask)
    neg_inf = tf.constant(-np.inf, queries.dtype)
    lse = tf.where(logsumexp == neg_inf, tf.zeros_like(logsumexp), logsumexp)
    D = tf.reduce_sum(grad_outputs * outputs, axis=-1)  # (b, nq) rowsum(dO * O)
    starts_k = range(0, nk, block_k)  # one gradient tile per key block:
    grad_keys = [tf.zeros_like(keys[:, j : j + block_k]) for j in starts_k]
    grad_values = [tf.zeros_like(values[:, j : j + block_k]) for j in starts_k]
    grad_queries = []  # one (b, bq, d) per query block
    for start_q in range(0, nq, block_q):
        end_q = min(start_q + block_q, nq)
        q, do = queries[:, start_q:end_q], grad_outputs[:, start_q:end_q]  # (b, bq, .)
        dq = tf.zeros_like(q)  # (b, bq, d)
        for start_k in range(0, _key_stop(end_q, nk, diagonal), block_k):
            end_k, j = min(start_k + block_k, nk), start_k // block_k
            k, v = keys[:, start_k:end_k], values[:, start_k:end_k]  # (b, bk, .)
            s = tf.matmul(q, k, transpose_b=True) * scale  # (b, bq, bk) recomputed
            visible = _visible(mask, diagonal, start_q, end_q, start_k, end_k)
            if visible is not None:
                s = tf.where(visible, s, neg_inf)  # (b, bq, bk)
            p = tf.exp(s - lse[:, start_q:end_q, None])  # (b, bq, bk) weights
            grad_values[j] += tf.matmul(p, do, transpose_a=True)  # (b, bk, d_v)
            dp = tf.matmul(do, v, transpose_b=True)  # (b, bq, bk)
            ds = p * (dp - D[:, start_q:end_q, None])  # (b, bq, bk)
            dq += tf.matmul(ds, k) * scale  # (b, bq, d)
            grad_keys[j] += tf.matmul(ds, q, transpose_a=True) * scale  # (b, bk, d)
        grad_queries.append(dq)
    return tuple(
        _join(g, x[:, :0])
        for g, x in zip(
            (grad_queries, grad_keys, grad_values), (queries, keys, values), strict=True
        )
    )


def attention_logsumexp(
    queries, keys, mask=None, causal=False, scale=None, align="top_left"
):
    """log sum_j exp(q_i . k_j * scale) over the visible keys: (b, nq).

    The direct (materialising) reference for flash_attention's logsumexp:
    builds the (b, nq, nk) scores. mask as in flash_attention, combined with
    causal (aligned by align, as in causal_mask) by AND. A fully masked row
    gives -inf.
    """
    queries, keys, mask = _inputs(queries, keys, mask)
    checks.attention_logsumexp_inputs(queries, keys, mask, causal, scale, align)
    (nq, d), nk = queries.shape[1:], keys.shape[1]
    scores = tf.matmul(queries, keys, transpose_b=True) * _scale(scale, d)
    if causal:  # scores (b, nq, nk)
        below = causal_mask(nq, nk, align=align)  # (nq, nk)
        mask = below if mask is None else mask & below
    if mask is not None:
        scores = tf.where(mask, scores, tf.constant(-np.inf, scores.dtype))
    return tf.reduce_logsumexp(scores, axis=-1)  # (b, nq); -inf for a masked row
