"""Assignment ``positions``: rotary position embeddings (RoPE) and RoPE scores.

* apply_rope_*(x, positions=None): x (batch, n, head_dim) or (batch, heads, n,
  head_dim), positions int (n,) (shared by the batch), (batch, n) (a row per
  batch element, shared by the heads) or None (0, 1, ..., n-1). The "halves"
  pairing of GPT-NeoX / Hugging Face / Keras-Hub: feature i pairs with feature
  i + head_dim/2 and turns by theta_i = position * 10000^(-2i/head_dim),

      out[i]          = x[i] cos theta_i - x[i + h] sin theta_i
      out[i + h]      = x[i + h] cos theta_i + x[i] sin theta_i     (h = head_dim/2)

  an odd head_dim raises ValueError.
* rope_scores_*(queries, keys, q_positions, k_positions): queries (batch,
  heads, n_q, head_dim), keys (batch, heads, n_k, head_dim) -> scores (batch,
  heads, n_q, n_k) = rope(q) . rope(k) / sqrt(head_dim); the queries may sit
  at later positions than the keys' first (cached decoding).

Checks: ``rope`` (no positions, an offset, a position row per batch element,
ranks 3 and 4, and the ValueError), ``scores`` (cached decoding, batched
positions), ``gradients`` (of sum(scores * g) w.r.t. queries and keys).
Shapes are drawn with the seed, so fresh grading inputs differ in shape too.
"""

import math

import numpy as np

from grader.assignments._common import rng
from grader.checks import Check, Variant
from grader.kernel.runners.positions import (
    RAISED_OTHER,
    RAISED_VALUE_ERROR,
    RETURNED,
    ROPE,
    RUNS,
    SCORES,
)
from grader.provenance import BUILTIN_ATTENTION, COURSE_ATTENTION

NAME = "positions"
SEED = 5005
BASE = 10000.0
# What the solution may not call (grader.provenance flags it for review): the
# course library's RoPE and ALiBi (and the models built on them), its scores
# and attention, the built-in layers, and the frameworks' ready-made rotary
# embeddings (torch.onnx.ops.rotary_embedding, keras_hub's RotaryEmbedding,
# torchtune's RotaryPositionalEmbeddings, transformers' apply_rotary_pos_emb).
FORBIDDEN = (
    *COURSE_ATTENTION,
    *BUILTIN_ATTENTION,
    # not "*rope*": that also matches "property"
    "torch.*.rotary_embedding*",
    "torch.*.RotaryEmbedding*",
    "torch.*.*RotaryEmbedding*",
    "keras.*.RotaryEmbedding",
    "keras.*.rotary_embedding*",
    "torchtune",
)


def _positions(r, n, start_high):
    """Positions 0..n-1 shifted by a random start in [1, start_high)."""
    return np.arange(n, dtype=np.int64) + int(r.integers(1, start_high))


def make_cases(seed: int = SEED) -> dict:
    r = rng(seed)
    d = int(r.choice([6, 8]))  # head_dim, even
    n = int(r.integers(4, 7))
    first = _positions(r, n, 4)
    batched = np.stack([first, first + int(r.integers(3, 25))])
    scattered = np.sort(
        np.stack([r.choice(40, size=n, replace=False) for _ in range(3)]), axis=-1
    ).astype(np.int64)
    n_k = int(r.integers(6, 9))
    n_q = int(r.integers(2, 4))
    # row 0 consecutive, row 1 with gaps (an evicted cache): the offsets
    # between queries and keys differ between the rows
    k_rows = np.stack(
        [_positions(r, n_k, 4), np.sort(r.choice(40, size=n_k, replace=False))]
    ).astype(np.int64)

    def rope_case(shape, positions):
        has = positions is not None
        return {
            "x": r.normal(size=shape),
            "positions": positions if has else np.arange(shape[-2], dtype=np.int64),
            "has_positions": np.array(has),
        }

    def scores_case(q_positions, k_positions):
        return {
            "queries": r.normal(size=(2, 2, n_q, d)),
            "keys": r.normal(size=(2, 2, n_k, d)),
            "q_positions": q_positions,
            "k_positions": k_positions,
            "upstream": r.normal(size=(2, 2, n_q, n_k)),
        }

    return {
        "default": rope_case((3, n, d), None),
        "offset": rope_case((2, 3, n, d), _positions(r, n, 12)),
        # batch == heads: positions broadcast onto the heads axis give numbers,
        # not a shape error, so that mistake is named
        "batched": rope_case((2, 2, n, d), batched),
        "scattered": rope_case((3, n, d), scattered),
        # cached decoding: the n_q new queries are the last positions
        "cached": scores_case(
            np.arange(n_k - n_q, n_k, dtype=np.int64), np.arange(n_k, dtype=np.int64)
        ),
        "batched_scores": scores_case(k_rows[:, n_k - n_q :].copy(), k_rows),
    }


