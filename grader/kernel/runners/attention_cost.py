"""Kernel side of ``attention-cost``: the student's table sizes, memory
budget and budgeted attention.

* ``table_mib_<fw>(queries, keys, backward=False)`` -> MiB of the (n_q, n_k)
  tables the direct method holds (2 forward, 4 forward + backward, every
  leading axis counted, the inputs' itemsize). A case is a list of calls
  (shapes, dtype, flag) whose answers come back as one float array;
* ``budget_chunk_<fw>(queries, keys, budget_mib)`` -> the query rows per
  chunk whose 2 forward tables fit the budget, at most n_q; a ValueError
  when not even one row fits. The answers come back as one int array,
  ``RAISED`` where the call raised that ValueError. Its type is graded, not
  its wording (any other exception there is the mistake ``wrong-exception``);
* ``budgeted_attention_<fw>(queries, keys, values, budget_mib, mask=None)``
  -> the outputs (..., n_q, d_v) in the inputs' dtype; the runner returns
  them as float64 with their itemsize. A mask is at least 2-D (its query
  axis n_q or 1): the runner passes no other.

The *memory* case (``seed`` in the inputs) draws its queries, keys, values
and key mask here from the seed (``long_inputs``; the grader draws the same)
and runs the call under ``flash_attention.address_space_cap``: one (n, n)
float32 table of the direct method is far beyond the cap and beyond the
sandbox's whole address space, chunks within the budget are a few MiB.
Every row counts: the runner returns ``MIXTURES`` signed sums of all rows
(``mixed``), never selected rows.
"""

import math

import numpy as np

from grader.kernel.errors import GradingError, call_student, student_error
from grader.kernel.runners._common import Run, lookup
from grader.kernel.runners.flash_attention import (
    GiB,
    call_capped,
    mixtures,
    out_of_memory,
)

TABLE = {"tf": "table_mib_tf", "torch": "table_mib_torch"}
CHUNK = {"tf": "budget_chunk_tf", "torch": "budget_chunk_torch"}
ATTENTION = {"tf": "budgeted_attention_tf", "torch": "budgeted_attention_torch"}
MiB = 1 << 20
RAISED = -1  # budget_chunk raised the ValueError the interface asks for
DTYPES = {2: "float16", 4: "float32", 8: "float64"}  # by itemsize
# the memory case: batch 1, HEADS head, LENGTH queries and keys; ONE (n, n)
# float32 table of the head is 4.5 GiB -- larger than the sandbox's whole
# address space (4 GiB), so no memory set aside before the call and freed in
# it holds one, 9 times what the call may map; the budget's chunk is 30 rows
# (two tables of about 4 MiB), the last chunk shorter
LENGTH, HEADS, HEAD_DIM, BUDGET_MIB = 17 * 2048, 1, 8, 8.0
HEADROOM = 512 * MiB
QUERY_SCALE = 2.0  # sharper weights: the outputs depend on a few keys


# ------------------------------------------------------------------ tensors
def _shape(row) -> tuple:
    """A stored shape: a row of ints, left-padded with -1."""
    return tuple(int(s) for s in np.asarray(row).tolist() if int(s) >= 0)


def framework_array(framework: str, x, itemsize: int):
    """A NumPy array as a tensor of the float dtype of ``itemsize`` (bool
    arrays stay bool)."""
    x = np.asarray(x)
    if framework == "tf":
        import tensorflow as tf

        if x.dtype.kind == "b":
            return tf.constant(x, dtype=tf.bool)
        return tf.constant(x, dtype=getattr(tf, DTYPES[int(itemsize)]))
    import torch

    if x.dtype.kind == "b":
        return torch.tensor(x, dtype=torch.bool)
    return torch.tensor(x, dtype=getattr(torch, DTYPES[int(itemsize)]))


def zeros(framework: str, shape: tuple, itemsize: int):
    """A tensor of zeros of ``shape`` (only the shape and dtype matter)."""
    if framework == "tf":
        import tensorflow as tf

        return tf.zeros(shape, dtype=getattr(tf, DTYPES[int(itemsize)]))
    import torch

    return torch.zeros(shape, dtype=getattr(torch, DTYPES[int(itemsize)]))


