"""Tiled (FlashAttention-style) attention in NumPy: the float64 reference.

flash_attention computes softmax(q k^T * scale) v one (block_q, block_k) tile
of the scores at a time and never holds the (num_queries, num_keys) table.
For each block of queries it walks the key blocks and keeps, per query, the
running maximum m of the scores seen so far, the running sum l of exp(score -
m), and the unnormalised output acc = sum exp(score - m) v (online softmax).
A new tile with a larger maximum rescales l and acc by exp(m_old - m_new).
At the end outputs = acc / l and logsumexp = m + log(l), the one number per
query that the backward pass needs to recompute the weights of any tile:
p = exp(score - logsumexp).

flash_attention_backward is the FlashAttention-2 backward pass: D = rowsum(dO
* O), then per tile P = exp(S - logsumexp), dV += P^T dO, dP = dO V^T, dS = P
* (dP - D), dQ += dS K * scale, dK += dS^T Q * scale.

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

from attncourse import checks
from attncourse._tiles import _diagonal, _key_stop

from .masking import causal_mask

__all__ = ["attention_logsumexp", "flash_attention", "flash_attention_backward"]


def _as_3d(mask):
    """A mask broadcastable to (b, nq, nk) with leading size-1 axes added."""
    return None if mask is None else mask.reshape((1,) * (3 - mask.ndim) + mask.shape)


def _visible(mask, diagonal, start_q, end_q, start_k, end_k):
    """Which scores of the tile (queries start_q:end_q, keys start_k:end_k) are
    kept: a bool array broadcastable to (b, bq, bk), or None for all of them.
    The causal part is built only for a tile that straddles the diagonal."""
    tile = None
    if mask is not None:  # a size-1 axis is shared by every tile
        rows = slice(start_q, end_q) if mask.shape[1] > 1 else slice(None)
        cols = slice(start_k, end_k) if mask.shape[2] > 1 else slice(None)
        tile = mask[:, rows, cols]  # (b | 1, bq | 1, bk | 1)
    if diagonal is not None and end_k - 1 > start_q + diagonal:  # straddles it
        rows = np.arange(start_q, end_q)[:, None] + diagonal  # (bq, 1)
        below = np.arange(start_k, end_k) <= rows  # (bq, bk)
        tile = below if tile is None else tile & below  # (b | 1, bq, bk)
    return tile


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
    scaled_dot_product_attention and attention_logsumexp.
    """
    queries, keys, values = (np.asarray(x) for x in (queries, keys, values))
    mask = None if mask is None else np.asarray(mask)
    checks.flash_attention_inputs(
        queries, keys, values, mask, causal, block_q, block_k, scale, align
    )
    (b, nq, d), (nk, d_v) = queries.shape, values.shape[1:]
    scale = 1 / math.sqrt(d) if scale is None else float(scale)
    diagonal = _diagonal(causal, align, nq, nk)  # None, or the causal shift
    mask, dtype = _as_3d(mask), queries.dtype
    outputs = np.zeros((b, nq, d_v), dtype)  # (b, nq, d_v)
    logsumexp = np.full((b, nq), -np.inf, dtype)  # (b, nq)
    for start_q in range(0, nq, block_q):
        end_q = min(start_q + block_q, nq)
        q = queries[:, start_q:end_q]  # (b, bq, d)
        m = np.full((b, end_q - start_q), -np.inf, dtype)  # (b, bq) running max
        l = np.zeros((b, end_q - start_q), dtype)  # (b, bq) running sum
        acc = np.zeros((b, end_q - start_q, d_v), dtype)  # (b, bq, d_v)
        for start_k in range(0, _key_stop(end_q, nk, diagonal), block_k):
            end_k = min(start_k + block_k, nk)
            k, v = keys[:, start_k:end_k], values[:, start_k:end_k]  # (b, bk, .)
            s = q @ k.swapaxes(1, 2) * scale  # (b, bq, bk) scores of the tile
            visible = _visible(mask, diagonal, start_q, end_q, start_k, end_k)
            if visible is not None:
                s = np.where(visible, s, -np.inf)  # (b, bq, bk)
            m_new = np.maximum(m, s.max(axis=-1))  # (b, bq)
            shift = np.where(np.isneginf(m_new), 0, m_new)  # no key seen yet: 0
            p = np.exp(s - shift[..., None])  # (b, bq, bk) unnormalised weights
            rescale = np.exp(m - shift)  # (b, bq) exp(m_old - m_new)
            l = rescale * l + p.sum(axis=-1)  # (b, bq)
            acc = rescale[..., None] * acc + p @ v  # (b, bq, d_v)
            m = m_new
        seen = l > 0  # (b, bq) rows with at least one visible key
        l_safe = np.where(seen, l, 1)
        outputs[:, start_q:end_q] = acc / l_safe[..., None]  # (b, bq, d_v)
        logsumexp[:, start_q:end_q] = np.where(seen, m + np.log(l_safe), -np.inf)
    return outputs, logsumexp


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
    queries, keys, values, outputs, logsumexp, grad_outputs = (
        np.asarray(x) for x in (queries, keys, values, outputs, logsumexp, grad_outputs)
    )
    mask = None if mask is None else np.asarray(mask)
    checks.flash_backward_inputs(
        queries,
        keys,
        values,
        outputs,
        logsumexp,
        grad_outputs,
        mask,
        causal,
        block_q,
        block_k,
        scale,
        align,
    )
    nq, d, nk = queries.shape[1], queries.shape[2], keys.shape[1]
    scale = 1 / math.sqrt(d) if scale is None else float(scale)
    diagonal = _diagonal(causal, align, nq, nk)  # None, or the causal shift
    mask = _as_3d(mask)
    lse = np.where(np.isneginf(logsumexp), 0, logsumexp)  # (b, nq) masked rows: 0
    D = (grad_outputs * outputs).sum(axis=-1)  # (b, nq) rowsum(dO * O)
    grad_queries = np.zeros_like(queries)  # (b, nq, d)
    grad_keys = np.zeros_like(keys)  # (b, nk, d)
    grad_values = np.zeros_like(values)  # (b, nk, d_v)
    for start_q in range(0, nq, block_q):
        end_q = min(start_q + block_q, nq)
        q, do = queries[:, start_q:end_q], grad_outputs[:, start_q:end_q]  # (b, bq, .)
        for start_k in range(0, _key_stop(end_q, nk, diagonal), block_k):
            end_k = min(start_k + block_k, nk)
            k, v = keys[:, start_k:end_k], values[:, start_k:end_k]  # (b, bk, .)
            s = q @ k.swapaxes(1, 2) * scale  # (b, bq, bk) recomputed scores
            visible = _visible(mask, diagonal, start_q, end_q, start_k, end_k)
            if visible is not None:
                s = np.where(visible, s, -np.inf)  # (b, bq, bk)
            p = np.exp(s - lse[:, start_q:end_q, None])  # (b, bq, bk) weights
            grad_values[:, start_k:end_k] += p.swapaxes(1, 2) @ do  # (b, bk, d_v)
            dp = do @ v.swapaxes(1, 2)  # (b, bq, bk)
            ds = p * (dp - D[:, start_q:end_q, None])  # (b, bq, bk)
            grad_queries[:, start_q:end_q] += ds @ k * scale  # (b, bq, d)
            grad_keys[:, start_k:end_k] += ds.swapaxes(1, 2) @ q * scale  # (b, bk, d)
    return grad_queries, grad_keys, grad_values


