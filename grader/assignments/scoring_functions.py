"""Assignment ``scoring-functions``: three score functions, two frameworks.

* additive_score_*(queries, keys, W, b, v): v . tanh([q; k] W + b), with W of
  shape (d_q + d_k, h) -- "concatenate, linear, tanh, weighted sum";
* projected_dot_score_*(queries, keys, W_q, W_k): (q W_q) . (k W_k) / sqrt(h),
  h = W_q.shape[1] -- the scaled dot product of projected queries and keys;
* bilinear_score_*(queries, keys, W): q W k^T, W (d_q, d_k).

All return scores (batch, num_queries, num_keys). One check per function.
"""

import math

import numpy as np

from grader.assignments._common import rng
from grader.checks import Check, Variant
from grader.kernel.runners.scoring_functions import FUNCTIONS, RUNS
from grader.provenance import BUILTIN_ATTENTION, COURSE_ATTENTION

NAME = "scoring-functions"
SEED = 2002
# What the solution may not call (grader.provenance flags it for review): the
# course library's own implementation and the built-in attention layers.
FORBIDDEN = (*COURSE_ATTENTION, *BUILTIN_ATTENTION)


def make_cases(seed: int = SEED) -> dict:
    r = rng(seed)
    d_q, d_k, h = 5, 3, 6
    additive = {
        "queries": r.normal(size=(2, 3, d_q)),
        "keys": r.normal(size=(2, 4, d_k)),
        "W": r.normal(size=(d_q + d_k, h)) / math.sqrt(d_q + d_k),
        "b": r.normal(size=(h,)),
        "v": r.normal(size=(h,)),
    }
    projected = {
        "queries": r.normal(size=(2, 3, 5)),
        "keys": r.normal(size=(2, 4, 3)),
        "W_q": r.normal(size=(5, 8)),
        "W_k": r.normal(size=(3, 8)),
    }
    bilinear = {
        "queries": r.normal(size=(2, 3, 5)),
        "keys": r.normal(size=(2, 4, 5)),
        "W": r.normal(size=(5, 5)),
    }
    return {"additive": additive, "projected_dot": projected, "bilinear": bilinear}


def _additive(i, order="qk", tanh=True, bias="inside", use_v=True):
    q, k, W, b, v = (i[n] for n in ("queries", "keys", "W", "b", "v"))
    d_q, d_k = q.shape[-1], k.shape[-1]
    if order == "qk":
        Wq, Wk = W[:d_q], W[d_q:]
    else:  # [k; q] W
        Wk, Wq = W[:d_k], W[d_k:]
    pre = (q @ Wq)[:, :, None, :] + (k @ Wk)[:, None, :, :]
    if bias == "inside":
        pre = pre + b
    feat = np.tanh(pre) if tanh else pre
    if bias == "outside":
        feat = feat + b
    return {"scores": feat @ v if use_v else feat.sum(-1)}


def _projected(i, scale="sqrt_h"):
    q, k = i["queries"] @ i["W_q"], i["keys"] @ i["W_k"]
    s = q @ np.swapaxes(k, -1, -2)
    h = i["W_q"].shape[1]
    div = {
        "sqrt_h": math.sqrt(h),
        "none": 1.0,
        "h": h,
        "sqrt_dq": math.sqrt(i["queries"].shape[-1]),
        "sqrt_dk": math.sqrt(i["keys"].shape[-1]),
    }[scale]
    return {"scores": s / div}


def _bilinear(i, transpose=False, scaled=False):
    W = i["W"].T if transpose else i["W"]
    s = i["queries"] @ W @ np.swapaxes(i["keys"], -1, -2)
    return {"scores": s / math.sqrt(i["keys"].shape[-1]) if scaled else s}


def expected(case: str, inputs: dict) -> dict:
    return {"additive": _additive, "projected_dot": _projected, "bilinear": _bilinear}[
        case
    ](inputs)


