"""Assignment ``tiny-transformer``: find the heads of a model from its maps.

weights (batch, heads, n, n): the attention of each query i over the keys j
(rows sum to 1); tokens (batch, n) int. Per framework the student writes

* previous_token_score_*(weights) -> (heads,): the mean over the batch and
  the queries i >= 1 of weights[b, h, i, i - 1]; n < 2 -> ValueError;
* induction_score_*(weights, tokens) -> (heads,): over the set Q of (b, i)
  whose token occurred before (some j < i with tokens[b, j] == tokens[b, i]),
  the mean over Q of sum_{j < i, tokens[b, j] == tokens[b, i]} weights[b, h,
  i, j + 1]; Q empty -> ValueError;
* find_heads_*(weights, tokens) -> (previous-token head, induction head), the
  argmax of each score.

Both scores are linear in the maps: score_h = sum_{b,i,j} C[b, i, j]
weights[b, h, i, j]. The reference and every known mistake are written as
their coefficient array C (``_linear``), which also gives the gradient the
checks compare (d sum_h g_h score_h / d weights = g_h C): a score computed
outside the framework (NumPy, .numpy()) has none.

Checks: ``previous_token`` (causal and full maps, n = 2), ``induction``
(causal maps with sequences that repeat once, several times, adjacently or
not at all; full maps with a sequence that never repeats), ``find_heads``
(maps of a "model" with a previous-token head, an induction head and decoys:
a head on the current token, one on the earlier copy itself, one on the
first token), ``errors`` (the two ValueErrors, and none for valid input).
"""

import numpy as np

from grader import numeric
from grader.assignments._common import rng
from grader.checks import Check, Variant
from grader.kernel.runners.tiny_transformer import (
    ERRORS,
    FIND,
    INDUCTION,
    OTHER_ERROR,
    PREVIOUS,
    RETURNED,
    RUNS,
    VALUE_ERROR,
)
from grader.provenance import BUILTIN_ATTENTION, COURSE_ATTENTION

NAME = "tiny-transformer"
SEED = 1707
# What the solution may not call (grader.provenance flags it for review): the
# course library (its head scores are the tiny chapter's own implementation),
# the built-in attention, and the input checks that raise their ValueErrors.
FORBIDDEN = (
    *COURSE_ATTENTION,
    *BUILTIN_ATTENTION,
    "attncourse.checks.head_weights_input",
    "attncourse.checks.induction_score_inputs",
    "attncourse.checks.check_repeated_tokens",
)


# ------------------------------------------------------------------ inputs
def _maps(r, batch, heads, n, causal=True):
    """Random row-stochastic maps (batch, heads, n, n), causal or full."""
    allowed = numeric.causal(n) if causal else np.ones((n, n), dtype=bool)
    scores = r.normal(scale=1.5, size=(batch, heads, n, n))
    return numeric.masked_softmax(scores, np.broadcast_to(allowed, scores.shape))


def _earlier(tokens):
    """M[b, i, j]: j < i and tokens[b, j] == tokens[b, i]."""
    n = tokens.shape[1]
    same = tokens[:, :, None] == tokens[:, None, :]
    return same & np.tri(n, k=-1, dtype=bool)


def _targets(kind, tokens):
    """Keys a planted head attends to: bool (batch, n, n) (rows may be empty)."""
    batch, n = tokens.shape
    t = np.zeros((batch, n, n), dtype=bool)
    m = _earlier(tokens)
    if kind == "previous":
        t[:, np.arange(1, n), np.arange(n - 1)] = True
    elif kind == "induction":
        t[:, :, 1:] = m[:, :, :-1]
    elif kind == "duplicate":  # the earlier copy itself
        t = m.copy()
    elif kind == "self":
        t[:, np.arange(n), np.arange(n)] = True
    elif kind == "first":
        t[:, :, 0] = True
    return t


