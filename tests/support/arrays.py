"""Array helpers for the library tests: framework conversions, tolerances, inputs.

Parity tests compare float32 TensorFlow / PyTorch results with the float64 NumPy
reference at ``ATOL``/``RTOL``; inputs are drawn from a seeded generator.
"""

import math

import numpy as np

import attncourse.numpy as anp

ATOL = 1e-5
RTOL = 1e-5


def to_tf(x, dtype=None):
    import tensorflow as tf

    x = np.asarray(x)
    if dtype is None and x.dtype == np.float64:
        dtype = tf.float32
    return tf.convert_to_tensor(x, dtype=dtype)


def to_torch(x, dtype=None):
    import torch

    x = np.asarray(x)
    t = torch.from_numpy(np.ascontiguousarray(x))
    if dtype is None and x.dtype == np.float64:
        dtype = torch.float32
    return t if dtype is None else t.to(dtype)


def to_np(x) -> np.ndarray:
    """A NumPy array from a NumPy array, TF tensor/variable or torch tensor."""
    if hasattr(x, "detach"):
        return x.detach().cpu().numpy()
    if hasattr(x, "numpy"):
        return x.numpy()
    return np.asarray(x)


def assert_close(actual, expected, atol=ATOL, rtol=RTOL, what=""):
    np.testing.assert_allclose(
        to_np(actual).astype(np.float64),
        to_np(expected).astype(np.float64),
        atol=atol,
        rtol=rtol,
        err_msg=what,
    )


def make_params(rng, d_q, d_k, d_v, d_model, d_out, bias=True):
    params = {
        "W_q": rng.normal(size=(d_q, d_model)) / math.sqrt(d_q),
        "W_k": rng.normal(size=(d_k, d_model)) / math.sqrt(d_k),
        "W_v": rng.normal(size=(d_v, d_model)) / math.sqrt(d_v),
        "W_o": rng.normal(size=(d_model, d_out)) / math.sqrt(d_model),
    }
    if bias:
        params.update({f"b_{c}": rng.normal(size=d_model) for c in "qkv"})
        params["b_o"] = rng.normal(size=d_out)
    return params


def make_mask(rng, kind, batch, heads, n_q, n_k):
    """Masks of every supported shape; every row keeps at least one key."""
    if kind is None:
        return None
    if kind == "padding":  # (batch, 1, n_k)
        lens = rng.integers(1, n_k + 1, size=batch)
        return np.arange(n_k)[None, None, :] < lens[:, None, None]
    if kind == "causal":  # (n_q, n_k)
        return anp.causal_mask(n_q, n_k)
    shape = (batch, n_q, n_k) if kind == "full3d" else (batch, heads, n_q, n_k)
    mask = rng.random(shape) < 0.6
    mask[..., 0] = True
    return mask


def inputs(rng, batch=2, n_q=3, n_k=5, d_q=6, d_k=4, d_v=7):
    return (
        rng.normal(size=(batch, n_q, d_q)),
        rng.normal(size=(batch, n_k, d_k)),
        rng.normal(size=(batch, n_k, d_v)),
    )
