"""Kernel side of ``flash-attention``: the student's tiled attention.

``flash_attention_<fw>(queries, keys, values, causal, block_q, block_k)``
returns ``(outputs, logsumexp)``; in PyTorch ``FlashAttentionTorch`` (a
``torch.autograd.Function``) returns the outputs of the same forward, and its
backward gives the gradients. The arguments go in positionally (``apply``
takes no keywords), causal and the block sizes as Python bool / ints.

Three cases need more than a call:

* the *skip* case (``poison_from`` in the inputs): the runner sets the keys
  and values from ``poison_from`` on to NaN. A query block whose last row
  comes before them never needs their tiles, so a correct implementation
  never reads them and its first ``checked_rows`` rows stay finite; code that
  computes those tiles and masks them gets NaN (0 * NaN = NaN). Only those
  rows are returned. If they hold NaN, the same call on the inputs as drawn
  (no NaN) tells a skipping mistake (finite there) from any other NaN;
* the *memory* case (``seed`` in the inputs): queries, keys and values of
  ``LENGTH`` positions are drawn here from the seed (``long_inputs``; the
  grader draws the same arrays) and the call runs under an address-space cap
  (``address_space_cap``): what the kernel maps already plus ``HEADROOM``,
  never above the limit it runs under. One (n, n) float32 table is far
  beyond both the cap and the sandbox's 4 GiB; a tiled solution needs tens
  of MiB. Only the rows named in ``rows`` are returned;
* the gradients of ``FlashAttentionTorch``: the class must be an
  ``autograd.Function`` whose backward produced the outputs' ``grad_fn``, and
  it must not keep an (n_q, n_k) table for the backward.
"""

import contextlib
import os
import resource

import numpy as np

from grader.kernel.adapters import to_framework
from grader.kernel.errors import GradingError, student_error
from grader.kernel.runners._common import (
    Run,
    call_and_unpack,
    call_student,
    lookup,
    numpy_results,
    tensors,
    unpack,
    with_gradients,
)

TARGETS = {"tf": "flash_attention_tf", "torch": "flash_attention_torch"}
FUNCTION = "FlashAttentionTorch"  # the torch part's autograd.Function
OUTPUTS = ("outputs", "logsumexp")
SOURCES = ("queries", "keys", "values")
GiB = 1 << 30
# the memory case: one (LENGTH, LENGTH) float32 table is 4.5 GiB -- more than
# HEADROOM and more than the sandbox's whole address space (4 GiB by default)
LENGTH, HEAD_DIM, BLOCK = 17 * 2048, 4, 2048
HEADROOM = 1 * GiB
QUERY_SCALE = 2.0  # sharper weights: the outputs depend on a few keys


def long_inputs(seed: int, length: int, head_dim: int) -> dict:
    """The memory case's float64 queries, keys and values (1, length, head_dim),
    drawn from ``seed`` -- here and in the grader, with the same NumPy."""
    r = np.random.default_rng(int(seed))
    shape = (1, int(length), int(head_dim))
    return {
        "queries": QUERY_SCALE * r.standard_normal(shape),
        "keys": r.standard_normal(shape),
        "values": r.standard_normal(shape),
    }


def mapped_bytes() -> int | None:
    """The address space this process maps now (what RLIMIT_AS counts)."""
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE")


@contextlib.contextmanager
def address_space_cap(headroom: int = HEADROOM):
    """Lower the soft RLIMIT_AS to what is mapped now plus ``headroom`` (never
    above the soft limit in force) for the block, then restore it. Without a
    sandbox (tests, a notebook run by hand) this is what keeps a
    materialising solution from allocating tens of GB."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    used = mapped_bytes()
    if used is None and soft == resource.RLIM_INFINITY:
        raise RuntimeError("cannot measure the address space (/proc/self/statm)")
    cap = soft if used is None else used + headroom
    if soft != resource.RLIM_INFINITY:
        cap = min(cap, soft)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield cap - (used or 0)  # what the block may still map
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def out_of_memory(exc: BaseException) -> bool:
    """An allocation that failed: NumPy's MemoryError, PyTorch's allocator
    RuntimeError, TensorFlow's ResourceExhaustedError (OOM)."""
    if isinstance(exc, MemoryError):
        return True
    if type(exc).__name__ == "ResourceExhaustedError":
        return True
    text = str(exc)[:2000]
    return isinstance(exc, RuntimeError) and (
        "can't allocate memory" in text
        or "not enough memory" in text
        or "Cannot allocate memory" in text
    )


