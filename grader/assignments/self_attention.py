"""Assignment ``self-attention``: a Keras layer and a PyTorch module.

SelfAttentionTF(d_k, d_v, causal=False) (keras.layers.Layer, weights from
add_weight in build) and SelfAttentionTorch(input_dim, d_k, d_v, causal=False)
(nn.Module with nn.Parameters): weights W_q, W_k (input_dim, d_k), W_v
(input_dim, d_v); call(inputs, attention_mask=None, return_weights=False):

    Q, K, V = X W_q, X W_k, X W_v;  weights = softmax(Q K^T / sqrt(d_k), mask);
    outputs = weights V.

attention_mask: bool, True = attend, broadcastable to (batch, seq, seq);
causal=True also hides keys j > i (AND with attention_mask).

Checks: ``forward`` (no mask), ``masks`` (padding, causal, both),
``gradients`` (w.r.t. W_q, W_k, W_v and the inputs).
"""

import math

import numpy as np

from grader import numeric
from grader.assignments._common import layer_checks, rng
from grader.assignments.mistakes import (
    inverted_mask,
    mask_added,
    mask_ignored,
    missing_scale,
    scale_after_softmax,
    softmax_axis,
)
from grader.checks import Variant
from grader.kernel.runners.self_attention import (
    D_K,
    D_V,
    INPUT_DIM,
    RUNS,
    SEQ,
    TARGETS,
    WEIGHTS,
)
from grader.provenance import BUILTIN_ATTENTION, COURSE_ATTENTION

NAME = "self-attention"
SEED = 5005
# What the solution may not call (grader.provenance flags it for review): the
# course library's own implementation and the built-in attention layers.
FORBIDDEN = (*COURSE_ATTENTION, *BUILTIN_ATTENTION)


def make_cases(seed: int = SEED) -> dict:
    r = rng(seed)
    base = {
        "inputs": r.normal(size=(2, SEQ, INPUT_DIM)),
        "W_q": r.normal(size=(INPUT_DIM, D_K)) / math.sqrt(INPUT_DIM),
        "W_k": r.normal(size=(INPUT_DIM, D_K)) / math.sqrt(INPUT_DIM),
        "W_v": r.normal(size=(INPUT_DIM, D_V)) / math.sqrt(INPUT_DIM),
        "upstream": r.normal(size=(2, SEQ, D_V)),
    }
    padding = numeric.lengths_mask(np.array([5, 3]), SEQ)[:, None, :]  # (2, 1, 5)
    no_mask = np.ones((1, 1, 1), dtype=bool)
    cases = {}
    for name, causal, mask in (
        ("plain", False, None),
        ("padded", False, padding),
        ("causal", True, None),
        ("causal_padded", True, padding),
    ):
        case = dict(
            base,
            causal=np.array(causal),
            has_mask=np.array(mask is not None),
            attention_mask=no_mask if mask is None else mask,
        )
        cases[name] = case
    return cases


def _forward(
    i,
    scale="d_k",
    axis=-1,
    swap_qk=False,
    mask="ok",
    causal="ok",
    projections="qkv",
    scale_after=False,
):
    """The reference and its wrong variants. ``projections`` names the weights
    for Q, K, V; ``mask``: ok, inverted, ignored, added (scores + mask),
    zero_fill (hidden scores set to 0, padding and causal), queries (the
    (batch, 1, seq) mask turned to (batch, seq, 1): it hides query rows)."""
    x = i["inputs"]
    q, k, v = (x @ i[f"W_{p}"] for p in projections)
    if swap_qk:
        q, k = k, q
    s = q @ np.swapaxes(k, -1, -2)
    div = {
        "d_k": D_K,
        "none": 1.0,
        "d_v": D_V,
        "input_dim": INPUT_DIM,
        "d_k_no_sqrt": D_K**2,
    }[scale]
    if not scale_after:
        s = s / math.sqrt(div)
    n = x.shape[1]
    full = np.ones((1, n, n), dtype=bool)
    m = full
    if bool(i["has_mask"]) and mask != "ignored":
        pad = i["attention_mask"]
        if mask == "queries":
            pad = np.swapaxes(pad, -1, -2)
        if mask == "added":
            s = s + pad
        else:
            m = m & (~pad if mask == "inverted" else pad)
    if bool(i["causal"]) and causal != "ignored":
        tri = {
            "ok": numeric.causal(n),
            "flipped": numeric.causal(n).T,
            "strict": np.tril(np.ones((n, n), dtype=bool), -1),
        }[causal]
        m = m & tri
    m = np.broadcast_to(m, s.shape)
    if mask == "zero_fill":  # every hidden score set to 0, nothing zeroed after
        s, m = np.where(m, s, 0.0), np.ones(s.shape, dtype=bool)
    if axis == -1:
        w = numeric.masked_softmax(s, m)
    else:
        w = numeric.softmax(np.where(m, s, -1e9), axis=axis) * m
    if scale_after:
        w = w / math.sqrt(div)
    return {"outputs": w @ v, "weights": w}


