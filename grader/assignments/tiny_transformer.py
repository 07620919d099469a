"""Assignment ``tiny-transformer``: find the heads of a model from its maps.

The chapter shows the previous-token score in code and gives the induction
score as a formula and pseudo-code; the exercise asks for the induction score,
the duplicate-token score the chapter only motivates, and find_heads.

weights (batch, heads, n, n): the attention of each query i over the keys j
(rows sum to 1); tokens (batch, n) int. Q is the set of (b, i) whose token
occurred before (some j < i with tokens[b, j] == tokens[b, i]). Per framework
the student writes

* duplicate_token_score_*(weights, tokens) -> (heads,): the mean over Q of
  sum_{j < i, tokens[b, j] == tokens[b, i]} weights[b, h, i, j] (the weight
  on the earlier copies themselves); Q empty -> ValueError;
* induction_score_*(weights, tokens) -> (heads,): the mean over Q of
  sum_{j < i, tokens[b, j] == tokens[b, i]} weights[b, h, i, j + 1]; Q empty
  -> ValueError;
* find_heads_*(weights, tokens) -> (previous-token head, duplicate-token head,
  induction head), the argmax of each score (the previous-token score may be
  the course library's, which the chapter shows).

Both scores are linear in the maps: score_h = sum_{b,i,j} C[b, i, j]
weights[b, h, i, j]. The reference and every known mistake are written as
their coefficient array C (``_linear``), which also gives the gradient the
checks compare (d sum_h g_h score_h / d weights = g_h C): a score computed
outside the framework (NumPy, .numpy()) has none.

Checks: ``duplicate`` and ``induction`` (causal maps with sequences that
repeat once, several times, adjacently or not at all; full maps with a
sequence that never repeats), ``find_heads`` (maps of a "model" with a
previous-token head, a duplicate-token head, an induction head and decoys: a
head on the current token, one on the first token), ``errors`` (the two
ValueErrors, and none for valid input).
"""

import numpy as np

from grader import numeric
from grader.assignments._common import rng
from grader.checks import Check, Variant
from grader.kernel.runners.tiny_transformer import (
    DUPLICATE,
    ERRORS,
    FIND,
    INDUCTION,
    OTHER_ERROR,
    RETURNED,
    RUNS,
    VALUE_ERROR,
)
from grader.provenance import BUILTIN_ATTENTION, COURSE_ATTENTION, allow