def _scalar(value, what: str, kind: str) -> float:
    """A student's returned number (Python, NumPy or a 0-d tensor) as a float."""
    if isinstance(value, bool) or value is None:
        raise GradingError(f"{what} returned {value!r}; it must return {kind}")
    try:
        if hasattr(value, "numpy"):
            value = value.numpy()
        elif hasattr(value, "detach"):
            value = value.detach().cpu().numpy()
        arr = np.asarray(value)
        if arr.size != 1 or arr.dtype.kind not in "iuf":
            raise TypeError
        number = float(arr.reshape(()))
    except Exception:  # noqa: BLE001  (anything that is not one number)
        raise GradingError(
            f"{what} returned {type(value).__name__}"
            + (f" of shape {_shape_of(value)}" if _has_shape(value) else "")
            + f"; it must return {kind}"
        ) from None
    if not math.isfinite(number):
        raise GradingError(
            f"{what} returned {number}, not a finite number; it must return "
            f"{kind}: a size or a number of rows computed from the shapes, "
            f"the itemsize and the budget is always finite"
        )
    return number


def _has_shape(value) -> bool:
    try:
        return hasattr(value, "shape")
    except Exception:  # noqa: BLE001  (a student's property may raise anything)
        return False


def _shape_of(value) -> str:
    try:
        return str(tuple(np.shape(value)))
    except Exception:  # noqa: BLE001
        return "(unreadable)"


# ------------------------------------------------------------------- tables
def _table_call(framework, fn, name, q_shape, k_shape, itemsize, backward):
    q = zeros(framework, q_shape, itemsize)
    k = zeros(framework, k_shape, itemsize)
    what = (
        f"{name}(queries {q_shape}, keys {k_shape}, {DTYPES[itemsize]}, "
        f"backward={backward})"
    )
    try:
        value = fn(q, k, backward=backward)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # noqa: BLE001  (student code may raise anything)
        raise student_error(what, exc) from None
    return _scalar(value, what, "one number (MiB, a float)")


def run_table(framework: str, namespace: dict, inputs: dict, gradients=False):
    name = TABLE[framework]
    fn = lookup(namespace, name)
    mib = [
        _table_call(framework, fn, name, _shape(qs), _shape(ks), int(item), bool(back))
        for qs, ks, item, back in zip(
            inputs["q_shapes"],
            inputs["k_shapes"],
            inputs["itemsizes"],
            inputs["backward"],
            strict=True,
        )
    ]
    return {"mib": np.array(mib, dtype=np.float64)}


# ------------------------------------------------------------------- chunks
def one_row_bytes(q_shape, k_shape, itemsize) -> int:
    """Bytes of one query row of the two forward tables (the message's size)."""
    return 2 * math.prod(q_shape[:-2]) * k_shape[-2] * itemsize


def budget_arg(budget) -> str:
    """A budget as the learner would pass it, exactly and without a long
    decimal (``556927 / 2**20``): the feedback's leak scan reads numbers of
    four or more decimals as possible reference values."""
    size = budget * MiB
    if float(budget).is_integer() or not float(size).is_integer():
        return f"{budget:g}"
    return f"{int(size)} / 2**20"


def budget_text(budget) -> str:
    """A budget in prose: ``2 MiB``, or ``556927 bytes (0.531 MiB)``."""
    size = budget * MiB
    if float(budget).is_integer() or not float(size).is_integer():
        return f"{budget:g} MiB"
    return f"{int(size)} bytes ({budget:.3f} MiB)"


def _rows(value, what) -> int:
    number = _scalar(value, what, "an int (a number of query rows)")
    if abs(number) > 2**53:
        raise GradingError(
            f"{what} returned {number:g}, which is no number of query rows: "
            f"a chunk has between 1 and n_q rows -- {_ROWS_HINT}"
        )
    if number != math.floor(number):
        raise GradingError(
            f"{what} returned {number:g}, not a whole number of rows.\nLikely "
            f"mistake (chunk-not-an-integer): a chunk is a whole number of "
            f"query rows: round DOWN (math.floor, or // on whole bytes), so "
            f"that the chunk's tables stay within the budget."
        )
    return int(number)


_ROWS_HINT = "floor(budget_mib * 2**20 / bytes of one row), then min(rows, n_q)"


