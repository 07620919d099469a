"""Catalogued mistakes of ``kv-cache`` (one GQA decoding step with a KV cache).

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
# tile == repeat_interleave when num_kv_heads is num_heads or 1: heads passes
NOT_HEADS_TORCH = tuple(g for g in ALL_TORCH if g != "torch-hidden-heads")

ROWS = [
    # the mask aligned top-left: wrong as soon as the cache is not empty
    (
        A,
        "bug1",
        "tf",
        [
            (
                "rows = tf.range(n_new)[:, None] + (t_total - n_new)",
                "rows = tf.range(n_new)[:, None]",
            )
        ],
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
                "k = new_cache_k.repeat_interleave(group, dim=1)",
                "k = new_cache_k.repeat(1, group, 1, 1)",
            ),
            (
                "v = new_cache_v.repeat_interleave(group, dim=1)",
                "v = new_cache_v.repeat(1, group, 1, 1)",
            ),
        ],
        NOT_HEADS_TORCH,
        "repeat-kv-tiled",
    ),
    # the cache returned as it came in
    (
        A,
        "bug2",
        "tf",
        [
            (
                'return concat @ params["W_o"], new_cache_k, new_cache_v',
                'return concat @ params["W_o"], cache_k, cache_v',
            )
        ],
        ALL_TF,
        "cache-without-new-keys",
    ),
    # the new keys and values before the cached ones
    (
        A,
        "bug2",
        "torch",
        [
            (
                "torch.cat([cache_k, k_new], dim=2)",
                "torch.cat([k_new, cache_k], dim=2)",
            ),
            (
                "torch.cat([cache_v, v_new], dim=2)",
                "torch.cat([v_new, cache_v], dim=2)",
            ),
        ],
        ALL_TORCH,
        "new-keys-first",
    ),
    # the values projected with W_k
    (
        A,
        "bug3",
        "tf",
        [
            (
                'v_new = heads(x_new @ params["W_v"], num_kv_heads)',
                'v_new = heads(x_new @ params["W_k"], num_kv_heads)',
            )
        ],
        HIDDEN_TF,
        "values-from-W_k",
    ),
    # no causal mask: each new token sees the chunk's later tokens
    (
        A,
        "bug3",
        "torch",
        [("    scores = scores.masked_fill(~allowed, -1e9)\n", "")],
        ALL_TORCH,
        "no-causal-mask",
    ),
    # the scores scaled by sqrt(d_model)
    (
        A,
        "bug4",
        "tf",
        [
            (
                "/ d_head**0.5",
                "/ float(x_new.shape[-1]) ** 0.5",
            )
        ],
        HIDDEN_TF,
        "scale-uses-d_model",
    ),
    # the repeated (num_heads) K/V stored in the cache
    (
        A,
        "bug4",
        "torch",
        [
            (
                'return concat @ params["W_o"], new_cache_k, new_cache_v',
                'return concat @ params["W_o"], k, v',
            )
        ],
        ALL_TORCH,
        "cache-holds-repeated-heads",
    ),
    # no 1/sqrt(d_head)
    (
        A,
        "bug5",
        "tf",
        [
            (
                "scores = tf.matmul(q, k, transpose_b=True) / d_head**0.5",
                "scores = tf.matmul(q, k, transpose_b=True)",
            )
        ],
        HIDDEN_TF,
        "missing-scale",
    ),
    # heads split by a reshape without the transpose
    (
        A,
        "bug5",
        "torch",
        [
            (
                "return x.reshape(batch, n_new, count, d_head).transpose(1, 2)",
                "return x.reshape(batch, count, n_new, d_head)",
            ),
            (
                "merged = (weights @ v).transpose(1, 2)",
                "merged = weights @ v",
            ),
        ],
        ALL_TORCH,
        "head-split-without-transpose",
    ),
    # the output projection left out
    (
        A,
        "bug6",
        "tf",
        [
            (
                'return concat @ params["W_o"], new_cache_k, new_cache_v',
                "return concat, new_cache_k, new_cache_v",
            )
        ],
        ALL_TF,
        "missing-output-projection",
    ),
    # the cache holds only the new tokens
    (
        A,
        "bug6",
        "torch",
        [
            (
                'return concat @ params["W_o"], new_cache_k, new_cache_v',
                'return concat @ params["W_o"], k_new, v_new',
            )
        ],
        ALL_TORCH,
        "cache-holds-only-new-keys",
    ),
]
