"""Assignment ``builtin-layers``: the framework's own multi-head attention layers.

builtin_mha_tf(queries, keys, values, params, num_heads, key_mask=None) with
keras.layers.MultiHeadAttention and builtin_mha_torch(...) with
torch.nn.MultiheadAttention. ``params`` is the course's canonical weight
dictionary (W_q, W_k, W_v, W_o as (in, out) matrices, biases b_q, b_k, b_v,
b_o), so the reference is the library's multi_head_attention:

    head_h = softmax((X_q W_q + b_q)_h (X_k W_k + b_k)_h^T / sqrt(d_head), mask)
             (X_v W_v + b_v)_h
    outputs = concat(head_0, ..., head_{H-1}) W_o + b_o

key_mask: bool (batch, n_k), True = a real key (attend), or None; both
functions return (outputs (batch, n_q, d_model), weights (batch, num_heads,
n_q, n_k)), the weights per head. The student converts the mask to each API's
own form (Keras attention_mask: True = attend; torch key_padding_mask: True =
NOT allowed). Queries and keys have different lengths, so a layer that reads
(length, batch, features) fails or differs.

Checks: ``forward`` (2 and 4 heads, no mask), ``masks`` (padding masks with
2 and 4 heads, no fully masked row, so an inverted mask stays finite and
recognisable), ``gradients`` (w.r.t. queries, keys and values: the built-in
must stay in the framework's graph).
"""

import math

import numpy as np

from grader import numeric
from grader.assignments._common import layer_checks, rng
from grader.checks import Variant
from grader.kernel.runners.builtin_layers import (
    BATCH,
    BIASES,
    D_MODEL,
    INPUTS,
    N_K,
    N_Q,
    RUNS,
    TARGETS,
    WEIGHTS,
)
from grader.numeric import merge_heads, split_heads
from grader.provenance import COURSE_ATTENTION, allow

NAME = "builtin-layers"
SEED = 7007
# What the solution may not call (grader.provenance flags it for review): the
# course library (its mask converters too) but the bridges to the built-in
# layers, which the notebook offers; the built-in layers are this exercise's
# task, so they are allowed.
FORBIDDEN = (*COURSE_ATTENTION, *allow("to_keras_mha", "to_torch_mha"))


def make_cases(seed: int = SEED) -> dict:
    r = rng(seed)
    base = {
        "queries": r.normal(size=(BATCH, N_Q, D_MODEL)),
        "keys": r.normal(size=(BATCH, N_K, D_MODEL)),
        "values": r.normal(size=(BATCH, N_K, D_MODEL)),
        **{w: r.normal(size=(D_MODEL, D_MODEL)) / math.sqrt(D_MODEL) for w in WEIGHTS},
        **{b: 0.1 * r.normal(size=D_MODEL) for b in BIASES},
        "upstream": r.normal(size=(BATCH, N_Q, D_MODEL)),
    }
    all_keys = np.ones((BATCH, N_K), dtype=bool)
    return {
        "two_heads": dict(
            base, num_heads=np.array(2), has_mask=np.array(False), key_mask=all_keys
        ),
        "four_heads": dict(
            base, num_heads=np.array(4), has_mask=np.array(False), key_mask=all_keys
        ),
        # no sequence is full or empty: an inverted mask keeps a key in every row
        "padded": dict(
            base,
            num_heads=np.array(2),
            has_mask=np.array(True),
            key_mask=numeric.lengths_mask(np.array([4, 2]), N_K),
        ),
        "padded_four_heads": dict(
            base,
            num_heads=np.array(4),
            has_mask=np.array(True),
            key_mask=numeric.lengths_mask(np.array([3, 1]), N_K),
        ),
    }