def _what(name, causal, block_q, block_k) -> str:
    return (
        f"{name}(queries, keys, values, causal={causal}, block_q={block_q}, "
        f"block_k={block_k})"
    )


def _settings(inputs):
    return bool(inputs["causal"]), int(inputs["block_q"]), int(inputs["block_k"])


def check_shapes(results: dict, batch, n_q, d_v, what) -> None:
    """GradingError naming the mistake if outputs / logsumexp have the wrong
    shape (before rows are selected or a loss is taken)."""
    outputs, lse = results["outputs"], results.get("logsumexp")
    want = (batch, n_q, d_v)
    got = None if outputs is None else tuple(outputs.shape)
    if got != want:
        hint = ""
        if got == (batch, n_q) and lse is not None and tuple(lse.shape) == want:
            hint = (
                "\nLikely mistake (results-swapped): return (outputs, "
                "logsumexp), in that order."
            )
        raise GradingError(
            f"{what}: outputs have shape {got}, expected (batch, n_q, d_v) = "
            f"{want}.{hint}"
        )
    if "logsumexp" not in results:
        return
    got = None if lse is None else tuple(lse.shape)
    if got != (batch, n_q):
        hint = ""
        if got == (batch, n_q, 1):
            hint = (
                "\nLikely mistake (logsumexp-keepdims): logsumexp has one "
                "number per query: shape (batch, n_q), without the last axis."
            )
        raise GradingError(
            f"{what}: logsumexp has shape {got}, expected (batch, n_q) = "
            f"{(batch, n_q)}.{hint}"
        )


def _call_forward(framework, fn, arrays, settings, what) -> dict:
    """The student's forward on NumPy ``arrays``: shape-checked NumPy results."""
    t = {k: to_framework(framework, arrays[k]) for k in SOURCES}
    out = call_and_unpack(what, fn, (*(t[k] for k in SOURCES), *settings), {}, OUTPUTS)
    results = numpy_results(out, TARGETS[framework])
    batch, n_q = arrays["queries"].shape[:2]
    check_shapes(results, batch, n_q, arrays["values"].shape[-1], what)
    return results


NOT_SKIPPED = (
    "\nLikely mistake (causal-tiles-not-skipped): tiles above the diagonal "
    "are computed (and masked). In this case the keys and values that no "
    "query of the first {rows} rows may see are NaN: a tile whose FIRST key "
    "comes after the LAST query of its block must be skipped, never read -- "
    "0 * NaN is NaN even where the mask gives weight 0. (Skipping them is "
    "what halves the work of causal attention.)"
)


def run_forward(framework: str, namespace: dict, inputs: dict, gradients=False):
    name = TARGETS[framework]
    fn = lookup(namespace, name)
    settings = _settings(inputs)
    what = _what(name, *settings)
    if "seed" in inputs:
        return run_long(framework, fn, inputs, settings, what)
    arrays = {k: np.asarray(inputs[k]) for k in SOURCES}
    if "poison_from" not in inputs:
        return _call_forward(framework, fn, arrays, settings, what)
    start, rows = int(inputs["poison_from"]), int(inputs["checked_rows"])
    poisoned = dict(arrays)
    for name in ("keys", "values"):
        poisoned[name] = arrays[name].copy()
        poisoned[name][:, start:] = np.nan
    results = _call_forward(framework, fn, poisoned, settings, what)
    kept = {k: v[:, :rows] for k, v in results.items()}
    if all(np.all(np.isfinite(v)) for v in kept.values()):
        return kept
    again = _call_forward(framework, fn, arrays, settings, what)
    if all(np.all(np.isfinite(v[:, :rows])) for v in again.values()):
        n_q, n_k = arrays["queries"].shape[1], arrays["keys"].shape[1]
        raise GradingError(
            f"{what}: outputs or logsumexp contain NaN in the first {rows} "
            f"rows (n_q {n_q}, n_k {n_k}) when the keys and values from "
            f"position {start} on are NaN; without those NaN the rows are "
            f"finite." + NOT_SKIPPED.format(rows=rows)
        )
    return kept  # NaN for another reason: the verdict says where


