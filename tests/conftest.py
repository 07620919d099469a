"""Fixtures and converters shared by the test suite.

Parity tests compare float32 TensorFlow / PyTorch results with the float64 NumPy
reference at ``ATOL``/``RTOL``; inputs are drawn from a seeded generator.
"""

import numpy as np
import pytest

import attncourse  # noqa: F401  (quiet TF before it is imported)

ATOL = 1e-5
RTOL = 1e-5


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(0)


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
        to_np(actual).astype(np.float64), to_np(expected).astype(np.float64),
        atol=atol, rtol=rtol, err_msg=what,
    )


from book_site import site  # noqa: E402,F401  (session fixture: the built book)
