"""Grading helpers the tests share: the bug catalogue, submissions, courses.

Each Bug edits the reference solution of one framework part (TensorFlow or
PyTorch) with one typical mistake; ``lost`` lists the test cells (grade ids)
that must score 0 and ``tag`` the likely mistake the feedback must name. A
student notebook combines one TensorFlow bug and one PyTorch bug, so each
part is graded separately and its points are lost independently.
"""

import contextlib
import io
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import attncourse  # noqa: F401  (quiet TF first)
from grader import notebooks as nbs
from grader import reference
from grader.nbgrader_cli import path_with_this_python

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Bug:
    assignment: str
    student: str  # the student notebook that carries it
    part: str  # "tf" or "torch"
    edits: tuple  # (old, new) replacements in the part's solution cell
    lost: tuple  # grade ids that must score 0
    tag: str = ""  # "Likely mistake (<tag>)" expected in the feedback
    extra: dict = field(default_factory=dict)
    says: str = ""  # text the feedback must contain (e.g. plain advice)


def B(assignment, student, part, edits, lost, tag="", says=""):
    return Bug(assignment, student, part, tuple(edits), tuple(lost), tag, says=says)


BRIDGE_TORCH = (
    "layer = atorch.to_torch_mha(params, num_heads)          # batch_first=True"  # noqa: E501
)


def copy_weights_in(transpose=True, biases=True) -> str:
    """builtin-layers: build torch.nn.MultiheadAttention and copy params in by
    hand (the notebook allows it), optionally without the transposes or the
    biases -- the replacement of the bridge call in the solution."""
    t = ".T" if transpose else ""
    lines = [
        "layer = torch.nn.MultiheadAttention(",
        "        queries.shape[-1], num_heads, batch_first=True, dtype=queries.dtype)",
        "    P = {k: torch.as_tensor(v, dtype=queries.dtype)",
        "         for k, v in params.items()}",
        "    with torch.no_grad():",
        f"        W = [P['W_q']{t}, P['W_k']{t}, P['W_v']{t}]",
        "        layer.in_proj_weight.copy_(torch.cat(W))",
        f"        layer.out_proj.weight.copy_(P['W_o']{t})",
    ]
    if biases:
        lines += [
            "        b = [P['b_q'], P['b_k'], P['b_v']]",
            "        layer.in_proj_bias.copy_(torch.cat(b))",
            "        layer.out_proj.bias.copy_(P['b_o'])",
        ]
    return "\n".join(lines)