def _plant(r, weights, head, kind, tokens):
    """Mix a share p in [0.7, 0.95] of each row of ``head`` onto its targets."""
    t = _targets(kind, tokens).astype(float)
    count = t.sum(axis=-1, keepdims=True)
    rows = count[..., 0] > 0
    p = r.uniform(0.7, 0.95, size=rows.shape)[..., None]
    mixed = (1 - p) * weights[:, head] + p * t / np.maximum(count, 1)
    weights[:, head] = np.where(rows[..., None], mixed, weights[:, head])


def _distinct(r, size, vocab=60):
    return r.permutation(vocab)[:size]


def _repeat_tokens(r, n):
    """Three sequences of n tokens: periodic (each repeats once or more),
    drawn from a vocabulary of 5 (tokens repeat several times), and nearly
    distinct with an adjacent repeat and a later one (few queries in Q)."""
    period = int(r.integers(4, 8))
    periodic = np.resize(_distinct(r, period), n)
    small = r.integers(0, 5, size=n)
    rare = _distinct(r, n)
    k = int(r.integers(2, n // 2))
    rare[k + 1] = rare[k]  # an adjacent repeat: the key after it is i itself
    rare[-1] = rare[int(r.integers(0, k))]
    return np.stack([periodic, small, rare]).astype(np.int64)


def _case(weights, tokens, r):
    case = {"weights": weights, "upstream": r.normal(size=(weights.shape[1],))}
    if tokens is not None:
        case["tokens"] = np.asarray(tokens, dtype=np.int64)
    return case


def _model_case(r, batch, n, kinds, period):
    """The maps of a "model" on repeated sequences: one head per kind."""
    tokens = np.stack(
        [np.resize(_distinct(r, period), n) for _ in range(batch)]
    ).astype(np.int64)
    weights = _maps(r, batch, len(kinds), n)
    for head, kind in enumerate(r.permutation(kinds)):
        if kind != "random":
            _plant(r, weights, head, kind, tokens)
    return _case(weights, tokens, r)


def make_cases(seed: int = SEED) -> dict:
    r = rng(seed)
    n = 14
    tokens = _repeat_tokens(r, n)
    repeats = _maps(r, 3, 4, n)
    for head, kind in zip(r.permutation(4)[:2], ("previous", "induction"), strict=True):
        _plant(r, repeats, head, kind, tokens)
    mixed_tokens = np.stack([r.integers(0, 4, size=8), _distinct(r, 8)])
    causal = _maps(r, 2, 5, 9)
    _plant(r, causal, int(r.integers(5)), "previous", np.zeros((2, 9)))
    return {
        "causal": _case(causal, None, r),
        "full": _case(_maps(r, 3, 2, 6, causal=False), None, r),
        "two": _case(_maps(r, 2, 3, 2, causal=False), None, r),
        "repeats": _case(repeats, tokens, r),
        "mixed": _case(_maps(r, 2, 3, 8, causal=False), mixed_tokens, r),
        "model": _model_case(
            r,
            4,
            16,
            ("previous", "induction", "duplicate", "self", "first", "random"),
            period=8,
        ),
        "small": _model_case(
            r,
            2,
            10,
            ("previous", "induction", "duplicate", "self"),
            period=int(r.integers(3, 6)),
        ),
        "errors": _error_case(r),
    }


def _error_case(r) -> dict:
    """Six calls in a drawn order, three of which must raise ValueError:
    previous_token_score with n = 1 (raise), n = 2 and n = 3..6 (return);
    induction_score with tokens that never repeat within a sequence but are
    shared between the sequences (raise), one position (raise), and one
    repeat in one sequence only (return). kinds[k]: 0 = previous_token_score,
    1 = induction_score; the drawn order makes the outcomes depend on the
    inputs (a constant answer could be faked without computing anything)."""
    batch, heads = int(r.integers(1, 4)), int(r.integers(1, 5))
    n = int(r.integers(3, 7))
    shared = _distinct(r, n)
    m = int(r.integers(4, 8))
    once = np.stack([_distinct(r, m), _distinct(r, m)])
    k = int(r.integers(1, m))
    once[0, k] = once[0, int(r.integers(0, k))]
    slots = [
        (0, _maps(r, batch, heads, 1), None),
        (0, _maps(r, batch, heads, 2, causal=False), None),
        (0, _maps(r, batch, heads, int(r.integers(3, 7))), None),
        (1, _maps(r, 2, heads, n), np.stack([shared, r.permutation(shared)])),
        (1, _maps(r, batch, heads, 1), r.integers(0, 9, size=(batch, 1))),
        (1, _maps(r, 2, heads, m), once),
    ]
    case = {"kinds": np.zeros(len(slots), dtype=np.int64)}
    for slot, index in enumerate(r.permutation(len(slots))):
        kind, weights, tokens = slots[index]
        case["kinds"][slot] = kind
        case[f"weights_{slot}"] = weights
        if tokens is not None:
            case[f"tokens_{slot}"] = np.asarray(tokens, dtype=np.int64)
    return case


def error_slots(i):
    """(kind, weights, tokens or None) of each call of the errors case."""
    return [
        (int(kind), i[f"weights_{k}"], i.get(f"tokens_{k}"))
        for k, kind in enumerate(i["kinds"])
    ]


# ------------------------------------------------- scores as coefficients
def _linear(inputs, coef) -> dict:
    """scores_h = sum C[b, i, j] weights[b, h, i, j] and their gradient."""
    w, g = inputs["weights"], inputs["upstream"]
    return {
        "scores": np.einsum("bij,bhij->h", coef, w),
        "grad_weights": g[None, :, None, None] * coef[:, None],
    }


def _previous_coef(w, offset=-1, queries="from1", divide="mean"):
    """offset -1: key i - 1 (the reference), +1: key i + 1, 0: key i;
    queries "from1" (i >= 1), "wrap" (every i, key -1 wraps to n - 1),
    "zero" (every i, query 0 adds 0); divide "mean", "batch" (summed over
    the queries), "none" (summed)."""
    batch, _, n, _ = w.shape
    coef = np.zeros((batch, n, n))
    rows = np.arange(n)
    keys = rows + offset
    if queries == "wrap":
        keys = keys % n
    keep = (keys >= 0) & (keys < n)
    coef[:, rows[keep], keys[keep]] = 1.0
    scored = n if queries in ("wrap", "zero") or offset == 0 else int(keep.sum())
    if divide == "mean":
        return coef / (batch * scored)
    return coef / batch if divide == "batch" else coef


def _induction_coef(
    tokens,
    key=1,
    occurrences="all",
    per_query="sum",
    over="Q",
    match="earlier",
    transpose=False,
):
    """key 1: the key after the earlier copy (reference), 0: the copy itself;
    occurrences "all" | "first" | "last"; per_query "sum" | "mean" (over the
    query's copies); over "Q" (mean over the queries in Q), "all" (over every
    query), "batch" (mean within each sequence, then over the sequences);
    match "earlier" (j < i), "self" (j <= i: the token matches itself),
    "any" (j != i: later copies count too); transpose: read weights[j', i]."""
    batch, n = tokens.shape
    same = tokens[:, :, None] == tokens[:, None, :]
    tri = {
        "earlier": np.tri(n, k=-1, dtype=bool),
        "self": np.tri(n, k=0, dtype=bool),
        "any": ~np.eye(n, dtype=bool),
    }[match]
    m = same & tri
    if key == 1:
        m[:, :, -1] = False  # no key after the last position
    if occurrences != "all":
        first = (
            np.argmax(m, axis=-1)
            if occurrences == "first"
            else (n - 1 - np.argmax(m[..., ::-1], axis=-1))
        )
        only = np.zeros_like(m)
        b, i = np.nonzero(m.any(axis=-1))
        only[b, i, first[b, i]] = True
        m = only
    coef = np.zeros((batch, n, n))
    weight = m.astype(float)
    if per_query == "mean":
        weight = weight / np.maximum(weight.sum(axis=-1, keepdims=True), 1)
    if key == 1:
        coef[:, :, 1:] = weight[:, :, :-1]
    else:
        coef = weight
    q = (same & tri).any(axis=-1)  # the queries the code averages over
    if over == "Q":
        coef = coef / q.sum()
    elif over == "all":
        coef = coef / (batch * n)
    else:
        coef = coef / (batch * q.sum(axis=1)[:, None, None])
    return np.swapaxes(coef, 1, 2) if transpose else coef


def _previous(i, **kw):
    return _linear(i, _previous_coef(i["weights"], **kw))


def _induction(i, **kw):
    return _linear(i, _induction_coef(i["tokens"], **kw))


def _heads(i) -> np.ndarray:
    prev = _previous_coef(i["weights"])
    ind = _induction_coef(i["tokens"])
    w = i["weights"]
    return np.array(
        [
            np.argmax(np.einsum("bij,bhij->h", prev, w)),
            np.argmax(np.einsum("bij,bhij->h", ind, w)),
        ],
        dtype=np.int64,
    )


def expected(case: str, inputs: dict) -> dict:
    if case == "errors":
        return _outcomes(inputs)
    if case in RUNS["find_heads"].cases:
        return {"heads": _heads(inputs)}
    if case in RUNS["induction"].cases:
        return _induction(inputs)
    return _previous(inputs)


# ------------------------------------------------------------ known mistakes
LONGER = ("causal", "full")  # n = 2 has one query: its sum is its mean
PREVIOUS_VARIANTS = (
    Variant(
        "next-token",
        "the score reads weights[b, h, i, i + 1], the key AFTER the query "
        "(or the query and key axes are swapped, which reads the same "
        "entries); a previous-token head puts its weight on key i - 1: "
        "weights[b, h, i, i - 1] (the diagonal below the main one).",
        lambda i: _previous(i, offset=1),
    ),
    Variant(
        "current-token",
        "the score reads the main diagonal weights[b, h, i, i] (the current "
        "token); the previous token is key i - 1, one diagonal below.",
        lambda i: _previous(i, offset=0),
    ),
    Variant(
        "query-0-wraps",
        "query 0 is scored too and its key i - 1 = -1 wraps around to the "
        "last key; query 0 has no previous token: average over the queries "
        "i >= 1 only.",
        lambda i: _previous(i, queries="wrap"),
    ),
    Variant(
        "query-0-counted",
        "the sum over the queries i >= 1 is divided by n (query 0 counted "
        "with weight 0); average over the n - 1 queries that have a "
        "previous token.",
        lambda i: _previous(i, queries="zero"),
    ),
    Variant(
        "summed-over-queries",
        "the weights are summed over the queries instead of averaged: take "
        "the mean over the batch AND the queries i >= 1.",
        lambda i: _previous(i, divide="batch"),
        cases=LONGER,
    ),
    Variant(
        "summed-not-averaged",
        "the weights are summed over the batch and the queries; the score "
        "is their mean (1 for a pure previous-token head).",
        lambda i: _previous(i, divide="none"),
        cases=LONGER,
    ),
)

INDUCTION_VARIANTS = (
    Variant(
        "earlier-copy-itself",
        "the score reads the weight on the earlier copy itself, weights[b, "
        "h, i, j] (what a duplicate-token head does); an induction head "
        "attends to the token AFTER it: weights[b, h, i, j + 1].",
        lambda i: _induction(i, key=0),
    ),
    Variant(
        "first-copy-only",
        "only the FIRST earlier copy of the token counts; sum over every "
        "earlier copy j < i with tokens[b, j] == tokens[b, i].",
        lambda i: _induction(i, occurrences="first"),
    ),
    Variant(
        "last-copy-only",
        "only the most recent earlier copy counts; sum over every earlier "
        "copy j < i with tokens[b, j] == tokens[b, i].",
        lambda i: _induction(i, occurrences="last"),
    ),
    Variant(
        "copies-averaged",
        "a query's weights are averaged over its earlier copies; SUM them "
        "(the head's total weight on the tokens after the copies), then "
        "average over the queries.",
        lambda i: _induction(i, per_query="mean"),
    ),
    Variant(
        "mean-over-all-queries",
        "the mean runs over every query, including those whose token never "
        "occurred before; average only over the queries (b, i) in Q.",
        lambda i: _induction(i, over="all"),
    ),
    Variant(
        "mean-of-means",
        "each sequence is averaged over its own queries, then the sequences "
        "are averaged; with different numbers of repeated tokens that is "
        "not the mean over Q: pool the queries of the whole batch.",
        lambda i: _induction(i, over="batch"),
        cases=("repeats",),
    ),
    Variant(
        "token-matches-itself",
        "the match uses j <= i, so every token matches itself: every query "
        "lands in Q and j = i adds weights[i, i + 1]; only EARLIER copies "
        "count (j < i).",
        lambda i: _induction(i, match="self"),
    ),
    Variant(
        "later-copies-counted",
        "copies after the query count too (j != i instead of j < i); the "
        "head can only look back: j < i.",
        lambda i: _induction(i, match="any"),
    ),
    Variant(
        "transposed-maps",
        "the query and key axes are swapped (weights[b, h, j + 1, i]); "
        "weights[b, h, i, :] is the row of query i.",
        lambda i: _induction(i, transpose=True),
    ),
)


def _decoy(i, kind) -> int:
    """The head of ``kind`` in a "model" case, found by its own score."""
    coef = (
        _induction_coef(i["tokens"], key=0)
        if kind == "duplicate"
        else (_previous_coef(i["weights"], offset=0))
    )
    return int(np.argmax(np.einsum("bij,bhij->h", coef, i["weights"])))


def _swap(i, which, value):
    heads = _heads(i)
    heads[which] = value
    return {"heads": heads}


FIND_VARIANTS = (
    Variant(
        "heads-swapped",
        "the two heads are returned in the wrong order: (previous-token "
        "head, induction head).",
        lambda i: {"heads": _heads(i)[::-1].copy()},
    ),
    Variant(
        "argmin",
        "both heads are the LOWEST scoring ones; the heads are the argmax "
        "of each score over the heads.",
        lambda i: {
            "heads": np.array(
                [
                    np.argmin(_previous(i)["scores"]),
                    np.argmin(_induction(i)["scores"]),
                ]
            )
        },
    ),
    Variant(
        "current-token-head",
        "the head named previous-token is the one that attends to the "
        "CURRENT token (weights[i, i]); check previous_token_score (its "
        "hidden test names the mistake): it reads key i - 1.",
        lambda i: _swap(i, 0, _decoy(i, "self")),
    ),
    Variant(
        "duplicate-token-head",
        "the head named induction is the one that attends to the earlier "
        "copy itself (a duplicate-token head); check induction_score (its "
        "hidden test names the mistake): it reads the key after the copy, "
        "j + 1.",
        lambda i: _swap(i, 1, _decoy(i, "duplicate")),
    ),
)


def _must_raise(kind, weights, tokens) -> bool:
    if kind == 0:
        return weights.shape[-1] < 2
    return not _earlier(tokens).any()


def _outcomes(i, previous=None, induction=None) -> dict:
    """The outcome of each call; ``previous`` / ``induction`` (kind, weights,
    tokens) -> code replace the right one for that function's calls."""
    codes = []
    for kind, w, t in error_slots(i):
        rule = previous if kind == 0 else induction
        if rule is not None:
            codes.append(rule(w, t))
        else:
            codes.append(VALUE_ERROR if _must_raise(kind, w, t) else RETURNED)
    return {"outcomes": np.array(codes, dtype=np.int64)}


def _when(kind, code, condition=None):
    """A rule: calls that must raise give ``code`` (or, with ``condition``,
    the calls where condition(weights, tokens) holds)."""

    def rule(w, t):
        hit = condition(w, t) if condition else _must_raise(kind, w, t)
        if hit:
            return code
        return VALUE_ERROR if _must_raise(kind, w, t) else RETURNED

    return rule


def _always(code):
    return lambda w, t: code


def _sequence_without_repeat(w, t):
    return not _earlier(t).any(axis=(1, 2)).all()


_NO_ERROR_PREV = (
    "previous_token_score returned a result for maps with n = 1 (a mean "
    "over no queries); raise ValueError when n < 2"
)
_NO_ERROR_IND = (
    "induction_score returned a result for tokens that never repeat within "
    "a sequence (equal tokens in different sequences do not count); raise "
    "ValueError when Q is empty"
)
_OTHER = "raise ValueError, not another exception"
ERROR_VARIANTS = (
    Variant(
        "no-errors",
        f"{_NO_ERROR_PREV}; {_NO_ERROR_IND}.",
        lambda i: _outcomes(i, _always(RETURNED), _always(RETURNED)),
    ),
    Variant(
        "no-error-short-maps",
        f"{_NO_ERROR_PREV}.",
        lambda i: _outcomes(i, previous=_always(RETURNED)),
    ),
    Variant(
        "no-error-without-repeats",
        f"{_NO_ERROR_IND}.",
        lambda i: _outcomes(i, induction=_always(RETURNED)),
    ),
    Variant(
        "always-raises",
        "both functions raise ValueError for every input, also for valid "
        "ones; raise only when n < 2 (previous_token_score) or when no "
        "token occurred before (induction_score).",
        lambda i: _outcomes(i, _always(VALUE_ERROR), _always(VALUE_ERROR)),
    ),
    Variant(
        "wrong-exception",
        f"both functions fail where they should, but not with ValueError: {_OTHER}.",
        lambda i: _outcomes(i, _when(0, OTHER_ERROR), _when(1, OTHER_ERROR)),
    ),
    Variant(
        "wrong-exception-short-maps",
        f"previous_token_score fails for n = 1, but not with ValueError: {_OTHER}.",
        lambda i: _outcomes(i, previous=_when(0, OTHER_ERROR)),
    ),
    Variant(
        "wrong-exception-without-repeats",
        "induction_score fails for tokens that never repeat, but not with "
        f"ValueError: {_OTHER}.",
        lambda i: _outcomes(i, induction=_when(1, OTHER_ERROR)),
    ),
    Variant(
        "error-for-two-positions",
        "previous_token_score raises for n = 2; two positions have one query "
        "with a previous token (i = 1): only n < 2 is an error.",
        lambda i: _outcomes(
            i, previous=_when(0, VALUE_ERROR, lambda w, t: w.shape[-1] <= 2)
        ),
    ),
    Variant(
        "error-when-a-sequence-lacks-repeats",
        "induction_score raises when ONE sequence has no repeated token; Q "
        "pools the whole batch: raise only when no sequence has one.",
        lambda i: _outcomes(
            i, induction=_when(1, VALUE_ERROR, _sequence_without_repeat)
        ),
    ),
)

NOTES = {
    "causal": "batch 2, 5 heads, n = 9, causal maps",
    "full": "batch 3, 2 heads, n = 6, maps over every key (not causal)",
    "two": "batch 2, 3 heads, n = 2: one query has a previous token",
    "repeats": (
        "batch 3, 4 heads, n = 14, causal maps; a periodic sequence, one "
        "whose tokens repeat several times, one with two repeats"
    ),
    "mixed": (
        "batch 2, 3 heads, n = 8, maps over every key; the second sequence "
        "never repeats a token"
    ),
    "model": (
        "batch 4, 6 heads, n = 16: a sequence of 8 tokens repeated, heads "
        "on the previous token, after the earlier copy, on the copy itself, "
        "on the current token, on the first token, and one random"
    ),
    "small": "batch 2, 4 heads, n = 10: a short sequence repeated",
    "errors": (
        "six calls in a drawn order: previous_token_score with n = 1, n = 2 "
        "and a longer n; induction_score on one position, on sequences that "
        "never repeat a token (the same tokens in each), on a batch with one "
        "repeat in one sequence; outcome per call: 1 = ValueError raised, "
        "0 = returned a result, 2 = another exception"
    ),
}
CHECKS = {
    "previous_token": Check(
        name="previous_token",
        runner=RUNS["previous_token"],
        targets=PREVIOUS,
        compare=("scores", "grad_weights"),
        variants=PREVIOUS_VARIANTS,
        case_notes=NOTES,
        reminder="scores[h] = mean over b and the queries i >= 1 of "
        "weights[b, h, i, i - 1], in framework operations.",
    ),
    "induction": Check(
        name="induction",
        runner=RUNS["induction"],
        targets=INDUCTION,
        compare=("scores", "grad_weights"),
        variants=INDUCTION_VARIANTS,
        case_notes=NOTES,
        reminder="Q = the (b, i) whose token occurred at some j < i; scores[h] "
        "= mean over Q of sum_{j < i, tokens[b, j] == tokens[b, i]} "
        "weights[b, h, i, j + 1], in framework operations.",
    ),
    "find_heads": Check(
        name="find_heads",
        runner=RUNS["find_heads"],
        targets=FIND,
        compare=("heads",),
        variants=FIND_VARIANTS,
        case_notes=NOTES,
        reminder="(argmax of previous_token_score, argmax of induction_score) "
        "over the heads.",
    ),
    "errors": Check(
        name="errors",
        runner=RUNS["errors"],
        targets=ERRORS,
        compare=("outcomes",),
        variants=ERROR_VARIANTS,
        case_notes=NOTES,
        reminder="previous_token_score raises ValueError when n < 2; "
        "induction_score raises ValueError when no token occurred before.",
    ),
}


def _loops(case, inputs) -> dict:
    """The definitions as plain loops (independent of the coefficients)."""
    w = inputs["weights"]
    batch, heads, n, _ = w.shape
    if case in RUNS["previous_token"].cases:
        total = sum(w[b, :, i, i - 1] for b in range(batch) for i in range(1, n))
        return {"scores": total / (batch * (n - 1))}
    t = inputs["tokens"]
    total, count = np.zeros(heads), 0
    for b in range(batch):
        for i in range(n):
            copies = [j for j in range(i) if t[b, j] == t[b, i]]
            if copies:
                count += 1
                total += sum(w[b, :, i, j + 1] for j in copies)
    return {"scores": total / count}


def crosscheck(case: str, inputs: dict, exp: dict) -> None:
    """The reference agrees with the definitions written as loops, with the
    library's previous_token_score / induction_score (NumPy) and their
    autograd gradient (PyTorch float64)."""
    import torch

    import attncourse.numpy as anp
    import attncourse.torch as atorch

    if case == "errors":
        for kind, w, t in error_slots(inputs):
            raises = _must_raise(kind, w, t)
            for lib, arr in ((anp, np.asarray), (atorch, torch.tensor)):
                fn = lib.previous_token_score if kind == 0 else lib.induction_score
                args = (arr(w),) if kind == 0 else (arr(w), arr(t))
                try:
                    fn(*args)
                except ValueError:
                    assert raises, f"{lib.__name__}: a ValueError for valid input"
                    continue
                assert not raises, f"{lib.__name__}: no ValueError"
        return
    w, t = inputs["weights"], inputs.get("tokens")
    if case in RUNS["find_heads"].cases:
        prev, ind = anp.previous_token_score(w), anp.induction_score(w, t)
        assert list(exp["heads"]) == [np.argmax(prev), np.argmax(ind)]
        # the planted heads win clearly: no tie decides the answer
        for s in (prev, ind):
            top = np.sort(s)
            assert top[-1] - top[-2] > 0.2, s
        return
    loops = _loops(case, inputs)["scores"]
    np.testing.assert_allclose(exp["scores"], loops, atol=1e-12)
    wt = torch.tensor(w, requires_grad=True)
    if case in RUNS["previous_token"].cases:
        lib = anp.previous_token_score(w)
        got = atorch.previous_token_score(wt)
    else:
        lib = anp.induction_score(w, t)
        got = atorch.induction_score(wt, torch.tensor(t))
    np.testing.assert_allclose(lib, exp["scores"], atol=1e-12)
    (got * torch.tensor(inputs["upstream"])).sum().backward()
    np.testing.assert_allclose(wt.grad.numpy(), exp["grad_weights"], atol=1e-12)
