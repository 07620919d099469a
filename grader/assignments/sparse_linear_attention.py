"""Assignment ``sparse-linear-attention``: a causal window, chunked linear attention.

window_attention_tf / window_attention_torch(queries, keys, values, window)
-> outputs (batch, n, d_v): causal sliding-window softmax attention, query i
sees the keys j with i - window < j <= i, scale 1/sqrt(d), computed one
query block of ``window`` tokens at a time against the keys of its own block
and the block before (never an (n, n) table).

chunked_linear_attention_tf / _torch(queries, keys, values, chunk) ->
outputs: causal linear attention with phi(x) = elu(x) + 1 (x + 1 for x > 0,
exp(x) otherwise), out_i = phi(q_i) S_i / (phi(q_i) . z_i + EPS) with S_i,
z_i summed over j <= i -- the library's linear_attention(..., causal=True)
-- computed chunk by chunk: the masked (chunk, chunk) table phi(Q_c)
phi(K_c)^T inside a chunk plus the running state S (d, d_v) and normaliser
z (d,) of the chunks before, updated after each chunk.

Checks: ``window`` (windows that do not divide n, window 1, window = n and
> n), ``window_memory`` (a sequence of runners' WINDOW_LENGTH positions under
an address-space cap), ``linear`` (chunks that do not divide n, chunk 1, one
chunk longer than n), ``linear_memory`` (LINEAR_LENGTH positions, d = d_v =
LINEAR_DIM: neither an (n, n) table nor the (n, d, d_v) cumulative states
fit). The memory cases compare MIXTURES signed sums of every row.

The expected outputs are float64 NumPy written here (never attncourse): the
window as masked softmax over a range of keys per block of queries, linear
attention chunk by chunk; the known mistakes are the same maths with another
visibility (``window_dense``) or another multiplicity of each key in the
numerator and denominator (``linear_dense``), on the small cases only.
``crosscheck`` compares with the library at build time.
"""

import math

import numpy as np

from grader.assignments._common import rng
from grader.assignments.mistakes import missing_scale
from grader.checks import Check, Variant
from grader.kernel.runners.sparse_linear_attention import (
    CHUNK,
    LINEAR_DIM,
    LINEAR_LENGTH,
    LINEAR_TARGETS,
    MIXTURES,
    QUERY_SCALE,
    RUNS,
    WINDOW,
    WINDOW_DIM,
    WINDOW_LENGTH,
    WINDOW_TARGETS,
    case_inputs,
    mixed,
)
from grader.provenance import BUILTIN_ATTENTION, COURSE_ATTENTION

NAME = "sparse-linear-attention"
SEED = 27027
EPS = 1e-6  # the library's: out = numerator / (denominator + EPS)
# What the solution may not call (flagged for review): the course library's
# attention, masks and softmax, its sliding-window and linear attention (the
# whole sparse module: the band, the feature map, the step), the tiled
# attention, and the frameworks' fused attention. The frameworks' elu is fine.
FORBIDDEN = (
    *COURSE_ATTENTION,
    *BUILTIN_ATTENTION,
    # the memory cases' address-space limit, raised from inside the call
    "resource.setrlimit",
    "resource.prlimit",
)
REF_BLOCK = 512  # query rows of the window reference at a time
REF_CHUNK = 128  # tokens of the linear reference at a time (not the student's)
LONG_ROWS = 16  # rows of the linear memory case checked directly (build time)


# ------------------------------------------------------------------ cases
def _case(r, batch, n, d, d_v, setting, value, query_scale=1.0) -> dict:
    return {
        "queries": query_scale * r.normal(size=(batch, n, d)),
        "keys": r.normal(size=(batch, n, d)),
        "values": r.normal(size=(batch, n, d_v)),
        setting: np.array(value),
    }


def _long(r, length, dim, setting, value, query_scale) -> dict:
    return {
        "seed": np.array(int(r.integers(2**31))),
        "length": np.array(length),
        "head_dim": np.array(dim),
        "query_scale": np.array(float(query_scale)),
        setting: np.array(value),
    }


