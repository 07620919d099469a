"""Catalogued mistakes of ``kv-cache`` (one GQA decoding step into a
pre-allocated KV cache).

ROWS are ``support.grading.B``'s arguments: (assignment, student, part,
edits, lost, tag[, says]). Each edits the reference solution of one part.
"""

A = "kv-cache"
TF = ("tf-visible", "tf-hidden-step", "tf-hidden-heads", "tf-hidden-decode")
TORCH = (
    "torch-visible",
    "torch-hidden-step",
    "torch-hidden-heads",
    "torch-hidden-decode",
)
ALL_TF = (*TF, "tf-hidden-gradients")
ALL_TORCH = (*TORCH, "torch-hidden-gradients")
HIDDEN_TF = ALL_TF[1:]  # the visible test does not check the scale or W_v
HIDDEN_TORCH = ALL_TORCH[1:]
# tile == repeat_interleave when num_kv_heads is num_heads or 1: heads passes
NOT_HEADS_TF = tuple(g for g in ALL_TF if g != "tf-hidden-heads")
NOT_HEADS_TORCH = tuple(g for g in ALL_TORCH if g != "torch-hidden-heads")
TF_MASK = "allowed = tf.range(end)[None, :] <= tf.range(n_new)[:, None] + t_past"
TF_K = "k = tf.repeat(cache_k[:, :, :end], group, axis=1)"
TF_V = "v = tf.repeat(cache_v[:, :, :end], group, axis=1)"
TORCH_CHECK = "if t_past + n_new > capacity:"

ROWS = [
    # the mask aligned top-left: wrong as soon as the cache is not empty
    (
        A,
        "bug1",
        "tf",
        [(TF_MASK, "allowed = tf.range(end)[None, :] <= tf.range(n_new)[:, None]")],
        ALL_TF,
        "top-left-mask",
    ),
    # tile instead of repeat_interleave: kv heads 0, 1, 0, 1
    (
        A,
        "bug1",
        "torch",
        [
            (
                "k = cache_k[:, :, :end].repeat_interleave(group, dim=1)",
                "k = cache_k[:, :, :end].repeat(1, group, 1, 1)",
            ),
            (
                "v = cache_v[:, :, :end].repeat_interleave(group, dim=1)",
                "v = cache_v[:, :, :end].repeat(1, group, 1, 1)",
            ),
        ],
        NOT_HEADS_TORCH,
        "repeat-kv-tiled",
    ),
    # the new keys and values over the cached ones, in slots 0 .. n_new - 1
    (
        A,
        "bug2",
        "tf",
        [
            (
                "tf.concat([cache[:, :, :t_past], new, cache[:, :, end:]], axis=2)",
                "tf.concat([new, cache[:, :, n_new:]], axis=2)",
            )
        ],
        ALL_TF,
        "write-at-zero",
    ),
    # no causal mask inside the chunk
    (
        A,
        "bug2",
        "torch",
        [
            (
                "torch.ones(n_new, end, dtype=torch.bool).tril(t_past)",
                "torch.ones(n_new, end, dtype=torch.bool)",
            )
        ],
        ALL_TORCH,
        "no-causal-mask",
    ),
    # the concat cache's habits: every slot read, the mask aligned to the end
    # of the whole cache -- the queries read the unfilled slots' noise
    (
        A,
        "bug3",
        "tf",
        [
            (TF_K, "k = tf.repeat(cache_k, group, axis=1)"),
            (TF_V, "v = tf.repeat(cache_v, group, axis=1)"),
            (
                TF_MASK,
                "allowed = tf.range(capacity)[None, :] <= "
                "tf.range(n_new)[:, None] + (capacity - n_new)",
            ),
        ],
        ALL_TF,
        "attends-unfilled-slots",
    ),
    # off by one: a chunk that fills the cache exactly is refused (the MQA
    # case of the heads test fills it); the student's own error is shown
    (
        A,
        "bug3",
        "torch",
        [(TORCH_CHECK, "if t_past + n_new >= capacity:")],
        ("torch-hidden-heads",),
        "",
        "the chunk does not fit",
    ),
    # no capacity check: tf.concat quietly makes a longer cache
    (
        A,
        "bug4",
        "tf",
        [("if t_past + n_new > capacity:", "if False:")],
        ("tf-visible", "tf-hidden-decode"),
        "capacity-not-checked",
    ),
    # the new keys and values written into slots 0 .. n_new - 1
    (
        A,
        "bug4",
        "torch",
        [
            ("cache_k[:, :, t_past:end] =", "cache_k[:, :, :n_new] ="),
            ("cache_v[:, :, t_past:end] =", "cache_v[:, :, :n_new] ="),
        ],
        ALL_TORCH,
        "write-at-zero",
    ),
    (
        A,
        "bug5",
        "tf",
        [
            (
                "tf.matmul(q, k, transpose_b=True) / d_head**0.5",
                "tf.matmul(q, k, transpose_b=True)",
            )
        ],
        HIDDEN_TF,
        "missing-scale",
    ),
    # no capacity check: the slice assignment fails with a RuntimeError
    (
        A,
        "bug5",
        "torch",
        [(TORCH_CHECK, "if False:")],
        ("torch-visible", "torch-hidden-decode"),
        "capacity-not-checked",
    ),
    (
        A,
        "bug6",
        "tf",
        [
            (TF_K, "k = tf.tile(cache_k[:, :, :end], (1, group, 1, 1))"),
            (TF_V, "v = tf.tile(cache_v[:, :, :end], (1, group, 1, 1))"),
        ],
        NOT_HEADS_TF,
        "repeat-kv-tiled",
    ),
    (
        A,
        "bug6",
        "torch",
        [
            (
                'cache_v[:, :, t_past:end] = heads(x_new @ params["W_v"]',
                'cache_v[:, :, t_past:end] = heads(x_new @ params["W_k"]',
            )
        ],
        HIDDEN_TORCH,
        "values-from-W_k",
    ),
]
