"""Assignment ``attention-cost``: what the direct method's tables cost, and
attention computed within a memory budget.

* table_mib_tf / table_mib_torch(queries, keys, backward=False) -> MiB
  (2**20 bytes) of the (n_q, n_k) tables the direct method holds: 2 (scores
  S and weights A) forward, 4 forward + backward (S, A, dA, dS: 4 counted,
  the chapter's budget, though 3 are alive at the backward peak), one per
  index of the leading axes (batch, heads), of the inputs' itemsize;
* budget_chunk_tf / budget_chunk_torch(queries, keys, budget_mib) -> the
  largest number of query rows whose 2 forward tables fit within
  budget_mib, at most n_q; ValueError (its type graded, not its wording)
  when not even one row fits;
* budgeted_attention_tf / budgeted_attention_torch(queries, keys, values,
  budget_mib, mask=None) -> softmax(q k^T / sqrt(d), mask) v computed
  budget_chunk rows of queries at a time; mask bool, True = attend, at
  least 2-D, broadcastable to (..., n_q, n_k), its query axis chunked with
  the queries; a fully masked row gives zero outputs (the library's
  masked_softmax); the inputs' dtype kept.

Checks: ``table`` (fresh shapes, 1 or 2 leading axes, float16/32/64, the
backward flag; realistic lengths), ``chunk`` (budgets between whole rows,
on an exact boundary, one row exactly, more than n_q rows; budgets below
one row: a ValueError, its type and not its wording), ``values``
(against float64 NumPy: uneven last chunks, masks of every broadcast shape
with a fully masked row, float64 inputs, a budget of one row, a budget
larger than the whole table), ``memory`` (batch 1, 1 head, n = 34,816 with
a key mask and an 8 MiB budget under a 512 MiB cap; ONE float32 (n, n) table
is 4.5 GiB, more than the sandbox's whole address space, so memory set aside
before the call helps no one; every row counted in signed sums).

The expected numbers are computed here from the definitions in float64
(sizes in exact integer / rational arithmetic); the known mistakes are the
same computations with one step changed.
"""

import math
from fractions import Fraction

import numpy as np

from grader import numeric
from grader.assignments._common import rng
from grader.assignments.mistakes import (
    inverted_mask,
    mask_ignored,
    mask_zero_fill,
    missing_scale,
    softmax_axis,
)
from grader.checks import Check, Variant
from grader.kernel.runners.attention_cost import (
    ATTENTION,
    BUDGET_MIB,
    CHUNK,
    HEAD_DIM,
    HEADROOM,
    HEADS,
    LENGTH,
    RAISED,
    RUNS,
    TABLE,
    MiB,
    long_inputs,
    mixed,
)
from grader.provenance import BUILTIN_ATTENTION, COURSE_ATTENTION, allow

NAME = "attention-cost"
SEED = 20250
# What the solution may not call (grader.provenance flags it for review): the
# course library's attention (the direct one and the tiled ones, which hold
# no table at all), its benchmark's own table sizes, the frameworks' fused
# attention, and resource limits changed from the notebook. Allowed, and said
# so in the notebook: attncourse.<fw>.masked_softmax -- the course's softmax
# with its mask convention, a tool of the earlier chapters; what is asked
# here is which rows of the scores and of the mask go with which chunk.
FORBIDDEN = (
    *COURSE_ATTENTION,
    *allow("masked_softmax"),
    *BUILTIN_ATTENTION,
    "resource",
)
TABLES = {False: 2, True: 4}  # tables held: forward, forward + backward
PAD = 5  # stored shapes: rows of PAD ints, left-padded with -1
CHUNK_ROWS = 16  # query rows of the memory case's reference at a time (4 MiB)
TABLE_CASES = RUNS["table"].cases
CHUNK_CASES = RUNS["chunk"].cases
# ONE (n, n) float32 table of one head of the memory case: larger than the
# sandbox's whole address space (4 GiB), whatever was set aside before the call
TABLE_BYTES = LENGTH * LENGTH * 4
assert TABLE_BYTES > 4 << 30 and TABLE_BYTES // HEADROOM >= 8


# ------------------------------------------------------------ sizes (exact)
def _shapes(rows) -> list[tuple]:
    return [tuple(int(s) for s in r if int(s) >= 0) for r in np.asarray(rows)]


def _pad(shape) -> list[int]:
    return [-1] * (PAD - len(shape)) + list(shape)


def _lead(shape) -> int:
    return math.prod(shape[:-2])