def make_cases(seed: int = SEED) -> dict:
    r = rng(seed)
    return {
        "uneven": _case(r, 2, 23, 8, 5, "window", 5, QUERY_SCALE),
        "window_one": _case(r, 2, 9, 4, 3, "window", 1, QUERY_SCALE),
        "window_n": _case(r, 1, 12, 6, 4, "window", 12, QUERY_SCALE),
        "wide": _case(r, 1, 7, 4, 6, "window", 11, QUERY_SCALE),
        "exact": _case(r, 2, 24, 8, 4, "window", 6, QUERY_SCALE),
        "window_long": _long(r, WINDOW_LENGTH, WINDOW_DIM, "window", WINDOW, 2.0),
        "chunks": _case(r, 2, 29, 6, 5, "chunk", 8),
        "chunks_even": _case(r, 1, 24, 5, 4, "chunk", 6),
        "chunk_one": _case(r, 2, 11, 4, 3, "chunk", 1),
        "one_chunk": _case(r, 1, 13, 8, 6, "chunk", 20),
        "linear_long": _long(r, LINEAR_LENGTH, LINEAR_DIM, "chunk", CHUNK, 1.0),
    }


# ------------------------------------------------------------- the window
def right_window(i, j, w):
    """Key j visible from query i: i - w < j <= i."""
    return (j <= i) & (j > i - w)


def window_dense(inputs, visible=right_window, scale=True, block=REF_BLOCK) -> dict:
    """Softmax attention over the keys ``visible(i, j, window)``, REF_BLOCK
    query rows at a time against the keys from 2 windows before the block to
    2 windows after it (every visibility below stays inside), float64."""
    a = case_inputs(inputs)
    q, k, v = a["queries"], a["keys"], a["values"]
    w = int(inputs["window"])
    batch, n, d = q.shape
    out = np.empty((batch, n, v.shape[-1]))
    factor = 1 / math.sqrt(d) if scale else 1.0
    for start in range(0, n, block):
        stop = min(start + block, n)
        lo, hi = max(0, start - 2 * w), min(n, stop + 2 * w)
        rows = np.arange(start, stop)[:, None]
        cols = np.arange(lo, hi)[None, :]
        s = q[:, start:stop] @ np.swapaxes(k[:, lo:hi], 1, 2) * factor
        s = np.where(visible(rows, cols, w), s, -np.inf)
        with np.errstate(invalid="ignore"):  # a row with no key: NaN, as code gives
            s = np.exp(s - s.max(axis=-1, keepdims=True))
            out[:, start:stop] = (s @ v[:, lo:hi]) / s.sum(axis=-1, keepdims=True)
    return {"outputs": out}


def _too_wide(i, j, w):
    return (j <= i) & (j >= i - w)


def _too_narrow(i, j, w):
    return (j <= i) & (j > i - w + 1)


def _band(i, j, w):
    return np.abs(i - j) < w


