"""Catalogued mistakes of ``positions`` (RoPE and RoPE attention scores).

ROWS are ``support.grading.B``'s arguments: (assignment, student, part,
edits, lost, tag[, says]). Each edits the reference solution of one part; a
student notebook carries at most one TensorFlow and one PyTorch mistake.
"""

A = "positions"


def cells(part, *names):
    return tuple(f"{part}-{n}" for n in names)


HIDDEN = ("hidden-rope", "hidden-scores", "hidden-gradients")
TF_ALL = cells("tf", "visible", *HIDDEN)
TORCH_ALL = cells("torch", "visible", *HIDDEN)
TF_HIDDEN = cells("tf", *HIDDEN)
TORCH_HIDDEN = cells("torch", *HIDDEN)

ROWS = [
    # the chapter's halves (i, i + head_dim/2) instead of neighbouring pairs
    (
        A,
        "bug1",
        "tf",
        [
            ("x[..., 0::2], x[..., 1::2]", "x[..., :half], x[..., half:]"),
            (
                "return tf.reshape(pairs, tf.shape(x))",
                "return tf.concat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)",
            ),
        ],
        TF_ALL,
        "halves-pairs",
    ),
    # the rotation written with the wrong sign: the pairs turn by -theta
    (
        A,
        "bug1",
        "torch",
        [
            (
                "x1 * cos - x2 * sin, x2 * cos + x1 * sin",
                "x1 * cos + x2 * sin, x2 * cos - x1 * sin",
            )
        ],
        TORCH_ALL,
        "rotation-sign",
    ),
    # arange(half) / head_dim: the exponent i/d instead of 2i/d (the visible
    # test's head_dim-4 pair 1 turns too fast)
    (
        A,
        "bug2",
        "tf",
        [
            (
                "tf.range(half, dtype=x.dtype) * 2 / head_dim",
                "tf.range(half, dtype=x.dtype) / head_dim",
            )
        ],
        TF_ALL,
        "frequency-exponent",
    ),
    # the default positions start at 1: only the call without positions is off
    (
        A,
        "bug2",
        "torch",
        [("torch.arange(x.shape[-2])", "torch.arange(1, x.shape[-2] + 1)")],
        cells("torch", "visible", "hidden-rope"),
        "positions-from-one",
    ),
    # the keys keep their features: the scores lose the relative property
    (
        A,
        "bug3",
        "tf",
        [("k = apply_rope_tf(keys, k_positions)", "k = keys")],
        cells("tf", "visible", "hidden-scores", "hidden-gradients"),
        "keys-not-rotated",
    ),
    # divided by sqrt(heads * head_dim), the model width
    (
        A,
        "bug3",
        "torch",
        [
            (
                "/ math.sqrt(queries.shape[-1])",
                "/ math.sqrt(queries.shape[1] * queries.shape[-1])",
            )
        ],
        cells("torch", "hidden-scores", "hidden-gradients"),
        "scale-d-model",
    ),
    # cached decoding: the new queries rotated from position 0
    (
        A,
        "bug4",
        "tf",
        [("q = apply_rope_tf(queries, q_positions)", "q = apply_rope_tf(queries)")],
        cells("tf", "visible", "hidden-scores", "hidden-gradients"),
        "query-offset-ignored",
    ),
    # no head_dim check: the even and odd features do not match and torch
    # raises a RuntimeError (not the ValueError asked for)
    (
        A,
        "bug4",
        "torch",
        [
            (
                "    if head_dim % 2:\n        raise ValueError(",
                "    if False:\n        raise ValueError(",
            )
        ],
        cells("torch", "visible", "hidden-rope"),
        "odd-head-dim-wrong-error",
    ),
    # (batch, n) positions broadcast onto the heads axis: a shape error in the
    # visible test (batch 2, heads 3), wrong numbers in the hidden cases
    # (batch == heads)
    (
        A,
        "bug5",
        "tf",
        [
            (
                "angles = angles[:, None]  # (batch, 1, n, half)",
                "angles = angles  # (batch, 1, n, half)",
            )
        ],
        cells("tf", "visible", "hidden-rope", "hidden-scores"),
        "heads-axis",
    ),
    # cos and sin exchanged: (1, 0) at position 0 turns to (0, 1)
    (
        A,
        "bug5",
        "torch",
        [
            (
                "cos, sin = torch.cos(angles), torch.sin(angles)",
                "cos, sin = torch.sin(angles), torch.cos(angles)",
            )
        ],
        TORCH_ALL,
        "cos-sin-swapped",
    ),
    # an extra zero in the base (the visible test's pair 1 turns too slowly)
    (
        A,
        "bug6",
        "tf",
        [("freqs = 10000.0 **", "freqs = 100000.0 **")],
        TF_ALL,
        "base-100000",
    ),
    # the halves' angle layout concat(theta, theta) with neighbouring pairs:
    # pair i turns by two different angles (head_dim 2 has one and passes)
    (
        A,
        "bug6",
        "torch",
        [
            (
                "    pairs = torch.stack(",
                "    cos, sin = torch.cat([cos, cos], -1), torch.cat([sin, sin], -1)\n"
                "    cos, sin = (cos[..., 0::2], cos[..., 1::2]), "
                "(sin[..., 0::2], sin[..., 1::2])\n"
                "    pairs = torch.stack(",
            ),
            (
                "[x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1",
                "[x1 * cos[0] - x2 * sin[0], x2 * cos[1] + x1 * sin[1]], dim=-1",
            ),
        ],
        TORCH_ALL,
        "mixed-layout",
    ),
    # the positions argument overwritten by 0..n-1
    (
        A,
        "bug7",
        "tf",
        [
            (
                "    if positions is None:\n        positions = tf.range(n)",
                "    positions = tf.range(n)",
            )
        ],
        TF_ALL,
        "positions-ignored",
    ),
    (
        A,
        "bug7",
        "torch",
        [(" / math.sqrt(queries.shape[-1])", "")],
        cells("torch", "hidden-scores", "hidden-gradients"),
        "missing-scale",
    ),
    # the pairs turned right but written back as halves: the scores cannot
    # tell (queries and keys permuted alike), the rotated vectors can
    (
        A,
        "bug8",
        "tf",
        [
            (
                "return tf.reshape(pairs, tf.shape(x))",
                "return tf.concat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)",
            )
        ],
        cells("tf", "visible", "hidden-rope"),
        "pairs-not-interleaved-back",
    ),
    # the rotation done in NumPy: right numbers, no gradient
    (
        A,
        "bug8",
        "torch",
        [
            (
                "return q @ k.transpose(-1, -2) / math.sqrt(queries.shape[-1])",
                "scores = q @ k.transpose(-1, -2) / math.sqrt(queries.shape[-1])\n"
                "    return torch.tensor(scores.detach().numpy())",
            )
        ],
        cells("torch", "hidden-gradients"),
        "no-gradient",
    ),
]
