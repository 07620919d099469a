"""Catalogued mistakes of ``sparse-linear-attention`` (a window, chunked linear).

ROWS are ``support.grading.B``'s arguments: (assignment, student, part,
edits, lost, tag[, says]). Each edits the reference solution of one part;
the TensorFlow bugs are in the window or the linear function, the PyTorch
bugs likewise, so each loses the visible test, its function's hidden check
and its memory check (wrong numbers there too). The students who build the
whole (n, n) table (window) or the cumulative states of every position
(linear, the cumsum form) get the right numbers and lose the memory check
only. The comments cite where the mistake is reported, if it is.
"""

A = "sparse-linear-attention"


def part(fw, *checks):
    return tuple(f"{fw}-{c}" for c in checks)


WINDOW_TF = part("tf", "visible", "hidden-window", "hidden-window-memory")
WINDOW_TORCH = part("torch", "visible", "hidden-window", "hidden-window-memory")
LINEAR_TF = part("tf", "visible", "hidden-linear", "hidden-linear-memory")
LINEAR_TORCH = part("torch", "visible", "hidden-linear", "hidden-linear-memory")
MASK_TF = "s = tf.where((j <= i) & (j > i - window), s * scale, -np.inf)"
MASK_TORCH = "s = s.masked_fill(~((j <= i) & (j > i - window)), -math.inf)"
UPDATE_TORCH = (
    "        state = state + k.transpose(-1, -2) @ v  # read, then write\n"
    "        norm = norm + k.sum(dim=1)\n"
)
WINDOW_DOC = '    """Causal sliding-window attention, one query block at a time."""\n'
# the whole (n, n) table, masked to the window: right numbers
NAIVE_WINDOW_TF = WINDOW_DOC + (
    "    n = queries.shape[1]\n"
    "    s = tf.matmul(queries, keys, transpose_b=True)\n"
    "    s = s / math.sqrt(queries.shape[-1])\n"
    "    i, j = tf.range(n)[:, None], tf.range(n)[None, :]\n"
    "    s = tf.where((j <= i) & (j > i - window), s, -np.inf)\n"
    "    return tf.matmul(tf.nn.softmax(s, axis=-1), values)\n"
)
LINEAR_DOC = (
    '    """Causal linear attention, chunk by chunk, with a running state."""\n'
)
# every prefix state at once (the cumsum form): right numbers, n x d x d_v
CUMSUM_TORCH = LINEAR_DOC + (
    "    fq, fk = feature_map_torch(queries), feature_map_torch(keys)\n"
    "    states = torch.cumsum(fk[..., :, None] * values[..., None, :], dim=1)\n"
    "    norms = torch.cumsum(fk, dim=1)\n"
    "    numerator = torch.einsum('bnr,bnre->bne', fq, states)\n"
    "    denominator = (fq * norms).sum(dim=-1)\n"
    "    return numerator / (denominator[..., None] + 1e-6)\n"
)

