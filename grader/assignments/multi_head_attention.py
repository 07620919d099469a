"""Assignment ``multi-head-attention``: multi-head attention with a given weight layout.

MultiHeadAttentionTF(num_heads, d_model) (keras.layers.Layer) and
MultiHeadAttentionTorch(num_heads, d_model) (nn.Module); weights W_q, W_k, W_v,
W_o, each (d_model, d_model), no biases, x @ W layout. Head h uses features
h*d_head ... (h+1)*d_head - 1 of Q, K and V (d_head = d_model // num_heads);
heads are concatenated in order and projected by W_o:

    head_h = softmax(Q_h K_h^T / sqrt(d_head), mask) V_h
    outputs = concat(head_0, ..., head_{H-1}) W_o

call(queries, keys, values, attention_mask=None, return_weights=False);
attention_mask bool (True = attend) broadcastable to (batch, n_q, n_k), shared
by all heads; weights (batch, num_heads, n_q, n_k).

Checks: ``forward`` (2 and 4 heads), ``masks`` (a padding mask),
``gradients`` (w.r.t. the four weights).
"""

import math

import numpy as np

from grader import numeric
from grader.assignments._common import layer_checks, rng
from grader.assignments.mistakes import (
    inverted_mask,
    mask_added,
    mask_ignored,
    mask_zero_fill,
    missing_scale,
    scale_after_softmax,
    softmax_axis,
)
from grader.checks import Variant
from grader.kernel.runners.multi_head_attention import (
    D_MODEL,
    N_K,
    N_Q,
    RUNS,
    TARGETS,
    WEIGHTS,
)
from grader.provenance import BUILTIN_ATTENTION, COURSE_ATTENTION

NAME = "multi-head-attention"
SEED = 6006
# What the solution may not call (grader.provenance flags it for review): the
# course library's own implementation and the built-in attention layers.
FORBIDDEN = (*COURSE_ATTENTION, *BUILTIN_ATTENTION)


def make_cases(seed: int = SEED) -> dict:
    r = rng(seed)
    base = {
        "queries": r.normal(size=(2, N_Q, D_MODEL)),
        "keys": r.normal(size=(2, N_K, D_MODEL)),
        "values": r.normal(size=(2, N_K, D_MODEL)),
        **{w: r.normal(size=(D_MODEL, D_MODEL)) / math.sqrt(D_MODEL) for w in WEIGHTS},
        "upstream": r.normal(size=(2, N_Q, D_MODEL)),
    }
    padding = numeric.lengths_mask(np.array([4, 2]), N_K)[:, None, :]  # (2, 1, 4)
    no_mask = np.ones((1, 1, 1), dtype=bool)
    return {
        "two_heads": dict(
            base,
            num_heads=np.array(2),
            has_mask=np.array(False),
            attention_mask=no_mask,
        ),
        "four_heads": dict(
            base,
            num_heads=np.array(4),
            has_mask=np.array(False),
            attention_mask=no_mask,
        ),
        "padded": dict(
            base, num_heads=np.array(2), has_mask=np.array(True), attention_mask=padding
        ),
    }