BUGS = (
    # ---------------------------------------------------------------- addressing
    B(
        "addressing",
        "bug1",
        "tf",
        [("tf.nn.softmax(scores, axis=-1)", "tf.nn.softmax(scores, axis=1)")],
        ["tf-visible", "tf-hidden"],
        "softmax-axis",
    ),
    B(
        "addressing",
        "bug1",
        "torch",
        [("scores = -beta * diff", "scores = beta * diff")],
        ["torch-visible", "torch-hidden"],
        "score-sign",
    ),
    B(
        "addressing",
        "bug2",
        "tf",
        [
            (
                "scores = -beta * tf.reduce_sum(tf.square(diff), axis=-1)",
                "scores = -tf.reduce_sum(tf.square(diff), axis=-1) / beta",
            )
        ],
        ["tf-visible", "tf-hidden"],
        "beta-divides",
    ),
    B(
        "addressing",
        "bug2",
        "torch",
        [("diff.pow(2).sum(dim=-1)", "diff.pow(2).sum(dim=-1).sqrt()")],
        ["torch-hidden"],
        "distance-not-squared",
    ),
    B(
        "addressing",
        "bug3",
        "tf",
        [("scores = -beta * tf.reduce_sum", "scores = -float(beta) * tf.reduce_sum")],
        ["tf-hidden"],
        "no-gradient",
    ),
    B(
        "addressing",
        "bug3",
        "torch",
        [
            (
                "scores = -beta * diff.pow(2).sum(dim=-1)",
                "scores = beta * queries @ keys.transpose(-1, -2)",
            )
        ],
        ["torch-hidden"],
        "dot-product-score",
    ),
    # mistakes learners report (see the variants' comments in grader/assignments)
    B(
        "addressing",
        "bug4",
        "tf",
        [
            (
                "scores = -beta * tf.reduce_sum(tf.square(diff), axis=-1)",
                "scores = -beta * tf.reduce_sum(tf.square(diff), axis=-1) / 2",
            )
        ],
        ["tf-hidden"],
        "halved-distance",
    ),
    B(
        "addressing",
        "bug4",
        "torch",
        [
            (
                "scores = -beta * diff.pow(2).sum(dim=-1)",
                "scores = -(beta * diff).pow(2).sum(dim=-1)",
            )
        ],
        ["torch-hidden"],
        "beta-squared",
    ),
    # --------------------------------------------------------- scoring-functions
    B(
        "scoring-functions",
        "bug1",
        "tf",
        [
            (
                "features = tf.tanh(q_part[:, :, None, :] + k_part[:, None, :, :] + b)",
                "features = q_part[:, :, None, :] + k_part[:, None, :, :] + b",
            )
        ],
        ["tf-visible", "tf-hidden-additive"],
        "missing-tanh",
    ),
    B(
        "scoring-functions",
        "bug1",
        "torch",
        [
            (
                "return q @ k.transpose(-1, -2) / math.sqrt(W_q.shape[1])",
                "return q @ k.transpose(-1, -2)",
            )
        ],
        ["torch-hidden-projected"],
        "missing-scale",
    ),
    B(
        "scoring-functions",
        "bug2",
        "tf",
        [
            ("q_part = queries @ W[:d_q]", "q_part = queries @ W[-d_q:]"),
            ("k_part = keys @ W[d_q:]", "k_part = keys @ W[:-d_q]"),
        ],
        ["tf-hidden-additive"],
        "concat-order",
    ),
    B(
        "scoring-functions",
        "bug2",
        "torch",
        [("return queries @ W @ keys", "return queries @ W.T @ keys")],
        ["torch-visible", "torch-hidden-bilinear"],
        "transposed-weights",
    ),
    B(
        "scoring-functions",
        "bug3",
        "tf",
        [("/ math.sqrt(W_q.shape[1])", "/ math.sqrt(queries.shape[-1])")],
        ["tf-hidden-projected"],
        "scale-input-size",
    ),
    B(
        "scoring-functions",
        "bug3",
        "torch",
        [
            (
                "torch.tanh(q_part[:, :, None, :] + k_part[:, None, :, :] + b)",
                "torch.tanh(q_part[:, :, None, :] + k_part[:, None, :, :]) + b",
            )
        ],
        ["torch-hidden-additive"],
        "bias-outside-tanh",
    ),
    B(
        "scoring-functions",
        "bug4",
        "tf",
        [
            (
                "return tf.matmul(queries @ W, keys, transpose_b=True)",
                "return tf.matmul(queries @ W, tf.transpose(keys))",
            )
        ],
        ["tf-visible", "tf-hidden-bilinear"],
        says="transpose only the last two axes of the keys",
    ),
    B(
        "scoring-functions",
        "bug4",
        "torch",
        [
            (
                "return q @ k.transpose(-1, -2) / math.sqrt(W_q.shape[1])",
                "return q @ k.T / math.sqrt(W_q.shape[1])",
            )
        ],
        ["torch-visible", "torch-hidden-projected"],
        says="transpose only the last two axes of the keys",
    ),
    # ------------------------------------------------------- soft-hard-attention
    B(
        "soft-hard-attention",
        "bug1",
        "tf",
        [
            (
                "indices = tf.minimum(tf.reduce_sum(below, axis=-1), scores.shape[-1] - 1)",  # noqa: E501
                "indices = tf.argmax(scores, axis=-1)",
            )
        ],
        ["tf-visible", "tf-hidden-sample", "tf-hidden-log-prob"],
        "argmax-not-sampled",
    ),
    B(
        "soft-hard-attention",
        "bug1",
        "torch",
        [
            (
                "log_probs = torch.gather(log_p, -1,",
                "log_probs = torch.gather(log_p.exp(), -1,",
            )
        ],
        ["torch-visible", "torch-hidden-log-prob"],
        "probability-not-log",
    ),
    B(
        "soft-hard-attention",
        "bug2",
        "tf",
        [
            (
                "log_probs = tf.gather(log_p, indices[..., None], batch_dims=2)[..., 0]",  # noqa: E501
                "log_probs = tf.stop_gradient(tf.gather(log_p, indices[..., None], "
                "batch_dims=2)[..., 0])",
            )
        ],
        ["tf-hidden-log-prob"],
        "no-gradient",
    ),
    B(
        "soft-hard-attention",
        "bug2",
        "torch",
        [("torch.log_softmax(scores, dim=-1)", "torch.log_softmax(scores, dim=1)")],
        ["torch-visible", "torch-hidden-sample", "torch-hidden-log-prob"],
        "softmax-axis",
    ),
    B(
        "soft-hard-attention",
        "bug3",
        "tf",
        [
            (
                "cdf = tf.cumsum(tf.exp(log_p), axis=-1)",
                "cdf = tf.cumsum(tf.exp(scores), axis=-1)",
            )
        ],
        ["tf-visible", "tf-hidden-sample", "tf-hidden-log-prob"],
        "unnormalised-probabilities",
    ),
    B(
        "soft-hard-attention",
        "bug3",
        "torch",
        [
            (
                "log_probs = torch.gather(log_p, -1,",
                "log_probs = torch.gather(scores, -1,",
            )
        ],
        ["torch-visible", "torch-hidden-log-prob"],
        "unnormalised-log-probability",
    ),
    B(
        "soft-hard-attention",
        "bug4",
        "tf",
        [
            (
                "log_probs = tf.gather(log_p, indices[..., None], batch_dims=2)[..., 0]",  # noqa: E501
                "log_probs = -tf.gather(log_p, indices[..., None], batch_dims=2)[..., 0]",  # noqa: E501
            )
        ],
        ["tf-visible", "tf-hidden-log-prob"],
        "negated-log-prob",
    ),
    B(
        "soft-hard-attention",
        "bug4",
        "torch",
        [
            (
                "log_probs = torch.gather(log_p, -1,",
                "log_probs = -torch.gather(log_p, -1,",
            )
        ],
        ["torch-visible", "torch-hidden-log-prob"],
        "negated-log-prob",
    ),
    B(
        "soft-hard-attention",
        "bug5",
        "tf",
        [
            (
                "cdf = tf.cumsum(tf.exp(log_p), axis=-1)",
                "cdf = tf.cumsum(tf.exp(log_p), axis=-1, exclusive=True)",
            )
        ],
        ["tf-visible", "tf-hidden-sample", "tf-hidden-log-prob"],
        "exclusive-cdf",
    ),
    B(
        "soft-hard-attention",
        "bug5",
        "torch",
        [
            (
                "cdf = torch.cumsum(log_p.exp(), dim=-1)",
                "cdf = torch.cumsum(log_p, dim=-1)",
            )
        ],
        ["torch-visible", "torch-hidden-sample", "torch-hidden-log-prob"],
        "cdf-of-log-probabilities",
    ),
    B(
        "soft-hard-attention",
        "bug6",
        "tf",
        [
            (
                "outputs = tf.gather(values, indices, batch_dims=1)",
                "outputs = tf.matmul(tf.exp(log_p), values)",
            )
        ],
        ["tf-visible", "tf-hidden-sample"],
        "soft-attention-output",
    ),
    B(
        "soft-hard-attention",
        "bug6",
        "torch",
        [
            (
                "outputs = torch.gather(values, 1, index)",
                "outputs = log_p.exp() @ values",
            )
        ],
        ["torch-visible", "torch-hidden-sample"],
        "soft-attention-output",
    ),
    # --------------------------------------------------------- key-value-masking
    B(
        "key-value-masking",
        "bug1",
        "tf",
        [
            (
                "mask = key_mask[:, None, :]",
                "mask = tf.logical_not(key_mask)[:, None, :]",
            )
        ],
        ["tf-visible", "tf-hidden-attention", "tf-hidden-empty"],
        "inverted-mask",
    ),
    B(
        "key-value-masking",
        "bug1",
        "torch",
        [
            (
                "scores.masked_fill(~mask, -1e9)",
                "scores.masked_fill(~mask, -float('inf'))",
            )
        ],
        ["torch-visible", "torch-hidden-empty"],
        "minus-infinity-fill",
    ),
    B(
        "key-value-masking",
        "bug2",
        "tf",
        [("scores = tf.where(mask, scores, -1e9)", "pass")],
        ["tf-visible", "tf-hidden-attention", "tf-hidden-empty"],
        "mask-after-softmax",
    ),
    B(
        "key-value-masking",
        "bug2",
        "torch",
        [("return token_ids != pad_id", "return token_ids != 0")],
        ["torch-hidden-mask"],
        "hard-coded-pad",
    ),
    B(
        "key-value-masking",
        "bug3",
        "tf",
        [
            (
                "weights = tf.nn.softmax(scores, axis=-1) * tf.cast(mask, scores.dtype)",  # noqa: E501
                "weights = tf.nn.softmax(scores, axis=-1)",
            )
        ],
        ["tf-visible", "tf-hidden-empty"],
        "uniform-on-empty-rows",
    ),
    B(
        "key-value-masking",
        "bug3",
        "torch",
        [("mask = key_mask[:, None, :]", "mask = key_mask[:, :, None]")],
        ["torch-visible", "torch-hidden-attention", "torch-hidden-empty"],
        "mask-on-queries",
    ),
    B(
        "key-value-masking",
        "bug4",
        "tf",
        [
            (
                "scores = tf.where(mask, scores, -1e9)                  # finite: no NaN\n"  # noqa: E501
                "    weights = tf.nn.softmax(scores, axis=-1) * tf.cast(mask, scores.dtype)",  # noqa: E501
                "weights = tf.nn.softmax(scores + tf.cast(mask, scores.dtype), axis=-1)",  # noqa: E501
            )
        ],
        ["tf-visible", "tf-hidden-attention", "tf-hidden-empty"],
        "mask-added",
    ),
    B(
        "key-value-masking",
        "bug4",
        "torch",
        [
            ("scores.masked_fill(~mask, -1e9)", "scores.masked_fill(~mask, 0.0)"),
            (
                "weights = torch.softmax(scores, dim=-1) * mask",
                "weights = torch.softmax(scores, dim=-1)",
            ),
        ],
        ["torch-visible", "torch-hidden-attention", "torch-hidden-empty"],
        "mask-zero-fill",
    ),
    B(
        "key-value-masking",
        "bug5",
        "tf",
        [("d_k = queries.shape[-1]", "d_k = values.shape[-1]")],
        ["tf-hidden-attention", "tf-hidden-empty"],
        "scale-uses-value-size",
    ),
    B(
        "key-value-masking",
        "bug5",
        "torch",
        [("mask = key_mask[:, None, :]", "mask = key_mask[:, None, :].float()")],
        ["torch-visible", "torch-hidden-attention", "torch-hidden-empty"],
        says="a mask is used as a boolean",
    ),
    # ------------------------------------------------------------ self-attention
    B(
        "self-attention",
        "bug1",
        "tf",
        [(" / math.sqrt(self.d_k)", "")],
        ["tf-hidden-forward", "tf-hidden-masks", "tf-hidden-gradients"],
        "missing-scale",
    ),
    B(
        "self-attention",
        "bug1",
        "torch",
        [("dtype=torch.bool).tril()", "dtype=torch.bool).triu()")],
        ["torch-visible", "torch-hidden-masks"],
        "causal-flipped",
    ),
    B(
        "self-attention",
        "bug2",
        "tf",
        [
            (
                "mask = tf.logical_and(mask, attention_mask)",
                "mask = tf.logical_and(mask, tf.logical_not(attention_mask))",
            )
        ],
        ["tf-visible", "tf-hidden-masks"],
        "inverted-mask",
    ),
    B(
        "self-attention",
        "bug2",
        "torch",
        [
            (
                "torch.empty(input_dim, d_k)))\n        self.W_k",
                "torch.empty(d_k, input_dim)))\n        self.W_k",
            ),
            ("inputs @ self.W_q,", "inputs @ self.W_q.T,"),
        ],
        [
            "torch-visible",
            "torch-hidden-forward",
            "torch-hidden-masks",
            "torch-hidden-gradients",
        ],
        "transposed-weights",
    ),
    B(
        "self-attention",
        "bug3",
        "tf",
        [
            (
                """self.W_q = self.add_weight(name="W_q", shape=(input_dim, self.d_k),
                                   initializer="glorot_uniform")""",
                """self.W_q = tf.random.normal((input_dim, self.d_k))""",
            )
        ],
        ["tf-visible", "tf-hidden-forward", "tf-hidden-masks", "tf-hidden-gradients"],
        "not-a-trainable-weight",
    ),
    B(
        "self-attention",
        "bug3",
        "torch",
        [
            (
                "torch.softmax(scores.masked_fill(~mask, -1e9), dim=-1)",
                "torch.softmax(scores.masked_fill(~mask, -1e9), dim=1)",
            )
        ],
        [
            "torch-visible",
            "torch-hidden-forward",
            "torch-hidden-masks",
            "torch-hidden-gradients",
        ],
        "softmax-axis",
    ),
    B(
        "self-attention",
        "bug4",
        "tf",
        [
            (
                "scores = tf.matmul(q, k, transpose_b=True) / math.sqrt(self.d_k)",
                "scores = tf.matmul(q, k, transpose_b=True)",
            ),
            (
                "outputs = tf.matmul(weights, v)",
                "weights = weights / math.sqrt(self.d_k)\n"
                "        outputs = tf.matmul(weights, v)",
            ),
        ],
        ["tf-visible", "tf-hidden-forward", "tf-hidden-masks", "tf-hidden-gradients"],
        "scale-after-softmax",
    ),
    B(
        "self-attention",
        "bug4",
        "torch",
        [
            (
                "inputs @ self.W_k, inputs @ self.W_v",
                "inputs @ self.W_q, inputs @ self.W_v",
            )
        ],
        ["torch-hidden-forward", "torch-hidden-masks", "torch-hidden-gradients"],
        "keys-projected-with-W_q",
    ),
    B(
        "self-attention",
        "bug5",
        "tf",
        [
            (
                "mask = tf.logical_and(mask, attention_mask)",
                "mask = tf.logical_and(mask, tf.transpose(attention_mask, (0, 2, 1)))",
            )
        ],
        ["tf-visible", "tf-hidden-masks"],
        "mask-on-queries",
    ),
    B(
        "self-attention",
        "bug5",
        "torch",
        [("mask = mask & attention_mask", "scores = scores + attention_mask")],
        ["torch-visible", "torch-hidden-masks"],
        "mask-added",
    ),
    B(
        "self-attention",
        "bug6",
        "tf",
        [
            (
                "scores = tf.where(mask, scores, -1e9)",
                "scores = tf.where(mask, scores, 0.0)",
            ),
            (
                "weights = tf.nn.softmax(scores, axis=-1) * tf.cast(mask, scores.dtype)",  # noqa: E501
                "weights = tf.nn.softmax(scores, axis=-1)",
            ),
        ],
        ["tf-visible", "tf-hidden-masks"],
        "mask-zero-fill",
    ),
    B(
        "self-attention",
        "bug6",
        "torch",
        [
            (
                "scores = q @ k.transpose(-1, -2) / math.sqrt(self.d_k)",
                "scores = q @ k.T / math.sqrt(self.d_k)",
            )
        ],
        [
            "torch-visible",
            "torch-hidden-forward",
            "torch-hidden-masks",
            "torch-hidden-gradients",
        ],
        says="transpose only the last two axes of the keys",
    ),
    # --------------------------------------------------- cross-attention-seq2seq
    B(
        "cross-attention-seq2seq",
        "bug1",
        "tf",
        [
            (
                "        if src_mask is not None:\n"
                "            scores = tf.where(src_mask, scores, -1e9)"
                "  # padding: no weight\n",
                "",
            )
        ],
        ["tf-visible", "tf-hidden-masks"],
        "mask-ignored",
    ),
    B(
        "cross-attention-seq2seq",
        "bug1",
        "torch",
        [("q = prev_state @ self.W_q", "q = embedded @ self.W_q")],
        [
            "torch-visible",
            "torch-hidden-forward",
            "torch-hidden-masks",
            "torch-hidden-gradients",
        ],
        "query-from-embedding",
    ),
    B(
        "cross-attention-seq2seq",
        "bug2",
        "tf",
        [("            + tf.matmul(context, self.W_c)\n", "")],
        ["tf-hidden-forward", "tf-hidden-masks", "tf-hidden-gradients"],
        "context-missing",
    ),
    B(
        "cross-attention-seq2seq",
        "bug2",
        "torch",
        [("torch.softmax(scores, dim=-1)", "torch.softmax(scores, dim=0)")],
        [
            "torch-visible",
            "torch-hidden-forward",
            "torch-hidden-masks",
            "torch-hidden-gradients",
        ],
        "softmax-over-batch",
    ),
    B(
        "cross-attention-seq2seq",
        "bug3",
        "tf",
        [("features = tf.tanh(q[:, None, :] + k)", "features = q[:, None, :] + k")],
        ["tf-visible", "tf-hidden-forward", "tf-hidden-masks", "tf-hidden-gradients"],
        "missing-tanh",
    ),
    B(
        "cross-attention-seq2seq",
        "bug3",
        "torch",
        [("masked_fill(~src_mask, -1e9)", "masked_fill(src_mask, -1e9)")],
        ["torch-visible", "torch-hidden-masks"],
        "inverted-mask",
    ),
    # the TF tutorial's (batch, src_len, 1) scores, softmax over the last axis
    B(
        "cross-attention-seq2seq",
        "bug4",
        "tf",
        [
            (
                "scores = tf.reduce_sum(features * self.w_v, axis=-1)",
                "scores = tf.matmul(features, self.w_v[:, None])",
            ),
            (
                "tf.where(src_mask, scores, -1e9)",
                "tf.where(src_mask[:, :, None], scores, -1e9)",
            ),
            (
                "context = tf.reduce_sum(weights[:, :, None] * enc_outputs, axis=1)",
                "context = tf.reduce_sum(weights * enc_outputs, axis=1)\n"
                "        weights = weights[:, :, 0]",
            ),
        ],
        ["tf-visible", "tf-hidden-forward", "tf-hidden-masks", "tf-hidden-gradients"],
        "softmax-over-size-1-axis",
    ),
    B(
        "cross-attention-seq2seq",
        "bug4",
        "torch",
        [("            + prev_state @ self.W_s\n", "")],
        ["torch-hidden-forward", "torch-hidden-masks", "torch-hidden-gradients"],
        "previous-state-ignored",
    ),
    # Luong's order (update, then attend with s_t) in a Bahdanau step
    B(
        "cross-attention-seq2seq",
        "bug5",
        "tf",
        [
            (
                "q = tf.matmul(prev_state, self.W_q)",
                "state = tf.tanh(\n"
                "            tf.matmul(embedded, self.W_e)\n"
                "            + tf.matmul(prev_state, self.W_s)\n"
                "            + self.b\n"
                "        )\n"
                "        q = tf.matmul(state, self.W_q)",
            ),
            (
                "        state = tf.tanh(\n"
                "            tf.matmul(embedded, self.W_e)\n"
                "            + tf.matmul(context, self.W_c)\n"
                "            + tf.matmul(prev_state, self.W_s)\n"
                "            + self.b\n"
                "        )\n",
                "",
            ),
        ],
        ["tf-visible", "tf-hidden-forward", "tf-hidden-masks", "tf-hidden-gradients"],
        "query-from-new-state",
    ),
    B(
        "cross-attention-seq2seq",
        "bug5",
        "torch",
        [
            (
                "        if src_mask is not None:\n"
                "            scores = scores.masked_fill(~src_mask, -1e9)"
                "  # padding: no weight\n",
                "",
            ),
            (
                "weights = torch.softmax(scores, dim=-1)",
                "weights = torch.softmax(scores, dim=-1)\n"
                "        if src_mask is not None:\n"
                "            weights = weights * src_mask",
            ),
        ],
        ["torch-visible", "torch-hidden-masks"],
        "mask-after-softmax",
    ),
    B(
        "cross-attention-seq2seq",
        "bug6",
        "tf",
        [("tf.where(src_mask, scores, -1e9)", "tf.where(src_mask, scores, 0.0)")],
        ["tf-visible", "tf-hidden-masks"],
        "mask-zero-fill",
    ),
    B(
        "cross-attention-seq2seq",
        "bug6",
        "torch",
        [("scores.masked_fill(~src_mask, -1e9)", "scores + src_mask")],
        ["torch-visible", "torch-hidden-masks"],
        "mask-added",
    ),
    B(
        "cross-attention-seq2seq",
        "bug7",
        "tf",
        [
            ('"W_c": (enc_dim, hidden_dim),', '"W_c": (hidden_dim, enc_dim),'),
            (
                "tf.matmul(context, self.W_c)",
                "tf.matmul(context, self.W_c, transpose_b=True)",
            ),
        ],
        ["tf-hidden-forward", "tf-hidden-masks", "tf-hidden-gradients"],
        "transposed-weights",
    ),
    B(
        "cross-attention-seq2seq",
        "bug7",
        "torch",
        [
            (
                "self.W_q = nn.Parameter(torch.empty(hidden_dim, attn_dim))",
                "self.W_q = torch.empty(hidden_dim, attn_dim)",
            )
        ],
        [
            "torch-visible",
            "torch-hidden-forward",
            "torch-hidden-masks",
            "torch-hidden-gradients",
        ],
        "not-a-parameter",
    ),
    # ---------------------------------------------------------------- multi-head
    B(
        "multi-head-attention",
        "bug1",
        "tf",
        [
            (
                "outputs = tf.matmul(self.merge_heads(tf.matmul(weights, v)), self.W_o)",  # noqa: E501
                "outputs = self.merge_heads(tf.matmul(weights, v))",
            )
        ],
        ["tf-hidden-forward", "tf-hidden-masks", "tf-hidden-gradients"],
        "missing-output-projection",
    ),
    B(
        "multi-head-attention",
        "bug1",
        "torch",
        [
            (
                "x.reshape(batch, n, self.num_heads, self.d_head).transpose(1, 2)",
                "x.reshape(batch, self.num_heads, n, self.d_head)",
            ),
            (
                "x.transpose(1, 2).reshape(batch, n, self.d_model)",
                "x.reshape(batch, n, self.d_model)",
            ),
        ],
        [
            "torch-visible",
            "torch-hidden-forward",
            "torch-hidden-masks",
            "torch-hidden-gradients",
        ],
        "head-split-without-transpose",
    ),
    B(
        "multi-head-attention",
        "bug2",
        "tf",
        [("/ math.sqrt(self.d_head)", "/ math.sqrt(self.d_model)")],
        ["tf-hidden-forward", "tf-hidden-masks", "tf-hidden-gradients"],
        "scale-uses-d_model",
    ),
    B(
        "multi-head-attention",
        "bug2",
        "torch",
        [("mask = attention_mask[:, None]", "mask = ~attention_mask[:, None]")],
        ["torch-visible", "torch-hidden-masks"],
        "inverted-mask",
    ),
    B(
        "multi-head-attention",
        "bug3",
        "tf",
        [
            (
                "x = tf.reshape(x, (batch, n, self.num_heads, self.d_head))\n"
                "        return tf.transpose(x, (0, 2, 1, 3))",
                "x = tf.reshape(x, (batch, n, self.d_head, self.num_heads))\n"
                "        return tf.transpose(x, (0, 3, 1, 2))",
            ),
            (
                "tf.reshape(tf.transpose(x, (0, 2, 1, 3)), (batch, n, self.d_model))",
                "tf.reshape(tf.transpose(x, (0, 2, 3, 1)), (batch, n, self.d_model))",
            ),
        ],
        ["tf-hidden-forward", "tf-hidden-masks", "tf-hidden-gradients"],
        "head-split-interleaved",
    ),
    B(
        "multi-head-attention",
        "bug3",
        "torch",
        [
            ("queries @ self.W_q)", "queries @ self.W_q.T)"),
            ("keys @ self.W_k)", "keys @ self.W_k.T)"),
            ("values @ self.W_v)", "values @ self.W_v.T)"),
            ("@ self.W_o\n", "@ self.W_o.T\n"),
        ],
        ["torch-hidden-forward", "torch-hidden-masks", "torch-hidden-gradients"],
        "transposed-weights",
    ),
    # the two multi-head mistakes that got no hint before (a split or a merge
    # alone is wrong), and the rest of the reported ones
    B(
        "multi-head-attention",
        "bug4",
        "tf",
        [
            (
                "x = tf.reshape(x, (batch, n, self.num_heads, self.d_head))\n"
                "        return tf.transpose(x, (0, 2, 1, 3))",
                "x = tf.reshape(x, (batch, n, self.d_head, self.num_heads))\n"
                "        return tf.transpose(x, (0, 3, 1, 2))",
            )
        ],
        ["tf-hidden-forward", "tf-hidden-masks", "tf-hidden-gradients"],
        "head-split-d_head-first",
    ),
    B(
        "multi-head-attention",
        "bug4",
        "torch",
        [
            (
                "x.transpose(1, 2).reshape(batch, n, self.d_model)",
                "x.reshape(batch, n, self.d_model)",
            )
        ],
        ["torch-hidden-forward", "torch-hidden-masks", "torch-hidden-gradients"],
        "head-merge-without-transpose",
    ),
    B(
        "multi-head-attention",
        "bug5",
        "tf",
        [
            (
                "tf.matmul(q, k, transpose_b=True) / math.sqrt(self.d_head)",
                "tf.matmul(q, k, transpose_b=True)",
            ),
            (
                "outputs = tf.matmul(self.merge_heads(tf.matmul(weights, v)), self.W_o)",  # noqa: E501
                "weights = weights / math.sqrt(self.d_head)\n        outputs = "
                "tf.matmul(self.merge_heads(tf.matmul(weights, v)), self.W_o)",
            ),
        ],
        ["tf-visible", "tf-hidden-forward", "tf-hidden-masks", "tf-hidden-gradients"],
        "scale-after-softmax",
    ),
    B(
        "multi-head-attention",
        "bug5",
        "torch",
        [
            ("torch.softmax(scores, dim=-1)", "torch.softmax(scores, dim=1)"),
            ("-1e9), dim=-1)", "-1e9), dim=1)"),
        ],
        [
            "torch-visible",
            "torch-hidden-forward",
            "torch-hidden-masks",
            "torch-hidden-gradients",
        ],
        "softmax-over-heads",
    ),
    B(
        "multi-head-attention",
        "bug6",
        "tf",
        [
            (
                "mask = tf.broadcast_to(attention_mask[:, None], tf.shape(scores))",
                "mask = tf.broadcast_to(attention_mask, tf.shape(scores))",
            )
        ],
        ["tf-hidden-masks"],
        "mask-missing-head-axis",
    ),
    B(
        "multi-head-attention",
        "bug6",
        "torch",
        [
            (
                "weights = torch.softmax(scores.masked_fill(~mask, -1e9), dim=-1) * mask",  # noqa: E501
                "weights = torch.softmax(scores + mask, dim=-1)",
            )
        ],
        ["torch-visible", "torch-hidden-masks"],
        "mask-added",
    ),
    B(
        "multi-head-attention",
        "bug7",
        "tf",
        [
            (
                "v = self.split_heads(tf.matmul(values, self.W_v))",
                "v = self.split_heads(tf.matmul(values, self.W_k))",
            )
        ],
        ["tf-hidden-forward", "tf-hidden-masks", "tf-hidden-gradients"],
        "values-projected-with-W_k",
    ),
    B(
        "multi-head-attention",
        "bug7",
        "torch",
        [
            (
                "weights = torch.softmax(scores.masked_fill(~mask, -1e9), dim=-1) * mask",  # noqa: E501
                "weights = torch.softmax(scores * mask, dim=-1)",
            )
        ],
        ["torch-visible", "torch-hidden-masks"],
        "mask-zero-fill",
    ),
    B(
        "multi-head-attention",
        "bug8",
        "torch",
        [("scores = q @ k.transpose(-1, -2)", "scores = q @ k.transpose(1, 2)")],
        [
            "torch-visible",
            "torch-hidden-forward",
            "torch-hidden-masks",
            "torch-hidden-gradients",
        ],
        says="transpose only the last two axes of the keys",
    ),
    B(
        "multi-head-attention",
        "bug8",
        "tf",
        [("/ math.sqrt(self.d_head)", "/ tf.sqrt(tf.cast(self.d_head, tf.float64))")],
        ["tf-visible", "tf-hidden-forward", "tf-hidden-masks", "tf-hidden-gradients"],
        says="float32 and float64 tensors are mixed",
    ),
    # ------------------------------------------------------------ builtin-layers
    B(
        "builtin-layers",
        "bug1",
        "tf",
        [("layer(queries, values, keys,", "layer(queries, keys, values,")],
        ["tf-hidden-forward", "tf-hidden-masks", "tf-hidden-gradients"],
        "keys-values-swapped",
    ),
    B(
        "builtin-layers",
        "bug1",
        "torch",
        [("else ~key_mask", "else key_mask")],
        ["torch-visible", "torch-hidden-masks"],
        "inverted-mask",
    ),
    B(
        "builtin-layers",
        "bug2",
        "tf",
        [("else key_mask[:, None, :]", "else tf.logical_not(key_mask)[:, None, :]")],
        ["tf-visible", "tf-hidden-masks"],
        "inverted-mask",
    ),
    B(
        "builtin-layers",
        "bug2",
        "torch",
        [("need_weights=True, average_attn_weights=False)", "need_weights=True)")],
        ["torch-visible", "torch-hidden-forward", "torch-hidden-masks"],
        "averaged-weights",
    ),
    B(
        "builtin-layers",
        "bug3",
        "tf",
        [("else key_mask[:, None, :]", "else key_mask")],
        ["tf-visible", "tf-hidden-masks"],
        says="needs a query axis",
    ),
    B(
        "builtin-layers",
        "bug3",
        "torch",
        [("else ~key_mask", "else (~key_mask).float()")],
        ["torch-visible", "torch-hidden-masks"],
        "float-padding-mask-added",
    ),
    B(
        "builtin-layers",
        "bug4",
        "torch",
        [("key_padding_mask=padding", "attn_mask=padding")],
        ["torch-visible", "torch-hidden-masks"],
        says="goes to key_padding_mask",
    ),
    B(
        "builtin-layers",
        "bug5",
        "torch",
        [(BRIDGE_TORCH, copy_weights_in(transpose=False))],
        ["torch-hidden-forward", "torch-hidden-masks", "torch-hidden-gradients"],
        "weights-not-transposed",
    ),
    B(
        "builtin-layers",
        "bug6",
        "torch",
        [(BRIDGE_TORCH, copy_weights_in(biases=False))],
        ["torch-hidden-forward", "torch-hidden-masks", "torch-hidden-gradients"],
        "biases-not-copied",
    ),
    B(
        "builtin-layers",
        "bug7",
        "torch",
        [
            (
                "else ~key_mask",
                "else (~key_mask)[:, None, :].expand(-1, queries.shape[1], -1)"
                ".repeat(num_heads, 1, 1)",
            ),
            ("key_padding_mask=padding", "attn_mask=padding"),
        ],
        ["torch-visible", "torch-hidden-masks"],
        "mask-repeated-not-interleaved",
    ),
)


