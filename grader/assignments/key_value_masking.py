"""Assignment ``key-value-masking``: padding masks and masked key-value attention.

* padding_mask_*(token_ids, pad_id) -> bool (batch, n), True where the token is
  real (token != pad_id), False on padding;
* masked_attention_*(queries, keys, values, key_mask) -> (outputs, weights):
  scaled dot-product attention over keys, key_mask (batch, num_keys) True =
  attend; a query whose keys are all padding gets all-zero weights and a zero
  output (no NaN).

Checks: ``padding_mask``, ``masked_attention`` (outputs, weights, gradients
w.r.t. queries and values), ``fully_masked`` (a sequence that is all padding).
"""

import math

import numpy as np

from grader import numeric
from grader.assignments._common import rng
from grader.assignments.mistakes import (
    mask_added,
    mask_zero_fill,
    missing_scale,
    softmax_axis,
)
from grader.checks import Check, Variant
from grader.kernel.runners.key_value_masking import ATTN_TARGETS, MASK_TARGETS, RUNS
from grader.provenance import BUILTIN_ATTENTION, COURSE_ATTENTION

NAME = "key-value-masking"
SEED = 4004
# What the solution may not call (grader.provenance flags it for review): the
# course library's own implementation and the built-in attention layers.
FORBIDDEN = (*COURSE_ATTENTION, *BUILTIN_ATTENTION)
PAD = 1


def make_cases(seed: int = SEED) -> dict:
    r = rng(seed)
    lengths = np.array([6, 4, 1])
    ids = r.integers(2, 50, size=(3, 6))
    ids = np.where(numeric.lengths_mask(lengths, 6), ids, PAD).astype(np.int64)

    def attn_case(batch, n, lengths):
        return {
            "queries": r.normal(size=(batch, n, 4)),
            "keys": r.normal(size=(batch, n, 4)),
            "values": r.normal(size=(batch, n, 3)),
            "key_mask": numeric.lengths_mask(np.array(lengths), n),
            "upstream": r.normal(size=(batch, n, 3)),
        }

    return {
        "tokens": {"token_ids": ids, "pad_id": np.array(PAD)},
        "main": attn_case(3, 5, [5, 3, 1]),
        "empty": attn_case(2, 4, [2, 0]),
    }


def _attend(i, scale=True, mask="keys", softmax="masked", axis=-1):
    q, k, v, m = (i[n] for n in ("queries", "keys", "values", "key_mask"))
    s = q @ np.swapaxes(k, -1, -2)
    if scale == "values":  # sqrt of the values' size instead of d_k
        s = s / math.sqrt(v.shape[-1])
    elif scale:
        s = s / math.sqrt(q.shape[-1])
    key_mask = {
        "keys": m[:, None, :],
        "inverted": ~m[:, None, :],
        "none": np.ones_like(m)[:, None, :],
        "queries": m[:, :, None],
    }[mask]
    key_mask = np.broadcast_to(key_mask, s.shape)
    if softmax == "masked":
        w = (
            numeric.masked_softmax(s, key_mask)
            if axis == -1
            else numeric.softmax(np.where(key_mask, s, -1e9), axis=axis)
        )
    elif softmax == "after":  # softmax first, then zero the padding (no renorm)
        w = numeric.softmax(s) * key_mask
    elif softmax == "added":  # the bool mask added to the scores: True = +1
        w = numeric.softmax(s + key_mask)
    elif softmax == "zero_fill":  # masked scores set to 0 (or scores * mask)
        w = numeric.softmax(np.where(key_mask, s, 0.0))
    else:  # "fill": big negative fill, no zeroing -> uniform on empty rows
        w = numeric.softmax(np.where(key_mask, s, -1e9))
    return {"outputs": w @ v, "weights": w}


def expected(case: str, inputs: dict) -> dict:
    if case == "tokens":
        return {"mask": inputs["token_ids"] != inputs["pad_id"]}
    q, k, v, m, g = (
        inputs[n] for n in ("queries", "keys", "values", "key_mask", "upstream")
    )
    scale = 1 / math.sqrt(q.shape[-1])
    out, w = numeric.attention(q, k, v, scale, m[:, None, :])
    dq, _, dv = numeric.attention_backward(q, k, v, w, g, scale)
    return {"outputs": out, "weights": w, "grad_queries": dq, "grad_values": dv}


MASK_VARIANTS = (
    Variant(
        "inverted-mask",
        "the mask is inverted: True must mark REAL tokens (token != pad_id) -- "
        "True = attend, the course's convention.",
        lambda i: {"mask": i["token_ids"] == i["pad_id"]},
    ),
    Variant(
        "hard-coded-pad",
        "the padding id is hard-coded as 0; use the pad_id argument.",
        lambda i: {"mask": i["token_ids"] != 0},
    ),
)