def _chunk_call(framework, fn, name, q_shape, k_shape, itemsize, budget):
    q = zeros(framework, q_shape, itemsize)
    k = zeros(framework, k_shape, itemsize)
    what = (
        f"{name}(queries {q_shape}, keys {k_shape}, {DTYPES[itemsize]}, "
        f"{budget_arg(budget)})"
    )
    row = one_row_bytes(q_shape, k_shape, itemsize)
    try:
        value = fn(q, k, budget)
    except (KeyboardInterrupt, SystemExit):
        raise
    except ValueError:
        # the idea is graded, not the prose: which exception, not its wording
        return RAISED
    except BaseException as exc:  # noqa: BLE001  (student code may raise anything)
        err = student_error(what, exc)
        if row > budget * MiB and not isinstance(exc, NotImplementedError):
            err = GradingError(
                f"{err}\nLikely mistake (wrong-exception): here not even one "
                f"row fits the budget, and the interface asks for ValueError "
                f"(not {type(exc).__name__}): a caller catches the bad "
                f"argument by its type. Name the budget and the size of one "
                f"row in the message, so that they know what to change."
            )
        raise err from None
    return _rows(value, what)


def run_chunk(framework: str, namespace: dict, inputs: dict, gradients=False):
    name = CHUNK[framework]
    fn = lookup(namespace, name)
    rows = [
        _chunk_call(
            framework, fn, name, _shape(qs), _shape(ks), int(item), float(budget)
        )
        for qs, ks, item, budget in zip(
            inputs["q_shapes"],
            inputs["k_shapes"],
            inputs["itemsizes"],
            inputs["budgets"],
            strict=True,
        )
    ]
    return {"rows": np.array(rows, dtype=np.int64)}