def expected(case: str, inputs: dict) -> dict:
    result = _forward(inputs)
    if case == "plain":
        x, g = inputs["inputs"], inputs["upstream"]
        q, k, v = (x @ inputs[w] for w in WEIGHTS)
        scale = 1 / math.sqrt(D_K)
        dq, dk, dv = numeric.attention_backward(q, k, v, result["weights"], g, scale)
        result.update(
            {
                "grad_W_q": np.einsum("bnd,bne->de", x, dq),
                "grad_W_k": np.einsum("bnd,bne->de", x, dk),
                "grad_W_v": np.einsum("bnd,bne->de", x, dv),
                "grad_inputs": dq @ inputs["W_q"].T
                + dk @ inputs["W_k"].T
                + dv @ inputs["W_v"].T,
            }
        )
    return result


# Each variant cites where learners report the mistake (issue threads of the
# anchors and of tutorials built on them).
FORWARD_VARIANTS = (
    # tunz/transformer-pytorch#8
    missing_scale(lambda i: _forward(i, scale="none")),
    Variant(
        "scale-uses-d_v",
        "the scores are divided by sqrt(d_v); the scale is sqrt(d_k), the size "
        "of queries and keys.",
        lambda i: _forward(i, scale="d_v"),
    ),
    # jadore801120/attention-is-all-you-need-pytorch#42 (sqrt(d_model))
    Variant(
        "scale-uses-input_dim",
        "the scores are divided by sqrt(input_dim); the scale is sqrt(d_k), the "
        "size of the projected queries and keys.",
        lambda i: _forward(i, scale="input_dim"),
    ),
    # thegregyang/NTK4A#3 (1/d instead of 1/sqrt(d))
    Variant(
        "scale-not-sqrt",
        "the scores are divided by d_k instead of sqrt(d_k).",
        lambda i: _forward(i, scale="d_k_no_sqrt"),
    ),
    # FrancescoSaverioZuppichini/ViT#2 and #6: F.softmax(energy) * scaling
    scale_after_softmax(lambda i: _forward(i, scale_after=True)),
    # labmlai/annotated_deep_learning_paper_implementations#282,
    # nerminnuraydogan/vision-transformer#1
    softmax_axis(lambda i: _forward(i, axis=1)),
    Variant(
        "queries-keys-swapped",
        "queries and keys are swapped (K Q^T instead of Q K^T): row i of the "
        "scores must hold query i against every key.",
        lambda i: _forward(i, swap_qk=True),
    ),
    # stevezheng23/reading_comprehension_tf#284 (projection reuse),
    # Khaliladib11/Transformer-from-scratch#1 (self.key used for the queries)
    Variant(
        "keys-projected-with-W_q",
        "the keys are projected with W_q, so the scores compare Q with itself; "
        "K = inputs @ W_k.",
        lambda i: _forward(i, projections="qqv"),
    ),
)

