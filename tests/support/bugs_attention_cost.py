"""Catalogued mistakes of ``attention-cost`` (table sizes, budgets, chunks).

ROWS are ``support.grading.B``'s arguments: (assignment, student, part,
edits, lost, tag[, says]). Each edits the reference solution of one part.
budgeted_attention calls the part's budget_chunk, but the chunk size never
changes the outputs: a budget mistake loses the chunk check (and the
visible test) only, unless it makes budgeted_attention fail. Students bug1
and bug2 also run through the real nbgrader CLI on fresh inputs
(test_exercises_grading): their losses hold on every draw. Reported
mistakes (grader/assignments/attention_cost.py cites them): MiB printed as
MB, the heads left out of a size, forward + backward memory summed wrong,
the softmax over the wrong axis, an empty row given uniform weights.
"""

A = "attention-cost"


def part(fw, *checks):
    return tuple(f"{fw}-{c}" for c in checks)


ROWS_TF = "    rows = int(budget_mib * 2**20) // row_bytes  # whole bytes, rounded down"
ROWS_TORCH = ROWS_TF
RAISE = "        raise ValueError(\n"
TF_MULTIPLY = (
    "        if rows_mask is not None:  # a fully masked row: zeros, not uniform\n"
    "            weights = weights * tf.cast(rows_mask, weights.dtype)\n"
)
TORCH_MULTIPLY = (
    "        if rows_mask is not None:  # a fully masked row: zeros, not uniform\n"
    "            weights = weights * rows_mask\n"
)
TORCH_FILL = (
    "        if rows_mask is not None:\n"
    "            fill = torch.finfo(scores.dtype).min\n"
    "            scores = scores.masked_fill(~rows_mask, fill)\n"
)
TABLE = ("visible", "hidden-table")
CHUNK = ("visible", "hidden-chunk")
VALUES = ("visible", "hidden-values", "hidden-memory")

