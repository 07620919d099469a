"""Float64 NumPy building blocks for the graders' reference implementations.

Forward passes and the hand-written backward passes the reference data needs
(attention is small enough to differentiate by hand). Batch first; masks are
boolean, True = attend, broadcast right-aligned; a fully masked row gets
all-zero weights -- the course's conventions (see ``attncourse``).

Independent of ``attncourse`` on purpose: the hidden reference outputs must not
inherit a bug of the library the chapters teach, so this module and the
assignments' ``expected`` functions are written again from the maths and only
*compared* with the library (each assignment's ``crosscheck``, run by
``python -m grader references``). It imports NumPy only
(tests/grading/test_layout.py checks).
"""

import numpy as np


def softmax(x, axis=-1):
    """Numerically stable softmax over ``axis``."""
    x = np.asarray(x, dtype=np.float64)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def masked_softmax(scores, mask=None):
    """Softmax over the last axis that ignores masked keys (mask True = attend).

    Rows with no unmasked key get all-zero weights, never NaN.
    """
    scores = np.asarray(scores, dtype=np.float64)
    if mask is None:
        return softmax(scores)
    mask = np.broadcast_to(np.asarray(mask, dtype=bool), scores.shape)
    top = np.max(np.where(mask, scores, -np.inf), axis=-1, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    e = np.where(mask, np.exp(np.where(mask, scores, 0.0) - top), 0.0)
    total = e.sum(axis=-1, keepdims=True)
    return np.divide(e, total, out=np.zeros_like(e), where=total > 0)


def softmax_backward(weights, grad_weights):
    """Gradient w.r.t. the scores of a (masked) softmax over the last axis."""
    inner = np.sum(grad_weights * weights, axis=-1, keepdims=True)
    return weights * (grad_weights - inner)


def attention(q, k, v, scale, mask=None):
    """softmax(scale * q k^T, mask) v over the last two axes -> (outputs, weights)."""
    weights = masked_softmax(scale * q @ np.swapaxes(k, -1, -2), mask)
    return weights @ v, weights


def attention_backward(q, k, v, weights, grad_out, scale):
    """Gradients (dq, dk, dv) of sum(outputs * grad_out) for ``attention``."""
    grad_weights = grad_out @ np.swapaxes(v, -1, -2)
    dv = np.swapaxes(weights, -1, -2) @ grad_out
    ds = softmax_backward(weights, grad_weights) * scale
    dq = ds @ k
    dk = np.swapaxes(ds, -1, -2) @ q
    return dq, dk, dv


def split_heads(x, h):
    """(batch, n, h * d_head) -> (batch, h, n, d_head): contiguous feature blocks."""
    b, n, d = x.shape
    return x.reshape(b, n, h, d // h).transpose(0, 2, 1, 3)


def merge_heads(x):
    """(batch, h, n, d_head) -> (batch, n, h * d_head), heads in order."""
    b, h, n, dh = x.shape
    return x.transpose(0, 2, 1, 3).reshape(b, n, h * dh)


def lengths_mask(lengths, n):
    """(batch, n) bool: True at positions < length."""
    return np.arange(n)[None, :] < np.asarray(lengths)[:, None]


def causal(n):
    """(n, n) bool: True where key j <= query i."""
    return np.tril(np.ones((n, n), dtype=bool))