def table_bytes(q_shape, k_shape, itemsize, backward) -> int:
    """Bytes of the tables the direct method holds (exact)."""
    return (
        TABLES[bool(backward)] * _lead(q_shape) * q_shape[-2] * k_shape[-2] * itemsize
    )


def tables(i, unit=MiB, lead=_lead, itemsize=None, counts=TABLES, square=False):
    """table_mib on every call of a case -- and its mistakes: ``unit`` (1e6:
    MB), ``lead`` (which leading axes count), ``itemsize`` (hard-coded),
    ``counts`` (tables forward, forward + backward), ``square`` (n_q x n_q)."""
    out = []
    for q, k, item, back in zip(
        _shapes(i["q_shapes"]),
        _shapes(i["k_shapes"]),
        np.asarray(i["itemsizes"]).tolist(),
        np.asarray(i["backward"]).tolist(),
        strict=True,
    ):
        n_k = q[-2] if square else k[-2]
        size = itemsize or item
        out.append(counts[bool(back)] * lead(q) * q[-2] * n_k * size / unit)
    return {"mib": np.array(out, dtype=np.float64)}


def chunks(
    i,
    unit=MiB,
    n_tables=2,
    lead=_lead,
    itemsize=None,
    square=False,
    round_up=False,
    strict=False,
    cap=True,
    raise_error=True,
):
    """budget_chunk on every call of a case (RAISED: ValueError) -- and its
    mistakes: ``unit`` (1e6: MB), ``n_tables`` per row, ``lead``,
    ``itemsize`` (hard-coded), ``square`` (n_q keys), ``round_up`` (ceil),
    ``strict`` (tables < budget), ``cap`` (min with n_q), ``raise_error``
    (False: 0 returned)."""
    out = []
    for q, k, item, budget in zip(
        _shapes(i["q_shapes"]),
        _shapes(i["k_shapes"]),
        np.asarray(i["itemsizes"]).tolist(),
        np.asarray(i["budgets"]).tolist(),
        strict=True,
    ):
        n_k = q[-2] if square else k[-2]
        row = n_tables * lead(q) * n_k * (itemsize or item)
        ratio = Fraction(budget) * unit / row  # exact
        rows = math.ceil(ratio) if round_up else math.floor(ratio)
        if strict and ratio == math.floor(ratio):
            rows -= 1
        if cap:
            rows = min(rows, q[-2])
        if rows < 1 and raise_error:
            rows = RAISED
        out.append(max(rows, 0) if rows != RAISED else RAISED)
    return {"rows": np.array(out, dtype=np.int64)}


# ---------------------------------------------------------------- attention
def _chunk(i) -> int:
    """The grader's own chunk for a values case (what budget_chunk gives)."""
    q, k, v = (np.asarray(i[n]) for n in ("queries", "keys", "values"))
    case = {
        "q_shapes": [_pad(q.shape)],
        "k_shapes": [_pad(k.shape)],
        "itemsizes": [int(i["itemsize"])],
        "budgets": [float(i["budget"])],
    }
    return int(chunks(case)["rows"][0])


def attend(q, k, v, mask=None, scale=True, axis=-1, fill="most-negative"):
    """Float64 attention of one chunk: softmax over ``axis`` of q k^T /
    sqrt(d) (``scale``); mask True = attend, a fully masked row -> zeros;
    ``fill``: how masked scores are treated (most-negative: the course's
    convention; zero: set to 0; ignored; inverted: the mask's complement;
    uniform: the most negative finite fill and no multiply by the mask, so
    a fully masked row gives every key the same weight)."""
    s = q @ np.swapaxes(k, -1, -2)
    if scale:
        s = s / math.sqrt(q.shape[-1])
    if mask is not None and fill == "inverted":
        mask = ~np.asarray(mask, dtype=bool)
    if mask is None or fill == "ignored":
        return numeric.softmax(s, axis=axis) @ v
    mask = np.broadcast_to(np.asarray(mask, dtype=bool), s.shape)
    if fill == "zero":
        return numeric.softmax(np.where(mask, s, 0.0), axis=axis) @ v
    if fill == "uniform":
        w = numeric.masked_softmax(s, mask)
        empty = ~mask.any(axis=-1, keepdims=True)  # all scores equal there
        return np.where(empty, 1.0 / s.shape[-1], w) @ v
    if axis == -1:
        return numeric.masked_softmax(s, mask) @ v
    # over the queries: the same masked softmax with the two axes swapped
    w = numeric.masked_softmax(np.swapaxes(s, -1, -2), np.swapaxes(mask, -1, -2))
    return np.swapaxes(w, -1, -2) @ v