# ----------------------------------------------------------------- reference
def rope(
    x,
    positions,
    *,
    layout="halves",
    sign=1.0,
    exponent=2.0,
    base=BASE,
    invert=False,
    swap=False,
    heads_axis=False,
):
    """RoPE in float64 and its wrong variants. ``layout``: halves (i with
    i + h), interleaved (2i with 2i + 1), mixed (halves pairing, but each
    frequency repeated for two neighbouring features); ``sign`` -1: turns by
    -theta; ``exponent`` 1: base^(-i/d); ``invert``: base^(+2i/d);
    ``swap``: cos and sin exchanged; ``heads_axis``: (batch, n) positions
    broadcast onto the heads axis of a rank-4 x."""
    x = np.asarray(x, dtype=np.float64)
    d = x.shape[-1]
    h = d // 2
    i = np.arange(h)
    power = exponent * i / d
    freq = base**power if invert else base ** (-power)
    angle = np.asarray(positions, dtype=np.float64)[..., None] * freq  # (.., n, h)
    if angle.ndim == 3 and x.ndim == 4:
        angle = angle[None] if heads_axis else angle[:, None]
    cos, sin = np.cos(angle), sign * np.sin(angle)
    if swap:
        cos, sin = sin, cos
    if layout == "interleaved":
        x1, x2 = x[..., 0::2], x[..., 1::2]
        out = np.empty(np.broadcast_shapes(x.shape, cos.shape[:-1] + (d,)))
        out[..., 0::2] = x1 * cos - x2 * sin
        out[..., 1::2] = x2 * cos + x1 * sin
        return out
    x1, x2 = x[..., :h], x[..., h:]
    if layout == "mixed":
        cos_d, sin_d = np.repeat(cos, 2, axis=-1), np.repeat(sin, 2, axis=-1)
        return x * cos_d + np.concatenate([-x2, x1], axis=-1) * sin_d
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def _rope_case(i, start=0, ignore_positions=False, **kw):
    n = i["x"].shape[-2]
    default = not bool(i["has_positions"]) or ignore_positions
    positions = np.arange(start, start + n) if default else i["positions"]
    return {"outputs": rope(i["x"], positions, **kw)}


def _matrix(fn, shape):
    """The rotation fn (linear in x) as matrices A (..., n, d_out, d_in)."""
    d = shape[-1]
    cols = []
    for j in range(d):
        e = np.zeros(shape)
        e[..., j] = 1.0
        cols.append(fn(e))
    return np.stack(cols, axis=-1)


def _scores(
    i,
    rotate="both",
    q_pos="given",
    k_pos="given",
    scale="sqrt_d",
    gradients=True,
    **kw,
):
    """Scores (and their gradients) of the reference and its variants.
    ``rotate``: both, queries (only), keys (only); ``q_pos`` / ``k_pos``:
    given or arange (0..n-1, the given positions ignored); ``scale``:
    sqrt_d, none, d, sqrt_d_model (sqrt(heads * head_dim)); ``kw`` go to
    ``rope``."""
    q, k = i["queries"], i["keys"]
    d = q.shape[-1]

    def pos(which, n, given):
        return np.arange(n) if which == "arange" else given

    qp = pos(q_pos, q.shape[-2], i["q_positions"])
    kp = pos(k_pos, k.shape[-2], i["k_positions"])

    def op(x, positions, on):
        if not on:
            return lambda y: np.broadcast_to(y, x.shape).copy()
        return lambda y: rope(y, positions, **kw)

    rq = op(q, qp, rotate in ("both", "queries"))
    rk = op(k, kp, rotate in ("both", "keys"))
    s = {
        "sqrt_d": math.sqrt(d),
        "none": 1.0,
        "d": float(d),
        "sqrt_d_model": math.sqrt(q.shape[1] * d),
    }[scale]
    A_q, A_k = _matrix(rq, q.shape), _matrix(rk, k.shape)
    qr = np.einsum("...ij,...j->...i", A_q, q)
    kr = np.einsum("...ij,...j->...i", A_k, k)
    result = {"scores": qr @ np.swapaxes(kr, -1, -2) / s}
    if gradients:
        g = i["upstream"]
        grad_qr = g @ kr / s
        grad_kr = np.swapaxes(g, -1, -2) @ qr / s
        result["grad_queries"] = np.einsum("...ij,...i->...j", A_q, grad_qr)
        result["grad_keys"] = np.einsum("...ij,...i->...j", A_k, grad_kr)
    return result