# Each variant cites where learners report the mistake.
ADDITIVE_VARIANTS = (
    # tensorflow/nmt#257 (the tanh left out of the attention layer)
    Variant(
        "missing-tanh",
        "the tanh is missing: the score is v . tanh([q; k] W + b).",
        lambda i: _additive(i, tanh=False),
    ),
    Variant(
        "concat-order",
        "the concatenation order is swapped: [q; k] puts the query first, so the "
        "first d_q rows of W multiply the query and the last d_k rows the key.",
        lambda i: _additive(i, order="kq"),
    ),
    # OpenNMT/OpenNMT-py#892, tensorflow/tensorflow#12111 (bias or no bias)
    Variant(
        "missing-bias",
        "the bias b is missing: tanh([q; k] W + b).",
        lambda i: _additive(i, bias="none"),
    ),
    Variant(
        "bias-outside-tanh",
        "the bias is added after the tanh; it belongs inside: tanh([q; k] W + b).",
        lambda i: _additive(i, bias="outside"),
    ),
    # tensorflow/tensorflow#39332 and #43471 (Keras AdditiveAttention sums the
    # tanh features, no v)
    Variant(
        "v-ignored",
        "the tanh features are summed instead of weighted by v: the score is "
        "v . tanh(...), a dot product with v.",
        lambda i: _additive(i, use_v=False),
    ),
)

PROJECTED_VARIANTS = (
    # tunz/transformer-pytorch#8
    Variant(
        "missing-scale",
        "the 1/sqrt(d_k) scaling is missing: divide the dot products by "
        "sqrt(h), h = W_q.shape[1] (the size of the projected queries and keys).",
        lambda i: _projected(i, "none"),
    ),
    # jadore801120/attention-is-all-you-need-pytorch#42 and #49 (sqrt of the
    # model size, not of the projected size)
    Variant(
        "scale-input-size",
        "the scores are divided by the square root of the INPUT size; use the "
        "size of the projected vectors, h = W_q.shape[1].",
        lambda i: _projected(i, "sqrt_dq"),
    ),
    Variant(
        "scale-key-input-size",
        "the scores are divided by the square root of the keys' input size; use "
        "the size of the projected vectors, h = W_q.shape[1].",
        lambda i: _projected(i, "sqrt_dk"),
    ),
    # thegregyang/NTK4A#3 (1/d instead of 1/sqrt(d))
    Variant(
        "scale-not-sqrt",
        "the scores are divided by h instead of sqrt(h).",
        lambda i: _projected(i, "h"),
    ),
)

BILINEAR_VARIANTS = (
    # dido1998/Recurrent-Independent-Mechanisms#9 (nn.Linear computes x A^T)
    Variant(
        "transposed-weights",
        "W is used transposed: the score is q W k^T with W of shape (d_q, d_k), "
        "i.e. (queries @ W) @ keys^T.",
        lambda i: _bilinear(i, transpose=True),
    ),
    Variant(
        "scaled-bilinear",
        "the bilinear score is not scaled: do not divide by sqrt(d).",
        lambda i: _bilinear(i, scaled=True),
    ),
)


def _check(kind, variants, note, reminder):
    base, _ = FUNCTIONS[kind]
    return Check(
        name=kind,
        runner=RUNS[kind],
        targets={f: f"{base}_{f}" for f in ("tf", "torch")},
        compare=("scores",),
        variants=variants,
        case_notes={kind: note},
        reminder=reminder,
    )


CHECKS = {
    "additive": _check(
        "additive",
        ADDITIVE_VARIANTS,
        "batch 2, 3 queries (d_q=5), 4 keys (d_k=3), h=6",
        "scores[b, i, j] = v . tanh([q_i; k_j] W + b).",
    ),
    "projected_dot": _check(
        "projected_dot",
        PROJECTED_VARIANTS,
        "d_q=5, d_k=3, projected size h=8",
        "scores = (q W_q)(k W_k)^T / sqrt(h), h = W_q.shape[1].",
    ),
    "bilinear": _check(
        "bilinear",
        BILINEAR_VARIANTS,
        "d_q = d_k = 5",
        "scores = q W k^T with W (d_q, d_k).",
    ),
}


def crosscheck(case: str, inputs: dict, exp: dict) -> None:
    """The reference agrees with attncourse.numpy's score functions."""
    import attncourse.numpy as anp

    i = inputs
    if case == "additive":
        d_q = i["queries"].shape[-1]
        # fold the bias into W_q through a constant feature: [q, 1] [W_q; b]
        q1 = np.concatenate([i["queries"], np.ones(i["queries"].shape[:-1] + (1,))], -1)
        Wq1 = np.concatenate([i["W"][:d_q], i["b"][None]], 0)
        got = anp.additive_score(q1, i["keys"], Wq1, i["W"][d_q:], i["v"])
    elif case == "projected_dot":
        got = anp.scaled_dot_score(i["queries"] @ i["W_q"], i["keys"] @ i["W_k"])
    else:
        got = anp.bilinear_score(i["queries"], i["keys"], i["W"])
    np.testing.assert_allclose(got, exp["scores"], atol=1e-10)