# --------------------------------------------------------------- attention
def long_inputs(seed, length, heads, head_dim) -> dict:
    """The memory case's float64 queries, keys, values (1, heads, length,
    head_dim) and its key mask (1, 1, 1, length): the last keys hidden --
    drawn from ``seed`` here and in the grader, with the same NumPy."""
    r = np.random.default_rng(int(seed))
    shape = (1, int(heads), int(length), int(head_dim))
    arrays = {
        "queries": QUERY_SCALE * r.standard_normal(shape),
        "keys": r.standard_normal(shape),
        "values": r.standard_normal(shape),
    }
    valid = int(length) - int(r.integers(1, int(length) // 8))
    arrays["mask"] = (np.arange(int(length)) < valid).reshape(1, 1, 1, -1)
    return arrays


def mixed(outputs, seed) -> dict:
    """Every row in a few numbers: MIXTURES signed sums over the query axis
    of the outputs (..., n, d_v) -> (..., MIXTURES, d_v)."""
    out = np.asarray(outputs, np.float64)
    mix = mixtures(seed, out.shape[-2])
    return {"outputs": np.einsum("mn,...nv->...mv", mix, out)}


def check_outputs(got, lead, n_q, d_v, what) -> None:
    """GradingError naming the mistake if the outputs' shape ``got`` is
    wrong."""
    want = (*lead, n_q, d_v)
    if got == want:
        return
    hint = ""
    if got[:-2] == want[:-2] and got[-1:] == want[-1:] and len(got) == len(want):
        rows = got[-2]
        if rows < n_q:
            hint = (
                f"\nLikely mistake (last-chunk-dropped): {n_q - rows} of the "
                f"{n_q} query rows are missing: loop over the chunks with "
                f"range(0, n_q, chunk) and slice queries[..., start:start + "
                f"chunk, :] -- the last chunk may be shorter."
            )
        else:
            hint = (
                f"\nLikely mistake (rows-repeated): {rows - n_q} rows too many: "
                f"chunks must not overlap -- each starts where the last one "
                f"stopped (range(0, n_q, chunk), stop = min(start + chunk, n_q))."
            )
    raise GradingError(
        f"{what}: outputs have shape {got}, expected (..., n_q, d_v) = {want}.{hint}"
    )


def _itemsize(out) -> int:
    if hasattr(out, "element_size"):  # torch
        return int(out.element_size())
    dtype = getattr(out, "dtype", None)
    size = getattr(dtype, "size", None)  # tf.DType
    if isinstance(size, int):
        return size
    return int(np.asarray(out).dtype.itemsize)


def _attention_results(out, lead, n_q, d_v, what) -> tuple:
    from grader.kernel.adapters import to_numpy

    # the returned object is the student's: its shape, dtype and values are
    # read like a call of their code (a property that raises is theirs)
    reading = f"reading the {type(out).__name__} that {what} returned"
    if out is None or not call_student(reading, hasattr, out, "shape"):
        raise GradingError(
            f"{what} returned {type(out).__name__}; it must return the outputs "
            f"tensor (..., n_q, d_v)"
        )
    got = call_student(reading, lambda: tuple(int(s) for s in out.shape))
    check_outputs(got, lead, n_q, d_v, what)
    outputs = call_student(reading, to_numpy, out, f"{what}: outputs")
    size = call_student(reading, _itemsize, out)
    if not 0 < size <= 64:
        raise GradingError(
            f"{what} returned a {type(out).__name__} whose elements take "
            f"{size} bytes; it must return the outputs tensor (..., n_q, d_v) "
            f"in the inputs' dtype"
        )
    return outputs, size


def _what(name, shapes, budget, mask) -> str:
    q, k, v = shapes
    m = "" if mask is None else f", mask {tuple(mask.shape)}"
    return f"{name}(queries {q}, keys {k}, values {v}, {budget_arg(budget)}{m})"


def run_attention(framework: str, namespace: dict, inputs: dict, gradients=False):
    name = ATTENTION[framework]
    fn = lookup(namespace, name)
    if "seed" in inputs:
        return run_long(framework, fn, name, inputs)
    item = int(inputs["itemsize"])
    budget = float(inputs["budget"])
    arrays = [np.asarray(inputs[k]) for k in ("queries", "keys", "values")]
    q, k, v = (framework_array(framework, a, item) for a in arrays)
    mask = inputs.get("mask")
    if mask is not None and np.ndim(mask) < 2:
        raise ValueError("attention-cost masks are at least 2-D (a query axis)")
    kwargs = {} if mask is None else {"mask": framework_array(framework, mask, item)}
    what = _what(name, [a.shape for a in arrays], budget, mask)
    try:
        out = fn(q, k, v, budget, **kwargs)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # noqa: BLE001  (student code may raise anything)
        raise student_error(what, exc) from None
    lead, n_q, d_v = arrays[0].shape[:-2], arrays[0].shape[-2], arrays[2].shape[-1]
    outputs, size = _attention_results(out, lead, n_q, d_v, what)
    return {"outputs": outputs, "itemsize": np.array(size, dtype=np.int64)}


def run_long(framework, fn, name, inputs) -> dict:
    """The memory case: a long sequence under the address-space cap."""
    n, h, d = (int(inputs[k]) for k in ("length", "heads", "head_dim"))
    budget = float(inputs["budget"])
    arrays = long_inputs(inputs["seed"], n, h, d)
    q, k, v = (
        framework_array(framework, arrays[key], 4)
        for key in ("queries", "keys", "values")
    )
    mask = framework_array(framework, arrays["mask"], 4)
    what = _what(name, [arrays["queries"].shape] * 3, budget, arrays["mask"])
    table = n * n * 4 / GiB  # one (n, n) float32 table of one head
    out, failure, allowed = call_capped(
        lambda: fn(q, k, v, budget, mask=mask), HEADROOM
    )
    if failure is not None and not out_of_memory(failure):
        raise student_error(what, failure) from None
    if failure is not None:
        raise GradingError(
            f"{what} ran out of memory: the call may map about "
            f"{allowed / MiB:.0f} MiB more than the kernel holds, the budget is "
            f"{budget_text(budget)} of tables, and one ({n}, {n}) float32 table of "
            f"one head is {table:.1f} GiB (more than the sandbox's whole "
            f"address space).\nLikely mistake "
            f"(budget-ignored): the scores and weights of all queries are "
            f"built at once (or of chunks larger than the budget allows); "
            f"compute them chunk = budget_chunk(queries, keys, budget_mib) "
            f"query rows at a time."
        )
    outputs, size = _attention_results(out, (1, h), n, d, what)
    return {**mixed(outputs, inputs["seed"]), "itemsize": np.array(size, np.int64)}


RUNS = {
    "table": Run(run_table, cases=("table", "table_long")),
    "chunk": Run(run_chunk, cases=("chunk", "chunk_edges", "chunk_errors")),
    "values": Run(
        run_attention,
        cases=("chunks", "heads_mask", "key_mask", "one_row", "one_chunk"),
    ),
    "memory": Run(run_attention, cases=("long",)),
}