def expected(case: str, inputs: dict) -> dict:
    if "queries" in inputs:
        return _scores(inputs, gradients=case == "cached")
    return {**_rope_case(inputs), "odd_error": np.array(RAISED_VALUE_ERROR)}


# ----------------------------------------------------------------- mistakes
# (tag, hint, rope keyword arguments): what a wrong apply_rope computes; each
# is named in the rope check and, through the scores, in the other two.
HALVES = (
    "pair feature i with feature i + head_dim/2 (x1 = x[..., :h], x2 = "
    "x[..., h:], h = head_dim/2)"
)
ROTATION_MISTAKES = (
    # RoFormer's (2i, 2i+1) pairs vs GPT-NeoX's halves: huggingface/
    # transformers#25199, meta-llama/llama#1146 (the permuted checkpoints)
    (
        "interleaved-pairs",
        "features are rotated in neighbouring pairs (0, 1), (2, 3), ... (the "
        f"RoFormer paper's layout); this exercise uses the halves layout: {HALVES}.",
        {"layout": "interleaved"},
    ),
    # rotate_half written as cat(x2, -x1): huggingface/transformers#26369
    (
        "rotation-sign",
        "the pairs turn the wrong way (by -theta, a sign of sin flipped); "
        "turn by +theta: out[i] = x[i] cos - x[i + h] sin and out[i + h] = "
        "x[i + h] cos + x[i] sin, i.e. rotate_half(x) = concat(-x2, x1).",
        {"sign": -1.0},
    ),
    (
        "cos-sin-swapped",
        "cos and sin are exchanged: the pair turns by theta with x1 cos theta - "
        "x2 sin theta, x2 cos theta + x1 sin theta; at position 0 RoPE is the "
        "identity.",
        {"swap": True},
    ),
    # arange(0, d//2) / d instead of arange(0, d, 2) / d
    (
        "frequency-exponent",
        "the frequencies use base^(-i/head_dim); the exponent is -2i/head_dim "
        "for i = 0, ..., head_dim/2 - 1 (arange(0, head_dim, 2) / head_dim).",
        {"exponent": 1.0},
    ),
    (
        "frequency-not-inverted",
        "the angle is multiplied by base^(+2i/head_dim): the frequencies are "
        "1 / base^(2i/head_dim), so theta_i = position / 10000^(2i/head_dim) "
        "falls from 1 radian per position to nearly 0.",
        {"invert": True},
    ),
    (
        "base-100000",
        "the frequencies use base 100000; this exercise uses base 10000: "
        "theta_i = position * 10000^(-2i/head_dim).",
        {"base": 1e5},
    ),
    # Llama 3's rope_theta = 500000 copied into a base-10000 exercise
    (
        "base-500000",
        "the frequencies use base 500000 (Llama 3's rope_theta); this exercise "
        "uses base 10000: theta_i = position * 10000^(-2i/head_dim).",
        {"base": 5e5},
    ),
    # GPT-J (interleaved) frequencies with NeoX's rotate_half: huggingface/
    # transformers#25199 discussion, EleutherAI/gpt-neox#241
    (
        "mixed-layout",
        "the pairs are the halves, but the frequencies are repeated for "
        "neighbouring features (repeat_interleave): features i and i + h need "
        "the SAME angle theta_i, so build cos/sin of shape (..., h) and use "
        "them on both halves (or concatenate them with themselves).",
        {"layout": "mixed"},
    ),
)
HEADS_AXIS = (
    "heads-axis",
    "positions of shape (batch, n) were broadcast against the heads axis (row "
    "b of the positions turned head b); give the angles a heads axis: "
    "(batch, 1, n, head_dim/2) for x of shape (batch, heads, n, head_dim).",
    {"heads_axis": True},
)
EXPLICIT = ("offset", "batched", "scattered")
SCORE_CASES = ("cached", "batched_scores")


def _variant(tag, hint, compute, cases=None):
    return Variant(tag, hint, compute, cases)