NAME = "tiny-transformer"
SEED = 1707
# What the solution may not call (grader.provenance flags it for review): the
# course library (its induction score is the tiny chapter's own
# implementation), the built-in attention, and the input checks that raise
# their ValueErrors. Allowed: the previous-token score, which the chapter
# shows and find_heads may call (the notebook says so).
FORBIDDEN = (
    *COURSE_ATTENTION,
    *allow("previous_token_score"),
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


def _repeat_case(r, n=14):
    """Causal maps (3 sequences, 4 heads) with a previous-token, a
    duplicate-token and an induction head planted on drawn heads."""
    tokens = _repeat_tokens(r, n)
    weights = _maps(r, 3, 4, n)
    kinds = ("previous", "duplicate", "induction")
    for head, kind in zip(r.permutation(4)[:3], kinds, strict=True):
        _plant(r, weights, head, kind, tokens)
    return _case(weights, tokens, r)


def _mixed_case(r):
    """Full maps (not causal); the first sequence repeats one token at least
    three times (a query with two earlier copies), the second never repeats
    one."""
    first = r.integers(0, 4, size=8)
    first[np.sort(r.choice(8, size=3, replace=False))] = first[0]
    tokens = np.stack([first, _distinct(r, 8)])
    return _case(_maps(r, 2, 3, 8, causal=False), tokens, r)


def make_cases(seed: int = SEED) -> dict:
    r = rng(seed)
    return {
        # duplicate_token_score and induction_score each get their own draws
        "copies": _repeat_case(r),
        "copies_mixed": _mixed_case(r),
        "repeats": _repeat_case(r),
        "mixed": _mixed_case(r),
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
    duplicate_token_score with tokens that never repeat within a sequence but
    are shared between the sequences (raise), on one position (raise), and
    with one repeat in one sequence only (return); induction_score with
    shared tokens that never repeat (raise), one repeat in one sequence only
    (return) and one adjacent repeat (return). kinds[k]: 0 =
    duplicate_token_score, 1 = induction_score; the drawn order makes the
    outcomes depend on the inputs (a constant answer could be faked without
    computing anything)."""
    batch, heads = int(r.integers(1, 4)), int(r.integers(1, 5))

    def shared():
        n = int(r.integers(3, 7))
        row = _distinct(r, n)
        return _maps(r, 2, heads, n), np.stack([row, r.permutation(row)])

    def once():
        m = int(r.integers(4, 8))
        rows = np.stack([_distinct(r, m), _distinct(r, m)])
        k = int(r.integers(1, m))
        rows[0, k] = rows[0, int(r.integers(0, k))]
        return _maps(r, 2, heads, m), rows

    def adjacent():
        m = int(r.integers(3, 7))
        row = _distinct(r, m)
        k = int(r.integers(1, m))
        row[k] = row[k - 1]
        return _maps(r, 1, heads, m), row[None]

    single = (_maps(r, batch, heads, 1), r.integers(0, 9, size=(batch, 1)))
    slots = [
        (0, *shared()),
        (0, *single),
        (0, *once()),
        (1, *shared()),
        (1, *once()),
        (1, *adjacent()),
    ]
    case = {"kinds": np.zeros(len(slots), dtype=np.int64)}
    for slot, index in enumerate(r.permutation(len(slots))):
        kind, weights, tokens = slots[index]
        case["kinds"][slot] = kind
        case[f"weights_{slot}"] = weights
        case[f"tokens_{slot}"] = np.asarray(tokens, dtype=np.int64)
    return case


def error_slots(i):
    """(kind, weights, tokens) of each call of the errors case."""
    return [
        (int(kind), i[f"weights_{k}"], i[f"tokens_{k}"])
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


def _previous_coef(w, offset=-1):
    """The previous-token score (offset -1, key i - 1, averaged over the
    queries i >= 1) or the current-token score (offset 0, every query)."""
    batch, _, n, _ = w.shape
    coef = np.zeros((batch, n, n))
    rows = np.arange(n)
    keys = rows + offset
    keep = keys >= 0
    coef[:, rows[keep], keys[keep]] = 1.0
    return coef / (batch * int(keep.sum()))


def _copy_coef(
    tokens,
    key=0,
    occurrences="all",
    per_query="sum",
    over="Q",
    match="earlier",
    q_match=None,
    transpose=False,
):
    """The weight on the keys j + ``key`` of the earlier copies j, averaged
    over Q: key 0 is the duplicate-token score, 1 the induction score (-1,
    2: the off-by-one readings). occurrences "all" | "first" | "last";
    per_query "sum" | "mean" (over the query's copies); over "Q" (mean over
    the queries in Q), "all" (over every query), "batch" (mean within each
    sequence, then over the sequences); match "earlier" (j < i), "self" (j
    <= i: the token matches itself), "any" (j != i: later copies count too);
    q_match: the match that decides Q (default: ``match``); transpose: read
    weights[j', i]."""
    batch, n = tokens.shape
    same = tokens[:, :, None] == tokens[:, None, :]
    tri = {
        "earlier": np.tri(n, k=-1, dtype=bool),
        "self": np.tri(n, k=0, dtype=bool),
        "any": ~np.eye(n, dtype=bool),
    }
    m = same & tri[match]
    if key > 0:
        m[:, :, n - key :] = False  # no key that far after the last position
    if key < 0:
        m[:, :, :-key] = False  # no key before the first position
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
    weight = m.astype(float)
    if per_query == "mean":
        weight = weight / np.maximum(weight.sum(axis=-1, keepdims=True), 1)
    coef = np.zeros((batch, n, n))
    if key > 0:
        coef[:, :, key:] = weight[:, :, :-key]
    elif key < 0:
        coef[:, :, :key] = weight[:, :, -key:]
    else:
        coef = weight
    q = (same & tri[q_match or match]).any(axis=-1)  # the queries averaged over
    if over == "Q":
        coef = coef / q.sum()
    elif over == "all":
        coef = coef / (batch * n)
    else:
        coef = coef / (batch * q.sum(axis=1)[:, None, None])
    return np.swapaxes(coef, 1, 2) if transpose else coef


def _duplicate(i, **kw):
    return _linear(i, _copy_coef(i["tokens"], **{"key": 0, **kw}))


def _induction(i, **kw):
    return _linear(i, _copy_coef(i["tokens"], **{"key": 1, **kw}))


def _score(i, coef) -> np.ndarray:
    return np.einsum("bij,bhij->h", coef, i["weights"])


def _heads(i, previous=None, duplicate=None, induction=None) -> np.ndarray:
    """(previous, duplicate, induction) heads: the argmax of each score;
    a keyword gives another coefficient array for that score."""
    t = i["tokens"]
    coefs = (
        _previous_coef(i["weights"]) if previous is None else previous,
        _copy_coef(t, key=0) if duplicate is None else duplicate,
        _copy_coef(t, key=1) if induction is None else induction,
    )
    return np.array([np.argmax(_score(i, c)) for c in coefs], dtype=np.int64)


def expected(case: str, inputs: dict) -> dict:
    if case == "errors":
        return _outcomes(inputs)
    if case in RUNS["find_heads"].cases:
        return {"heads": _heads(inputs)}
    if case in RUNS["duplicate"].cases:
        return _duplicate(inputs)
    return _induction(inputs)


# ------------------------------------------------------------ known mistakes
# mistakes both copy scores can make: (tag, hint, _copy_coef keywords, cases)
_SHARED = (
    (
        "first-copy-only",
        "only the FIRST earlier copy of the token counts; sum over every "
        "earlier copy j < i with tokens[b, j] == tokens[b, i].",
        {"occurrences": "first"},
    ),
    (
        "last-copy-only",
        "only the most recent earlier copy counts; sum over every earlier "
        "copy j < i with tokens[b, j] == tokens[b, i].",
        {"occurrences": "last"},
    ),
    (
        "copies-averaged",
        "a query's weights are averaged over its earlier copies; SUM them "
        "(the head's total weight on those keys), then average over the "
        "queries in Q.",
        {"per_query": "mean"},
    ),
    (
        "mean-over-all-queries",
        "the mean runs over every query, including those whose token never "
        "occurred before; average only over the queries (b, i) in Q.",
        {"over": "all"},
    ),
    (
        "mean-of-means",
        "each sequence is averaged over its own queries, then the sequences "
        "are averaged; with different numbers of repeated tokens that is "
        "not the mean over Q: pool the queries of the whole batch.",
        {"over": "batch"},
    ),
    (
        "token-matches-itself",
        "the match uses j <= i, so every token is its own copy: every query "
        "lands in Q and the current token's key counts; only EARLIER copies "
        "count (j < i).",
        {"match": "self"},
    ),
    (
        "later-copies-counted",
        "copies after the query count too (j != i instead of j < i); the "
        "head can only look back: j < i.",
        {"match": "any"},
    ),
    (
        "transposed-maps",
        "the query and key axes are swapped (weights[b, h, j, i] is read "
        "for query i); weights[b, h, i, :] is the row of query i.",
        {"transpose": True},
    ),
)


def _copy_variants(score, repeats_case: str, own: tuple) -> tuple:
    """The Variants of one copy score: its own mistakes and the shared ones
    (mean-of-means only on the case whose sequences differ in |Q|)."""

    def compute(kw):
        return lambda i: score(i, **kw)

    return tuple(
        Variant(
            tag,
            hint,
            compute(kw),
            cases=(repeats_case,) if tag == "mean-of-means" else None,
        )
        for tag, hint, kw in (*own, *_SHARED)
    )


DUPLICATE_VARIANTS = _copy_variants(
    _duplicate,
    "copies",
    (
        (
            "key-after-copy",
            "the score reads the key AFTER the earlier copy, weights[b, h, i, "
            "j + 1] (that is the induction score); a duplicate-token head "
            "attends to the earlier copy itself: weights[b, h, i, j].",
            {"key": 1},
        ),
        (
            "key-before-copy",
            "the score reads the key BEFORE the earlier copy, weights[b, h, "
            "i, j - 1]; a duplicate-token head attends to the earlier copy "
            "itself: weights[b, h, i, j].",
            {"key": -1},
        ),
        (
            "current-token-counted",
            "Q is right, but the sum also adds the weight on the current "
            "token (j <= i in the sum, for every query); only the earlier "
            "copies j < i count.",
            {"match": "self", "q_match": "earlier"},
        ),
    ),
)

INDUCTION_VARIANTS = _copy_variants(
    _induction,
    "repeats",
    (
        (
            "earlier-copy-itself",
            "the score reads the weight on the earlier copy itself, weights[b, "
            "h, i, j] (what a duplicate-token head does); an induction head "
            "attends to the token AFTER it: weights[b, h, i, j + 1].",
            {"key": 0},
        ),
        (
            "key-two-after-copy",
            "the score reads weights[b, h, i, j + 2], two keys after the "
            "earlier copy; the induction key is the one right after it, "
            "j + 1.",
            {"key": 2},
        ),
    ),
)


def _find(previous=None, duplicate=None, induction=None):
    """find_heads with one score replaced: coefficient functions of i."""

    def compute(i):
        return {
            "heads": _heads(
                i,
                previous=previous(i) if previous else None,
                duplicate=duplicate(i) if duplicate else None,
                induction=induction(i) if induction else None,
            )
        }

    return compute


FIND_VARIANTS = (
    Variant(
        "heads-swapped",
        "the duplicate-token and induction heads are returned in the wrong "
        "order: (previous-token head, duplicate-token head, induction head).",
        lambda i: {"heads": _heads(i)[[0, 2, 1]]},
    ),
    Variant(
        "argmin",
        "the heads are the LOWEST scoring ones; each head is the argmax of "
        "its score over the heads.",
        lambda i: {
            "heads": np.array(
                [
                    np.argmin(_score(i, c))
                    for c in (
                        _previous_coef(i["weights"]),
                        _copy_coef(i["tokens"], key=0),
                        _copy_coef(i["tokens"], key=1),
                    )
                ],
                dtype=np.int64,
            )
        },
    ),
    Variant(
        "current-token-head",
        "the head named previous-token is the one that attends to the "
        "CURRENT token (weights[i, i]); the previous token is key i - 1 "
        "(the chapter's previous_token_score, which you may call).",
        _find(previous=lambda i: _previous_coef(i["weights"], offset=0)),
    ),
    Variant(
        "duplicate-counts-current-token",
        "the head named duplicate-token is the one on the CURRENT token: "
        "your duplicate_token_score counts the token as its own copy (j <= "
        "i); check it (its hidden test names the mistake): only earlier "
        "copies j < i count.",
        _find(duplicate=lambda i: _copy_coef(i["tokens"], key=0, match="self")),
    ),
    Variant(
        "duplicate-reads-key-after",
        "the head named duplicate-token is the induction head: the "
        "duplicate-token score reads the earlier copy itself, j, not j + 1.",
        _find(duplicate=lambda i: _copy_coef(i["tokens"], key=1)),
    ),
    Variant(
        "induction-reads-the-copy",
        "the head named induction is the duplicate-token head: the induction "
        "score reads the key after the earlier copy, j + 1, not the copy.",
        _find(induction=lambda i: _copy_coef(i["tokens"], key=0)),
    ),
)


def _must_raise(kind, weights, tokens) -> bool:
    return not _earlier(tokens).any()


def _outcomes(i, duplicate=None, induction=None) -> dict:
    """The outcome of each call; ``duplicate`` / ``induction`` (weights,
    tokens) -> code replace the rule for that function's calls."""
    codes = []
    for kind, w, t in error_slots(i):
        rule = duplicate if kind == 0 else induction
        if rule is not None:
            codes.append(rule(w, t))
        else:
            codes.append(VALUE_ERROR if _must_raise(kind, w, t) else RETURNED)
    return {"outcomes": np.array(codes, dtype=np.int64)}


def _when(code, condition=None):
    """A rule: calls that must raise give ``code`` (or, with ``condition``,
    the calls where condition(weights, tokens) holds)."""

    def rule(w, t):
        hit = condition(w, t) if condition else _must_raise(0, w, t)
        if hit:
            return code
        return VALUE_ERROR if _must_raise(0, w, t) else RETURNED

    return rule


def _always(code):
    return lambda w, t: code


def _sequence_without_repeat(w, t):
    return not _earlier(t).any(axis=(1, 2)).all()


_NO_ERROR = (
    "{} returned a result for tokens that never repeat within a sequence "
    "(equal tokens in different sequences do not count, nor does a single "
    "position); raise ValueError when Q is empty"
)
_OTHER = "raise ValueError, not another exception"
_DUP, _IND = "duplicate_token_score", "induction_score"
ERROR_VARIANTS = (
    Variant(
        "no-errors",
        f"{_NO_ERROR.format(_DUP + ' and ' + _IND)}.",
        lambda i: _outcomes(i, _always(RETURNED), _always(RETURNED)),
    ),
    Variant(
        "no-error-duplicate",
        f"{_NO_ERROR.format(_DUP)}.",
        lambda i: _outcomes(i, duplicate=_always(RETURNED)),
    ),
    Variant(
        "no-error-induction",
        f"{_NO_ERROR.format(_IND)}.",
        lambda i: _outcomes(i, induction=_always(RETURNED)),
    ),
    Variant(
        "always-raises",
        "both functions raise ValueError for every input, also for valid "
        "ones; raise only when no token occurred before in its sequence (Q "
        "empty).",
        lambda i: _outcomes(i, _always(VALUE_ERROR), _always(VALUE_ERROR)),
    ),
    Variant(
        "wrong-exception",
        f"both functions fail where they should, but not with ValueError: {_OTHER}.",
        lambda i: _outcomes(i, _when(OTHER_ERROR), _when(OTHER_ERROR)),
    ),
    Variant(
        "wrong-exception-duplicate",
        f"{_DUP} fails when Q is empty, but not with ValueError: {_OTHER}.",
        lambda i: _outcomes(i, duplicate=_when(OTHER_ERROR)),
    ),
    Variant(
        "wrong-exception-induction",
        f"{_IND} fails when Q is empty, but not with ValueError: {_OTHER}.",
        lambda i: _outcomes(i, induction=_when(OTHER_ERROR)),
    ),
    Variant(
        "error-when-a-sequence-lacks-repeats",
        "the scores raise when ONE sequence has no repeated token; Q pools "
        "the whole batch: raise only when no sequence has one.",
        lambda i: _outcomes(
            i,
            _when(VALUE_ERROR, _sequence_without_repeat),
            _when(VALUE_ERROR, _sequence_without_repeat),
        ),
    ),
)

_REPEATS = (
    "batch 3, 4 heads, n = 14, causal maps; a periodic sequence, one whose "
    "tokens repeat several times, one with an adjacent repeat and a later one"
)
_MIXED = (
    "batch 2, 3 heads, n = 8, maps over every key; the second sequence never "
    "repeats a token"
)
NOTES = {
    "copies": _REPEATS,
    "copies_mixed": _MIXED,
    "repeats": _REPEATS,
    "mixed": _MIXED,
    "model": (
        "batch 4, 6 heads, n = 16: a sequence of 8 tokens repeated, heads "
        "on the previous token, after the earlier copy, on the copy itself, "
        "on the current token, on the first token, and one random"
    ),
    "small": "batch 2, 4 heads, n = 10: a short sequence repeated",
    "errors": (
        "six calls in a drawn order: each score on sequences that never "
        "repeat a token (the same tokens in each) and on a batch with one "
        "repeat in one sequence; duplicate_token_score on one position, "
        "induction_score on one adjacent repeat; outcome per call: 1 = "
        "ValueError raised, 0 = returned a result, 2 = another exception"
    ),
}
_Q = "Q = the (b, i) whose token occurred at some j < i; "
CHECKS = {
    "duplicate": Check(
        name="duplicate",
        runner=RUNS["duplicate"],
        targets=DUPLICATE,
        compare=("scores", "grad_weights"),
        variants=DUPLICATE_VARIANTS,
        case_notes=NOTES,
        reminder=_Q + "scores[h] = mean over Q of sum_{j < i, tokens[b, j] == "
        "tokens[b, i]} weights[b, h, i, j], in framework operations.",
    ),
    "induction": Check(
        name="induction",
        runner=RUNS["induction"],
        targets=INDUCTION,
        compare=("scores", "grad_weights"),
        variants=INDUCTION_VARIANTS,
        case_notes=NOTES,
        reminder=_Q + "scores[h] = mean over Q of sum_{j < i, tokens[b, j] == "
        "tokens[b, i]} weights[b, h, i, j + 1], in framework operations.",
    ),
    "find_heads": Check(
        name="find_heads",
        runner=RUNS["find_heads"],
        targets=FIND,
        compare=("heads",),
        variants=FIND_VARIANTS,
        case_notes=NOTES,
        reminder="(argmax of the previous-token score, argmax of "
        "duplicate_token_score, argmax of induction_score) over the heads.",
    ),
    "errors": Check(
        name="errors",
        runner=RUNS["errors"],
        targets=ERRORS,
        compare=("outcomes",),
        variants=ERROR_VARIANTS,
        case_notes=NOTES,
        reminder="duplicate_token_score and induction_score raise ValueError "
        "when no token occurred before in its sequence (Q empty).",
    ),
}


def _loops(case, inputs) -> dict:
    """The definitions as plain loops (independent of the coefficients)."""
    w, t = inputs["weights"], inputs["tokens"]
    batch, heads, n, _ = w.shape
    shift = 0 if case in RUNS["duplicate"].cases else 1
    total, count = np.zeros(heads), 0
    for b in range(batch):
        for i in range(n):
            copies = [j for j in range(i) if t[b, j] == t[b, i]]
            if copies:
                count += 1
                total += sum(w[b, :, i, j + shift] for j in copies)
    return {"scores": total / count}


def _shifted(w, t):
    """Maps and tokens on which the induction score is the duplicate-token
    score of (w, t): a zero key in front (key j + 1 of the new maps is key j
    of w) and a last position with a token of its own."""
    batch, heads, n, _ = w.shape
    padded = np.zeros((batch, heads, n + 1, n + 1))
    padded[:, :, :n, 1:] = w
    fresh = np.full((batch, 1), t.max() + 1)
    return padded, np.concatenate([t, fresh], axis=1)


def crosscheck(case: str, inputs: dict, exp: dict) -> None:
    """The reference agrees with the definitions written as loops, with the
    library's induction_score (NumPy) and its autograd gradient (PyTorch
    float64) -- for the duplicate-token score through ``_shifted`` -- and
    with the library's previous_token_score in find_heads."""
    import torch

    import attncourse.numpy as anp
    import attncourse.torch as atorch

    if case == "errors":
        for _, w, t in error_slots(inputs):
            raises = _must_raise(0, w, t)
            for lib, arr in ((anp, np.asarray), (atorch, torch.tensor)):
                try:
                    lib.induction_score(arr(w), arr(t))
                except ValueError:
                    assert raises, f"{lib.__name__}: a ValueError for valid input"
                    continue
                assert not raises, f"{lib.__name__}: no ValueError"
        return
    w, t = inputs["weights"], inputs["tokens"]
    if case in RUNS["find_heads"].cases:
        scores = (
            anp.previous_token_score(w),
            anp.induction_score(*_shifted(w, t)),
            anp.induction_score(w, t),
        )
        assert list(exp["heads"]) == [np.argmax(s) for s in scores]
        # the planted heads win clearly: no tie decides the answer
        for s in scores:
            top = np.sort(s)
            assert top[-1] - top[-2] > 0.2, s
        return
    np.testing.assert_allclose(
        exp["scores"], _loops(case, inputs)["scores"], atol=1e-12
    )
    duplicate = case in RUNS["duplicate"].cases
    wl, tl = _shifted(w, t) if duplicate else (w, t)
    np.testing.assert_allclose(anp.induction_score(wl, tl), exp["scores"], atol=1e-12)
    wt = torch.tensor(w, requires_grad=True)
    if duplicate:
        padded = torch.nn.functional.pad(wt, (1, 0, 0, 1))  # key in front, row below
        got = atorch.induction_score(padded, torch.tensor(tl))
    else:
        got = atorch.induction_score(wt, torch.tensor(t))
    (got * torch.tensor(inputs["upstream"])).sum().backward()
    np.testing.assert_allclose(wt.grad.numpy(), exp["grad_weights"], atol=1e-12)
