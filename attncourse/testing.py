"""Small assertions for the exercises' visible tests (``attncourse.testing``).

They accept TensorFlow or PyTorch tensors (or NumPy arrays) and fail with a
message that says what was expected, so a student can act on it.
"""

import numpy as np


def as_array(x, what="result") -> np.ndarray:
    """x as a NumPy array (TF/torch tensors and variables included)."""
    if x is None:
        raise AssertionError(f"{what} is None")
    try:
        if hasattr(x, "detach"):  # torch
            x = x.detach().cpu().numpy()
        elif hasattr(x, "numpy"):  # TF tensors and variables, Keras variables
            x = x.numpy()
        arr = np.asarray(x)
    except Exception as exc:  # noqa: BLE001
        raise AssertionError(
            f"{what} could not be converted to an array ({type(exc).__name__}: "
            f"{exc}); return a TensorFlow or PyTorch tensor"
        ) from None
    if arr.dtype.kind == "O":
        raise AssertionError(f"{what} is not a tensor of numbers (got {type(x)})")
    return arr.astype(np.float64) if arr.dtype.kind == "f" else arr


def expect_shape(x, shape, what="result") -> None:
    """x has exactly ``shape``."""
    got = tuple(as_array(x, what).shape)
    assert got == tuple(shape), f"{what} should have shape {tuple(shape)}, got {got}"


def expect_distribution(weights, what="weights", mask=None, atol=1e-5) -> None:
    """Weights are >= 0 and sum to 1 over the last axis (the keys).

    With ``mask`` (True = attend, broadcastable), masked entries must be 0 and
    rows with no unmasked entry must be all zero.
    """
    w = as_array(weights, what)
    assert np.all(np.isfinite(w)), f"{what} contain NaN or inf"
    assert np.all(w >= -atol), f"{what} must be non-negative"
    target = np.ones(w.shape[:-1])
    if mask is not None:
        m = np.broadcast_to(as_array(mask, "mask").astype(bool), w.shape)
        assert np.allclose(w[~m], 0, atol=atol), (
            f"{what} must be 0 where the mask is False (masked keys)"
        )
        target = m.any(axis=-1).astype(float)
    sums = w.sum(axis=-1)
    assert np.allclose(sums, target, atol=atol), (
        f"each row of {what} should sum to 1 over the keys (last axis)"
        + ("; rows with no unmasked key should sum to 0" if mask is not None else "")
        + f"; got row sums between {sums.min():.4f} and {sums.max():.4f}"
    )


def expect_close(actual, desired, what="result", atol=1e-5, rtol=1e-4) -> None:
    """actual == desired within the tolerances (same shape)."""
    a, d = as_array(actual, what), as_array(desired, "expected")
    assert a.shape == d.shape, f"{what} should have shape {d.shape}, got {a.shape}"
    assert np.allclose(a, d, atol=atol, rtol=rtol), (
        f"{what} is not as expected (largest difference "
        f"{np.max(np.abs(a - d)):.3g}, tolerance {atol:g})"
    )
