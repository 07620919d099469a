"""Assignment ``flash-attention``: tiled attention with an online softmax.

flash_attention_tf / flash_attention_torch(queries, keys, values, causal,
block_q, block_k) -> (outputs, logsumexp); queries (batch, n_q, d), keys
(batch, n_k, d), values (batch, n_k, d_v), scale 1/sqrt(d). The scores are
computed one (block_q, block_k) tile at a time; per query the running max m,
the running sum l of exp(score - m) and the unnormalised output acc are
rescaled by exp(m_old - m_new) when a tile raises the max; outputs = acc / l,
logsumexp = m + log(l). causal: key j visible from query i iff j <= i (top
left), and a key tile whose first key comes after the last query of the
block is skipped. PyTorch also: FlashAttentionTorch, an autograd.Function
whose backward recomputes each tile's weights exp(S - logsumexp) from the
saved logsumexp (FlashAttention-2: D = rowsum(dO * O), dS = P * (dP - D)).

Checks: ``forward`` (no mask; block sizes that do not divide the lengths,
n_q != n_k, a single query block shorter than block_q), ``causal`` (square,
wide n_q < n_k and tall n_q > n_k sequences with block_q != block_k, and the
*skip* case: NaN keys and values where only tiles above the diagonal would
read them), ``gradients`` (of sum(outputs * g) w.r.t. queries, keys and
values: through the TF forward with a tape, through FlashAttentionTorch's
backward; also causal), ``memory`` (a causal sequence of
runners.flash_attention.LENGTH positions under an address-space cap; the
grader computes every row directly, CHUNK rows at a time, and compares
MIXTURES signed sums of all rows: rows the kernel knew would be all a naive
solution has to compute).

The expected outputs are computed directly (the full softmax, a chunk of
rows at a time); ``tiled`` is the tiled algorithm in NumPy, row by
row, with the known mistakes as options -- what a student's code with the
mistake returns -- and agrees with the direct reference when correct.
"""

import math

import numpy as np

from grader import numeric
from grader.assignments._common import rng
from grader.assignments.mistakes import missing_scale
from grader.checks import Check, Variant
from grader.kernel.runners.flash_attention import (
    BLOCK,
    HEAD_DIM,
    HEADROOM,
    LENGTH,
    MIXTURES,
    RUNS,
    SOURCES,
    TARGETS,
    GiB,
    long_inputs,
    mixed,
)
from grader.provenance import BUILTIN_ATTENTION, COURSE_ATTENTION