def _catalogues() -> tuple:
    """The bugs of the later assignments: one module per assignment,
    ``support/bugs_<module>.py``, whose ``ROWS`` are B(...)'s arguments as
    tuples (assignment, student, part, edits, lost[, tag[, says]])."""
    import importlib

    rows = []
    for path in sorted(Path(__file__).parent.glob("bugs_*.py")):
        module = importlib.import_module(f"{__package__}.{path.stem}")
        rows += [B(*row) for row in module.ROWS]
    return tuple(rows)


BUGS = BUGS + _catalogues()


WARNING_EDITS = {
    "key-value-masking": {
        "tf": [("* tf.cast(mask, scores.dtype)", "* tf.compat.v1.to_float(mask)")],
        "torch": [
            (
                "d_k = queries.shape[-1]\n",
                "d_k = queries.shape[-1]\n    key_mask = torch.tensor(key_mask)\n",
            )
        ],
    },
}


STUDENTS = ("bug1", "bug2", "bug3")


def source_notebook(assignment):
    return nbs.read(ROOT / "solutions" / assignment / f"{assignment}.ipynb")


def release_notebook(assignment):
    return nbs.read(ROOT / "exercises" / assignment / f"{assignment}.ipynb")


def apply_edits(code: str, edits, what: str) -> str:
    for old, new in edits:
        assert code.count(old) == 1, f"{what}: {old!r} occurs {code.count(old)} times"
        code = code.replace(old, new)
    return code


