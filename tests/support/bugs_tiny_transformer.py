"""Known mistakes of ``tiny-transformer`` (read by support.grading): each row
is B(assignment, student, part, edits, lost[, tag[, says]]) as a tuple."""

A = "tiny-transformer"
TF_DUP_TOTAL = "total = tf.reduce_sum(copies * weights, axis=[0, 2, 3])"
TF_DUP_COPIES = "copies = tf.cast(earlier[:, None], weights.dtype)  # (batch, 1, i, j)"
TORCH_TOTAL = "total = (after * weights[..., 1:]).sum(dim=(0, 2, 3))"
TORCH_DUP_TOTAL = "total = (copies * weights).sum(dim=(0, 2, 3))"
TORCH_DUP_COPIES = "copies = earlier[:, None].to(weights.dtype)  # (batch, 1, i, j)"

ROWS = [
    # the duplicate-token score reads the key after the copy (the induction
    # score): find_heads then names the induction head twice
    (
        A,
        "bug1",
        "tf",
        [
            (
                TF_DUP_TOTAL,
                "total = tf.reduce_sum(copies[..., :-1] * weights[..., 1:], "
                "axis=[0, 2, 3])",
            )
        ],
        ["tf-visible", "tf-hidden-duplicate", "tf-hidden-heads"],
        "key-after-copy",
    ),
    # the induction score reads the earlier copy itself (j) instead of the
    # token after it (j + 1): find_heads then names the duplicate-token head
    (
        A,
        "bug1",
        "torch",
        [
            (
                TORCH_TOTAL,
                "total = (earlier[:, None].to(weights.dtype) * weights)"
                ".sum(dim=(0, 2, 3))",
            )
        ],
        ["torch-visible", "torch-hidden-induction", "torch-hidden-heads"],
        "earlier-copy-itself",
    ),
    # every query in the denominator; the argmax is unchanged
    (
        A,
        "bug2",
        "tf",
        [
            (
                "return total / count",
                "return total / tf.cast(tf.size(repeated), weights.dtype)",
            )
        ],
        ["tf-visible", "tf-hidden-induction"],
        "mean-over-all-queries",
    ),
    # the duplicate-token and induction heads returned in the wrong order
    (
        A,
        "bug2",
        "torch",
        [
            (
                "return int(previous), int(duplicate), int(induction)",
                "return int(previous), int(induction), int(duplicate)",
            )
        ],
        ["torch-visible", "torch-hidden-heads"],
        "heads-swapped",
    ),
    # j <= i: every token matches itself (so Q is never empty: no ValueError)
    (
        A,
        "bug3",
        "tf",
        [
            (
                "earlier = tf.logical_and(same, before)",
                "earlier = tf.logical_and(same, tf.range(n)[None, :] <= "
                "tf.range(n)[:, None])",
            )
        ],
        ["tf-visible", "tf-hidden-induction", "tf-hidden-errors"],
        "token-matches-itself",
    ),
    # the score leaves PyTorch: right numbers, no gradient
    (
        A,
        "bug3",
        "torch",
        [
            (
                TORCH_DUP_TOTAL,
                "total = torch.tensor((copies * weights).sum(dim=(0, 2, 3))"
                ".detach().numpy())",
            )
        ],
        ["torch-hidden-duplicate"],
        "no-gradient",
    ),
    # no check for an empty Q: the mean over no queries is NaN
    (
        A,
        "bug4",
        "tf",
        [("    if not tf.reduce_any(repeated):\n", "    if False:\n")],
        ["tf-visible", "tf-hidden-errors"],
        "no-error-duplicate",
    ),
    # only the first earlier copy: the visible example repeats each token
    # once, so only the hidden tests see it
    (
        A,
        "bug4",
        "torch",
        [
            (
                TORCH_DUP_COPIES,
                "first = earlier.cumsum(dim=-1) == 1\n"
                "    copies = (earlier & first)[:, None].to(weights.dtype)",
            )
        ],
        ["torch-hidden-duplicate"],
        "first-copy-only",
    ),
    # another exception than ValueError
    (
        A,
        "bug5",
        "tf",
        [
            (
                'raise ValueError(\n            f"no repeated token',
                'raise RuntimeError(\n            f"no repeated token',
            )
        ],
        ["tf-visible", "tf-hidden-errors"],
        "wrong-exception-induction",
    ),
    (
        A,
        "bug5",
        "torch",
        [
            (
                'raise ValueError(\n            f"no token repeats',
                'raise RuntimeError(\n            f"no token repeats',
            )
        ],
        ["torch-visible", "torch-hidden-errors"],
        "wrong-exception-duplicate",
    ),
    # a query's copies averaged, not summed: the visible example has one copy
    # per query
    (
        A,
        "bug6",
        "tf",
        [
            (
                TF_DUP_COPIES,
                TF_DUP_COPIES + "\n    copies = copies / tf.maximum("
                "tf.reduce_sum(copies, -1, keepdims=True), 1.0)",
            )
        ],
        ["tf-hidden-duplicate"],
        "copies-averaged",
    ),
    # every query in the denominator of the duplicate-token score
    (
        A,
        "bug6",
        "torch",
        [("return total / repeated.sum()", "return total / repeated.numel()")],
        ["torch-visible", "torch-hidden-duplicate"],
        "mean-over-all-queries",
    ),
    # both functions raise ValueError for everything: no point for the errors
    # check, whose inputs mix calls that must raise with calls that must not
    (
        A,
        "bug7",
        "tf",
        [
            ("    if not tf.reduce_any(repeated):\n", "    if True:\n"),
            ("    if count == 0:\n", "    if True:\n"),
        ],
        [
            "tf-visible",
            "tf-hidden-duplicate",
            "tf-hidden-induction",
            "tf-hidden-heads",
            "tf-hidden-errors",
        ],
        "always-raises",
    ),
    # later copies count too (j != i)
    (
        A,
        "bug7",
        "torch",
        [
            (
                "earlier = same & torch.ones(n, n, dtype=torch.bool).tril(-1)",
                "earlier = same & ~torch.eye(n, dtype=torch.bool)",
            )
        ],
        ["torch-visible", "torch-hidden-induction"],
        "later-copies-counted",
    ),
]