ROPE_VARIANTS = (
    *(
        _variant(tag, hint, lambda i, kw=kw: _rope_case(i, **kw))
        for tag, hint, kw in ROTATION_MISTAKES
    ),
    _variant(
        HEADS_AXIS[0],
        HEADS_AXIS[1],
        lambda i: _rope_case(i, **HEADS_AXIS[2]),
        cases=("batched",),
    ),
    _variant(
        "positions-from-one",
        "without positions the first token must sit at position 0 (RoPE leaves "
        "it unchanged): the default is 0, 1, ..., n - 1, not 1, ..., n.",
        lambda i: _rope_case(i, start=1),
        cases=("default",),
    ),
    _variant(
        "positions-ignored",
        "the positions argument is ignored: every sequence is rotated as if it "
        "started at position 0; turn feature pair i by positions * "
        "10000^(-2i/head_dim) with the positions given.",
        lambda i: _rope_case(i, ignore_positions=True),
        cases=EXPLICIT,
    ),
    _variant(
        "odd-head-dim-accepted",
        "apply_rope returned a result for an odd head_dim; the pairs cannot be "
        "formed, so check x.shape[-1] % 2 and raise ValueError naming head_dim.",
        lambda i: {**_rope_case(i), "odd_error": np.array(RETURNED)},
    ),
    _variant(
        "odd-head-dim-wrong-error",
        "for an odd head_dim apply_rope raised a framework error (or another "
        "exception), not ValueError; check x.shape[-1] % 2 first and raise "
        "ValueError naming head_dim.",
        lambda i: {**_rope_case(i), "odd_error": np.array(RAISED_OTHER)},
    ),
)


def _score_variants(gradients: bool) -> tuple:
    def v(tag, hint, cases=None, **kw):
        return _variant(
            tag, hint, lambda i: _scores(i, gradients=gradients, **kw), cases
        )

    heads_tag, heads_hint, heads_kw = HEADS_AXIS
    # cos and sin exchanged turn by pi/2 - theta: a constant turn cancels in
    # q . k, so its scores are those of -theta (named once, for both)
    swapped = " (Exchanging cos and sin gives the same scores.)"
    return (
        *(
            v(tag, hint + (swapped if tag == "rotation-sign" else ""), **kw)
            for tag, hint, kw in ROTATION_MISTAKES
            if tag != "cos-sin-swapped"
        ),
        v(heads_tag, heads_hint, cases=("batched_scores",), **heads_kw),
        v(
            "keys-not-rotated",
            "only the queries are rotated; RoPE turns the queries AND the keys "
            "(each by its own positions), so that their dot product depends on "
            "the offset between them.",
            rotate="queries",
        ),
        v(
            "queries-not-rotated",
            "only the keys are rotated; RoPE turns the queries AND the keys "
            "(each by its own positions).",
            rotate="keys",
        ),
        # the KV-cache mistake: new queries restarted at position 0
        v(
            "query-offset-ignored",
            "the queries are rotated as if they started at position 0; in "
            "cached decoding the new queries are the LAST positions: rotate "
            "them with q_positions.",
            q_pos="arange",
        ),
        v(
            "key-positions-ignored",
            "the keys are rotated by 0, 1, ..., n_k - 1 instead of k_positions.",
            k_pos="arange",
            cases=("batched_scores",),
        ),
        v(
            "positions-ignored",
            "q_positions and k_positions are ignored (both rotated from 0); "
            "rotate the queries by q_positions and the keys by k_positions.",
            q_pos="arange",
            k_pos="arange",
        ),
        v(
            "missing-scale",
            "the scores are not divided by sqrt(head_dim): rope(q) . rope(k) / "
            "sqrt(head_dim).",
            scale="none",
        ),
        v(
            "scale-not-sqrt",
            "the scores are divided by head_dim instead of sqrt(head_dim).",
            scale="d",
        ),
        v(
            "scale-d-model",
            "the scores are divided by sqrt(heads * head_dim), the model width; "
            "each head scales by its own size: sqrt(head_dim) = "
            "sqrt(queries.shape[-1]).",
            scale="sqrt_d_model",
        ),
    )


