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
  of MiB. Every row counts: the runner returns ``MIXTURES`` signed sums of
  all rows (``mixed``), never selected rows (rows the kernel knows, a naive
  solution could compute alone);
* the gradients of ``FlashAttentionTorch``: the class must be an
  ``autograd.Function`` whose backward produced the outputs' ``grad_fn``, and
  it must not keep an (n_q, n_k) table for the backward.
"""

import contextlib
import ctypes
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
MIXTURES = 16  # signed sums of all rows the memory case returns


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


M_MMAP_THRESHOLD = -3  # glibc mallopt parameter
MMAP_THRESHOLD = 1 << 20  # blocks from 1 MiB up: mapped alone, unmapped when freed


def steady_large_blocks() -> None:
    """Fix glibc's mmap threshold (it grows after each large free, up to 32 MiB):
    then every tile-sized block is mapped on its own and unmapped when freed,
    instead of growing the threads' malloc arenas, whose reserved address space
    counts against the cap though nothing lives there. Without this an honest
    tiled solution in a long-lived, many-threaded process could be refused a
    16 MiB tile with hundreds of MiB of room. Best effort (not glibc: no-op)."""
    try:
        ctypes.CDLL(None).mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)
    except (OSError, AttributeError, TypeError):
        pass


@contextlib.contextmanager
def address_space_cap(headroom: int = HEADROOM):
    """Lower the soft RLIMIT_AS to what is mapped now plus ``headroom`` (never
    above the soft limit in force) for the block, then restore it. Without a
    sandbox (tests, a notebook run by hand) this is what keeps a
    materialising solution from allocating tens of GB."""
    steady_large_blocks()
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
        now = resource.getrlimit(resource.RLIMIT_AS)[0]
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    if now != cap:  # the student's code changed the limit of the memory case
        raise GradingError(
            "the memory limit of this case was changed during your call "
            "(resource.setrlimit or prlimit); the case measures memory under "
            "the grader's limit: leave it as it is"
        )


def call_capped(call, headroom: int = HEADROOM):
    """``call()`` (the student's code) under ``address_space_cap``: (its
    result, None, room) or, when it raised, (None, the exception, room), room
    being what the call could still map. Interrupts pass through."""
    result = failure = None
    with address_space_cap(headroom) as allowed:
        try:
            result = call()
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:  # noqa: BLE001  (student code may raise anything)
            failure = exc
    return result, failure, allowed


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
    "0 * NaN is NaN even where the mask gives weight 0. Tile with the "
    "block_q and block_k you are given: the test's blocks decide which tiles "
    "those are. (Skipping them is what halves the work of causal attention.)"
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
    result, failure, allowed = call_capped(lambda: fn(*args))
    if failure is not None and not out_of_memory(failure):
        raise student_error(what, failure) from None
    if failure is not None:
        raise GradingError(
            f"{what} ran out of memory on a sequence of {n} positions: the "
            f"call may map about {allowed / GiB:.1f} GiB more than the kernel "
            f"holds, and one ({n}, {n}) float32 table alone is {table:.1f} "
            f"GiB.\nLikely mistake (materialised-weights): the scores or "
            f"weights of all queries and keys are built at once (or an (n_q, "
            f"n_k) mask); keep only "
            f"one (block_q, block_k) tile of them at a time, with the running "
            f"max, sum and output per query."
        )
    out = numpy_results(unpack(result, OUTPUTS, what), TARGETS[framework])
    check_shapes(out, 1, n, arrays["values"].shape[-1], what)
    return mixed(out, inputs["seed"])


def mixtures(seed: int, n: int) -> np.ndarray:
    """(MIXTURES, n): random signs / sqrt(n), drawn from the case's seed --
    here and in the grader, with the same NumPy."""
    r = np.random.default_rng([int(seed), 1])
    return r.choice([-1.0, 1.0], size=(MIXTURES, int(n))) / np.sqrt(int(n))


def mixed(results: dict, seed) -> dict:
    """Every row of the memory case in a few numbers: MIXTURES signed sums of
    all rows' outputs and logsumexp (no row can be left out or guessed: each
    sum needs every row; knowing the signs does not help)."""
    mix = mixtures(seed, results["outputs"].shape[1])
    return {
        "outputs": (mix @ np.asarray(results["outputs"][0], np.float64))[None],
        "logsumexp": (mix @ np.asarray(results["logsumexp"][0], np.float64))[None],
    }


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


WALK_OBJECTS = 20_000  # objects a look at what the forward kept visits at most
WALK_DEPTH = 8


def kept_numbers(roots) -> list[int]:
    """The numbers each tensor, array or buffer reachable from ``roots`` holds
    (a tensor: its whole storage, so a view of a table counts as the table),
    through containers, objects' attributes and functions' closures and
    defaults -- never into modules or classes' methods. Bounded
    (``WALK_OBJECTS``, ``WALK_DEPTH``); never calls student code (no
    properties, no ``__iter__``)."""
    import torch

    found, seen = [], set()
    todo = [(r, 0) for r in roots]
    while todo and len(seen) < WALK_OBJECTS:
        obj, depth = todo.pop()
        if id(obj) in seen or depth > WALK_DEPTH:
            continue
        seen.add(id(obj))
        children = ()
        if isinstance(obj, torch.Tensor):
            try:
                storage = obj.untyped_storage().nbytes() // max(obj.element_size(), 1)
            except (RuntimeError, NotImplementedError):
                storage = 0
            found.append(max(obj.numel(), storage))
            children = tuple(vars(obj).values()) if type(obj).__dict__ else ()
        elif isinstance(obj, np.ndarray):
            base = obj.base if isinstance(obj.base, np.ndarray) else None
            found.append(obj.size if base is None else max(obj.size, base.size))
        elif isinstance(obj, (bytes, bytearray, memoryview)):
            found.append(
                len(obj) // 4 if not isinstance(obj, memoryview) else obj.nbytes // 4
            )
        elif isinstance(obj, (str, int, float, complex, bool, type(None), type)):
            continue
        elif isinstance(obj, (list, tuple, set, frozenset)):
            for base in (list, tuple, set, frozenset):  # never a subclass's own
                if isinstance(obj, base):
                    children = tuple(base.__iter__(obj))
                    break
        elif isinstance(obj, dict):
            children = (*dict.keys(obj), *dict.values(obj))
        elif callable(obj) and hasattr(obj, "__code__"):
            cells = getattr(obj, "__closure__", None) or ()
            children = (
                *(c.cell_contents for c in cells if _filled(c)),
                *(getattr(obj, "__defaults__", None) or ()),
                *(getattr(obj, "__kwdefaults__", None) or {}).values(),
            )
        elif type(obj).__name__ != "module" and not _machinery(obj):
            attrs = getattr(obj, "__dict__", None)
            if isinstance(attrs, dict):
                children = tuple(dict.values(attrs))
        todo.extend((c, depth + 1) for c in children)
    return found


def _machinery(obj) -> bool:
    """The shell's and the kernel's own objects (never the student's data)."""
    module = getattr(type(obj), "__module__", "") or ""
    return module.split(".")[0] in ("IPython", "ipykernel", "traitlets", "zmq")


SHELL_NAMES = ("In", "Out", "exit", "quit", "get_ipython")


def _filled(cell) -> bool:
    try:
        cell.cell_contents  # noqa: B018
    except ValueError:
        return False
    return True


def _saves_weights(what, shape) -> GradingError:
    return GradingError(
        f"{what}: the forward keeps {shape} for the backward.\nLikely mistake "
        f"(saves-weights): the weights (or scores) of all queries and keys are "
        f"kept -- the memory the tiling saves; save queries, keys, values, "
        f"outputs and the logsumexp (one number per query) and recompute each "
        f"tile's weights in backward as exp(scores - logsumexp)."
    )


def _saved(out, cls, batch, n_q, n_k, what) -> None:
    """The outputs come from the student's Function, which keeps no (n_q, n_k)
    table for the backward (in save_for_backward, on ctx, in anything those
    hold: lists, dicts, arrays, bytes, closures)."""

    node = call_student(what, lambda: out.grad_fn)
    if node is None or getattr(type(node), "_forward_cls", None) is not cls:
        raise GradingError(
            f"{what}: the outputs were not made by {FUNCTION}.forward (their "
            f"grad_fn is {type(node).__name__}); return the outputs tensor "
            f"computed in forward, so that autograd calls your backward."
        )

    def large_kept():  # what the student's forward left on its node
        kept = kept_numbers([*node.saved_tensors, *vars(node).values()])
        return [n for n in kept if n >= batch * n_q * n_k]

    big = call_student(f"reading what {FUNCTION}.forward saved", large_kept)
    if big:
        raise _saves_weights(what, f"{big[0]} numbers (an (n_q, n_k) table)")


# the look at what the forward keeps, on a sequence where one (n, n) table
# dwarfs what the backward needs (queries, keys, values, outputs: 4 n d, and
# the logsumexp: n): the weights kept in any form -- whole, in tiles, on
# ctx, in a global or on the class -- add at least half a table
PROBE_LENGTH, PROBE_DIM, PROBE_BLOCK = 256, 4, 64


def _probe_kept(cls, namespace, what) -> None:
    """Run the student's Function once on a longer sequence and refuse more
    than half an (n, n) table of numbers kept for the backward: on its node
    (recursively) or newly reachable from the notebook's namespace."""
    import torch

    n, d = PROBE_LENGTH, PROBE_DIM
    table = n * n
    r = np.random.default_rng(n)
    leaves = [
        torch.tensor(r.standard_normal((1, n, d)), dtype=torch.float32).requires_grad_()
        for _ in SOURCES
    ]

    def roots():  # read afresh: what the class and the namespace hold now
        return [
            *vars(cls).values(),  # a class attribute (kept_numbers skips classes)
            *(
                v
                for k, v in namespace.items()
                if k not in SHELL_NAMES and type(v).__name__ != "module"
            ),
        ]

    before = call_student(
        f"{FUNCTION}: reading the namespace", lambda: kept_numbers(roots())
    )
    args = (*leaves, True, PROBE_BLOCK, PROBE_BLOCK)
    probe = f"{FUNCTION}.apply(queries, keys, values, True, 64, 64) on {n} positions"
    out = call_student(probe, cls.apply, *args)
    node = call_student(probe, lambda: getattr(out, "grad_fn", None))
    if node is None:
        return  # the graded cases say what is wrong
    on_node = call_student(
        f"reading what {FUNCTION}.forward saved",
        lambda: kept_numbers([*node.saved_tensors, *vars(node).values()]),
    )
    leaf_ids = {id(t) for t in leaves}
    saved = list(call_student(probe, lambda: node.saved_tensors))
    inputs_kept = sum(t.numel() for t in saved if id(t) in leaf_ids)
    after = call_student(
        f"{FUNCTION}: reading the namespace", lambda: kept_numbers(roots())
    )
    extra = sum(on_node) - inputs_kept + max(sum(after) - sum(before), 0)
    if extra >= table // 2:
        raise _saves_weights(
            what.split("(")[0] + f"(..., {n} positions)",
            f"{extra} numbers besides the inputs ({n} x {n} = {table} would be "
            f"the weights; the backward needs about {n * (2 * d + 1)})",
        )


class _AutogradInBackward(Exception):
    pass


@contextlib.contextmanager
def no_autograd_in_backward(what):
    """A backward that builds an autograd graph (a forward recomputed under
    ``torch.enable_grad()`` and differentiated by autograd) is not the
    hand-written backward the exercise asks for: any tensor saved for
    autograd while a node's backward runs is refused."""
    import torch

    seen = []

    def pack(tensor):
        if torch._C._current_autograd_node() is not None:
            seen.append(tuple(tensor.shape))
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        yield
    if seen:
        raise GradingError(
            f"{what}: {FUNCTION}.backward runs autograd (it records a graph "
            f"while computing the gradients: a forward recomputed under "
            f"torch.enable_grad() and differentiated with .backward() or "
            f"torch.autograd).\nLikely mistake (autograd-in-backward): write "
            f"the gradients tile by tile: P = exp(S - logsumexp), dV += P^T "
            f"dO, dP = dO V^T, dS = P * (dP - D), dQ += dS K * scale, dK += "
            f"dS^T Q * scale."
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
    if framework == "tf":
        return with_gradients(framework, forward, t, {"outputs": g}, what)
    with no_autograd_in_backward(what):
        results = with_gradients(framework, forward, t, {"outputs": g}, what)
    _probe_kept(cls, namespace, what)
    return results


RUNS = {
    "forward": Run(run_forward, cases=("uneven", "one_block")),
    "causal": Run(run_forward, cases=("causal", "causal_wide", "causal_tall", "skip")),
    "gradients": Run(run_gradients, cases=("grad", "grad_causal"), gradients=True),
    "memory": Run(run_forward, cases=("long",)),
}