ROWS = [
    # one key too many (ml-explore/mlx-lm#390, apple/axlearn#1009)
    (
        A,
        "bug1",
        "tf",
        [(MASK_TF, MASK_TF.replace("j > i - window", "j >= i - window"))],
        WINDOW_TF,
        "window-off-by-one",
    ),
    # the state reset for every chunk (fla-org/flash-linear-attention#494)
    (A, "bug1", "torch", [(UPDATE_TORCH, "")], LINEAR_TORCH, "state-not-carried"),
    # a band forward and back (huggingface/transformers#39408): the keys of
    # the next block are read too
    (
        A,
        "bug2",
        "tf",
        [
            (
                "q, k = queries[:, start:stop], keys[:, first:stop]",
                "last = min(stop + window, n)\n"
                "        q, k = queries[:, start:stop], keys[:, first:last]",
            ),
            (
                "j = tf.range(first, stop)[None, :]",
                "j = tf.range(first, last)[None, :]",
            ),
            (MASK_TF, "s = tf.where(tf.abs(i - j) < window, s * scale, -np.inf)"),
            ("values[:, first:stop]", "values[:, first:last]"),
        ],
        WINDOW_TF,
        "non-causal-band",
    ),
    # a strict mask inside the chunk (open-lm-engine/
    # accelerated-model-architectures#480)
    (
        A,
        "bug2",
        "torch",
        [
            (
                "torch.tril(q @ k.transpose(-1, -2))",
                "torch.tril(q @ k.transpose(-1, -2), diagonal=-1)",
            )
        ],
        LINEAR_TORCH,
        "diagonal-dropped",
    ),
    # the whole table: right numbers, out of memory on 49,000 positions
    (
        A,
        "bug3",
        "tf",
        [(WINDOW_DOC, NAIVE_WINDOW_TF)],
        part("tf", "hidden-window-memory"),
        "materialised-scores",
    ),
    # the cumsum form: right numbers, its states do not fit
    (
        A,
        "bug3",
        "torch",
        [(LINEAR_DOC, CUMSUM_TORCH)],
        part("torch", "hidden-linear-memory"),
        "materialised-states",
    ),
    # each block scores only its own keys
    (
        A,
        "bug4",
        "tf",
        [("first = max(0, start - window)", "first = start")],
        WINDOW_TF,
        "previous-block-forgotten",
    ),
    # phi = elu, which can be negative
    (
        A,
        "bug4",
        "torch",
        [
            (
                "torch.where(x > 0, x + 1.0, torch.exp(x.clamp(max=0.0)))",
                "torch.nn.functional.elu(x)",
            )
        ],
        LINEAR_TORCH,
        "phi-without-plus-one",
    ),
    # the scores not scaled
    (A, "bug5", "tf", [("s * scale", "s")], WINDOW_TF, "missing-scale"),
    # the normaliser of the whole sequence
    (
        A,
        "bug5",
        "torch",
        [
            (
                "denominator = (q * norm[:, None, :]).sum(dim=-1) + table.sum(dim=-1)",
                "denominator = (q * fk.sum(dim=1)[:, None, :]).sum(dim=-1)",
            )
        ],
        LINEAR_TORCH,
        "normaliser-over-all-keys",
    ),
    # only the causal mask on the block and the one before
    (
        A,
        "bug6",
        "tf",
        [(MASK_TF, "s = tf.where(j <= i, s * scale, -np.inf)")],
        WINDOW_TF,
        "window-mask-missing",
    ),
    # the chunk written into the state before it is read
    (
        A,
        "bug6",
        "torch",
        [
            (UPDATE_TORCH, ""),
            (
                "        numerator = q @ state + table @ v\n",
                UPDATE_TORCH + "        numerator = q @ state + table @ v\n",
            ),
        ],
        LINEAR_TORCH,
        "state-updated-before-read",
    ),
    # the later keys of the block seen
    (
        A,
        "bug7",
        "tf",
        [(MASK_TF, "s = tf.where(j > i - window, s * scale, -np.inf)")],
        WINDOW_TF,
        "causal-mask-missing",
    ),
    # the state update one token short at each chunk's end
    (
        A,
        "bug7",
        "torch",
        [
            (
                "state = state + k.transpose(-1, -2) @ v",
                "state = state + k[:, :-1].transpose(-1, -2) @ v[:, :-1]",
            ),
            ("norm = norm + k.sum(dim=1)", "norm = norm + k[:, :-1].sum(dim=1)"),
        ],
        LINEAR_TORCH,
        "state-misses-chunk-end",
    ),
    # the outputs not divided by the normaliser (lucidrains/performer-pytorch#40)
    (
        A,
        "bug8",
        "tf",
        [
            (
                "outputs.append(numerator / (denominator[..., None] + 1e-6))",
                "outputs.append(numerator)",
            )
        ],
        LINEAR_TF,
        "normaliser-missing",
    ),
    # one key too few (lightseekorg/tokenspeed#578)
    (
        A,
        "bug8",
        "torch",
        [(MASK_TORCH, MASK_TORCH.replace("i - window", "i - window + 1"))],
        WINDOW_TORCH,
        "window-one-short",
    ),
    # softmax's 1/sqrt(d) carried over into linear attention
    (
        A,
        "bug9",
        "tf",
        [
            (
                "fq, fk = feature_map_tf(queries), feature_map_tf(keys)",
                "fq = feature_map_tf(queries / math.sqrt(queries.shape[-1]))\n"
                "    fk = feature_map_tf(keys)",
            )
        ],
        LINEAR_TF,
        "scaled-queries",
    ),
    # the state carried, the normaliser not
    (
        A,
        "bug9",
        "torch",
        [("        norm = norm + k.sum(dim=1)\n", "")],
        LINEAR_TORCH,
        "normaliser-not-carried",
    ),
    # the first block's slice from start - window without max(0, ...):
    # keys[:, -window:window], empty once n > 2 window; TensorFlow's
    # broadcast error is named, not blamed on transposed keys or a mask
    (
        A,
        "bug10",
        "tf",
        [("first = max(0, start - window)", "first = start - window")],
        WINDOW_TF,
        "negative-slice-start",
        "max(0, start - window)",
    ),
    # the block's mask from block-local indices: the window lags after the
    # first block
    (
        A,
        "bug10",
        "torch",
        [
            (
                "torch.arange(start, stop)[:, None]",
                "torch.arange(stop - start)[:, None]",
            ),
            (
                "torch.arange(first, stop)[None, :]",
                "torch.arange(stop - first)[None, :]",
            ),
        ],
        WINDOW_TORCH,
        "mask-positions-local",
    ),
]