def _mask_rows(mask, start, stop, first_rows=False):
    """The chunk's rows of a mask (at least 2-D) whose query axis is n_q
    (else the whole mask: it broadcasts); ``first_rows``: the first chunk's
    rows reused."""
    if mask is None or mask.shape[-2] == 1:
        return mask
    if first_rows:
        return mask[..., : stop - start, :]
    return mask[..., start:stop, :]


def budgeted(
    i,
    scale=True,
    axis=-1,
    fill="most-negative",
    mask_first_rows=False,
    drop_last=False,
    itemsize=None,
):
    """budgeted_attention chunk by chunk in float64 -- and its mistakes:
    ``scale``, ``axis`` (-2: softmax over the chunk's queries), ``fill``,
    ``mask_first_rows`` (the mask not chunked with the queries),
    ``drop_last`` (the rows after the last whole chunk left at zero),
    ``itemsize`` (of the returned tensor)."""
    q, k, v = (
        np.asarray(i[n], dtype=np.float64) for n in ("queries", "keys", "values")
    )
    mask = i.get("mask")
    mask = None if mask is None else np.asarray(mask, dtype=bool)
    n_q, size = q.shape[-2], _chunk(i)
    out = np.zeros((*q.shape[:-1], v.shape[-1]))
    last = n_q // size * size if drop_last else n_q
    for start in range(0, last, size):
        stop = min(start + size, n_q)
        m = _mask_rows(mask, start, stop, mask_first_rows)
        out[..., start:stop, :] = attend(
            q[..., start:stop, :], k, v, m, scale, axis, fill
        )
    item = itemsize or int(i["itemsize"])
    return {"outputs": out, "itemsize": np.array(item, dtype=np.int64)}


def direct_long(i) -> np.ndarray:
    """The memory case's outputs, every row, CHUNK_ROWS rows at a time."""
    a = long_inputs(i["seed"], i["length"], i["heads"], i["head_dim"])
    q, k, v = a["queries"], a["keys"], a["values"]
    # the key mask hides the LAST keys: the visible ones are a slice (no
    # pass over the scores to mask them), the scale folded into the queries
    valid = int(a["mask"][0, 0, 0].sum())
    assert a["mask"][0, 0, 0, :valid].all()
    q = q / math.sqrt(q.shape[-1])
    kt = np.swapaxes(k[..., :valid, :], -1, -2)
    v = v[..., :valid, :]
    out = np.empty(q.shape[:-1] + (v.shape[-1],))
    for start in range(0, q.shape[-2], CHUNK_ROWS):
        s = q[..., start : start + CHUNK_ROWS, :] @ kt
        s -= s.max(axis=-1, keepdims=True)
        np.exp(s, out=s)
        out[..., start : start + CHUNK_ROWS, :] = (s @ v) / s.sum(-1, keepdims=True)
    return out


# -------------------------------------------------------------------- cases
def _dtype_item(r, options=(2, 4, 8)) -> int:
    return int(r.choice(options))