ROPE_REMINDER = (
    "h = head_dim/2, theta_i = position * 10000^(-2i/head_dim) for i < h, "
    "out[..., :h] = x1 cos - x2 sin, out[..., h:] = x2 cos + x1 sin with x1 = "
    "x[..., :h], x2 = x[..., h:]; positions (n,) or (batch, n), default 0..n-1."
)
SCORES_REMINDER = (
    "scores = apply_rope(queries, q_positions) @ apply_rope(keys, "
    "k_positions)^T / sqrt(head_dim), shape (batch, heads, n_q, n_k)."
)
ROPE_NOTES = {
    "default": "x (batch, n, head_dim), no positions (0, 1, ..., n-1)",
    "offset": "x (batch, heads, n, head_dim), positions (n,) starting after 0",
    "batched": "x (batch, heads, n, head_dim), positions (batch, n): one row "
    "per batch element",
    "scattered": "x (batch, n, head_dim), positions (batch, n): increasing, "
    "not consecutive",
}
SCORE_NOTES = {
    "cached": "cached decoding: n_q new queries at the last of n_k positions, "
    "q_positions (n_q,), k_positions (n_k,)",
    "batched_scores": "q_positions (batch, n_q) and k_positions (batch, n_k): "
    "one row per batch element, the queries at the last positions of their row",
}


def _check(name, targets, compare, variants, notes, reminder):
    return Check(
        name=name,
        runner=RUNS[name],
        targets=targets,
        compare=compare,
        variants=variants,
        case_notes=notes,
        reminder=reminder,
    )


CHECKS = {
    "rope": _check(
        "rope", ROPE, ("outputs", "odd_error"), ROPE_VARIANTS, ROPE_NOTES, ROPE_REMINDER
    ),
    "scores": _check(
        "scores",
        SCORES,
        ("scores",),
        _score_variants(gradients=False),
        SCORE_NOTES,
        SCORES_REMINDER,
    ),
    "gradients": _check(
        "gradients",
        SCORES,
        ("grad_queries", "grad_keys"),
        _score_variants(gradients=True),
        SCORE_NOTES,
        "gradients of sum(scores * g) must reach queries and keys (check the "
        "scores test first).",
    ),
}


# ----------------------------------------------------------------- crosscheck
def _complex_rope(x, positions):
    """RoPE as a complex product, written apart from ``rope``: the halves
    (x1, x2) are z = x1 + i x2, and z e^{i theta} is the turned pair."""
    x = np.asarray(x)
    h = x.shape[-1] // 2
    theta = np.asarray(positions, float)[..., None] / BASE ** (np.arange(h) / h)
    if theta.ndim == 3 and x.ndim == 4:
        theta = theta[:, None]
    z = (x[..., :h] + 1j * x[..., h:]) * np.exp(1j * theta)
    return np.concatenate([z.real, z.imag], axis=-1)


def crosscheck(case: str, inputs: dict, exp: dict) -> None:
    """The reference agrees with RoPE written as a complex product, with the
    course library's apply_rope (NumPy) and, for the gradients, with PyTorch
    float64 autograd through attncourse.torch.apply_rope."""
    import torch

    import attncourse.numpy as anp
    import attncourse.torch as atorch

    if "x" in inputs:
        positions = inputs["positions"]
        given = positions if bool(inputs["has_positions"]) else None
        for got in (
            _complex_rope(inputs["x"], positions),
            anp.apply_rope(inputs["x"], given),
        ):
            np.testing.assert_allclose(got, exp["outputs"], atol=1e-12)
        return
    q, k = inputs["queries"], inputs["keys"]
    qp, kp = inputs["q_positions"], inputs["k_positions"]
    scale = math.sqrt(q.shape[-1])
    for fn in (_complex_rope, anp.apply_rope):
        got = fn(q, qp) @ np.swapaxes(fn(k, kp), -1, -2) / scale
        np.testing.assert_allclose(got, exp["scores"], atol=1e-12)
    if "grad_queries" not in exp:
        return
    tq = torch.tensor(q, requires_grad=True)
    tk = torch.tensor(k, requires_grad=True)
    rq = atorch.apply_rope(tq, torch.tensor(qp))
    rk = atorch.apply_rope(tk, torch.tensor(kp))
    scores = rq @ rk.transpose(-1, -2) / scale
    np.testing.assert_allclose(scores.detach().numpy(), exp["scores"], atol=1e-12)
    (scores * torch.tensor(inputs["upstream"])).sum().backward()
    np.testing.assert_allclose(tq.grad.numpy(), exp["grad_queries"], atol=1e-10)
    np.testing.assert_allclose(tk.grad.numpy(), exp["grad_keys"], atol=1e-10)