def _own_block_only(i, j, w):
    return right_window(i, j, w) & (j >= i // w * w)


def _no_window_mask(i, j, w):
    return (j <= i) & (j >= (i // w - 1) * w)


def _causal(i, j, w):
    return j <= i


def _local_positions(i, j, w):
    """The block's mask from block-local indices (arange(stop - start),
    arange(stop - first), first = max(0, start - w)): after the first block
    the key indices start w positions earlier, so the window lags by w."""
    start = i // w * w
    first = np.maximum(0, start - w)
    row, col = i - start, j - first
    return (col >= 0) & (j < start + w) & (col <= row) & (col > row - w)


def _future_in_block(i, j, w):
    return (j > i - w) & (j < (i // w + 1) * w)


def _window_variant(tag, hint, visible, cases=None) -> Variant:
    return Variant(tag, hint, lambda i: window_dense(i, visible), cases)


WINDOW_RULE = (
    "query i sees the keys i - window < j <= i: its own key and the window - "
    "1 before it"
)
WINDOW_VARIANTS = (
    # one key too many: ml-explore/mlx-lm#390, apple/axlearn#1009,
    # huggingface/transformers#39408 (window sizes counted without the query)
    _window_variant(
        "window-off-by-one",
        "each query sees window + 1 keys (i - window <= j); " + WINDOW_RULE + ".",
        _too_wide,
        ("uneven", "window_one", "exact"),
    ),
    _window_variant(
        "window-ignored",
        "every earlier key is seen: this is plain causal attention; the window "
        "keeps only the last ones: " + WINDOW_RULE + ".",
        _causal,
        ("uneven", "window_one", "exact"),
    ),
    # one key too few: lightseekorg/tokenspeed#578
    _window_variant(
        "window-one-short",
        "each query sees only window - 1 keys (i - window + 1 < j); the query's "
        "own key counts: " + WINDOW_RULE + ".",
        _too_narrow,
        ("uneven", "exact"),
    ),
    # a window forward as well as back: huggingface/transformers#39408
    _window_variant(
        "non-causal-band",
        "the window is a symmetric band |i - j| < window: later keys are seen; "
        "the window is causal: " + WINDOW_RULE + ".",
        _band,
        ("uneven", "window_n", "wide", "exact"),
    ),
    _window_variant(
        "previous-block-forgotten",
        "each query block scores only its own keys: the first queries of a "
        "block lose the keys of the block before that are still in their "
        "window; score the block against the keys from max(0, block_start - "
        "window) to block_stop (its own block and the previous one), masked to "
        "the window.",
        _own_block_only,
        ("uneven", "exact"),
    ),
    _window_variant(
        "window-mask-missing",
        "the block's scores against its own and the previous block's keys are "
        "masked only causally (j <= i): keys older than the window are seen; "
        "mask them too: " + WINDOW_RULE + ".",
        _no_window_mask,
        ("uneven", "exact"),
    ),
    _window_variant(
        "causal-mask-missing",
        "inside a block the later keys of the same block are seen (j > i): "
        "the block's scores are masked only on the old side; " + WINDOW_RULE + ".",
        _future_in_block,
        ("uneven", "exact"),
    ),
    # the mask from tf.range(stop - start) / torch.arange(stop - first): the
    # block's own indices, not the positions in the sequence
    # (the slice from max(0, start - window), as the reminder says)
    _window_variant(
        "mask-positions-local",
        "after the first block the window is shifted back: the block's mask "
        "compares block-local indices (range(stop - start) for the queries, "
        "range(stop - first) for the keys), which start at different "
        "positions; build it from the positions in the sequence: "
        "range(start, stop) for the queries and range(first, stop) for the "
        "keys, where first is the first key sliced.",
        _local_positions,
        ("uneven", "window_one", "exact"),
    ),
    # window 1: one key per query, its weight is 1 whatever the scale
    missing_scale(
        lambda i: window_dense(i, scale=False),
        "sqrt(d)",
        ("uneven", "window_n", "wide", "exact"),
    ),
)


# ------------------------------------------------------ linear attention
def elu_plus_one(x):
    """phi(x) = x + 1 for x > 0, exp(x) otherwise (strictly positive)."""
    return np.where(x > 0, x + 1.0, np.exp(np.minimum(x, 0.0)))


def linear_chunked(inputs, chunk=REF_CHUNK) -> dict:
    """Causal linear attention, float64, ``chunk`` tokens at a time: the masked
    quadratic form inside a chunk plus the running S (r, d_v), z (r,)."""
    a = case_inputs(inputs)
    q, k, v = a["queries"], a["keys"], a["values"]
    batch, n, r = q.shape
    state = np.zeros((batch, r, v.shape[-1]))
    norm = np.zeros((batch, r))
    out = np.empty((batch, n, v.shape[-1]))
    for start in range(0, n, chunk):  # phi per chunk: no (n, r) copies
        stop = min(start + chunk, n)
        q_c, k_c = elu_plus_one(q[:, start:stop]), elu_plus_one(k[:, start:stop])
        v_c = v[:, start:stop]
        table = np.tril(q_c @ np.swapaxes(k_c, 1, 2))  # j <= i inside the chunk
        num = q_c @ state + table @ v_c
        den = np.einsum("bnr,br->bn", q_c, norm) + table.sum(axis=-1)
        out[:, start:stop] = num / (den[..., None] + EPS)
        state += np.swapaxes(k_c, 1, 2) @ v_c
        norm += k_c.sum(axis=1)
    return {"outputs": out}


def _phi_elu(x):
    return np.where(x > 0, x, np.expm1(np.minimum(x, 0.0)))


def linear_dense(inputs, phi=elu_plus_one, num="causal", den="causal", scale=False):
    """Linear attention from the (n, n) table A = phi(Q) phi(K)^T, each key
    counted ``mult`` times in the numerator and the denominator (a known
    mistake's visibility); den None: no normaliser. Small cases only."""
    q, k, v = (np.asarray(inputs[n]) for n in ("queries", "keys", "values"))
    if scale:
        q = q / math.sqrt(q.shape[-1])
    c, n = int(inputs["chunk"]), q.shape[1]
    table = phi(q) @ np.swapaxes(phi(k), 1, 2)
    numerator = (table * multiplicity(num, n, c)) @ v
    if den is None:
        return {"outputs": numerator}
    denominator = (table * multiplicity(den, n, c)).sum(axis=-1, keepdims=True)
    return {"outputs": numerator / (denominator + EPS)}


def multiplicity(kind, n, c) -> np.ndarray:
    """(n, n): how often key j enters query i's sums under ``kind``."""
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    same = i // c == j // c
    before = j // c < i // c  # the chunks before: the carried state
    if kind == "causal":
        return (j <= i) * 1.0
    if kind == "all":
        return np.ones((n, n))
    if kind == "own_chunk":
        return ((j <= i) & same) * 1.0
    if kind == "strict":
        return (j < i) * 1.0
    if kind == "state_after_update":  # the chunk's own keys in the state too
        return (j < (i // c + 1) * c) * 1.0 + ((j <= i) & same)
    if kind == "last_token_lost":  # the state never gets a chunk's last key
        return ((j <= i) & ~(before & (j % c == c - 1))) * 1.0
    raise ValueError(kind)


def _linear_variant(tag, hint, cases=None, **bug) -> Variant:
    return Variant(tag, hint, lambda i: linear_dense(i, **bug), cases)


LINEAR_RULE = (
    "per chunk: out = (phi(Q_c) S + tril(phi(Q_c) phi(K_c)^T) V_c) / "
    "(phi(Q_c) z + rowsum(tril(...)) + 1e-6), then S += phi(K_c)^T V_c and z "
    "+= colsum(phi(K_c))"
)
MULTI = ("chunks", "chunks_even", "chunk_one")  # cases with more than one chunk
LINEAR_VARIANTS = (
    _linear_variant(
        "phi-without-plus-one",
        "the feature map is elu(x), which is negative for x < 0; phi(x) = "
        "elu(x) + 1 (x + 1 for x > 0, exp(x) otherwise) keeps every weight "
        "positive.",
        phi=_phi_elu,
    ),
    _linear_variant(
        "scaled-queries",
        "the queries are divided by sqrt(d) before phi: linear attention has "
        "no 1/sqrt(d); use phi(queries) and phi(keys) as they are.",
        scale=True,
    ),
    # the causal normaliser left out: lucidrains/performer-pytorch#40
    _linear_variant(
        "normaliser-missing",
        "the outputs are the numerators phi(q_i) S_i only; divide each by its "
        "normaliser: out_i = phi(q_i) S_i / (phi(q_i) . z_i + 1e-6).",
        den=None,
    ),
    # the normaliser summed along the wrong axis (not the causal prefix):
    # fla-org/flash-linear-attention#594, #850
    _linear_variant(
        "normaliser-over-all-keys",
        "the normaliser sums phi(k_j) over ALL keys (the non-causal z); query "
        "i's normaliser z_i sums only j <= i, like its numerator.",
        den="all",
    ),
    # chunk-wise runs that lose the state between chunks:
    # fla-org/flash-linear-attention#494
    _linear_variant(
        "state-not-carried",
        "the state S and normaliser z are reset for every chunk, so a query "
        "sees only the keys of its own chunk; carry them from chunk to chunk: "
        + LINEAR_RULE
        + ".",
        cases=MULTI,
        num="own_chunk",
        den="own_chunk",
    ),
    _linear_variant(
        "normaliser-not-carried",
        "the state S is carried from chunk to chunk but the normaliser z is "
        "not: both sum the chunks before; " + LINEAR_RULE + ".",
        cases=MULTI,
        den="own_chunk",
    ),
    # a strict causal mask inside the chunk (row > col for row >= col):
    # open-lm-engine/accelerated-model-architectures#480
    _linear_variant(
        "diagonal-dropped",
        "inside a chunk the mask is strict (j < i): each query's own key is "
        "left out; the prefix is inclusive, j <= i (torch.tril / "
        "tf.linalg.band_part(x, -1, 0) keeps the diagonal).",
        num="strict",
        den="strict",
    ),
    _linear_variant(
        "state-updated-before-read",
        "the chunk's own keys are added to S and z before the chunk reads them: "
        "its queries see later keys of their chunk and count the earlier ones "
        "twice (with the table); read S and z first, then add the chunk.",
        num="state_after_update",
        den="state_after_update",
    ),
    _linear_variant(
        "state-misses-chunk-end",
        "the last token of each chunk never reaches the carried state "
        "(an off-by-one in the slice of the update, e.g. [start:stop - 1]); "
        "add every key of the chunk: S += phi(K_c)^T V_c over [start:stop].",
        cases=("chunks", "chunks_even"),
        num="last_token_lost",
        den="last_token_lost",
    ),
)


# --------------------------------------------------------------- expected
LONG = ("window_long", "linear_long")


def expected(case: str, inputs: dict) -> dict:
    result = window_dense(inputs) if "window" in inputs else linear_chunked(inputs)
    if case in LONG:  # every row, in the runner's signed sums
        return mixed(result["outputs"], inputs["seed"])
    return result


NAN_WINDOW = (
    "NaN or inf usually means a query saw no key at all (0 / 0): its own key "
    "j = i is always in its window, so check the mask of the first block and "
    "of window 1; fill the hidden scores with -inf (or a large negative "
    "number) before the max and the exp."
)
NAN_LINEAR = (
    "NaN or inf usually means a normaliser of 0 or below: phi must be "
    "positive (elu(x) + 1, not elu(x)), and the denominator gets + 1e-6."
)
NOTES = {
    "uneven": "batch 2, n 23, d 8, d_v 5, window 5 (the last block is shorter)",
    "window_one": "batch 2, n 9, d 4, d_v 3, window 1 (each query sees itself)",
    "wide": "batch 1, n 7, d 4, d_v 6, window 11 (longer than the sequence: "
    "causal attention)",
    "window_n": "batch 1, n 12, d 6, d_v 4, window 12 (= n: causal attention)",
    "exact": "batch 2, n 24, d 8, d_v 4, window 6 (4 full blocks)",
    "window_long": f"batch 1, n {WINDOW_LENGTH}, d = d_v = {WINDOW_DIM}, window "
    f"{WINDOW}; compared: {MIXTURES} sums of every row's outputs with random "
    f"signs (so every row counts)",
    "chunks": "batch 2, n 29, d 6, d_v 5, chunk 8 (the last chunk is shorter)",
    "chunks_even": "batch 1, n 24, d 5, d_v 4, chunk 6 (4 full chunks)",
    "chunk_one": "batch 2, n 11, d 4, d_v 3, chunk 1 (one token per chunk)",
    "one_chunk": "batch 1, n 13, d 8, d_v 6, chunk 20 (one chunk holds the "
    "whole sequence)",
    "linear_long": f"batch 1, n {LINEAR_LENGTH}, d = d_v = {LINEAR_DIM}, chunk "
    f"{CHUNK}; compared: {MIXTURES} sums of every row's outputs with random "
    f"signs (so every row counts)",
}
WINDOW_REMINDER = (
    "for each query block [start, stop) of window tokens, first = max(0, start "
    "- window): scores = Q_block K[first : stop]^T / sqrt(d), hidden where not "
    "(i - window < j <= i) with i, j positions in the sequence, softmax over the "
    "keys, @ V[first : stop]."
)


def _check(name, targets, variants, nan_hint, reminder) -> Check:
    return Check(
        name=name,
        runner=RUNS[name],
        targets=targets,
        compare=("outputs",),
        variants=variants,
        case_notes=NOTES,
        nan_hint=nan_hint,
        reminder=reminder,
    )


# the memory checks name no variant: each would recompute a mistake on all
# rows per student (the window and linear checks name the same mistakes)
CHECKS = {
    "window": _check(
        "window", WINDOW_TARGETS, WINDOW_VARIANTS, NAN_WINDOW, WINDOW_REMINDER
    ),
    "window_memory": _check(
        "window_memory",
        WINDOW_TARGETS,
        (),
        NAN_WINDOW,
        "the window test names the likely mistake on small inputs; " + WINDOW_REMINDER,
    ),
    "linear": _check(
        "linear", LINEAR_TARGETS, LINEAR_VARIANTS, NAN_LINEAR, LINEAR_RULE + "."
    ),
    "linear_memory": _check(
        "linear_memory",
        LINEAR_TARGETS,
        (),
        NAN_LINEAR,
        "the linear test names the likely mistake on small inputs; "
        + LINEAR_RULE
        + ".",
    ),
}


# ---------------------------------------------------------- build time
def long_rows(inputs) -> np.ndarray:
    """LONG_ROWS rows of a memory case (the first, the last, random ones)."""
    n = int(inputs["length"])
    r = np.random.default_rng(int(inputs["seed"]))
    middle = r.choice(np.arange(1, n - 1), LONG_ROWS - 2, replace=False)
    return np.sort(np.concatenate([[0], middle, [n - 1]]))


def crosscheck(case: str, inputs: dict, exp: dict) -> None:
    """The reference agrees with the course library (attncourse.numpy's
    sliding_window_attention with sliding_window_mask'd softmax, and
    linear_attention(causal=True) with the quadratic form) and, for the
    memory cases, with the rows computed one by one."""
    import attncourse.numpy as anp

    a = case_inputs(inputs)
    q, k, v = a["queries"], a["keys"], a["values"]
    n = q.shape[1]
    if "window" in inputs:
        w = min(int(inputs["window"]), n)  # a longer window sees every key
        band, _ = anp.sliding_window_attention(q, k, v, w)
        if case in LONG:
            full = window_dense(inputs)["outputs"]
            np.testing.assert_allclose(band, full, atol=1e-10)
            got = mixed(band, inputs["seed"])["outputs"]
        else:
            masked, _ = anp.scaled_dot_product_attention(
                q, k, v, mask=anp.sliding_window_mask(n, w)
            )
            np.testing.assert_allclose(masked, exp["outputs"], atol=1e-10)
            got = band
        np.testing.assert_allclose(got, exp["outputs"], atol=1e-10)
        return
    if case not in LONG:
        lib = anp.linear_attention(q, k, v, causal=True)
        np.testing.assert_allclose(lib, exp["outputs"], atol=1e-10)
        dense = linear_dense(inputs)["outputs"]
        np.testing.assert_allclose(dense, exp["outputs"], atol=1e-10)
        return
    full = linear_chunked(inputs)["outputs"]
    got = mixed(full, inputs["seed"])["outputs"]
    np.testing.assert_allclose(got, exp["outputs"], atol=1e-10)
    prefix = 512  # the library's cumsum on a prefix (its rows need no more)
    lib = anp.linear_attention(q[:, :prefix], k[:, :prefix], v[:, :prefix], True)
    np.testing.assert_allclose(lib, full[:, :prefix], atol=1e-10)
    fk = elu_plus_one(k[0])
    for row in long_rows(inputs):  # one row at a time: O(n d)
        weights = fk[: row + 1] @ elu_plus_one(q[0, row])
        want = weights @ v[0, : row + 1] / (weights.sum() + EPS)
        np.testing.assert_allclose(full[0, row], want, atol=1e-10, rtol=1e-10)
