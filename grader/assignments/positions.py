"""Assignment ``positions``: interleaved rotary position embeddings (RoPE).

The chapter teaches (and the course library implements) the "halves" pairing
of GPT-NeoX / Hugging Face; the exercise asks for the other layout, the
interleaved pairing of the RoFormer paper, GPT-J and Meta's original LLaMA
code, which the page motivates but never shows.

* apply_rope_*(x, positions=None): x (batch, n, head_dim) or (batch, heads, n,
  head_dim), positions int (n,) (shared by the batch), (batch, n) (a row per
  batch element, shared by the heads) or None (0, 1, ..., n-1). Feature 2i
  pairs with feature 2i + 1 and turns by theta_i = position *
  10000^(-2i/head_dim), i = 0, ..., head_dim/2 - 1,

      out[2i]     = x[2i] cos theta_i - x[2i + 1] sin theta_i
      out[2i + 1] = x[2i + 1] cos theta_i + x[2i] sin theta_i

  an odd head_dim raises ValueError.
* rope_scores_*(queries, keys, q_positions, k_positions): queries (batch,
  heads, n_q, head_dim), keys (batch, heads, n_k, head_dim) -> scores (batch,
  heads, n_q, n_k) = rope(q) . rope(k) / sqrt(head_dim); the queries may sit
  at later positions than the keys' first (cached decoding).

The two layouts differ by a fixed permutation of the features (feature i of
the halves at slot 2i, feature i + head_dim/2 at slot 2i + 1): ``crosscheck``
verifies the reference against the library's halves RoPE through it.

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
    layout="interleaved",
    sign=1.0,
    exponent=2.0,
    base=BASE,
    invert=False,
    swap=False,
    heads_axis=False,
):
    """RoPE in float64 and its wrong variants. ``layout``: interleaved (2i
    with 2i + 1, the reference), halves (i with i + h, the chapter's layout),
    mixed (neighbouring pairs, but the angles laid out as the halves'
    concat(theta, theta): feature j turns by theta_{j mod h}), unwoven
    (neighbouring pairs, the results written as two halves); ``sign`` -1:
    turns by -theta; ``exponent`` 1: base^(-i/d); ``invert``: base^(+2i/d);
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
    shape = np.broadcast_shapes(x.shape, cos.shape[:-1] + (d,))
    if layout == "halves":
        x1, x2 = x[..., :h], x[..., h:]
        return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    if layout == "mixed":
        cos_d = np.concatenate([cos, cos], axis=-1)  # feature j: theta_{j mod h}
        sin_d = np.concatenate([sin, sin], axis=-1)
        out = np.empty(shape)
        out[..., 0::2] = x1 * cos_d[..., 0::2] - x2 * sin_d[..., 0::2]
        out[..., 1::2] = x2 * cos_d[..., 1::2] + x1 * sin_d[..., 1::2]
        return out
    first, second = x1 * cos - x2 * sin, x2 * cos + x1 * sin
    if layout == "unwoven":
        return np.concatenate(np.broadcast_arrays(first, second), axis=-1)
    out = np.empty(shape)
    out[..., 0::2], out[..., 1::2] = first, second
    return out


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
NEIGHBOURS = (
    "pair feature 2i with feature 2i + 1 (x1 = x[..., 0::2], x2 = x[..., 1::2]) "
    "and write the turned pair back to slots 2i and 2i + 1"
)
ROTATION_MISTAKES = (
    # the chapter's (and GPT-NeoX's) halves instead of the RoFormer / GPT-J /
    # LLaMA pairs: huggingface/transformers#25199, meta-llama/llama#1146
    (
        "halves-pairs",
        "features are rotated in the pairs (i, i + head_dim/2), the halves "
        "layout the chapter shows; this exercise uses the interleaved layout: "
        f"{NEIGHBOURS}.",
        {"layout": "halves"},
    ),
    # rotate_every_two written as (x2, -x1): the pairs turn by -theta
    (
        "rotation-sign",
        "the pairs turn the wrong way (by -theta, a sign of sin flipped); "
        "turn by +theta: out[2i] = x[2i] cos - x[2i + 1] sin and out[2i + 1] "
        "= x[2i + 1] cos + x[2i] sin.",
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
    # the halves' angle layout concat(theta, theta) kept for neighbouring
    # pairs (GPT-NeoX's cos/sin cache with GPT-J's rotation): EleutherAI/
    # gpt-neox#241
    (
        "mixed-layout",
        "the pairs are neighbours, but the angles are laid out as for the "
        "halves (concat(theta, theta): feature j turns by theta_{j mod "
        "head_dim/2}); features 2i and 2i + 1 need the SAME angle theta_i: "
        "use cos/sin of shape (..., head_dim/2) on x[..., 0::2] and x[..., "
        "1::2] (or repeat each angle twice, repeat_interleave).",
        {"layout": "mixed"},
    ),
)
# the pairs turned right, written back as halves: a permutation of the
# features that the scores cannot see (q and k permuted alike), so only the
# rope check names it
UNWOVEN = (
    "pairs-not-interleaved-back",
    "the pairs (2i, 2i + 1) are turned right, but the results are written as "
    "two halves (concat(first, second)) instead of back to slots 2i and "
    "2i + 1; interleave them again (stack on a new last axis, then reshape "
    "to head_dim).",
    {"layout": "unwoven"},
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
        for tag, hint, kw in (*ROTATION_MISTAKES, UNWOVEN)
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
    "theta_i = position * 10000^(-2i/head_dim) for i < head_dim/2, "
    "out[..., 0::2] = x1 cos - x2 sin, out[..., 1::2] = x2 cos + x1 sin with "
    "x1 = x[..., 0::2], x2 = x[..., 1::2]; positions (n,) or (batch, n), "
    "default 0..n-1."
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
    """Interleaved RoPE as a complex product, written apart from ``rope``:
    the neighbours (x[2i], x[2i + 1]) are z = x[2i] + i x[2i + 1], and
    z e^{i theta} is the turned pair."""
    x = np.asarray(x)
    h = x.shape[-1] // 2
    theta = np.asarray(positions, float)[..., None] / BASE ** (np.arange(h) / h)
    if theta.ndim == 3 and x.ndim == 4:
        theta = theta[:, None]
    z = (x[..., 0::2] + 1j * x[..., 1::2]) * np.exp(1j * theta)
    out = np.stack(np.broadcast_arrays(z.real, z.imag), axis=-1)
    return out.reshape(out.shape[:-2] + (2 * h,))


def _slots(d):
    """perm: slot 2i holds halves feature i, slot 2i + 1 feature i + d/2, so
    interleaved(x) = halves(x[..., inverse])[..., perm]."""
    perm = np.stack([np.arange(d // 2), np.arange(d // 2) + d // 2], 1).ravel()
    return perm, np.argsort(perm)


def _via_halves(rope_halves, x, positions):
    """The interleaved RoPE from a halves RoPE and the permutation."""
    perm, inverse = _slots(x.shape[-1])
    return rope_halves(x[..., inverse], positions)[..., perm]


def crosscheck(case: str, inputs: dict, exp: dict) -> None:
    """The reference agrees with RoPE written as a complex product, with the
    course library's (halves) apply_rope (NumPy) once the features are
    permuted -- the relation the chapter states -- and, for the gradients,
    with PyTorch float64 autograd through attncourse.torch.apply_rope,
    permuted alike."""
    import torch

    import attncourse.numpy as anp
    import attncourse.torch as atorch

    if "x" in inputs:
        positions = inputs["positions"]
        given = positions if bool(inputs["has_positions"]) else None
        for got in (
            _complex_rope(inputs["x"], positions),
            _via_halves(anp.apply_rope, inputs["x"], given),
        ):
            np.testing.assert_allclose(got, exp["outputs"], atol=1e-12)
        return
    q, k = inputs["queries"], inputs["keys"]
    qp, kp = inputs["q_positions"], inputs["k_positions"]
    scale = math.sqrt(q.shape[-1])
    _, inverse = _slots(q.shape[-1])

    def halves(y, positions):  # no permutation back: q, k permuted alike
        return anp.apply_rope(y[..., inverse], positions)

    for fn in (_complex_rope, halves):
        got = fn(q, qp) @ np.swapaxes(fn(k, kp), -1, -2) / scale
        np.testing.assert_allclose(got, exp["scores"], atol=1e-12)
    if "grad_queries" not in exp:
        return
    tq = torch.tensor(q, requires_grad=True)
    tk = torch.tensor(k, requires_grad=True)
    rq = _via_halves(atorch.apply_rope, tq, torch.tensor(qp))
    rk = _via_halves(atorch.apply_rope, tk, torch.tensor(kp))
    scores = rq @ rk.transpose(-1, -2) / scale
    np.testing.assert_allclose(scores.detach().numpy(), exp["scores"], atol=1e-12)
    (scores * torch.tensor(inputs["upstream"])).sum().backward()
    np.testing.assert_allclose(tq.grad.numpy(), exp["grad_queries"], atol=1e-10)
    np.testing.assert_allclose(tk.grad.numpy(), exp["grad_keys"], atol=1e-10)