def attention_logsumexp(
    queries, keys, mask=None, causal=False, scale=None, align="top_left"
):
    """log sum_j exp(q_i . k_j * scale) over the visible keys: (b, nq).

    The direct (materialising) reference for flash_attention's logsumexp:
    builds the (b, nq, nk) scores. mask as in flash_attention, combined with
    causal (aligned by align, as in causal_mask) by AND. A fully masked row
    gives -inf.
    """
    queries, keys = np.asarray(queries), np.asarray(keys)
    mask = None if mask is None else np.asarray(mask)
    checks.attention_logsumexp_inputs(queries, keys, mask, causal, scale, align)
    (nq, d), nk = queries.shape[1:], keys.shape[1]
    scale = 1 / math.sqrt(d) if scale is None else float(scale)
    scores = queries @ keys.swapaxes(1, 2) * scale  # (b, nq, nk)
    if causal:
        below = causal_mask(nq, nk, align=align)  # (nq, nk)
        mask = below if mask is None else mask & below
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)  # (b, nq, nk)
    top = scores.max(axis=-1, keepdims=True, initial=-np.inf)  # (b, nq, 1)
    top = np.where(np.isneginf(top), 0, top)  # a fully masked row: 0
    total = np.exp(scores - top).sum(axis=-1)  # (b, nq)
    with np.errstate(divide="ignore"):  # log(0) = -inf for a fully masked row
        return np.log(total) + top[..., 0]  # (b, nq)
