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

__all__ = [
    "TASKS",
    "batch_indices",
    "induction_accuracy",
    "induction_task",
    "prediction_accuracy",
    "token_task",
]

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


def induction_task(
    batch, half_len, vocab_size, seed=0, *, distinct=True, min_repeat=None
):
    """Repeated random sequences: tokens int64 (batch, 2 * half_len).

    Each row is a random sequence A of half_len tokens followed by A again
    ("A B C ... A B C ..."). From the second copy on, the next token can be
    read off the first copy: find the earlier occurrence of the current token
    and copy the token after it (an induction head). With ``distinct`` (the
    default) a row holds no other repeated token, so that earlier occurrence
    is unique.

    With a fixed half_len every copy sits half_len positions back, and a
    head that attends by position alone ("half_len - 1 back") would do.
    ``min_repeat`` breaks that shortcut: each row's A then has a random length
    L in [min_repeat, half_len], and the row is 2 * (half_len - L) random
    filler tokens, then A, then A again, so the distance between the copies
    changes from row to row. distinct needs 2 * half_len - L <= vocab_size.
    """
    min_len = half_len if min_repeat is None else min_repeat
    checks.induction_task_sizes(batch, half_len, vocab_size, seed, distinct, min_len)
    rng = np.random.default_rng(int(seed))
    batch, half_len, vocab_size = int(batch), int(half_len), int(vocab_size)
    lengths = rng.integers(int(min_len), half_len + 1, size=batch)
    rows = np.zeros((batch, 2 * half_len), dtype=np.int64)
    for row, length in zip(rows, lengths, strict=True):
        fresh = 2 * half_len - length  # filler + A, all drawn anew
        if distinct:
            draw = rng.permutation(vocab_size)[:fresh]
        else:
            draw = rng.integers(0, vocab_size, size=fresh)
        row[:fresh] = draw
        row[fresh:] = draw[-length:]  # the second copy of A
    return rows


def induction_accuracy(predictions, tokens):
    """Accuracy of next-token predictions where induction applies: over the
    positions i <= n - 2 whose token occurred earlier in the row (the second
    copy of an induction_task row), the fraction with predictions[b, i] ==
    tokens[b, i + 1]. Chance is about 1 / vocab_size.

    predictions: int (batch, n), the argmax of the logits at each position.
    """
    predictions, tokens = np.asarray(predictions), np.asarray(tokens)
    if predictions.shape != tokens.shape or tokens.ndim != 2:
        raise ValueError(
            f"predictions and tokens must be (batch, n) arrays of one shape, got "
            f"{predictions.shape} and {tokens.shape} (take argmax over the "
            f"vocabulary axis of the logits first)"
        )
    for name, a in (("predictions", predictions), ("tokens", tokens)):
        if not np.issubdtype(a.dtype, np.integer):
            raise TypeError(f"{name} must hold integer token ids, got {a.dtype}")
    n = tokens.shape[1]
    earlier = (tokens[:, :, None] == tokens[:, None, :]) & np.tri(n, k=-1, dtype=bool)
    repeated = earlier.any(axis=2)[:, :-1]  # (batch, n - 1): i has a target
    checks.check_repeated_tokens(int(repeated.sum()), tokens.shape)
    right = predictions[:, :-1] == tokens[:, 1:]
    return float(right[repeated].mean())