def _table_case(r) -> dict:
    """Eight calls: 1 and 2 leading axes (batch > 1 and heads > 1 where 2),
    every dtype with and without backward, n_q != n_k."""
    calls = []
    for rank, item, back in (
        (4, 4, False),
        (4, 2, True),
        (3, 8, False),
        (3, 4, True),
        (4, 8, True),
        (3, 2, False),
        (4, 4, True),
        (3, 4, False),
    ):
        lead = [int(r.integers(2, 5))] + ([int(r.integers(2, 9))] if rank == 4 else [])
        n_q = int(r.integers(200, 1200))
        n_k = n_q + int(r.choice([-1, 1])) * int(r.integers(n_q // 4, n_q // 2))
        calls.append(((*lead, n_q, 2), (*lead, n_k, 2), item, back))
    return _calls(calls, "backward")


def _table_long_case(r) -> dict:
    """Lengths of real models: the sizes a budget is about."""
    heads = int(r.choice([8, 12, 16]))
    n = int(r.choice([8192, 16384, 32768]))
    n_q = int(r.choice([1024, 2048, 4096]))
    calls = [
        ((1, heads, n, 2), (1, heads, n, 2), 2, True),
        ((8, n_q, 2), (8, n_q + 2048, 2), 4, False),
        ((2, heads, 4096, 2), (2, heads, 4096, 2), 4, True),
    ]
    return _calls(calls, "backward")


def _calls(calls, last: str) -> dict:
    return {
        "q_shapes": np.array([_pad(c[0]) for c in calls], dtype=np.int64),
        "k_shapes": np.array([_pad(c[1]) for c in calls], dtype=np.int64),
        "itemsizes": np.array([c[2] for c in calls], dtype=np.int64),
        last: np.array([c[3] for c in calls]),
    }


def _row_bytes(q_shape, k_shape, item) -> int:
    return 2 * _lead(q_shape) * k_shape[-2] * item


def _budget(rows: Fraction, q_shape, k_shape, item) -> float:
    """The budget (MiB, a float holding the value exactly) of ``rows`` rows."""
    value = rows * _row_bytes(q_shape, k_shape, item) / MiB
    assert float(value) == value, "budgets must be exact binary fractions"
    return float(value)


def _chunk_case(r) -> dict:
    """Budgets between k and k + 1 rows, k from 40 on (so MB and MiB give
    different rows), n_q above 2k + 2 (so a doubled chunk is not capped), n_k
    far from n_q; every dtype, 1 and 2 leading axes."""
    calls = []
    for rank, item in ((4, 2), (3, 8), (4, 4), (3, 4)):
        lead = [int(r.integers(2, 5))] + ([int(r.integers(2, 7))] if rank == 4 else [])
        k = int(r.integers(40, 150))
        n_q = int(r.integers(3 * k, 4 * k))
        n_k = int(n_q * r.choice([0.5, 1.5, 2.0, 2.5]))
        q_shape, k_shape = (*lead, n_q, 2), (*lead, n_k, 2)
        frac = Fraction(int(r.integers(1, 4)), 4)
        budget = _budget(k + frac, q_shape, k_shape, item)
        calls.append((q_shape, k_shape, item, budget))
    return _calls(calls, "budgets")


def _chunk_edges_case(r) -> dict:
    """An exact boundary (k rows to the byte), one row exactly, a budget of
    more than n_q rows, a short sequence that fits exactly."""
    lead = [int(r.integers(2, 5)), int(r.integers(2, 9))]
    k = int(r.integers(5, 30))
    n_q, n_k = k + int(r.integers(10, 40)), int(r.integers(100, 900))
    a = ((*lead, n_q, 2), (*lead, n_k, 2), 4)
    b = ((lead[0], n_q, 2), (lead[0], n_k + 7, 2), 8)
    c = ((*lead, n_q, 2), (*lead, n_k, 2), 2)
    n_short = int(r.integers(2, 6))
    s = ((lead[1], n_short, 2), (lead[1], n_k, 2), 2)
    calls = [
        (*a, _budget(Fraction(k), *a)),
        (*b, _budget(Fraction(1), *b)),
        (*c, _budget(Fraction(int(r.integers(2, 5)) * n_q) + Fraction(1, 2), *c)),
        (*s, _budget(Fraction(n_short), *s)),
    ]
    return _calls(calls, "budgets")


ERROR_BUDGETS = (0.25, 0.5, 1.0, 1.5, 2.0, 3.0)  # MiB, printed alike any way
ERROR_ROWS = (0.75, 1.25, 2.0, 2.5, 4.0, 6.0)  # MiB of one row's two tables


def _chunk_errors_case(r) -> dict:
    """Budgets below one row (by a quarter at least), with round numbers so
    that any way of printing them names them."""
    calls = []
    for rank, item in ((4, 4), (3, 2), (4, 8)):
        while True:
            budget = float(r.choice(ERROR_BUDGETS))
            row = float(r.choice([x for x in ERROR_ROWS if x >= 1.25 * budget]))
            lead = [int(r.choice([2, 4]))] + (
                [int(r.choice([2, 4]))] if rank == 4 else []
            )
            n_k = Fraction(row) * MiB / (2 * math.prod(lead) * item)
            if n_k.denominator == 1 and 512 <= n_k <= 65536:
                break
        n_q = int(r.integers(4, 64))
        calls.append(((*lead, n_q, 2), (*lead, int(n_k), 2), item, budget))
    return _calls(calls, "budgets")


def _attention_case(r, lead, n_q, n_k, d, d_v, rows, item, mask=None) -> dict:
    q_shape, k_shape = (*lead, n_q, d), (*lead, n_k, d)
    case = {
        "queries": 1.5 * r.normal(size=q_shape),
        "keys": r.normal(size=k_shape),
        "values": r.normal(size=(*lead, n_k, d_v)),
        "itemsize": np.array(item),
        # between rows and rows + 1: no honest rounding decides the chunk
        "budget": np.array(_budget(rows + Fraction(1, 2), q_shape, k_shape, item)),
    }
    if mask is not None:
        case["mask"] = mask
    return case


def _uneven(r, low, high, chunk) -> int:
    """A length in [low, high) that is not a multiple of chunk (> 1 chunk)."""
    n = int(r.integers(low, high))
    return n + 1 if n % chunk == 0 else n


def _full_mask(r, shape, empty_row) -> np.ndarray:
    """A random mask (True = attend) with one fully masked query row
    (``empty_row``) and at least one key for every other row."""
    mask = r.random(shape) < 0.65
    mask[..., 0] |= ~mask.any(axis=-1)
    mask[..., empty_row, :] = False
    return mask


def make_cases(seed: int = SEED) -> dict:
    r = rng(seed)
    n1 = _uneven(r, 13, 20, 4)
    n2 = _uneven(r, 9, 13, 3)
    n_k2 = int(r.integers(6, 10))
    n3 = _uneven(r, 9, 12, 4)
    n_k3 = int(r.integers(9, 13))
    lengths = r.integers(1, n_k3, size=3)  # each batch element hides keys
    key_mask = (np.arange(n_k3)[None, :] < lengths[:, None])[:, None, :]
    n4, n_k4 = int(r.integers(5, 8)), int(r.integers(4, 7))
    causalish = np.arange(n_k4)[None, :] <= np.arange(n4)[:, None] + int(
        r.integers(0, 2)
    )
    causalish &= r.random((n4, n_k4)) < 0.8
    causalish[:, 0] = True
    n5 = int(r.integers(20, 31))
    cases = {
        "table": _table_case(r),
        "table_long": _table_long_case(r),
        "chunk": _chunk_case(r),
        "chunk_edges": _chunk_edges_case(r),
        "chunk_errors": _chunk_errors_case(r),
        "chunks": _attention_case(r, (2,), n1, int(r.integers(7, 12)), 8, 5, 4, 4),
        "heads_mask": _attention_case(
            r,
            (2, 3),
            n2,
            n_k2,
            4,
            6,
            3,
            4,
            # the fully masked row inside a whole chunk after the first
            _full_mask(r, (2, 1, n2, n_k2), int(r.integers(3, n2 // 3 * 3))),
        ),
        "key_mask": _attention_case(r, (3,), n3, n_k3, 6, 4, 4, 8, key_mask),
        "one_row": _attention_case(r, (2,), n4, n_k4, 8, 3, 1, 4, causalish),
        "one_chunk": _attention_case(
            r, (1, 2), n5, int(r.integers(20, 31)), 8, 5, 10**6, 4
        ),
        "long": {
            "seed": np.array(int(r.integers(2**31))),
            "length": np.array(LENGTH),
            "heads": np.array(HEADS),
            "head_dim": np.array(HEAD_DIM),
            "budget": np.array(BUDGET_MIB),
        },
    }
    # the interface's masks are at least 2-D (a query axis, maybe of size 1)
    assert all(np.ndim(c.get("mask", [[0]])) >= 2 for c in cases.values())
    return cases


def expected(case: str, inputs: dict) -> dict:
    if case in TABLE_CASES:
        return tables(inputs)
    if case in CHUNK_CASES:
        return chunks(inputs)
    if case == "long":
        return {
            **mixed(direct_long(inputs), inputs["seed"]),
            "itemsize": np.array(4, dtype=np.int64),
        }
    return budgeted(inputs)


# ----------------------------------------------------------------- mistakes
SIZE = (
    "tables x product of the leading axes x n_q x n_k x itemsize / 2**20, with "
    "2 tables (scores, weights) forward and 4 with backward=True"
)


def _table(tag, hint, **bug) -> Variant:
    return Variant(tag, hint, lambda i: tables(i, **bug), TABLE_CASES)


TABLE_VARIANTS = (
    # MiB sizes labelled MB: facebookresearch/xformers#267 (its memory report)
    _table(
        "mb-not-mib",
        "the size is in MB (10**6 bytes); a MiB is 2**20 = 1,048,576 bytes: "
        "divide the bytes by 2**20.",
        unit=10**6,
    ),
    _table(
        "leading-dims-ignored",
        "the leading axes are not counted: every batch element and every "
        "head has its own (n_q, n_k) tables -- multiply by the product of all "
        "axes before the last two (math.prod(queries.shape[:-2])).",
        lead=lambda s: 1,
    ),
    # "forgot to account for the heads": pbloem/former#34 (a batch of
    # attention matrices sized without them)
    _table(
        "only-first-leading-dim",
        "only the first axis (the batch) is counted; with (batch, heads, n_q, "
        "d) inputs every head has its tables too: multiply by the product of "
        "all axes before the last two.",
        lead=lambda s: s[0],
    ),
    _table(
        "heads-only",
        "only the axis just before n_q (the heads) is counted; the batch "
        "multiplies the tables as well: use the product of all axes before "
        "the last two.",
        lead=lambda s: s[-3],
    ),
    _table(
        "itemsize-hard-coded",
        "the itemsize is taken as 4 bytes (float32) whatever the inputs' "
        "dtype; float16 holds 2 bytes a number and float64 8: read it from the "
        "inputs (TF: queries.dtype.size, PyTorch: queries.element_size()).",
        itemsize=4,
    ),
    _table(
        "one-table",
        "only the scores S are counted; the direct method holds the weights "
        "A = softmax(S) beside them: 2 tables forward, 4 with the backward "
        "pass.",
        counts={False: 1, True: 2},
    ),
    _table(
        "three-tables",
        "3 tables a pass are counted; the chapter's direct method counts 2 "
        "forward (S, A) and 4 forward + backward (S and A from the forward "
        "pass, dA and dS from the backward: 4 tables counted, not the 3 alive "
        "at the backward peak): " + SIZE + ".",
        counts={False: 3, True: 6},
    ),
    # forward + backward memory summed wrong: harvard-edge/cs249r_book#1155
    _table(
        "backward-not-doubled",
        "backward=True gives the forward's 2 tables; the backward pass keeps "
        "A and builds dA and dS of the same size: 4 tables in all.",
        counts={False: 2, True: 2},
    ),
    _table(
        "square-table",
        "the table is taken as (n_q, n_q); scores and weights have one row "
        "per query and one column per KEY: (n_q, n_k), n_k = keys.shape[-2].",
        square=True,
    ),
)

ROWS_RULE = (
    "rows = floor(budget_mib * 2**20 / bytes of one row), one row = 2 tables "
    "x product of the leading axes x n_k x itemsize bytes, then min(rows, n_q)"
)


def _chunks(tag, hint, cases=("chunk",), **bug) -> Variant:
    return Variant(tag, hint, lambda i: chunks(i, **bug), cases)


CHUNK_VARIANTS = (
    _chunks(
        "mb-not-mib",
        "the budget is read as MB (10**6 bytes); budget_mib is in MiB: "
        "budget_mib * 2**20 bytes.",
        unit=10**6,
    ),
    _chunks(
        "chunk-rounded-up",
        "the number of rows is rounded UP: the last row's tables no longer "
        "fit; round down -- " + ROWS_RULE + ".",
        cases=("chunk", "chunk_errors"),
        round_up=True,
    ),
    _chunks(
        "one-table-per-row",
        "one table per query row is counted; a chunk's forward pass holds "
        "its scores AND its weights: 2 tables -- " + ROWS_RULE + ".",
        n_tables=1,
    ),
    _chunks(
        "backward-tables-per-row",
        "4 tables per row are counted (forward + backward); budgeted "
        "attention runs the forward pass only, which holds 2 -- " + ROWS_RULE + ".",
        n_tables=4,
    ),
    _chunks(
        "leading-dims-ignored",
        "the leading axes are not counted: one query row of the chunk has a "
        "row of scores and weights for every batch element and head -- "
        + ROWS_RULE
        + ".",
        lead=lambda s: 1,
    ),
    _chunks(
        "itemsize-hard-coded",
        "the itemsize is taken as 4 bytes whatever the dtype (float16: 2, "
        "float64: 8) -- " + ROWS_RULE + ".",
        itemsize=4,
    ),
    _chunks(
        "square-table",
        "a row is taken as n_q numbers; a query's row of scores has one "
        "number per KEY: n_k = keys.shape[-2] -- " + ROWS_RULE + ".",
        square=True,
    ),
    _chunks(
        "strictly-below-budget",
        "a chunk whose tables take exactly the budget is refused (< instead "
        "of <=); 'fits within' allows equality. Work in whole bytes (int) "
        "so that no rounding decides: " + ROWS_RULE + ".",
        cases=("chunk_edges",),
        strict=True,
    ),
    _chunks(
        "chunk-not-capped",
        "the chunk is larger than n_q when the budget holds more than the "
        "whole table; no chunk has more rows than the queries: min(rows, n_q).",
        cases=("chunk_edges",),
        cap=False,
    ),
    _chunks(
        "no-error-when-nothing-fits",
        "0 rows are returned when not even one row fits; a chunk of 0 rows "
        "never ends the loop: raise ValueError naming the budget and the "
        "size of one row.",
        cases=("chunk_errors",),
        raise_error=False,
    ),
)

MASKED = ("heads_mask", "key_mask", "one_row")
FLOAT32 = ("chunks", "heads_mask", "one_row", "one_chunk")


def _values(tag, hint, cases=None, **bug) -> Variant:
    return Variant(tag, hint, lambda i: budgeted(i, **bug), cases)


VALUE_VARIANTS = (
    missing_scale(lambda i: budgeted(i, scale=False), "sqrt(d)"),
    # stevezheng23/reading_comprehension_tf#30 (softmax over the wrong axis)
    softmax_axis(lambda i: budgeted(i, axis=-2)),
    _values(
        "mask-not-chunked",
        "every chunk uses the FIRST rows of the mask; the mask's query axis "
        "goes with the queries: chunk it like them, mask[..., start:stop, :] "
        "(a mask whose query axis has size 1 broadcasts as it is).",
        cases=("heads_mask", "one_row"),
        mask_first_rows=True,
    ),
    inverted_mask(lambda i: budgeted(i, fill="inverted"), "mask", MASKED),
    mask_ignored(lambda i: budgeted(i, fill="ignored"), "mask", MASKED),
    mask_zero_fill(lambda i: budgeted(i, fill="zero"), MASKED),
    # d2l-ai/d2l-en#2423 (a big negative fill gives an empty row uniform
    # weights)
    _values(
        "fully-masked-row-uniform",
        "a query row whose keys are all masked gets the mean of the values: "
        "with the most negative finite fill its scores are all equal and the "
        "softmax gives every key the same weight. The course gives such a "
        "row zero weights and zero outputs: multiply the weights by the mask "
        "after the softmax (or use masked_softmax).",
        cases=("heads_mask",),
        fill="uniform",
    ),
    _values(
        "last-chunk-dropped",
        "the rows after the last whole chunk are never computed (zeros): "
        "when n_q is not a multiple of the chunk the last chunk is shorter; "
        "loop with range(0, n_q, chunk).",
        cases=("chunks", "heads_mask", "key_mask"),
        drop_last=True,
    ),
    _values(
        "dtype-upcast",
        "the outputs come back in float64 for float32 inputs; keep the "
        "inputs' dtype (compute in it, or cast the result back).",
        cases=FLOAT32,
        itemsize=8,
    ),
)
NAN = (
    "NaN usually comes from a fully masked query row whose scores were all "
    "set to -inf (exp(-inf) / 0): the course gives such a row zero weights "
    "and zero outputs -- fill hidden scores with the most negative finite "
    "number AND multiply the weights by the mask after the softmax, or use "
    "the course's masked_softmax."
)
ATTENTION_RULE = (
    "chunk = budget_chunk(queries, keys, budget_mib); for each start in "
    "range(0, n_q, chunk): scores = q_chunk k^T / sqrt(d), the chunk's rows "
    "of the mask (True = attend), softmax over the keys (a fully masked row "
    "-> zeros), @ values; the outputs of the chunks concatenated along the "
    "query axis, in the inputs' dtype."
)
NOTES = {
    "table": "8 calls: (batch, n, 2) and (batch, heads, n, 2) inputs, n_q != "
    "n_k, float16 / float32 / float64, backward False and True",
    "table_long": "3 calls at the lengths of real models (thousands of "
    "positions, 8 to 16 heads)",
    "chunk": "4 calls, budgets between two whole numbers of rows, float16 / "
    "float32 / float64, 1 and 2 leading axes",
    "chunk_edges": "4 calls: a budget of exactly k rows, of exactly one row, "
    "of more rows than n_q, of exactly n_q rows",
    "chunk_errors": f"3 calls whose budget is smaller than one row: each must "
    f"raise ValueError (the runner returns {RAISED} for it)",
    "chunks": "batch 2, n_q not a multiple of the chunk of 4 rows, d 8, d_v "
    "5, float32, no mask",
    "heads_mask": "(batch 2, heads 3), chunk 3 rows, mask (2, 1, n_q, n_k) "
    "with one fully masked query row, float32",
    "key_mask": "batch 3, chunk 4 rows, key mask (3, 1, n_k), float64",
    "one_row": "batch 2, a budget of one row (chunk 1), a 2-D (n_q, n_k) mask, float32",
    "one_chunk": "(batch 1, heads 2), a budget far above the whole table "
    "(one chunk), float32, no mask",
    "long": f"(batch 1, heads {HEADS}), n_q = n_k = {LENGTH:,}, d = d_v = "
    f"{HEAD_DIM}, a key mask (1, 1, 1, n), budget {BUDGET_MIB:g} MiB; "
    f"compared: signed sums of every row's outputs",
}
COMMON = {"case_notes": NOTES}
CHECKS = {
    "table": Check(
        name="table",
        runner=RUNS["table"],
        targets=TABLE,
        compare=("mib",),
        variants=TABLE_VARIANTS,
        reminder=SIZE + ".",
        **COMMON,
    ),
    "chunk": Check(
        name="chunk",
        runner=RUNS["chunk"],
        targets=CHUNK,
        compare=("rows",),
        variants=CHUNK_VARIANTS,
        reminder=ROWS_RULE + f"; ValueError ({RAISED} here) when not one row fits.",
        **COMMON,
    ),
    "values": Check(
        name="values",
        runner=RUNS["values"],
        targets=ATTENTION,
        compare=("outputs", "itemsize"),
        variants=VALUE_VARIANTS,
        nan_hint=NAN,
        reminder=ATTENTION_RULE,
        **COMMON,
    ),
    "memory": Check(
        name="memory",
        runner=RUNS["memory"],
        targets=ATTENTION,
        compare=("outputs", "itemsize"),
        # none: each would recompute all 34,816 rows per student (the values
        # check names the same mistakes)
        variants=(),
        nan_hint=NAN,
        reminder=ATTENTION_RULE,
        **COMMON,
    ),
}


# -------------------------------------------------------------- crosscheck
def crosscheck(case: str, inputs: dict, exp: dict) -> None:
    """The sizes against the library's benchmark.weights_mib (square calls)
    and a count of rows one at a time; the values against the library's
    masked_softmax (NumPy) on whole tables; the memory case on some rows."""
    import attncourse.numpy as anp
    from attncourse import benchmark

    if case in TABLE_CASES:
        for n, (q, k, item, back) in enumerate(
            zip(
                _shapes(inputs["q_shapes"]),
                _shapes(inputs["k_shapes"]),
                inputs["itemsizes"].tolist(),
                inputs["backward"].tolist(),
                strict=True,
            )
        ):
            want = np.empty(0, dtype=f"f{item}").itemsize * _lead(q) * q[-2] * k[-2]
            pass_ = "backward" if back else "forward"
            assert exp["mib"][n] == benchmark.TABLES[pass_] * want / 2**20
            if q[-2] == k[-2]:
                lib = benchmark.TABLES[pass_] * benchmark.weights_mib(
                    q[-2], heads=_lead(q), batch=1, itemsize=item
                )
                np.testing.assert_allclose(exp["mib"][n], lib, rtol=1e-12)
        return
    if case in CHUNK_CASES:
        for n, (q, k, item, budget) in enumerate(
            zip(
                _shapes(inputs["q_shapes"]),
                _shapes(inputs["k_shapes"]),
                inputs["itemsizes"].tolist(),
                inputs["budgets"].tolist(),
                strict=True,
            )
        ):
            rows = 0  # the largest count of rows whose tables fit, by counting
            while (
                rows < q[-2]
                and table_bytes((*q[:-2], rows + 1, q[-1]), k, item, False)
                <= Fraction(budget) * 2**20
            ):
                rows += 1
            assert exp["rows"][n] == (rows or RAISED), (case, n)
        return
    if case == "long":
        a = long_inputs(
            inputs["seed"], inputs["length"], inputs["heads"], inputs["head_dim"]
        )
        rows = np.sort(np.random.default_rng(1).choice(LENGTH, 16, replace=False))
        s = a["queries"][..., rows, :] @ np.swapaxes(a["keys"], -1, -2)
        s = s / math.sqrt(a["queries"].shape[-1])
        lib = anp.masked_softmax(s, a["mask"]) @ a["values"]
        full = direct_long(inputs)
        np.testing.assert_allclose(full[..., rows, :], lib, atol=1e-10)
        for key, value in mixed(full, inputs["seed"]).items():
            np.testing.assert_allclose(value, exp[key], atol=1e-10)
        return
    q, k, v = (inputs[n] for n in ("queries", "keys", "values"))
    s = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    lib = anp.masked_softmax(s, inputs.get("mask")) @ v  # the whole table at once
    np.testing.assert_allclose(exp["outputs"], lib, atol=1e-12)
    assert exp["itemsize"] == inputs["itemsize"]
    assert 1 <= _chunk(inputs) <= q.shape[-2]