def _split(x, h, how="ok"):
    b, n, d = x.shape
    if how == "ok":
        return numeric.split_heads(x, h)
    if how == "no_transpose":
        return x.reshape(b, h, n, d // h)
    return x.reshape(b, n, d // h, h).transpose(0, 3, 1, 2)  # interleaved


def _merge(x, how="ok"):
    b, h, n, dh = x.shape
    if how == "ok":
        return numeric.merge_heads(x)
    if how == "no_transpose":
        return x.reshape(b, n, h * dh)
    return x.transpose(0, 2, 3, 1).reshape(b, n, h * dh)  # interleaved


def _forward(
    i,
    scale="d_head",
    axis=-1,
    split="ok",
    merge=None,
    out_proj=True,
    mask="ok",
    transpose_w=False,
    projections="qkv",
    scale_after=False,
):
    """The reference and its wrong variants. ``merge`` defaults to the inverse
    of ``split``; ``projections`` names the weights used for Q, K, V;
    ``mask``: ok, inverted, ignored, added (scores + mask), zero_fill (masked
    scores set to 0, no zeroing), no_head_axis (the (batch, 1, n_k) mask
    broadcast against (batch, heads, n_q, n_k) lands on the heads axis)."""
    h = int(i["num_heads"])
    W = {w: (i[w].T if transpose_w else i[w]) for w in WEIGHTS}
    q, k, v = (
        _split(i[x] @ W[f"W_{p}"], h, split)
        for x, p in zip(("queries", "keys", "values"), projections, strict=True)
    )
    d_head = D_MODEL // h
    div = {"d_head": d_head, "none": 1.0, "d_model": D_MODEL}[scale]
    s = q @ np.swapaxes(k, -1, -2)
    if not scale_after:
        s = s / math.sqrt(div)
    m = np.ones(s.shape, dtype=bool)
    if bool(i["has_mask"]) and mask != "ignored":
        pad = i["attention_mask"][:, None]  # (batch, 1, 1, n_k): same for all heads
        if mask == "no_head_axis":
            pad = i["attention_mask"][None]  # (1, batch, 1, n_k): batch b -> head b
        if mask == "added":
            s = s + np.broadcast_to(pad, s.shape)
        elif mask == "zero_fill":
            s = np.where(np.broadcast_to(pad, s.shape), s, 0.0)
        else:
            m = m & (~pad if mask == "inverted" else pad)
    if axis == -1:
        w = numeric.masked_softmax(s, m)
    else:
        w = numeric.softmax(np.where(m, s, -1e9), axis=axis) * m
    if scale_after:
        w = w / math.sqrt(div)
    heads = _merge(w @ v, split if merge is None else merge)
    return {"outputs": heads @ W["W_o"] if out_proj else heads, "weights": w}


def expected(case: str, inputs: dict) -> dict:
    result = _forward(inputs)
    if case == "two_heads":
        h = int(inputs["num_heads"])
        x = {n: inputs[n] for n in ("queries", "keys", "values")}
        proj = {
            c: x[n] @ inputs[f"W_{c}"]
            for c, n in (("q", "queries"), ("k", "keys"), ("v", "values"))
        }
        q, k, v = (_split(proj[c], h) for c in "qkv")
        concat = _merge(result["weights"] @ v)
        g = inputs["upstream"]
        grad_concat = g @ inputs["W_o"].T
        dq, dk, dv = numeric.attention_backward(
            q,
            k,
            v,
            result["weights"],
            _split(grad_concat, h),
            1 / math.sqrt(D_MODEL // h),
        )
        result.update(
            {
                "grad_W_o": np.einsum("bnd,bne->de", concat, g),
                "grad_W_q": np.einsum("bnd,bne->de", x["queries"], _merge(dq)),
                "grad_W_k": np.einsum("bnd,bne->de", x["keys"], _merge(dk)),
                "grad_W_v": np.einsum("bnd,bne->de", x["values"], _merge(dv)),
            }
        )
    return result


# Each variant cites where learners report the mistake (issue threads of the
# anchors and of tutorials built on them).
VARIANTS = (
    # jadore801120/attention-is-all-you-need-pytorch#42, tunz/transformer-pytorch#8
    missing_scale(lambda i: _forward(i, scale="none"), "sqrt(d_head)"),
    # chelsea0x3b/dfdx#171, brightmart/bert_language_understanding#9,
    # jadore801120/attention-is-all-you-need-pytorch#49, omihub777/ViT-CIFAR#11
    Variant(
        "scale-uses-d_model",
        "the scores are divided by sqrt(d_model); each head scales by "
        "sqrt(d_head), d_head = d_model // num_heads.",
        lambda i: _forward(i, scale="d_model"),
    ),
    # FrancescoSaverioZuppichini/ViT#2 and #6: F.softmax(energy) * scaling
    scale_after_softmax(lambda i: _forward(i, scale_after=True), "sqrt(d_head)"),
    # labmlai/annotated_deep_learning_paper_implementations#282,
    # jadore801120/attention-is-all-you-need-pytorch#52
    softmax_axis(lambda i: _forward(i, axis=2)),
    # FudanNLP/fastNLP#254: dim=1 from 3-D code is the heads axis in 4-D
    Variant(
        "softmax-over-heads",
        "the softmax runs over the heads axis (dim=1 of (batch, num_heads, "
        "n_q, n_k)); normalise over the keys, the last axis (dim=-1).",
        lambda i: _forward(i, axis=1),
    ),
    Variant(
        "missing-output-projection",
        "the output projection is missing: concatenate the heads, then "
        "multiply by W_o.",
        lambda i: _forward(i, out_proj=False),
    ),
    # hyunwoongko/transformer#15, bentrevett/pytorch-seq2seq#148,
    # harvardnlp/annotated-transformer#17 and #118
    Variant(
        "head-split-without-transpose",
        "wrong head split: reshaping (batch, n, d_model) straight to "
        "(batch, num_heads, n, d_head) mixes positions; reshape to (batch, n, "
        "num_heads, d_head), then move the head axis forward (and back when "
        "merging).",
        lambda i: _forward(i, split="no_transpose"),
    ),
    Variant(
        "head-split-without-transpose-only",
        "wrong head split: reshaping (batch, n, d_model) straight to "
        "(batch, num_heads, n, d_head) mixes positions (the weights are "
        "already wrong); reshape to (batch, n, num_heads, d_head), then move "
        "the head axis forward.",
        lambda i: _forward(i, split="no_transpose", merge="ok"),
    ),
    # jsbaan/transformer-from-scratch#4 / #6, ajhalthor/Transformer-Neural-Network
    # #4 and #8, 649453932/Chinese-Text-Classification-Pytorch#10
    Variant(
        "head-merge-without-transpose",
        "the weights are right but the heads are merged wrongly: reshaping "
        "(batch, num_heads, n, d_head) straight to (batch, n, d_model) mixes "
        "positions; move the head axis back first: x.transpose(1, 2)"
        ".reshape(batch, n, d_model) (tf.transpose(x, (0, 2, 1, 3))).",
        lambda i: _forward(i, merge="no_transpose"),
    ),
    Variant(
        "head-split-interleaved",
        "wrong head split: head h must use the CONTIGUOUS features "
        "h*d_head ... (h+1)*d_head - 1, not every num_heads-th feature.",
        lambda i: _forward(i, split="interleaved"),
    ),
    # the (d_head, num_heads) reshape: the split is interleaved, the merge right
    Variant(
        "head-split-d_head-first",
        "wrong head split: reshape to (batch, n, num_heads, d_head) -- heads "
        "first, then d_head -- not (batch, n, d_head, num_heads): head h must "
        "use the CONTIGUOUS features h*d_head ... (h+1)*d_head - 1.",
        lambda i: _forward(i, split="interleaved", merge="ok"),
    ),
    Variant(
        "transposed-weights",
        "the weights are used transposed: the layout is x @ W with W of shape "
        "(d_in, d_out), not x @ W^T as nn.Linear stores it.",
        lambda i: _forward(i, transpose_w=True),
    ),
    # yflyzhang/AnnotatedTransformer#1 (value = k_proj(value)),
    # stevezheng23/reading_comprehension_tf#284 (projection reuse)
    Variant(
        "values-projected-with-W_k",
        "the values are projected with W_k; V = values @ W_v.",
        lambda i: _forward(i, projections="qkk"),
    ),
    Variant(
        "one-projection-for-qkv",
        "one weight projects queries, keys and values; each has its own: "
        "Q = queries @ W_q, K = keys @ W_k, V = values @ W_v.",
        lambda i: _forward(i, projections="qqq"),
    ),
)

PADDED = ("padded",)
MASK_VARIANTS = (
    inverted_mask(lambda i: _forward(i, mask="inverted")),
    mask_ignored(lambda i: _forward(i, mask="ignored")),
    # huggingface/transformers#41443, huggingface/pytorch-image-models#2674
    mask_added(lambda i: _forward(i, mask="added"), cases=PADDED),
    # georg-wolflein/good-features#1, hyunwoongko/transformer#10
    mask_zero_fill(lambda i: _forward(i, mask="zero_fill"), cases=PADDED),
    # hyunwoongko/transformer#32, harvardnlp/annotated-transformer#118 ("Same
    # mask applied to all h heads": mask.unsqueeze(1))
    Variant(
        "mask-missing-head-axis",
        "the (batch, 1, n_k) mask is broadcast against (batch, num_heads, "
        "n_q, n_k) without a head axis, so batch element b's mask lands on "
        "head b; add the head axis: attention_mask[:, None] -> (batch, 1, 1, "
        "n_k).",
        lambda i: _forward(i, mask="no_head_axis"),
        cases=PADDED,
    ),
)


def _hidden(i):
    """Positions of the weights that must be 0 (padding keys), or None."""
    return ~i["attention_mask"][:, None] if bool(i["has_mask"]) else None


NOTES = {
    "two_heads": "batch 2, 3 queries, 4 keys, d_model 8, 2 heads",
    "four_heads": "the same inputs with 4 heads (d_head 2)",
    "padded": "2 heads, padding mask (batch, 1, n_k) for lengths 4 and 2",
}
REMINDER = (
    "project with W_q/W_k/W_v, split features into contiguous heads, "
    "softmax(Q_h K_h^T / sqrt(d_head)) over keys, concatenate in head order, "
    "multiply by W_o."
)
CHECKS = layer_checks(
    RUNS,
    TARGETS,
    variants=VARIANTS,
    mask_variants=MASK_VARIANTS,
    notes=NOTES,
    reminder=REMINDER,
    grads=("grad_W_q", "grad_W_k", "grad_W_v", "grad_W_o"),
    grad_reminder="gradients of sum(outputs * g) must reach all four "
    "weights (check the forward test first).",
    hidden=_hidden,
)


def crosscheck(case: str, inputs: dict, exp: dict) -> None:
    """The reference agrees with the library's multi_head_attention (NumPy
    forward, TensorFlow float64 GradientTape for the gradients)."""
    import tensorflow as tf

    import attncourse.numpy as anp
    import attncourse.tf as atf

    h = int(inputs["num_heads"])
    params = {w: inputs[w] for w in WEIGHTS}
    qkv = (inputs["queries"], inputs["keys"], inputs["values"])
    mask = inputs["attention_mask"] if bool(inputs["has_mask"]) else None
    out, w = anp.multi_head_attention(*qkv, params, h, mask)
    np.testing.assert_allclose(out, exp["outputs"], atol=1e-12)
    np.testing.assert_allclose(w, exp["weights"], atol=1e-12)
    if case == "two_heads":
        variables = {k: tf.Variable(v) for k, v in params.items()}
        with tf.GradientTape() as tape:
            out_t, _ = atf.multi_head_attention(*qkv, variables, h)
            loss = tf.reduce_sum(out_t * inputs["upstream"])
        grads = tape.gradient(loss, variables)
        for k in WEIGHTS:
            np.testing.assert_allclose(grads[k].numpy(), exp[f"grad_{k}"], atol=1e-10)
