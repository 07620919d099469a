"""Generated toy tasks for token-to-token models: copy, reverse or sort digits.

Each example is a row of ``length`` tokens drawn uniformly from
``0 .. vocab_size - 1``; the target row has the same length:

    copy     target[i] = input[i]
    reverse  target[i] = input[length - 1 - i]
    sort     target    = the input's tokens in ascending order

The arrays are framework-free (int64 NumPy), so a TensorFlow and a PyTorch
model can train on exactly the same batches (``batch_indices``) and be scored
by the same ``prediction_accuracy``. With 10 tokens and length 8 there are
10**8 rows, so a held-out split drawn from another seed is (almost surely) new.
"""

import numpy as np

from attncourse import checks

__all__ = ["TASKS", "batch_indices", "prediction_accuracy", "token_task"]

TASKS = ("copy", "reverse", "sort")


def token_task(kind, num_examples, length, vocab_size=10, seed=0):
    """(inputs, targets), both int64 (num_examples, length), for ``kind`` in
    TASKS; the same seed gives the same rows."""
    if kind not in TASKS:
        raise ValueError(f"kind must be one of {TASKS}, got {kind!r}")
    for name, value in (
        ("num_examples", num_examples),
        ("length", length),
        ("vocab_size", vocab_size),
    ):
        checks.check_positive(name, value)
    checks.check_count("seed", seed)
    rng = np.random.default_rng(int(seed))
    inputs = rng.integers(0, int(vocab_size), size=(int(num_examples), int(length)))
    if kind == "copy":
        targets = inputs.copy()
    elif kind == "reverse":
        targets = inputs[:, ::-1].copy()
    else:
        targets = np.sort(inputs, axis=1)
    return inputs.astype(np.int64), targets.astype(np.int64)


def batch_indices(num_examples, steps, batch_size, seed=0):
    """Row indices (steps, batch_size) int64: each step's minibatch, drawn
    without replacement within a step, from a generator seeded with ``seed``."""
    checks.check_positive("num_examples", num_examples)
    checks.check_positive("steps", steps)
    checks.check_positive("batch_size", batch_size)
    checks.check_count("seed", seed)
    if batch_size > num_examples:
        raise ValueError(
            f"batch_size ({batch_size}) is larger than num_examples "
            f"({num_examples}): a batch draws rows without replacement"
        )
    rng = np.random.default_rng(int(seed))
    rows = [
        rng.choice(int(num_examples), int(batch_size), replace=False)
        for _ in range(int(steps))
    ]
    return np.stack(rows).astype(np.int64)


def prediction_accuracy(predictions, targets):
    """(per-token accuracy, whole-sequence accuracy) of predicted token ids.

    predictions and targets: integer arrays of the same shape (N, length); the
    first is the fraction of positions right, the second the fraction of rows
    right at every position.
    """
    predictions, targets = np.asarray(predictions), np.asarray(targets)
    if predictions.shape != targets.shape or predictions.ndim != 2:
        raise ValueError(
            f"predictions and targets must be (N, length) arrays of one shape, got "
            f"{predictions.shape} and {targets.shape} (take argmax over the "
            f"vocabulary axis of the logits first)"
        )
    for name, a in (("predictions", predictions), ("targets", targets)):
        if not np.issubdtype(a.dtype, np.integer):
            raise TypeError(f"{name} must hold integer token ids, got {a.dtype}")
    right = predictions == targets
    return float(right.mean()), float(right.all(axis=1).mean())
