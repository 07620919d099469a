"""Catalogued mistakes of ``flash-attention`` (tiled attention, online softmax).

ROWS are ``support.grading.B``'s arguments: (assignment, student, part,
edits, lost, tag[, says]). Each edits the reference solution of one part.
The naive students build the whole (n_q, n_k) table: right numbers, but they
read the tiles that must be skipped (``causal``) and run out of memory on
the long sequence (``memory``); the student who computes every tile and masks
it loses ``causal`` only.
"""

A = "flash-attention"


def part(fw, *checks):
    return tuple(f"{fw}-{c}" for c in checks)


ALL = ("visible", "hidden-forward", "hidden-causal", "hidden-gradients")
ALL_TF = part("tf", *ALL, "hidden-memory")
ALL_TORCH = part("torch", *ALL, "hidden-memory")
# a causal mistake: the forward check (no causal) passes; the aligned blocks
# of the memory case make skipping from the first query right there
CAUSAL_TF = part("tf", "visible", "hidden-causal", "hidden-gradients", "hidden-memory")
SKIP_TF = part("tf", "visible", "hidden-causal", "hidden-gradients")
NAIVE = ("hidden-causal", "hidden-memory")
DOC = '    """Tiled attention with an online softmax: (outputs, logsumexp)."""\n'
NAIVE_TF = DOC + (
    "    d = queries.shape[-1]\n"
    "    scores = tf.matmul(queries, keys, transpose_b=True) / math.sqrt(d)\n"
    "    if causal:\n"
    "        rows = tf.range(queries.shape[1])[:, None]\n"
    "        cols = tf.range(keys.shape[1])[None, :]\n"
    "        scores = tf.where(cols <= rows, scores, -np.inf)\n"
    "    lse = tf.reduce_logsumexp(scores, axis=-1)\n"
    "    return tf.exp(scores - lse[..., None]) @ values, lse\n"
)
NAIVE_TORCH = DOC + (
    "    d = queries.shape[-1]\n"
    "    scores = queries @ keys.transpose(-1, -2) / math.sqrt(d)\n"
    "    if causal:\n"
    "        hidden = torch.ones(queries.shape[1], keys.shape[1]).triu(1).bool()\n"
    "        scores = scores.masked_fill(hidden, -math.inf)\n"
    "    lse = torch.logsumexp(scores, dim=-1)\n"
    "    return torch.exp(scores - lse[..., None]) @ values, lse\n"
)

ROWS = [
    # the running sum kept relative to the old max
    (
        A,
        "bug1",
        "tf",
        [
            (
                "l = alpha * l + tf.reduce_sum(p, axis=-1)",
                "l = l + tf.reduce_sum(p, axis=-1)",
            )
        ],
        ALL_TF,
        "sum-not-rescaled",
    ),
    # the backward without D = rowsum(dO * O)
    (
        A,
        "bug1",
        "torch",
        [("ds = p * (dp - d_i)", "ds = p * dp")],
        part("torch", "visible", "hidden-gradients"),
        "backward-without-D",
    ),
    # the accumulated output never rescaled
    (
        A,
        "bug2",
        "tf",
        [
            (
                "acc = alpha[..., None] * acc + tf.matmul(",
                "acc = acc + tf.matmul(",
            )
        ],
        ALL_TF,
        "output-not-rescaled",
    ),
    # logsumexp = log(l), the max left out (the backward's weights are off too)
    (
        A,
        "bug2",
        "torch",
        [
            (
                "logsumexp.append(m + torch.log(l))",
                "logsumexp.append(torch.log(l))",
            )
        ],
        ALL_TORCH,
        "logsumexp-without-max",
    ),
    # the whole table at once
    (A, "bug3", "tf", [(DOC, NAIVE_TF)], part("tf", *NAIVE), "materialised-weights"),
    # every key tile computed and masked: right numbers, the skip case NaN
    (
        A,
        "bug3",
        "torch",
        [
            (
                "k_stop = min(n_k, q_stop) if causal else n_k  # later tiles: skipped",
                "k_stop = n_k",
            )
        ],
        part("torch", "hidden-causal"),
        "causal-tiles-not-skipped",
    ),
    # the tile on the diagonal skipped: block 0 gets no key (0 / 0)
    (
        A,
        "bug4",
        "tf",
        [
            (
                "k_stop = min(n_k, q_stop) if causal else n_k",
                "k_stop = min(n_k, q_start) if causal else n_k",
            )
        ],
        CAUSAL_TF,
        "diagonal-tile-skipped",
    ),
    # the sum rescaled with the tile's own max
    (
        A,
        "bug4",
        "torch",
        [
            (
                "l = alpha * l + p.sum(dim=-1)",
                "l = torch.exp(m - s.amax(dim=-1)) * l + p.sum(dim=-1)",
            )
        ],
        ALL_TORCH,
        "sum-rescaled-with-wrong-max",
    ),
    # no mask inside the tiles that cross the diagonal
    (
        A,
        "bug5",
        "tf",
        [("                s = tf.where(cols <= rows, s, -np.inf)\n", "")],
        CAUSAL_TF,
        "no-mask-inside-tiles",
    ),
    # the whole table at once
    (
        A,
        "bug5",
        "torch",
        [(DOC, NAIVE_TORCH)],
        part("torch", *NAIVE),
        "materialised-weights",
    ),
    # tiles skipped from the block's first query on
    (
        A,
        "bug6",
        "tf",
        [
            (
                "k_stop = min(n_k, q_stop) if causal else n_k",
                "k_stop = min(n_k, q_start + 1) if causal else n_k",
            )
        ],
        SKIP_TF,
        "causal-skip-from-first-query",
    ),
    # acc returned without dividing by l
    (
        A,
        "bug6",
        "torch",
        [("outputs.append(acc / l[..., None])", "outputs.append(acc)")],
        ALL_TORCH,
        "output-not-normalised",
    ),
]