def run_long(framework, fn, inputs, settings, what) -> dict:
    """The memory case: a long causal sequence under the address-space cap."""
    arrays = long_inputs(inputs["seed"], inputs["length"], inputs["head_dim"])
    t = {k: to_framework(framework, arrays[k]) for k in SOURCES}
    args = (*(t[k] for k in SOURCES), *settings)
    n = arrays["queries"].shape[1]
    table = n * n * 4 / GiB
    failure = None
    with address_space_cap() as allowed:
        try:
            result = fn(*args)
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:  # noqa: BLE001  (student code may raise anything)
            failure = exc
    if failure is not None and not out_of_memory(failure):
        raise student_error(what, failure) from None
    if failure is not None:
        raise GradingError(
            f"{what} ran out of memory on a sequence of {n} positions: the "
            f"call may map about {allowed / GiB:.1f} GiB more than the kernel "
            f"holds, and one ({n}, {n}) float32 table alone is {table:.1f} "
            f"GiB.\nLikely mistake (materialised-weights): the scores or "
            f"weights of all queries and keys are built at once (or those of "
            f"a query block with all keys, or an (n_q, n_k) mask); keep only "
            f"one (block_q, block_k) tile of them at a time, with the running "
            f"max, sum and output per query."
        )
    out = numpy_results(unpack(result, OUTPUTS, what), TARGETS[framework])
    check_shapes(out, 1, n, arrays["values"].shape[-1], what)
    rows = np.asarray(inputs["rows"], dtype=np.int64)
    return {k: v[:, rows] for k, v in out.items()}


def _function(namespace):
    import torch

    cls = lookup(namespace, FUNCTION)
    if not (isinstance(cls, type) and issubclass(cls, torch.autograd.Function)):
        raise GradingError(
            f"{FUNCTION} must be a subclass of torch.autograd.Function (class "
            f"{FUNCTION}(torch.autograd.Function) with static forward and "
            f"backward methods), got {type(cls).__name__}"
        )
    return cls


def _saved(out, cls, batch, n_q, n_k, what) -> None:
    """The outputs come from the student's Function, which keeps no (n_q, n_k)
    table for the backward (in save_for_backward or on ctx)."""
    import torch

    node = call_student(what, lambda: out.grad_fn)
    if node is None or getattr(type(node), "_forward_cls", None) is not cls:
        raise GradingError(
            f"{what}: the outputs were not made by {FUNCTION}.forward (their "
            f"grad_fn is {type(node).__name__}); return the outputs tensor "
            f"computed in forward, so that autograd calls your backward."
        )

    def large_kept():  # what the student's forward left on its node
        kept = [*node.saved_tensors, *vars(node).values()]
        return [
            tuple(t.shape)
            for t in kept
            if isinstance(t, torch.Tensor) and t.numel() >= batch * n_q * n_k
        ]

    big = call_student(f"reading what {FUNCTION}.forward saved", large_kept)
    if big:
        raise GradingError(
            f"{what}: the forward keeps tensors of shape {big[0]} for the "
            f"backward.\nLikely mistake (saves-weights): the weights (or "
            f"scores) of all queries and keys are kept -- the memory the "
            f"tiling saves; save queries, keys, values, outputs and the "
            f"logsumexp (one number per query) and recompute each tile's "
            f"weights in backward as exp(scores - logsumexp)."
        )


def run_gradients(framework: str, namespace: dict, inputs: dict, gradients=True):
    causal, block_q, block_k = settings = _settings(inputs)
    t = tensors(framework, inputs, SOURCES, variables=SOURCES)
    batch, n_q, _ = np.shape(inputs["queries"])
    n_k, d_v = np.shape(inputs["values"])[1:]
    args = (*(t[k] for k in SOURCES), *settings)
    if framework == "tf":
        fn = lookup(namespace, TARGETS["tf"])
        what = _what(TARGETS["tf"], *settings)

        def forward():
            out = call_and_unpack(what, fn, args, {}, OUTPUTS)
            check_shapes(numpy_results(out, what), batch, n_q, d_v, what)
            return {"outputs": out["outputs"]}

    else:
        cls = _function(namespace)
        what = (
            f"{FUNCTION}.apply(queries, keys, values, {causal}, {block_q}, {block_k})"
        )

        def forward():
            out = call_and_unpack(what, cls.apply, args, {}, ("outputs",))
            shown = numpy_results(out, what)
            check_shapes(shown, batch, n_q, d_v, what)
            _saved(out["outputs"], cls, batch, n_q, n_k, what)
            return out

    g = tensors(framework, inputs, ("upstream",))["upstream"]
    return with_gradients(framework, forward, t, {"outputs": g}, what)


RUNS = {
    "forward": Run(run_forward, cases=("uneven", "one_block")),
    "causal": Run(run_forward, cases=("causal", "causal_wide", "causal_tall", "skip")),
    "gradients": Run(run_gradients, cases=("grad", "grad_causal"), gradients=True),
    "memory": Run(run_forward, cases=("long",)),
}