# Each variant cites where learners report the mistake.
ATTN_VARIANTS = (
    # julber95's fix in InseeFrLab/torchTextClassifiers#92 (inverted mask)
    Variant(
        "inverted-mask",
        "the mask polarity is inverted: True = attend, so padding keys are the "
        "False entries of key_mask.",
        lambda i: _attend(i, mask="inverted"),
    ),
    Variant(
        "mask-ignored",
        "the mask is not applied: padding keys still receive weight.",
        lambda i: _attend(i, mask="none"),
    ),
    # abisee/pointer-generator#88 (softmax, then mask)
    Variant(
        "mask-after-softmax",
        "the mask is applied after the softmax without renormalising, so the "
        "weights no longer sum to 1; mask the SCORES before the softmax.",
        lambda i: _attend(i, softmax="after"),
    ),
    # lsdefine/attention-is-all-you-need-keras#16 (mask over the queries)
    Variant(
        "mask-on-queries",
        "the mask is broadcast over the queries axis; a padding mask hides KEYS: "
        "give it shape (batch, 1, num_keys).",
        lambda i: _attend(i, mask="queries"),
    ),
    # huggingface/transformers#41443, huggingface/pytorch-image-models#2674
    mask_added(lambda i: _attend(i, softmax="added")),
    # georg-wolflein/good-features#1, hyunwoongko/transformer#10,
    # Shujun-He/RibonanzaNet#5 (-1e-9 instead of -1e9)
    mask_zero_fill(lambda i: _attend(i, softmax="zero_fill")),
    missing_scale(lambda i: _attend(i, scale=False)),
    Variant(
        "scale-uses-value-size",
        "the scores are divided by the square root of the VALUES' size; d_k "
        "is the size of queries and keys (queries.shape[-1]).",
        lambda i: _attend(i, scale="values"),
    ),
    softmax_axis(lambda i: _attend(i, axis=1)),
    # d2l-ai/d2l-en#2423 (masked_softmax gives uniform weights to an empty row)
    Variant(
        "uniform-on-empty-rows",
        "a query whose keys are all padding gets uniform weights over the "
        "padding; it must get all-zero weights and a zero output -- multiply "
        "the weights by the mask after the softmax.",
        lambda i: _attend(i, softmax="fill"),
        cases=("empty",),
    ),
)


def _hidden(i):
    """Positions of the weights that must be 0: padding keys."""
    return ~i["key_mask"][:, None, :]


ATTN_REMINDER = (
    "scores q k^T / sqrt(d_k); padding keys (key_mask False) get weight "
    "0, the others a softmax over the keys; rows with no real key are "
    "all zero."
)
CHECKS = {
    "padding_mask": Check(
        name="padding_mask",
        runner=RUNS["padding_mask"],
        targets=MASK_TARGETS,
        compare=("mask",),
        variants=MASK_VARIANTS,
        case_notes={"tokens": f"3 sequences of 6 tokens, pad_id = {PAD}"},
        reminder="mask = token_ids != pad_id (True = real token), dtype bool.",
    ),
    "masked_attention": Check(
        name="masked_attention",
        runner=RUNS["masked_attention"],
        targets=ATTN_TARGETS,
        compare=("weights", "outputs", "grad_queries", "grad_values"),
        variants=ATTN_VARIANTS,
        case_notes={"main": "batch 3 of lengths 5, 3, 1; 5 queries and keys"},
        reminder=ATTN_REMINDER,
        hidden=_hidden,
    ),
    "fully_masked": Check(
        name="fully_masked",
        runner=RUNS["fully_masked"],
        targets=ATTN_TARGETS,
        compare=("weights", "outputs", "grad_queries", "grad_values"),
        variants=ATTN_VARIANTS,
        case_notes={"empty": "the second sequence is all padding (length 0)"},
        hidden=_hidden,
        nan_hint=(
            "Likely mistake (minus-infinity-fill): filling masked scores with "
            "-inf gives 0/0 = NaN for a row with no real key; fill with a large "
            "negative finite number and multiply the weights by the mask."
        ),
        reminder=ATTN_REMINDER,
    ),
}


def crosscheck(case: str, inputs: dict, exp: dict) -> None:
    """The reference agrees with the library's scaled_dot_product_attention
    (NumPy forward, PyTorch float64 autograd for the gradients)."""
    if case == "tokens":
        return
    import torch

    import attncourse.numpy as anp
    import attncourse.torch as atorch

    q, k, v, m = (inputs[n] for n in ("queries", "keys", "values", "key_mask"))
    out, w = anp.scaled_dot_product_attention(q, k, v, mask=m[:, None, :])
    np.testing.assert_allclose(out, exp["outputs"], atol=1e-12)
    np.testing.assert_allclose(w, exp["weights"], atol=1e-12)
    qt = torch.tensor(q, requires_grad=True)
    vt = torch.tensor(v, requires_grad=True)
    out_t, _ = atorch.scaled_dot_product_attention(
        qt, torch.tensor(k), vt, mask=torch.tensor(m)[:, None, :]
    )
    (out_t * torch.tensor(inputs["upstream"])).sum().backward()
    np.testing.assert_allclose(qt.grad.numpy(), exp["grad_queries"], atol=1e-12)
    np.testing.assert_allclose(vt.grad.numpy(), exp["grad_values"], atol=1e-12)