def solutions_for(assignment, edits_by_part: dict) -> dict:
    """grade_id -> code of the reference solution with the given edits."""
    solutions = nbs.solution_cells(source_notebook(assignment))
    for part, edits in edits_by_part.items():
        gid = f"{part}-solution"
        solutions[gid] = apply_edits(solutions[gid], edits, f"{assignment}/{gid}")
    return solutions


def student_solutions(assignment, student) -> dict:
    if student == "reference":
        return solutions_for(assignment, {})
    if student == "warning":
        return solutions_for(assignment, WARNING_EDITS[assignment])
    edits = {
        b.part: b.edits
        for b in BUGS
        if b.assignment == assignment and b.student == student
    }
    return solutions_for(assignment, edits)


def expected_lost(assignment, student) -> set:
    return {
        gid
        for b in BUGS
        if b.assignment == assignment and b.student == student
        for gid in b.lost
    }


def points(assignment) -> dict:
    """grade_id -> points of every test cell of the source notebook."""
    return {
        c["metadata"]["nbgrader"]["grade_id"]: c["metadata"]["nbgrader"]["points"]
        for c in source_notebook(assignment)["cells"]
        if c.get("metadata", {}).get("nbgrader", {}).get("grade")
    }


def run_in_process(assignment, solutions: dict, hidden=True) -> dict:
    """Execute a submission's cells here: {grade_id of a test cell: error or None}.

    Like a kernel: setup, solution cells, test cells in order, one namespace;
    hidden tests read the committed reference data. Output is captured.
    """
    nb = source_notebook(assignment)
    namespace = {"__name__": "__main__"}
    results = {}
    old = os.environ.get(reference.ENV_VAR)
    os.environ[reference.ENV_VAR] = str(reference.source_path(ROOT, assignment))
    try:
        for cell in nb["cells"]:
            meta = cell.get("metadata", {}).get("nbgrader", {})
            if cell["cell_type"] != "code" or not meta:
                continue
            gid = meta["grade_id"]
            code = solutions.get(gid, nbs.source(cell))
            if meta.get("grade") and not hidden and "BEGIN HIDDEN TESTS" in code:
                continue
            try:
                with contextlib.redirect_stdout(io.StringIO()):
                    exec(compile(code, f"<{assignment}:{gid}>", "exec"), namespace)
                error = None
            except Exception as exc:  # noqa: BLE001
                error = f"{type(exc).__name__}: {exc}"
            if meta.get("grade"):
                results[gid] = error
    finally:
        if old is None:
            os.environ.pop(reference.ENV_VAR, None)
        else:
            os.environ[reference.ENV_VAR] = old
    return results


