"""Known mistakes of ``tiny-transformer`` (read by support.grading): each row
is B(assignment, student, part, edits, lost[, tag[, says]]) as a tuple."""

A = "tiny-transformer"
TF_PREV = "below = tf.linalg.diag_part(weights[:, :, 1:, :-1])"
TORCH_TOTAL = "total = (after * weights[..., 1:]).sum(dim=(0, 2, 3))"

ROWS = [
    # the key after the query (i -> i + 1); the planted head scores 0, so
    # find_heads names another head too
    (
        A,
        "bug1",
        "tf",
        [(TF_PREV, "below = tf.linalg.diag_part(weights[:, :, :-1, 1:])")],
        ["tf-visible", "tf-hidden-previous", "tf-hidden-heads"],
        "next-token",
    ),
    # the earlier copy itself (j) instead of the token after it (j + 1):
    # find_heads then names the duplicate-token head
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
    # query 0 counted: divided by n instead of n - 1
    (
        A,
        "bug2",
        "torch",
        [
            (
                "return below.mean(dim=(0, 2))",
                "return below.sum(dim=(0, 2)) / (weights.shape[0] * n)",
            )
        ],
        ["torch-visible", "torch-hidden-previous"],
        "query-0-counted",
    ),
    # j <= i: every token matches itself (so Q is never empty: no ValueError)
    (
        A,
        "bug3",
        "tf",
        [
            (
                "before = tf.range(n)[None, :] < tf.range(n)[:, None]",
                "before = tf.range(n)[None, :] <= tf.range(n)[:, None]",
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
                "return below.mean(dim=(0, 2))",
                "return torch.tensor(below.detach().numpy().mean(axis=(0, 2)))",
            )
        ],
        ["torch-hidden-previous"],
        "no-gradient",
    ),
    # no check for n < 2: the mean over no queries is NaN
    (
        A,
        "bug4",
        "tf",
        [("    if n < 2:\n", "    if n < 1:\n")],
        ["tf-visible", "tf-hidden-errors"],
        "no-error-short-maps",
    ),
    (
        A,
        "bug4",
        "torch",
        [
            (
                "return int(previous), int(induction)",
                "return int(induction), int(previous)",
            )
        ],
        ["torch-visible", "torch-hidden-heads"],
        "heads-swapped",
    ),
    # only the first earlier copy: the visible example repeats each token
    # once, so only the hidden tests see it
    (
        A,
        "bug5",
        "tf",
        [
            (
                "earlier = tf.logical_and(same, before)\n",
                "earlier = tf.logical_and(same, before)\n"
                "    first = tf.cumsum(tf.cast(earlier, tf.int32), axis=-1) == 1\n"
                "    earlier = tf.logical_and(earlier, first)\n",
            )
        ],
        ["tf-hidden-induction"],
        "first-copy-only",
    ),
    # each sequence averaged on its own: the visible example has one sequence
    (
        A,
        "bug5",
        "torch",
        [
            (
                "return total / count",
                "per = (after * weights[..., 1:]).sum(dim=(2, 3))\n"
                "    return (per / repeated.sum(dim=1)[:, None]).mean(dim=0)",
            )
        ],
        ["torch-hidden-induction"],
        "mean-of-means",
    ),
    # another exception than ValueError
    (
        A,
        "bug6",
        "tf",
        [
            (
                'raise ValueError(\n            f"no repeated token',
                'raise RuntimeError(\n            f"no repeated token',
            )
        ],
        ["tf-visible", "tf-hidden-errors"],
        "wrong-exception-without-repeats",
    ),
    # the query and key axes swapped
    (
        A,
        "bug6",
        "torch",
        [(TORCH_TOTAL, TORCH_TOTAL.replace("weights[", "weights.transpose(-1, -2)["))],
        ["torch-visible", "torch-hidden-induction", "torch-hidden-heads"],
        "transposed-maps",
    ),
    # both functions raise ValueError for everything: no point for the errors
    # check, whose inputs mix calls that must raise with calls that must not
    (
        A,
        "bug7",
        "tf",
        [
            ("    if n < 2:\n", "    if True:\n"),
            ("    if count == 0:\n", "    if True:\n"),
        ],
        [
            "tf-visible",
            "tf-hidden-previous",
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