PADDED, CAUSAL = ("padded", "causal_padded"), ("causal", "causal_padded")
MASK_VARIANTS = (
    inverted_mask(lambda i: _forward(i, mask="inverted"), cases=PADDED),
    mask_ignored(lambda i: _forward(i, mask="ignored"), cases=PADDED),
    # huggingface/transformers#41443, huggingface/pytorch-image-models#2674
    mask_added(lambda i: _forward(i, mask="added"), cases=PADDED),
    # georg-wolflein/good-features#1, hyunwoongko/transformer#10
    Variant(
        "mask-zero-fill",
        "masked scores are set to 0 (or multiplied by the mask), but softmax "
        "gives a score of 0 the weight exp(0) = 1; fill them with -1e9.",
        lambda i: _forward(i, mask="zero_fill"),
        cases=PADDED + ("causal",),
    ),
    # lsdefine/attention-is-all-you-need-keras#16 (mask broadcast over queries)
    Variant(
        "mask-on-queries",
        "the padding mask is applied along the queries (rows), not the keys "
        "(columns): attention_mask is (batch, 1, seq), keys on the LAST axis "
        "-- do not transpose it.",
        lambda i: _forward(i, mask="queries"),
        cases=PADDED,
    ),
    Variant(
        "causal-flipped",
        "the causal mask points the wrong way: query i may attend to keys "
        "j <= i (the past and itself), not to the future.",
        lambda i: _forward(i, causal="flipped"),
        cases=CAUSAL,
    ),
    Variant(
        "causal-excludes-diagonal",
        "the causal mask hides the diagonal: query i may also attend to "
        "itself (j <= i).",
        lambda i: _forward(i, causal="strict"),
        cases=CAUSAL,
    ),
    Variant(
        "causal-ignored",
        "causal=True does not hide the future keys.",
        lambda i: _forward(i, causal="ignored"),
        cases=CAUSAL,
    ),
)


def _hidden(i):
    """Positions of the weights that must be 0 (padding, future keys), or None."""
    n = i["inputs"].shape[1]
    m = np.ones((1, n, n), dtype=bool)
    if bool(i["has_mask"]):
        m = m & i["attention_mask"]
    if bool(i["causal"]):
        m = m & numeric.causal(n)
    return ~m


NOTES = {
    "plain": "batch 2, seq 5, input_dim 6, d_k 4, d_v 3; no mask",
    "padded": "padding mask (batch, 1, seq) for lengths 5 and 3",
    "causal": "causal=True, no attention_mask",
    "causal_padded": "causal=True and a padding mask",
}
REMINDER = (
    "Q, K, V = X W_q, X W_k, X W_v; softmax(Q K^T / sqrt(d_k)) over keys, "
    "masked where attention_mask is False or (causal) key j > query i."
)
CHECKS = layer_checks(
    RUNS,
    TARGETS,
    variants=FORWARD_VARIANTS,
    mask_variants=MASK_VARIANTS,
    notes=NOTES,
    reminder=REMINDER,
    grads=("grad_W_q", "grad_W_k", "grad_W_v", "grad_inputs"),
    grad_reminder="gradients of sum(outputs * g) must flow to W_q, W_k, "
    "W_v and the inputs (check the forward test first).",
    hidden=_hidden,
)


def crosscheck(case: str, inputs: dict, exp: dict) -> None:
    """The reference agrees with the library's SelfAttention (NumPy forward,
    PyTorch float64 autograd for the gradients)."""
    import torch

    import attncourse.numpy as anp
    import attncourse.torch as atorch

    layer = anp.SelfAttention(D_K, D_V, INPUT_DIM)
    anp.set_params(layer, {w: inputs[w] for w in WEIGHTS})
    n = SEQ
    mask = np.ones((1, n, n), dtype=bool)
    if bool(inputs["has_mask"]):
        mask = mask & inputs["attention_mask"]
    if bool(inputs["causal"]):
        mask = mask & anp.causal_mask(n)
    out, w = layer(inputs["inputs"], attention_mask=mask, return_weights=True)
    np.testing.assert_allclose(out, exp["outputs"], atol=1e-12)
    np.testing.assert_allclose(w, exp["weights"], atol=1e-12)
    if case == "plain":
        mod = atorch.SelfAttention(D_K, D_V, INPUT_DIM).double()
        atorch.set_params(mod, {w: inputs[w] for w in WEIGHTS})
        x = torch.tensor(inputs["inputs"], requires_grad=True)
        (mod(x) * torch.tensor(inputs["upstream"])).sum().backward()
        for wname in WEIGHTS:
            np.testing.assert_allclose(
                getattr(mod, wname).grad.numpy(), exp[f"grad_{wname}"], atol=1e-12
            )
        np.testing.assert_allclose(x.grad.numpy(), exp["grad_inputs"], atol=1e-12)