ROWS = [
    # ------------------------------------------------------------ table_mib
    # MB for MiB
    (
        A,
        "bug1",
        "tf",
        [("queries.dtype.size / 2**20", "queries.dtype.size / 1e6")],
        part("tf", *TABLE),
        "mb-not-mib",
    ),
    # the chunk rounded up: one row over the budget
    (
        A,
        "bug1",
        "torch",
        [(ROWS_TORCH, "    rows = math.ceil(budget_mib * 2**20 / row_bytes)")],
        part("torch", *CHUNK),
        "chunk-rounded-up",
    ),
    # the batch counted, not the heads
    (
        A,
        "bug2",
        "tf",
        [
            (
                "    lead = math.prod(queries.shape[:-2])  # batch (and heads)",
                "    lead = queries.shape[0]  # batch (and heads)",
            )
        ],
        part("tf", *TABLE),
        "only-first-leading-dim",
    ),
    # float32's 4 bytes for every dtype
    (
        A,
        "bug2",
        "torch",
        [("queries.element_size() / 2**20", "4 / 2**20")],
        part("torch", *TABLE),
        "itemsize-hard-coded",
    ),
    # the scores counted, not the weights
    (
        A,
        "bug3",
        "tf",
        [("n_tables = 4 if backward else 2", "n_tables = 2 if backward else 1")],
        part("tf", *TABLE),
        "one-table",
    ),
    # backward=True ignored
    (
        A,
        "bug3",
        "torch",
        [("n_tables = 4 if backward else 2", "n_tables = 2")],
        part("torch", *TABLE),
        "backward-not-doubled",
    ),
    # 3 tables a pass
    (
        A,
        "bug4",
        "tf",
        [("n_tables = 4 if backward else 2", "n_tables = 6 if backward else 3")],
        part("tf", *TABLE),
        "three-tables",
    ),
    # (n_q, n_q) tables
    (
        A,
        "bug4",
        "torch",
        [
            (
                "n_q, n_k = queries.shape[-2], keys.shape[-2]",
                "n_q, n_k = queries.shape[-2], queries.shape[-2]",
            )
        ],
        part("torch", *TABLE),
        "square-table",
    ),
    # the heads counted, not the batch: the visible test's shapes hide it
    (
        A,
        "bug5",
        "tf",
        [
            (
                "    lead = math.prod(queries.shape[:-2])  # batch (and heads)",
                "    lead = queries.shape[-3]  # batch (and heads)",
            )
        ],
        part("tf", "hidden-table"),
        "heads-only",
    ),
    # no leading axis counted
    (
        A,
        "bug5",
        "torch",
        [
            (
                "    lead = math.prod(queries.shape[:-2])  # batch (and heads)",
                "    lead = 1  # batch (and heads)",
            )
        ],
        part("torch", *TABLE),
        "leading-dims-ignored",
    ),
    # ---------------------------------------------------------- budget_chunk
    # the budget read as MB
    (
        A,
        "bug6",
        "tf",
        [(ROWS_TF, "    rows = int(budget_mib * 1e6) // row_bytes")],
        part("tf", *CHUNK),
        "mb-not-mib",
    ),
    # one table per row
    (
        A,
        "bug6",
        "torch",
        [("row_bytes = 2 * lead", "row_bytes = lead")],
        part("torch", *CHUNK),
        "one-table-per-row",
    ),
    # 4 bytes a number: float32 budgets (the visible test's) are right
    (
        A,
        "bug7",
        "tf",
        [("* queries.dtype.size  # one query row", "* 4  # one query row")],
        part("tf", "hidden-chunk"),
        "itemsize-hard-coded",
    ),
    # the backward's 4 tables per row: the one-row budget of the values check
    # then fits no row (ValueError there)
    (
        A,
        "bug7",
        "torch",
        [("row_bytes = 2 * lead", "row_bytes = 4 * lead")],
        part("torch", *CHUNK, "hidden-values"),
        "backward-tables-per-row",
    ),
    # < for <=: a budget of exactly k rows gives k - 1
    (
        A,
        "bug8",
        "tf",
        [
            (
                ROWS_TF,
                "    rows = math.ceil(int(budget_mib * 2**20) / row_bytes) - 1",
            )
        ],
        part("tf", *CHUNK),
        "strictly-below-budget",
    ),
    # more rows than queries
    (
        A,
        "bug8",
        "torch",
        [("    return min(rows, queries.shape[-2])", "    return rows")],
        part("torch", *CHUNK),
        "chunk-not-capped",
    ),
    # no ValueError: 0 rows
    (
        A,
        "bug9",
        "tf",
        [("    if rows < 1:\n", "    if rows < 0:\n")],
        part("tf", *CHUNK),
        "no-error-when-nothing-fits",
    ),
    # an assert instead of the ValueError the interface asks for
    (
        A,
        "bug9",
        "torch",
        [(RAISE, "        assert False, (\n")],
        part("torch", *CHUNK),
        "wrong-exception",
    ),
    # a fractional number of rows: range() refuses it in budgeted_attention
    (
        A,
        "bug10",
        "tf",
        [(ROWS_TF, "    rows = budget_mib * 2**20 / row_bytes")],
        part("tf", *CHUNK, "hidden-values", "hidden-memory"),
        "chunk-not-an-integer",
    ),
    # ---------------------------------------------------- budgeted_attention
    # softmax over the chunk's queries
    (
        A,
        "bug10",
        "torch",
        [("torch.softmax(scores, dim=-1)", "torch.softmax(scores, dim=-2)")],
        part("torch", *VALUES),
        "softmax-axis",
    ),
    # no 1/sqrt(d)
    (
        A,
        "bug11",
        "tf",
        [("scores = scores * scale  # (..., rows", "scores = scores  # (..., rows")],
        part("tf", *VALUES),
        "missing-scale",
    ),
    # the mask inverted (fill and multiply)
    (
        A,
        "bug11",
        "torch",
        [
            ("scores.masked_fill(~rows_mask,", "scores.masked_fill(rows_mask,"),
            ("weights = weights * rows_mask", "weights = weights * ~rows_mask"),
        ],
        part("torch", *VALUES),
        "inverted-mask",
    ),
    # every chunk reads the mask's first rows (a key mask broadcasts: the
    # memory case is right)
    (
        A,
        "bug12",
        "tf",
        [
            (
                "mask[..., start:stop, :] if per_row",
                "mask[..., : stop - start, :] if per_row",
            )
        ],
        part("tf", "visible", "hidden-values"),
        "mask-not-chunked",
    ),
    # the mask never applied
    (
        A,
        "bug12",
        "torch",
        [(TORCH_FILL, ""), (TORCH_MULTIPLY, "")],
        part("torch", *VALUES),
        "mask-ignored",
    ),
    # hidden scores set to 0
    (
        A,
        "bug13",
        "tf",
        [
            (
                "fill = tf.constant(scores.dtype.min, scores.dtype)",
                "fill = tf.constant(0, scores.dtype)",
            ),
            (TF_MULTIPLY, ""),
        ],
        part("tf", *VALUES),
        "mask-zero-fill",
    ),
    # -inf fill, no multiply: the fully masked row is NaN (the memory case
    # has none)
    (
        A,
        "bug13",
        "torch",
        [("torch.finfo(scores.dtype).min", "-math.inf"), (TORCH_MULTIPLY, "")],
        part("torch", "visible", "hidden-values"),
        "",
        "fully masked query row",
    ),
    # the last, shorter chunk dropped (the memory case's n_q = 34,816 is 1,160
    # chunks of 30 rows and one of 16)
    (
        A,
        "bug14",
        "tf",
        [
            (
                "for start in range(0, n_q, chunk):",
                "for start in range(0, n_q - chunk + 1, chunk):",
            )
        ],
        part("tf", *VALUES),
        "last-chunk-dropped",
    ),
    # float64 returned for float32 inputs
    (
        A,
        "bug14",
        "torch",
        [
            (
                "return torch.cat(outputs, dim=-2)",
                "return torch.cat(outputs, dim=-2).double()",
            )
        ],
        part("torch", *VALUES),
        "dtype-upcast",
    ),
    # overlapping chunks
    (
        A,
        "bug15",
        "tf",
        [
            (
                "stop = min(start + chunk, n_q)",
                "stop = min(start + chunk + 1, n_q)",
            )
        ],
        part("tf", *VALUES),
        "rows-repeated",
    ),
    # the budget ignored: every query at once
    (
        A,
        "bug15",
        "torch",
        [
            (
                "chunk = budget_chunk_torch(queries, keys, budget_mib)",
                "chunk = queries.shape[-2]",
            )
        ],
        part("torch", "hidden-memory"),
        "budget-ignored",
    ),
    (
        A,
        "bug16",
        "tf",
        [
            (
                "chunk = budget_chunk_tf(queries, keys, budget_mib)",
                "chunk = queries.shape[-2]",
            )
        ],
        part("tf", "hidden-memory"),
        "budget-ignored",
    ),
    # the most negative finite fill, no multiply: the fully masked row gets
    # the mean of the values (the memory case's key mask empties no row)
    (
        A,
        "bug16",
        "torch",
        [(TORCH_MULTIPLY, "")],
        part("torch", "visible", "hidden-values"),
        "fully-masked-row-uniform",
    ),
]
