"""Tiled (FlashAttention-style) attention in PyTorch: a torch.autograd.Function.

flash_attention computes softmax(q k^T * scale) v one (block_q, block_k) tile
of the scores at a time and never holds the (num_queries, num_keys) table.
For each block of queries it walks the key blocks and keeps, per query, the
running maximum m of the scores seen so far, the running sum l of exp(score -
m), and the unnormalised output acc = sum exp(score - m) v (online softmax).
A new tile with a larger maximum rescales l and acc by exp(m_old - m_new).
At the end outputs = acc / l and logsumexp = m + log(l), the one number per
query that the backward pass needs to recompute the weights of any tile:
p = exp(score - logsumexp).

FlashAttention saves queries, keys, values, outputs and logsumexp -- one (b,
nq) tensor besides the inputs and outputs, never the (b, nq, nk) weights --
and its backward is flash_attention_backward, the FlashAttention-2 backward
pass: D = rowsum(dO * O), then per tile P = exp(S - logsumexp), dV += P^T dO,
dP = dO V^T, dS = P * (dP - D), dQ += dS K * scale, dK += dS^T Q * scale.

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

import torch

from attncourse import checks
from attncourse._tiles import _diagonal, _key_stop

from .masking import causal_mask

__all__ = [
    "FlashAttention",
    "attention_logsumexp",
    "flash_attention",
    "flash_attention_backward",
]


def _as_3d(mask):
    """A mask broadcastable to (b, nq, nk) with leading size-1 axes added."""
    return None if mask is None else mask.reshape((1,) * (3 - mask.ndim) + mask.shape)


def _visible(mask, diagonal, start_q, end_q, start_k, end_k, device):
    """Which scores of the tile (queries start_q:end_q, keys start_k:end_k) are
    kept: a bool tensor broadcastable to (b, bq, bk), or None for all of them.
    The causal part is built only for a tile that straddles the diagonal."""
    tile = None
    if mask is not None:  # a size-1 axis is shared by every tile
        rows = slice(start_q, end_q) if mask.shape[1] > 1 else slice(None)
        cols = slice(start_k, end_k) if mask.shape[2] > 1 else slice(None)
        tile = mask[:, rows, cols]  # (b | 1, bq | 1, bk | 1)
    if diagonal is not None and end_k - 1 > start_q + diagonal:  # straddles it
        cols = torch.arange(start_k, end_k, device=device)
        rows = torch.arange(start_q, end_q, device=device)[:, None] + diagonal
        below = cols <= rows  # (bq, bk)
        tile = below if tile is None else tile & below  # (b | 1, bq, bk)
    return tile


def _inputs(*xs, device=None):
    """Tensors from the arguments (None stays None), on ``device`` if given."""
    return tuple(None if x is None else torch.as_tensor(x, device=device) for x in xs)


def _scale(scale, d):
    return 1 / math.sqrt(d) if scale is None else float(scale)


class FlashAttention(torch.autograd.Function):
    """Tiled attention whose backward recomputes the weights tile by tile.

    FlashAttention.apply(queries, keys, values, mask, causal, block_q,
    block_k, scale, align) -> (outputs, logsumexp), arguments as in flash_attention
    (positional, as apply takes them; flash_attention validates them first).
    logsumexp is returned for inspection and carries no gradient.
    """

    @staticmethod
    def forward(
        ctx, queries, keys, values, mask, causal, block_q, block_k, scale, align
    ):
        (b, nq, d), (nk, d_v) = queries.shape, values.shape[1:]
        diagonal = _diagonal(causal, align, nq, nk)  # None, or the causal shift
        scale, tiles = _scale(scale, d), _as_3d(mask)
        options = {"dtype": queries.dtype, "device": queries.device}
        outputs = torch.zeros(b, nq, d_v, **options)  # (b, nq, d_v)
        logsumexp = torch.full((b, nq), -math.inf, **options)  # (b, nq)
        for start_q in range(0, nq, block_q):
            end_q = min(start_q + block_q, nq)
            q = queries[:, start_q:end_q]  # (b, bq, d)
            m = torch.full((b, end_q - start_q), -math.inf, **options)  # running max
            l = torch.zeros(b, end_q - start_q, **options)  # (b, bq) running sum
            acc = torch.zeros(b, end_q - start_q, d_v, **options)  # (b, bq, d_v)
            for start_k in range(0, _key_stop(end_q, nk, diagonal), block_k):
                end_k = min(start_k + block_k, nk)
                k, v = keys[:, start_k:end_k], values[:, start_k:end_k]  # (b, bk, .)
                s = q @ k.transpose(1, 2) * scale  # (b, bq, bk) scores of the tile
                visible = _visible(
                    tiles, diagonal, start_q, end_q, start_k, end_k, queries.device
                )
                if visible is not None:
                    s = s.masked_fill(~visible, -math.inf)  # (b, bq, bk)
                m_new = torch.maximum(m, s.amax(dim=-1))  # (b, bq)
                shift = m_new.masked_fill(m_new.isneginf(), 0)  # no key seen yet: 0
                p = torch.exp(s - shift[..., None])  # (b, bq, bk) unnormalised
                rescale = torch.exp(m - shift)  # (b, bq) exp(m_old - m_new)
                l = rescale * l + p.sum(dim=-1)  # (b, bq)
                acc = rescale[..., None] * acc + p @ v  # (b, bq, d_v)
                m = m_new
            seen = l > 0  # (b, bq) rows with at least one visible key
            l_safe = l.masked_fill(~seen, 1)
            outputs[:, start_q:end_q] = acc / l_safe[..., None]  # (b, bq, d_v)
            lse = (m + torch.log(l_safe)).masked_fill(~seen, -math.inf)  # (b, bq)
            logsumexp[:, start_q:end_q] = lse
        ctx.save_for_backward(queries, keys, values, outputs, logsumexp)
        ctx.options = (mask, causal, block_q, block_k, scale, align)
        ctx.mark_non_differentiable(logsumexp)
        return outputs, logsumexp

    @staticmethod
    def backward(ctx, grad_outputs, grad_logsumexp):
        queries, keys, values, outputs, logsumexp = ctx.saved_tensors
        grads = flash_attention_backward(
            queries, keys, values, outputs, logsumexp, grad_outputs, *ctx.options
        )
        return (*grads, None, None, None, None, None, None)  # none for the options


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
    scaled_dot_product_attention and attention_logsumexp. Differentiable through
    FlashAttention (outputs only; logsumexp carries no gradient).
    """
    queries, keys, values = _inputs(queries, keys, values)
    (mask,) = _inputs(mask, device=queries.device)
    checks.flash_attention_inputs(
        queries, keys, values, mask, causal, block_q, block_k, scale, align
    )
    return FlashAttention.apply(
        queries, keys, values, mask, causal, block_q, block_k, scale, align
    )


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
    (mask,) = _inputs(mask, device=queries.device)
    checks.flash_backward_inputs(*tensors, mask, causal, block_q, block_k, scale, align)
    nq, d, nk = queries.shape[1], queries.shape[2], keys.shape[1]
    diagonal = _diagonal(causal, align, nq, nk)  # None, or the causal shift
    scale, mask = _scale(scale, d), _as_3d(mask)
    lse = logsumexp.masked_fill(logsumexp.isneginf(), 0)  # (b, nq) masked rows: 0
    D = (grad_outputs * outputs).sum(dim=-1)  # (b, nq) rowsum(dO * O)
    grad_queries = torch.zeros_like(queries)  # (b, nq, d)
    grad_keys = torch.zeros_like(keys)  # (b, nk, d)
    grad_values = torch.zeros_like(values)  # (b, nk, d_v)
    for start_q in range(0, nq, block_q):
        end_q = min(start_q + block_q, nq)
        q, do = queries[:, start_q:end_q], grad_outputs[:, start_q:end_q]  # (b, bq, .)
        for start_k in range(0, _key_stop(end_q, nk, diagonal), block_k):
            end_k = min(start_k + block_k, nk)
            k, v = keys[:, start_k:end_k], values[:, start_k:end_k]  # (b, bk, .)
            s = q @ k.transpose(1, 2) * scale  # (b, bq, bk) recomputed scores
            visible = _visible(
                mask, diagonal, start_q, end_q, start_k, end_k, queries.device
            )
            if visible is not None:
                s = s.masked_fill(~visible, -math.inf)  # (b, bq, bk)
            p = torch.exp(s - lse[:, start_q:end_q, None])  # (b, bq, bk) weights
            grad_values[:, start_k:end_k] += p.transpose(1, 2) @ do  # (b, bk, d_v)
            dp = do @ v.transpose(1, 2)  # (b, bq, bk)
            ds = p * (dp - D[:, start_q:end_q, None])  # (b, bq, bk)
            grad_queries[:, start_q:end_q] += ds @ k * scale  # (b, bq, d)
            grad_keys[:, start_k:end_k] += ds.transpose(1, 2) @ q * scale  # (b, bk, d)
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
    queries, keys = _inputs(queries, keys)
    (mask,) = _inputs(mask, device=queries.device)
    checks.attention_logsumexp_inputs(queries, keys, mask, causal, scale, align)
    (nq, d), nk = queries.shape[1:], keys.shape[1]
    scores = queries @ keys.transpose(1, 2) * _scale(scale, d)  # (b, nq, nk)
    if causal:
        below = causal_mask(nq, nk, align=align).to(queries.device)  # (nq, nk)
        mask = below if mask is None else mask & below
    if mask is not None:
        scores = scores.masked_fill(~mask, -math.inf)  # (b, nq, nk)
    return torch.logsumexp(scores, dim=-1)  # (b, nq); -inf for a masked row