def _forward(i, mask="ok", keys="keys", values="values", average=False):
    """The reference and its wrong variants: ``keys``/``values`` name the inputs
    used as keys and values (a swap or the Keras default key = value); ``mask``
    "tiled" gives head h of batch element b the mask of element (b*H + h) % B,
    what torch reads from a (B*H, n_q, n_k) attn_mask built with .repeat."""
    h = int(i["num_heads"])
    q = split_heads(i["queries"] @ i["W_q"] + i["b_q"], h)  # (batch, h, n_q, d_head)
    k = split_heads(i[keys] @ i["W_k"] + i["b_k"], h)  # (batch, h, n_k, d_head)
    v = split_heads(i[values] @ i["W_v"] + i["b_v"], h)  # (batch, h, n_k, d_head)
    s = q @ np.swapaxes(k, -1, -2) / math.sqrt(D_MODEL // h)
    m = None
    if bool(i["has_mask"]) and mask != "ignored":
        pad = i["key_mask"][:, None, None, :]  # (batch, 1, 1, n_k)
        if mask == "float_added":  # torch adds a float key_padding_mask
            s = s + pad
        elif mask == "float_added_inverted":
            s = s + ~pad
        elif mask == "tiled":
            rows = (np.arange(len(pad))[:, None] * h + np.arange(h)) % len(pad)
            m = pad[rows, 0]  # (batch, h, 1, n_k)
        else:
            m = ~pad if mask == "inverted" else pad
    w = numeric.masked_softmax(s, m)  # (batch, h, n_q, n_k)
    outputs = merge_heads(w @ v) @ i["W_o"] + i["b_o"]  # (batch, n_q, d_model)
    return {"outputs": outputs, "weights": w.mean(axis=1) if average else w}


def expected(case: str, inputs: dict) -> dict:
    result = _forward(inputs)
    if case == "two_heads":
        h = int(inputs["num_heads"])
        q, k, v = (
            split_heads(inputs[x] @ inputs[f"W_{c}"] + inputs[f"b_{c}"], h)
            for x, c in zip(INPUTS, "qkv", strict=True)
        )
        grad_heads = split_heads(inputs["upstream"] @ inputs["W_o"].T, h)
        dq, dk, dv = numeric.attention_backward(
            q, k, v, result["weights"], grad_heads, 1 / math.sqrt(D_MODEL // h)
        )
        result.update(
            {
                "grad_queries": merge_heads(dq) @ inputs["W_q"].T,
                "grad_keys": merge_heads(dk) @ inputs["W_k"].T,
                "grad_values": merge_heads(dv) @ inputs["W_v"].T,
            }
        )
    return result


# Each variant cites where learners report the mistake.
VARIANTS = (
    # tensorflow/text#1017 (Keras argument order query, value, key)
    Variant(
        "keys-values-swapped",
        "keys and values are swapped: keras.layers.MultiHeadAttention is called "
        "as layer(query, VALUE, key), torch.nn.MultiheadAttention as "
        "layer(query, key, value).",
        lambda i: _forward(i, keys="values", values="keys"),
    ),
    Variant(
        "key-defaults-to-value",
        "the keys are not used: called with two tensors, "
        "keras.layers.MultiHeadAttention takes the value as the key; pass the "
        "keys as the third argument, layer(query, value, key).",
        lambda i: _forward(i, keys="values"),
    ),
    # skyzh/tiny-llm#41 and CyberZHG/keras-bert#137: a torch Linear weight is
    # (out, in), the transpose of an x @ W matrix
    Variant(
        "weights-not-transposed",
        "the weight matrices went in untransposed: params' W_* are (in, out), "
        "used as x @ W, but torch stores (out, in): in_proj_weight = "
        "cat([W_q.T, W_k.T, W_v.T]), out_proj.weight = W_o.T (Keras kernels "
        "are W itself, reshaped to (d_model, num_heads, d_head)).",
        lambda i: _forward({**i, **{w: i[w].T for w in WEIGHTS}}),
    ),
    # pytorch/pytorch#52545 and #153136: in_proj_bias and out_proj.bias start
    # at 0, so biases that are not copied in leave the layer bias-free
    Variant(
        "biases-not-copied",
        "the biases are missing: the layer's biases start at 0, so copy b_q, "
        "b_k, b_v (in_proj_bias) and b_o (out_proj.bias) in as well as the "
        "weights.",
        lambda i: _forward({**i, **{b: 0 * i[b] for b in BIASES}}),
    ),
)

MASK_VARIANTS = (
    # pytorch/pytorch#141018 and #141694 (key_padding_mask True = ignored)
    Variant(
        "inverted-mask",
        "the mask polarity is inverted: key_mask is True = attend, as is "
        "Keras's attention_mask (pass it as it is, with a query axis); "
        "torch.nn.MultiheadAttention's key_padding_mask is True = NOT allowed "
        "(pass ~key_mask).",
        lambda i: _forward(i, mask="inverted"),
    ),
    Variant(
        "mask-ignored",
        "the mask is not applied: pass it to the layer (Keras attention_mask, "
        "torch key_padding_mask).",
        lambda i: _forward(i, mask="ignored"),
    ),
    # mlverse/torch#1205 / #1208, pytorch/pytorch#141018 and #147209: a float
    # key_padding_mask is added to the scores, it does not hide anything
    Variant(
        "float-mask-added",
        "the mask reached the layer as floats (1.0 = real key), and torch "
        "ADDS a float key_padding_mask to the scores instead of hiding keys; "
        "pass a bool mask, ~key_mask (True = NOT allowed).",
        lambda i: _forward(i, mask="float_added"),
    ),
    Variant(
        "float-padding-mask-added",
        "the mask reached the layer as floats (1.0 = padding), and torch "
        "ADDS a float key_padding_mask to the scores (1.0 is not -inf); pass "
        "the bool mask ~key_mask itself, without .float().",
        lambda i: _forward(i, mask="float_added_inverted"),
    ),
    # line/lighthouse#77 and ArrowLuo/CLIP4Clip#22: a (batch * num_heads, n_q,
    # n_k) attn_mask is indexed b * num_heads + h; .repeat tiles the batch
    Variant(
        "mask-repeated-not-interleaved",
        "the per-head attn_mask was built with .repeat(num_heads, 1, 1), which "
        "tiles the batch ([m0, m1, m0, m1]) so heads read another sequence's "
        "mask; torch indexes it b * num_heads + h: use "
        ".repeat_interleave(num_heads, dim=0), or key_padding_mask=~key_mask.",
        lambda i: _forward(i, mask="tiled"),
    ),
)


def _hidden(i):
    """Positions of the weights that must be 0 (padding keys), or None."""
    return ~i["key_mask"][:, None, None, :] if bool(i["has_mask"]) else None


NOTES = {
    "two_heads": "batch 2, 3 queries, 5 keys, d_model 8, 2 heads, no mask",
    "four_heads": "the same inputs with 4 heads (d_head 2), no mask",
    "padded": "2 heads, key_mask (batch, n_k) for lengths 4 and 2",
    "padded_four_heads": "4 heads, key_mask (batch, n_k) for lengths 3 and 1",
}
REMINDER = (
    "build the layer holding params (to_keras_mha / to_torch_mha), call it "
    "with queries, keys and values in its own argument order, the mask in its "
    "own polarity, and return the per-head weights."
)
CHECKS = layer_checks(
    RUNS,
    TARGETS,
    variants=VARIANTS,
    mask_variants=MASK_VARIANTS,
    notes=NOTES,
    reminder=REMINDER,
    grads=("grad_queries", "grad_keys", "grad_values"),
    grad_reminder="gradients of sum(outputs * g) must reach the "
    "queries, keys and values: keep them framework "
    "tensors (check the forward test first).",
    hidden=_hidden,
    forward_hidden=False,
)


def crosscheck(case: str, inputs: dict, exp: dict) -> None:
    """The reference agrees with the library's multi_head_attention (NumPy
    forward, TensorFlow float64 GradientTape for the input gradients)."""
    import tensorflow as tf

    import attncourse.numpy as anp
    import attncourse.tf as atf

    h = int(inputs["num_heads"])
    params = {w: inputs[w] for w in WEIGHTS + BIASES}
    qkv = tuple(inputs[x] for x in INPUTS)
    mask = inputs["key_mask"][:, None, :] if bool(inputs["has_mask"]) else None
    out, w = anp.multi_head_attention(*qkv, params, h, mask)
    np.testing.assert_allclose(out, exp["outputs"], atol=1e-12)
    np.testing.assert_allclose(w, exp["weights"], atol=1e-12)
    if case == "two_heads":
        sources = [tf.constant(x) for x in qkv]
        with tf.GradientTape() as tape:
            for s in sources:
                tape.watch(s)
            out_t, _ = atf.multi_head_attention(*sources, params, h)
            loss = tf.reduce_sum(out_t * inputs["upstream"])
        grads = tape.gradient(loss, sources)
        for x, g in zip(INPUTS, grads, strict=True):
            np.testing.assert_allclose(g.numpy(), exp[f"grad_{x}"], atol=1e-10)
