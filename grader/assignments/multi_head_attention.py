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
from grader.assignments._common import rng
from grader.core import Check, Variant
from grader.kernel.runners.multi_head_attention import (
    D_MODEL,
    N_K,
    N_Q,
    RUNS,
    TARGETS,
    WEIGHTS,
)

NAME = "multi-head-attention"
SEED = 6006


def make_cases() -> dict:
    r = rng(SEED)
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
        "two_heads": dict(base, num_heads=np.array(2), has_mask=np.array(False),
                          attention_mask=no_mask),
        "four_heads": dict(base, num_heads=np.array(4), has_mask=np.array(False),
                           attention_mask=no_mask),
        "padded": dict(base, num_heads=np.array(2), has_mask=np.array(True),
                       attention_mask=padding),
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


def _forward(i, scale="d_head", axis=-1, split="ok", out_proj=True, mask="ok",
             transpose_w=False):
    h = int(i["num_heads"])
    W = {w: (i[w].T if transpose_w else i[w]) for w in WEIGHTS}
    q, k, v = (_split(i[x] @ W[w], h, split)
               for x, w in (("queries", "W_q"), ("keys", "W_k"), ("values", "W_v")))
    d_head = D_MODEL // h
    div = {"d_head": d_head, "none": 1.0, "d_model": D_MODEL}[scale]
    s = q @ np.swapaxes(k, -1, -2) / math.sqrt(div)
    m = np.ones(s.shape, dtype=bool)
    if bool(i["has_mask"]) and mask != "ignored":
        pad = i["attention_mask"][:, None]  # (batch, 1, 1, n_k): same for all heads
        m = m & (~pad if mask == "inverted" else pad)
    if axis == -1:
        w = numeric.masked_softmax(s, m)
    else:
        w = numeric.softmax(np.where(m, s, -1e9), axis=axis) * m
    heads = _merge(w @ v, split)
    return {"outputs": heads @ W["W_o"] if out_proj else heads, "weights": w}


def expected(case: str, inputs: dict) -> dict:
    result = _forward(inputs)
    if case == "two_heads":
        h = int(inputs["num_heads"])
        x = {n: inputs[n] for n in ("queries", "keys", "values")}
        proj = {c: x[n] @ inputs[f"W_{c}"]
                for c, n in (("q", "queries"), ("k", "keys"), ("v", "values"))}
        q, k, v = (_split(proj[c], h) for c in "qkv")
        concat = _merge(result["weights"] @ v)
        g = inputs["upstream"]
        grad_concat = g @ inputs["W_o"].T
        dq, dk, dv = numeric.attention_backward(
            q, k, v, result["weights"], _split(grad_concat, h),
            1 / math.sqrt(D_MODEL // h))
        result.update({
            "grad_W_o": np.einsum("bnd,bne->de", concat, g),
            "grad_W_q": np.einsum("bnd,bne->de", x["queries"], _merge(dq)),
            "grad_W_k": np.einsum("bnd,bne->de", x["keys"], _merge(dk)),
            "grad_W_v": np.einsum("bnd,bne->de", x["values"], _merge(dv)),
        })
    return result


VARIANTS = (
    Variant("missing-scale",
            "the scores are not divided by sqrt(d_head).",
            lambda i: _forward(i, scale="none")),
    Variant("scale-uses-d_model",
            "the scores are divided by sqrt(d_model); each head scales by "
            "sqrt(d_head), d_head = d_model // num_heads.",
            lambda i: _forward(i, scale="d_model")),
    Variant("softmax-axis",
            "the softmax runs over the queries axis; normalise over the keys "
            "(last axis).",
            lambda i: _forward(i, axis=2)),
    Variant("missing-output-projection",
            "the output projection is missing: concatenate the heads, then "
            "multiply by W_o.",
            lambda i: _forward(i, out_proj=False)),
    Variant("head-split-without-transpose",
            "wrong head split: reshaping (batch, n, d_model) straight to "
            "(batch, num_heads, n, d_head) mixes positions; reshape to (batch, n, "
            "num_heads, d_head), then move the head axis forward (and back when "
            "merging).",
            lambda i: _forward(i, split="no_transpose")),
    Variant("head-split-interleaved",
            "wrong head split: head h must use the CONTIGUOUS features "
            "h*d_head ... (h+1)*d_head - 1, not every num_heads-th feature.",
            lambda i: _forward(i, split="interleaved")),
    Variant("transposed-weights",
            "the weights are used transposed: the layout is x @ W with W of shape "
            "(d_in, d_out), not x @ W^T as nn.Linear stores it.",
            lambda i: _forward(i, transpose_w=True)),
)

MASK_VARIANTS = (
    Variant("inverted-mask", "the attention_mask polarity is inverted: True = attend.",
            lambda i: _forward(i, mask="inverted")),
    Variant("mask-ignored", "attention_mask is not applied.",
            lambda i: _forward(i, mask="ignored")),
)


NOTES = {"two_heads": "batch 2, 3 queries, 4 keys, d_model 8, 2 heads",
         "four_heads": "the same inputs with 4 heads (d_head 2)",
         "padded": "2 heads, padding mask (batch, 1, n_k) for lengths 4 and 2"}
REMINDER = ("project with W_q/W_k/W_v, split features into contiguous heads, "
            "softmax(Q_h K_h^T / sqrt(d_head)) over keys, concatenate in head order, "
            "multiply by W_o.")
CHECKS = {
    "forward": Check(name="forward", runner=RUNS["forward"], targets=TARGETS, compare=("weights", "outputs"), variants=VARIANTS,
                     case_notes=NOTES, reminder=REMINDER),
    "masks": Check(name="masks", runner=RUNS["masks"], targets=TARGETS, compare=("weights", "outputs"), variants=MASK_VARIANTS + VARIANTS, case_notes=NOTES,
                   reminder=REMINDER),
    "gradients": Check(name="gradients", runner=RUNS["gradients"], targets=TARGETS, compare=("grad_W_q", "grad_W_k", "grad_W_v", "grad_W_o"),
                       variants=VARIANTS, case_notes=NOTES,
                       reminder="gradients of sum(outputs * g) must reach all four "
                                "weights (check the forward test first)."),
}


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