def make_course(dest: Path, assignments) -> None:
    """A course copy with these assignments and their submissions."""
    dest.mkdir(parents=True)
    copy_course(dest, assignments)
    for a in assignments:
        release = nbs.read(ROOT / "exercises" / a / f"{a}.ipynb")  # the committed one
        students = ["reference", "blank", *STUDENTS]
        if a in WARNING_EDITS:
            students.append("warning")
        for student in students:
            nb = (
                release
                if student == "blank"
                else nbs.submission(release, student_solutions(a, student))
            )
            nbs.write(nb, dest / "submitted" / student / a / f"{a}.ipynb")


def environment(root: Path) -> dict:
    env = dict(os.environ)
    env["PATH"] = path_with_this_python(env.get("PATH", ""))
    env["PYTHONPATH"] = str(root)
    # hidden tests must find their data beside the notebook, as in real use
    env.pop("GRADER_REFERENCE", None)
    return env


def copy_course(dest: Path, assignments) -> None:
    """A course copy without submissions: the config, both packages and the
    sources of ``assignments``."""
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "nbgrader_config.py", dest)
    for package in ("attncourse", "grader"):
        shutil.copytree(
            ROOT / package,
            dest / package,
            ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"),
        )
    for a in assignments:
        shutil.copytree(
            ROOT / "solutions" / a,
            dest / "solutions" / a,
            ignore=shutil.ignore_patterns("grader-errors.log"),
        )


def read_report(root: Path) -> dict:
    """student -> row of the grading report a batch run wrote."""
    import json

    data = json.loads((root / "grading-report.json").read_text())
    return {r["student"]: r for r in data["rows"]}


def read_scores(root: Path) -> dict:
    """(assignment, student) -> {grade_id: score} from the course's gradebook."""
    from nbgrader.api import Gradebook

    os.environ["PATH"] = environment(root)["PATH"]  # for nbgrader's `alembic`
    scores = {}
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}", "attention-course") as gb:
        for assignment in gb.assignments:
            for sub in gb.assignment_submissions(assignment.name):
                for nb in sub.notebooks:
                    scores[assignment.name, sub.student.id] = {
                        g.name: g.score for g in nb.grades
                    }
    return scores