NAME = "flash-attention"
SEED = 18018
# What the solution may not call (grader.provenance flags it for review): the
# course library's attention (the tiled one of attncourse.<fw>.efficient
# included), masks and softmax, the frameworks' fused attention, and autograd
# run on a recomputed forward in place of the backward the exercise asks for.
FORBIDDEN = (
    *COURSE_ATTENTION,
    *BUILTIN_ATTENTION,
    # the memory cases' address-space limit, raised from inside the call
    "resource.setrlimit",
    "resource.prlimit",
    "torch.autograd.grad",
    "torch.autograd.backward",
    "torch.autograd.functional",
    "torch.func",
    # the skip case's NaN keys and values scrubbed instead of never read
    "torch.nan_to_num",
    "torch.isnan",
    "numpy.nan_to_num",
    "tensorflow.*.nan_to_num",
    "tensorflow.*.is_nan",
    "tensorflow.*.multiply_no_nan",
)
# rows of the memory case the library cross-check recomputes (build time);
# the grading compares every row: a subset the kernel knew (it is in its
# inputs) would let a naive solution compute just those rows
LONG_ROWS = 24
CHUNK = 64  # query rows of the direct reference at a time (memory case)
# one (LENGTH, LENGTH) float32 table must not fit: neither in what the runner
# leaves the call nor in the sandbox's default address space (grader.sandbox)
TABLE_BYTES = LENGTH * LENGTH * 4
assert min(TABLE_BYTES // HEADROOM, TABLE_BYTES // GiB) >= 4


def _case(r, batch, n_q, n_k, d, d_v, block_q, block_k, causal) -> dict:
    """Fresh inputs; queries scaled up so the weights are peaked and the
    running max changes from tile to tile (the rescaling shows)."""
    return {
        "queries": 2.0 * r.normal(size=(batch, n_q, d)),
        "keys": r.normal(size=(batch, n_k, d)),
        "values": r.normal(size=(batch, n_k, d_v)),
        "causal": np.array(causal),
        "block_q": np.array(block_q),
        "block_k": np.array(block_k),
    }


def _skip_case(r) -> dict:
    """The runner sets the keys and values from POISON on to NaN: query
    blocks 0..2 (rows 0..23, block_q 8) end before them, so their key tiles
    (block_k 12, the first at 24) are entirely above the diagonal for those
    blocks; rows 24.. may see them and are not checked."""
    case = _case(r, 2, 45, 53, 8, 5, 8, 12, True)
    case["poison_from"] = np.array(POISON)
    case["checked_rows"] = np.array(POISON)
    return case


POISON = 24  # a multiple of block_q (8) and of block_k (12) in the skip case


def make_cases(seed: int = SEED) -> dict:
    r = rng(seed)
    grad = _case(r, 2, 24, 40, 8, 6, 8, 16, False)
    grad["upstream"] = r.normal(size=(2, 24, 6))
    grad_causal = _case(r, 1, 30, 30, 4, 5, 8, 12, True)
    grad_causal["upstream"] = r.normal(size=(1, 30, 5))
    return {
        "uneven": _case(r, 2, 37, 29, 8, 5, 8, 6, False),
        "one_block": _case(r, 1, 5, 70, 4, 6, 16, 16, False),
        "causal": _case(r, 2, 45, 45, 8, 5, 16, 8, True),
        "causal_wide": _case(r, 2, 20, 50, 4, 3, 6, 9, True),
        "causal_tall": _case(r, 2, 30, 18, 8, 4, 8, 8, True),
        "skip": _skip_case(r),
        "grad": grad,
        "grad_causal": grad_causal,
        "long": {
            "seed": np.array(int(r.integers(2**31))),
            "length": np.array(LENGTH),
            "head_dim": np.array(HEAD_DIM),
            "causal": np.array(True),
            "block_q": np.array(BLOCK),
            "block_k": np.array(BLOCK),
        },
    }


def long_rows(inputs) -> np.ndarray:
    """LONG_ROWS rows of the memory case (two of the first query block, the
    last query: every tile up to the diagonal) for the cross-checks, tests."""
    r = np.random.default_rng(int(inputs["seed"]))
    return np.sort(
        np.concatenate(
            [
                r.choice(BLOCK, 2, replace=False),
                r.choice(np.arange(BLOCK, LENGTH - 1), LONG_ROWS - 3, replace=False),
                [LENGTH - 1],
            ]
        )
    )


def _arrays(i) -> tuple:
    """queries, keys, values of a case (the memory case's drawn from its seed)."""
    if "seed" in i:
        a = long_inputs(i["seed"], i["length"], i["head_dim"])
        return a["queries"], a["keys"], a["values"]
    return i["queries"], i["keys"], i["values"]


def _rows(i, n_q):
    """The query rows a case checks."""
    if "rows" in i:
        return np.asarray(i["rows"], dtype=np.int64)
    return np.arange(int(i.get("checked_rows", n_q)))


def _visible(rows, n_k, causal):
    """(len(rows), n_k) bool: key j visible from query i iff j <= i."""
    if not causal:
        return np.ones((len(rows), n_k), dtype=bool)
    return np.arange(n_k)[None, :] <= rows[:, None]


def direct(i) -> dict:
    """The float64 reference on the checked rows: the full softmax of those
    rows' scores, CHUNK rows at a time (never more than CHUNK x n_k)."""
    q, k, v = _arrays(i)
    rows = _rows(i, q.shape[1])
    causal = bool(i["causal"])
    outputs = np.empty((q.shape[0], len(rows), v.shape[-1]))
    lse = np.empty((q.shape[0], len(rows)))
    scale = 1 / math.sqrt(q.shape[-1])
    for start in range(0, len(rows), CHUNK):
        part = rows[start : start + CHUNK]
        # keys no row of this chunk may see: never read
        n_k = k.shape[1] if not causal else min(k.shape[1], int(part.max()) + 1)
        s = q[:, part] @ np.swapaxes(k[:, :n_k], 1, 2)
        s *= scale
        s[:, ~_visible(part, n_k, causal)] = -np.inf
        top = s.max(axis=-1, keepdims=True)
        s -= top
        np.exp(s, out=s)
        total = s.sum(axis=-1, keepdims=True)
        outputs[:, start : start + CHUNK] = (s @ v[:, :n_k]) / total
        lse[:, start : start + CHUNK] = (top + np.log(total))[..., 0]
    return {"outputs": outputs, "logsumexp": lse}


def tiled(
    i,
    sum_max="new",
    rescale_output=True,
    normalise=True,
    lse="m_plus_log_l",
    skip="after_last_query",
    mask_tiles=True,
    scale=True,
) -> dict:
    """The tiled forward in NumPy on the checked rows, and its mistakes.

    Each row's online softmax depends only on its own scores and on which key
    tiles its query block visits, so rows are computed independently (cheap
    for the memory case). ``sum_max``: the max the running sum is rescaled
    with (new: the new running max; tile: the tile's own max);
    ``rescale_output``: acc rescaled by exp(m_old - m_new); ``normalise``:
    acc / l; ``lse``: m + log l or log l; ``skip``: which key tiles a causal
    block visits (after_last_query: those starting at or before the block's
    last query; after_first_query: ... its first query); ``mask_tiles``: the
    causal mask applied inside the tiles; ``scale``: 1/sqrt(d)."""
    q, k, v = _arrays(i)
    (batch, n_q, d), n_k = q.shape, k.shape[1]
    rows = _rows(i, n_q)
    causal = bool(i["causal"])
    block_q, block_k = int(i["block_q"]), int(i["block_k"])
    first = rows // block_q * block_q
    last = np.minimum(first + block_q, n_q) - 1
    qr = q[:, rows] * (1 / math.sqrt(d) if scale else 1.0)
    m = np.full((batch, len(rows)), -np.inf)
    l = np.zeros_like(m)
    acc = np.zeros((batch, len(rows), v.shape[-1]))
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        for start in range(0, n_k, block_k):
            stop = min(start + block_k, n_k)
            if causal:
                bound = last if skip == "after_last_query" else first
                visits = start <= bound
            else:
                visits = np.ones(len(rows), dtype=bool)
            if not visits.any():
                continue
            kt, vt = k[:, start:stop], v[:, start:stop]
            s = qr @ np.swapaxes(kt, 1, 2)
            if causal and mask_tiles:
                cols = np.arange(start, stop)
                s = np.where(cols[None, :] <= rows[:, None], s, -np.inf)
            tile_max = s.max(axis=-1)
            m_new = np.maximum(m, tile_max)
            p = np.exp(s - m_new[..., None])
            alpha = np.exp(m - m_new)
            beta = {"new": alpha, "tile": np.exp(m - tile_max), "none": 1.0}[sum_max]
            l_new = beta * l + p.sum(axis=-1)
            out_scale = alpha if rescale_output else np.ones_like(alpha)
            acc_new = out_scale[..., None] * acc + p @ vt
            keep = visits[None, :]
            m = np.where(keep, m_new, m)
            l = np.where(keep, l_new, l)
            acc = np.where(keep[..., None], acc_new, acc)
        outputs = acc / l[..., None] if normalise else acc
        log_l = np.log(l)
    return {
        "outputs": outputs,
        "logsumexp": m + log_l if lse == "m_plus_log_l" else log_l,
    }


def backward(i, d_term=True, lse_shift=False, grad_scale=True) -> dict:
    """Gradients of sum(outputs * upstream) (materialised, float64), as the
    FlashAttention-2 backward computes them -- and with its mistakes:
    ``d_term`` False: dS = P * dP (D = rowsum(dO * O) left out);
    ``lse_shift``: the weights recomputed as exp(S - log l) (the logsumexp
    without the max, P * exp(m)); ``grad_scale`` False: dQ, dK without the
    1/sqrt(d)."""
    q, k, v = _arrays(i)
    g = i["upstream"]
    n_q, d = q.shape[1:]
    scale = 1 / math.sqrt(d)
    s = q @ np.swapaxes(k, 1, 2) * scale
    visible = _visible(np.arange(n_q), k.shape[1], bool(i["causal"]))
    s = np.where(visible, s, -np.inf)
    p = numeric.softmax(s)
    out = p @ v
    if lse_shift:
        p = p * np.exp(s.max(axis=-1, keepdims=True))
    dp = g @ np.swapaxes(v, 1, 2)
    dsum = (g * out).sum(axis=-1, keepdims=True) if d_term else 0.0
    ds = p * (dp - dsum)
    gs = scale if grad_scale else 1.0
    return {
        "grad_queries": ds @ k * gs,
        "grad_keys": np.swapaxes(ds, 1, 2) @ q * gs,
        "grad_values": np.swapaxes(p, 1, 2) @ g,
    }


def expected(case: str, inputs: dict) -> dict:
    result = direct(inputs)
    if case == "long":  # every row, in the runner's signed sums
        return mixed(result, inputs["seed"])
    if "upstream" in inputs:
        result.update(backward(inputs))
    return result


def _forward_variant(tag, hint, cases=None, **bug) -> Variant:
    return Variant(tag, hint, lambda i: tiled(i, **bug), cases)


def _backward_variant(tag, hint, cases=None, **bug) -> Variant:
    def compute(i):
        return {**direct(i), **backward(i, **bug)}

    return Variant(tag, hint, compute, cases)


FORWARD_CASES = ("uneven", "one_block")
CAUSAL_CASES = ("causal", "causal_wide", "causal_tall")
GRAD_CASES = ("grad", "grad_causal")
# the cases where no visited tile holds a row with every key masked (the
# tile's own max is -inf there, and the tile-max mistake gives inf, not a
# number to match)
ALIGNED = (*FORWARD_CASES, "causal_tall", "grad", "long")
# block_k < block_q: a tile that starts inside the block is still needed
SPLIT_BLOCKS = ("causal", "causal_wide", "grad_causal")

RUNNING_MAX = (
    "m_new = max(m_old, rowmax(tile)), then l = exp(m_old - m_new) * l + "
    "rowsum(exp(tile - m_new)) and acc = exp(m_old - m_new) * acc + "
    "exp(tile - m_new) @ V_tile"
)
SUM_NOT_RESCALED = _forward_variant(
    "sum-not-rescaled",
    "the running sum l is not rescaled when a tile raises the max: what was "
    "summed so far is relative to the OLD max; " + RUNNING_MAX + ".",
    sum_max="none",
)
SUM_WRONG_MAX = _forward_variant(
    "sum-rescaled-with-wrong-max",
    "the running sum is rescaled with the tile's own max, exp(m_old - "
    "rowmax(tile)); both l and acc must be brought to the NEW running max: "
    + RUNNING_MAX
    + ".",
    cases=ALIGNED,
    sum_max="tile",
)
OUTPUT_NOT_RESCALED = _forward_variant(
    "output-not-rescaled",
    "the accumulated output is not rescaled when a tile raises the max; like "
    "l, acc holds sums relative to the old max: " + RUNNING_MAX + ".",
    rescale_output=False,
)
NOT_NORMALISED = _forward_variant(
    "output-not-normalised",
    "the outputs are the unnormalised acc; divide by the running sum at the "
    "end: outputs = acc / l.",
    normalise=False,
)
LSE_WITHOUT_MAX = _forward_variant(
    "logsumexp-without-max",
    "logsumexp is log(l), but l sums exp(score - m): logsumexp = m + log(l).",
    lse="log_l",
)
SKIP_FROM_FIRST = _forward_variant(
    "causal-skip-from-first-query",
    "key tiles are skipped from the block's FIRST query on; a tile is needed "
    "as long as its first key is at most the block's LAST query (the later "
    "queries of the block see it): skip a tile only if k_start > q_stop - 1.",
    cases=SPLIT_BLOCKS,
    skip="after_first_query",
)
NO_TILE_MASK = _forward_variant(
    "no-mask-inside-tiles",
    "the tiles on the diagonal are not masked: they hold keys after some of "
    "the block's queries (key j > query i); inside a tile that crosses the "
    "diagonal, set those scores to -inf before the max and the exp.",
    mask_tiles=False,
)
MISSING_SCALE = missing_scale(lambda i: tiled(i, scale=False), "sqrt(d)")
FORWARD_VARIANTS = (
    SUM_NOT_RESCALED,
    SUM_WRONG_MAX,
    OUTPUT_NOT_RESCALED,
    NOT_NORMALISED,
    LSE_WITHOUT_MAX,
    MISSING_SCALE,
)
CAUSAL_VARIANTS = (NO_TILE_MASK, SKIP_FROM_FIRST)


def _only(variants, cases):
    """The variants restricted to ``cases`` (those they apply to)."""
    return tuple(
        Variant(
            v.tag,
            v.hint,
            v.compute,
            tuple(c for c in cases if v.cases is None or c in v.cases),
        )
        for v in variants
    )


# in the gradients check a forward mistake shows in the outputs; the
# logsumexp's does not (the outputs are right), so it is recognised by the
# gradients it gives PyTorch's backward (the weights recomputed as P e^m)
GRAD_VARIANTS = (
    *(v for v in FORWARD_VARIANTS if v is not LSE_WITHOUT_MAX),
    *_only(CAUSAL_VARIANTS, ("grad_causal",)),
    _backward_variant(
        "backward-without-D",
        "the backward computes dS = P * dP; the softmax's gradient subtracts "
        "each query's D_i = rowsum(dO_i * O_i): dS = P * (dP - D).",
        d_term=False,
    ),
    _backward_variant(
        "backward-missing-scale",
        "dQ and dK miss the 1/sqrt(d) of the scores: dQ += dS @ K_tile * "
        "scale, dK += dS^T @ Q_tile * scale.",
        grad_scale=False,
    ),
    _backward_variant(
        "logsumexp-without-max",
        "the backward's weights exp(scores - logsumexp) are off by the "
        "row's max: the forward saved log(l) as the logsumexp; it is m + "
        "log(l).",
        lse_shift=True,
    ),
)
DIAGONAL = (
    "\nLikely mistake (diagonal-tile-skipped): NaN in a causal case usually "
    "means a query got no key at all (l = 0: 0 / 0): the key tile on the "
    "diagonal -- the one holding the query's own key -- was skipped. A key "
    "tile is entirely above the diagonal only when its FIRST key comes after "
    "the LAST query of the block: skip it iff k_start > q_stop - 1."
)
NAN = (
    "\nNaN or inf from an online softmax usually comes from exp of a "
    "difference with the wrong sign: exp(m_old - m_new) is at most 1 (the "
    "new max is at least the old one), and a running max that starts at "
    "-inf gives exp(-inf) = 0 for the first tile."
)
REMINDER = (
    "per query block, per key tile: scores = Q_tile K_tile^T / sqrt(d), "
    + RUNNING_MAX
    + "; outputs = acc / l, logsumexp = m + log(l); causal: key j visible from "
    "query i iff j <= i."
)
NOTES = {
    "uneven": "batch 2, n_q 37, n_k 29, d 8, d_v 5, block_q 8, block_k 6 (the "
    "last blocks are partial), causal=False",
    "one_block": "batch 1, n_q 5 (one query block shorter than block_q 16), "
    "n_k 70, d 4, d_v 6, block_k 16, causal=False",
    "causal": "batch 2, n_q = n_k = 45, d 8, d_v 5, block_q 16, block_k 8, causal=True",
    "causal_wide": "batch 2, n_q 20, n_k 50 (keys after the last query are "
    "never visible), d 4, d_v 3, block_q 6, block_k 9, causal=True",
    "causal_tall": "batch 2, n_q 30, n_k 18 (queries after the last key see "
    "every key), d 8, d_v 4, block_q 8, block_k 8, causal=True",
    "skip": f"batch 2, n_q 45, n_k 53, d 8, d_v 5, block_q 8, block_k 12, "
    f"causal=True; the keys and values from position {POISON} on are NaN and "
    f"only rows 0..{POISON - 1} are checked: their query blocks end before "
    f"those keys, so those tiles must be skipped",
    "grad": "gradients of sum(outputs * g): batch 2, n_q 24, n_k 40, d 8, d_v "
    "6, block_q 8, block_k 16, causal=False",
    "grad_causal": "gradients of sum(outputs * g): batch 1, n_q = n_k = 30, d "
    "4, d_v 5, block_q 8, block_k 12, causal=True",
    "long": f"batch 1, n_q = n_k = {LENGTH}, d = d_v = {HEAD_DIM}, block_q = "
    f"block_k = {BLOCK}, causal=True; compared: {MIXTURES} sums of every "
    f"row's outputs and logsumexp with random signs (so every row counts)",
}
COMPARE = ("outputs", "logsumexp")
GRADS = ("outputs", "grad_queries", "grad_keys", "grad_values")
COMMON = {"targets": TARGETS, "case_notes": NOTES}
CHECKS = {
    "forward": Check(
        name="forward",
        runner=RUNS["forward"],
        compare=COMPARE,
        variants=FORWARD_VARIANTS,
        nan_hint=NAN.strip(),
        reminder=REMINDER,
        **COMMON,
    ),
    "causal": Check(
        name="causal",
        runner=RUNS["causal"],
        compare=COMPARE,
        # the skip case's failures are NaN (named by the runner) or wrong
        # numbers the three cases before it show first
        variants=_only((*CAUSAL_VARIANTS, *FORWARD_VARIANTS), CAUSAL_CASES),
        nan_hint=(DIAGONAL + NAN).strip(),
        reminder=REMINDER,
        **COMMON,
    ),
    "gradients": Check(
        name="gradients",
        runner=RUNS["gradients"],
        compare=GRADS,
        variants=GRAD_VARIANTS,
        nan_hint=(DIAGONAL + NAN).strip(),
        reminder="the gradients of sum(outputs * g) w.r.t. queries, keys and "
        "values (check the forward and causal tests first); PyTorch: per tile "
        "P = exp(S - logsumexp), dV += P^T dO, dP = dO V^T, dS = P * (dP - D) "
        "with D = rowsum(dO * O), dQ += dS K * scale, dK += dS^T Q * scale.",
        **COMMON,
    ),
    "memory": Check(
        name="memory",
        runner=RUNS["memory"],
        compare=COMPARE,
        # none: each would be the tiled NumPy forward on all 34,816 rows, per
        # student (the forward and causal checks name the same mistakes)
        variants=(),
        nan_hint=(DIAGONAL + NAN).strip(),
        reminder=REMINDER,
        **COMMON,
    ),
}


def crosscheck(case: str, inputs: dict, exp: dict) -> None:
    """The reference agrees with the tiled NumPy algorithm of this module, and
    with the course library (attncourse.numpy's flash_attention and
    flash_attention_backward, attention_logsumexp, the naive
    scaled_dot_product_attention; the memory case on its checked rows)."""
    import attncourse.numpy as anp

    sub = {**inputs, "rows": long_rows(inputs)} if case == "long" else inputs
    want = direct(sub) if case == "long" else exp
    for key, value in tiled(sub).items():
        np.testing.assert_allclose(value, want[key], atol=1e-10, err_msg=key)
    q, k, v = _arrays(inputs)
    causal = bool(inputs["causal"])
    blocks = {"block_q": int(inputs["block_q"]), "block_k": int(inputs["block_k"])}
    rows = _rows(inputs, q.shape[1])
    if case == "long":  # the library on a subset of the rows (build time)
        rows = long_rows(inputs)
        full = direct(inputs)
        for key, value in mixed(full, inputs["seed"]).items():
            np.testing.assert_allclose(value, exp[key], atol=1e-10, err_msg=key)
        exp = {key: value[:, rows] for key, value in full.items()}
        q_rows = q[:, rows]
        # each row's online softmax needs its own keys only (causal): the
        # rows as queries of a prefix, masked like causal_mask of the prefix
        n = int(rows.max()) + 1
        mask = np.arange(n)[None, None, :] <= rows[None, :, None]
        out, lse = anp.flash_attention(q_rows, k[:, :n], v[:, :n], mask=mask, **blocks)
    elif case == "skip":
        n = int(inputs["checked_rows"])
        out, lse = anp.flash_attention(
            q[:, :n], k[:, :n], v[:, :n], causal=True, **blocks
        )
    else:
        out, lse = anp.flash_attention(q, k, v, causal=causal, **blocks)
        direct_lse = anp.attention_logsumexp(q, k, causal=causal)
        np.testing.assert_allclose(direct_lse, exp["logsumexp"], atol=1e-10)
        mask = anp.causal_mask(q.shape[1], k.shape[1]) if causal else None
        naive, _ = anp.scaled_dot_product_attention(q, k, v, mask)
        np.testing.assert_allclose(naive, exp["outputs"], atol=1e-10)
    np.testing.assert_allclose(out, exp["outputs"], atol=1e-10)
    np.testing.assert_allclose(lse, exp["logsumexp"], atol=1e-10)
    if "upstream" not in inputs:
        return
    grads = anp.flash_attention_backward(
        q, k, v, out, lse, inputs["upstream"], causal=causal, **blocks
    )
    for name, value in zip(("queries", "keys", "values"), grads, strict=True):
        np.testing.assert_allclose(value, exp[f"grad_{name}"], atol=1e-10, err_msg=name)
    _torch_crosscheck(inputs, exp)


def _torch_crosscheck(inputs, exp) -> None:
    """The gradients against float64 PyTorch autograd on the naive formula."""
    import torch

    t = {n: torch.tensor(inputs[n], requires_grad=True) for n in SOURCES}
    n_q, d = t["queries"].shape[1:]
    s = t["queries"] @ t["keys"].transpose(1, 2) / math.sqrt(d)
    if bool(inputs["causal"]):
        hidden = torch.ones(n_q, s.shape[-1], dtype=torch.bool).triu(1)
        s = s.masked_fill(hidden, -torch.inf)
    out = torch.softmax(s, dim=-1) @ t["values"]
    (out * torch.tensor(inputs["upstream"])).sum().backward()
    np.testing.assert_allclose(out.detach().numpy(), exp["outputs"], atol=1e-10)
    for n in SOURCES:
        np.testing.assert_allclose(
            t[n].grad.numpy(), exp[f"grad_{n}"], atol=1e-10, err_msg=n
        )
