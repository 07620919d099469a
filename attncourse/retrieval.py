"""The marked-item retrieval task of the soft and hard attention chapter.

Each example is a set of ``num_items`` items. Item i has N(0, 1) features (its
key) and a random label, stored one-hot (its value). One item per example is
*marked*: its feature 0 is shifted up by ``mark``. The target is the marked
item's label. Noise can lift an unmarked item above the marked one, so even the
best possible picker (the largest feature 0) is sometimes wrong.

The arrays are NumPy float32, so a TensorFlow and a PyTorch model can train on
exactly the same batches and be scored by the same ``read_metrics``.
"""

import numpy as np

__all__ = ["item_losses", "marked_items", "read_metrics"]


def _count(name, value):
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{name} must be at least 1, got {value}")


def marked_items(rng, batch, num_items=16, num_features=8, num_classes=10, mark=3.5):
    """One batch drawn from the generator ``rng``: (feats (batch, n, f), values
    (batch, n, C) one-hot, target (batch, C) one-hot, marked (batch,) int64).

    The same generator state gives the same batch.
    """
    if not isinstance(rng, np.random.Generator):
        raise TypeError(
            f"rng must be a numpy.random.Generator (np.random.default_rng(seed)), "
            f"got {type(rng).__name__}"
        )
    for name, value in (
        ("batch", batch),
        ("num_items", num_items),
        ("num_features", num_features),
        ("num_classes", num_classes),
    ):
        _count(name, value)
    feats = rng.normal(size=(batch, num_items, num_features))  # (B, n, f)
    marked = rng.integers(num_items, size=batch)  # (B,)
    feats[np.arange(batch), marked, 0] += mark
    labels = rng.integers(num_classes, size=(batch, num_items))  # (B, n)
    values = np.eye(num_classes, dtype=np.float32)[labels]  # (B, n, C)
    return feats.astype(np.float32), values, values[np.arange(batch), marked], marked


def item_losses(values, target):
    """Squared error of reading each item: values (B, n, C), target (B, C) -> (B, n)."""
    values, target = np.asarray(values), np.asarray(target)
    if values.ndim != 3 or target.shape != (values.shape[0], values.shape[2]):
        raise ValueError(
            f"values must be (batch, num_items, num_classes) and target (batch, "
            f"num_classes), got {values.shape} and {target.shape}"
        )
    return ((values - target[:, None, :]) ** 2).sum(axis=-1)


def read_metrics(weights, losses):
    """(accuracy of the argmax read, expected loss of a sampled read).

    weights (B, n): one attention distribution per example; losses (B, n): the
    loss of reading each item (``item_losses``). A read is right when its loss
    is 0. The expected loss sum_i weights_i * losses_i is exact, not sampled.
    """
    weights, losses = np.asarray(weights), np.asarray(losses)
    if weights.ndim != 2 or weights.shape != losses.shape:
        raise ValueError(
            f"weights and losses must both be (batch, num_items), got "
            f"{weights.shape} and {losses.shape}"
        )
    picked = losses[np.arange(len(weights)), weights.argmax(axis=-1)]
    return float(np.mean(picked == 0)), float(np.mean((weights * losses).sum(-1)))
