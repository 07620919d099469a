"""Kernel side of ``sparse-linear-attention``: windowed and chunked attention.

``window_attention_<fw>(queries, keys, values, window)`` and
``chunked_linear_attention_<fw>(queries, keys, values, chunk)`` return the
outputs ``(batch, n, d_v)``; the window and the chunk go in as Python ints.

The two memory cases (``seed`` in the inputs) draw their queries, keys and
values here from the seed (``long_inputs``; the grader draws the same arrays)
and run the call under the address-space cap of flash-attention's runner
(what the kernel maps plus ``HEADROOM``, never above the limit in force):

* window: ``WINDOW_LENGTH`` positions, window ``WINDOW``; one (n, n) float32
  table is 8.9 GiB (a bool mask 2.2 GiB), the chapter's band of keys copied
  (n, window, d) -- TensorFlow's tf.signal.frame copies -- 2.2 GiB, a blocked
  solution needs a few MiB;
* linear: ``LINEAR_LENGTH`` positions, d = d_v = ``LINEAR_DIM``, chunks of
  ``CHUNK``; one (n, n) table is 20 GiB and the cumulative states (n, d, d_v)
  of the cumsum form 4.5 GiB, a chunked solution needs a few MiB beyond its
  inputs.

Every row counts: the runner returns ``MIXTURES`` signed sums of all rows
(``mixed``), never selected rows. A window function that raises on an empty
key axis (``keys[:, start - window:stop]`` at start 0 is ``keys[:, -window:
window]``) is named ``negative-slice-start``.
"""

import re

import numpy as np

from grader.kernel.adapters import to_framework
from grader.kernel.errors import GradingError, student_error
from grader.kernel.runners._common import (
    Run,
    lookup,
    numpy_results,
    unpack,
)
from grader.kernel.runners.flash_attention import (
    HEADROOM,
    GiB,
    call_capped,
    out_of_memory,
)

WINDOW_TARGETS = {"tf": "window_attention_tf", "torch": "window_attention_torch"}
LINEAR_TARGETS = {
    "tf": "chunked_linear_attention_tf",
    "torch": "chunked_linear_attention_torch",
}
SOURCES = ("queries", "keys", "values")
# the memory cases (lengths that the window / the chunk do not divide)
WINDOW_LENGTH, WINDOW_DIM, WINDOW = 49_000, 32, 384
LINEAR_LENGTH, LINEAR_DIM, CHUNK = 73_700, 128, 256
MIXTURES = 16  # signed sums of all rows a memory case returns
QUERY_SCALE = 2.0  # sharper softmax weights in the window case


def long_inputs(seed, length, head_dim, query_scale=1.0) -> dict:
    """A memory case's float64 queries, keys, values (1, length, head_dim),
    drawn from ``seed`` -- here and in the grader, with the same NumPy."""
    r = np.random.default_rng(int(seed))
    shape = (1, int(length), int(head_dim))
    return {
        "queries": float(query_scale) * r.standard_normal(shape),
        "keys": r.standard_normal(shape),
        "values": r.standard_normal(shape),
    }


def case_inputs(inputs) -> dict:
    """queries, keys, values of a case (a memory case's drawn from its seed)."""
    if "seed" in inputs:
        return long_inputs(
            inputs["seed"], inputs["length"], inputs["head_dim"], inputs["query_scale"]
        )
    return {k: np.asarray(inputs[k]) for k in SOURCES}


def mixtures(seed, n: int) -> np.ndarray:
    """(MIXTURES, n): random signs / sqrt(n), drawn from the case's seed."""
    r = np.random.default_rng([int(seed), 1])
    return r.choice([-1.0, 1.0], size=(MIXTURES, int(n))) / np.sqrt(int(n))


def mixed(outputs, seed) -> dict:
    """Every row of a memory case in a few numbers: MIXTURES signed sums of
    all rows' outputs (each sum needs every row; knowing the signs does not
    help)."""
    outputs = np.asarray(outputs)
    mix = mixtures(seed, outputs.shape[1])
    return {"outputs": (mix @ np.asarray(outputs[0], np.float64))[None]}


def _what(name, setting, value) -> str:
    return f"{name}(queries, keys, values, {setting}={value})"


def check_shape(outputs, want, what) -> None:
    got = None if outputs is None else tuple(np.shape(outputs))
    if got == want:
        return
    hint = ""
    if got is not None and len(got) == 3 and got[:2] == want[:2][::-1]:
        hint = (
            "\nLikely mistake (outputs-transposed): the outputs must be "
            "(batch, n, d_v), one row per query."
        )
    elif got is not None and len(got) == 3 and got[1] < want[1]:
        hint = (
            "\nLikely mistake (rows-dropped): fewer rows than queries; the last "
            "block (or chunk) is shorter when the window (chunk) does not "
            "divide n: loop with range(0, n, size) and slice [start:start + size]."
        )
    raise GradingError(
        f"{what}: outputs have shape {got}, expected (batch, n, d_v) = {want}.{hint}"
    )


# a shape error naming an empty axis: TensorFlow's "then [2,5,0]" (a shape of
# 2+ axes, not "indices[0,0]"), PyTorch's "The size of tensor b (0)"
EMPTY_AXIS = re.compile(
    r"(?<!\w)\[(?=[\d,]*,)(?:\d+,)*0(?:,\d+)*\]|size of tensor [ab] \(0\)"
)
NEGATIVE_SLICE = (
    "\nLikely mistake (negative-slice-start): a tensor with an empty axis -- "
    "usually the first block's keys: at start = 0, keys[:, start - window:stop] "
    "is keys[:, -window:window] (a negative start counts from the end), empty "
    "once n > 2 window; slice from first = max(0, start - window) and build "
    "the key positions from the same first."
)


def window_error(what, exc) -> GradingError:
    """The student's exception; an empty axis in a window call is named (the
    generic shape advice, transposed keys or a padding mask, is dropped)."""
    error = student_error(what, exc)
    text = str(error)
    if not EMPTY_AXIS.search(str(exc)[:4000]):
        return error
    head, sep, frames = text.partition("\nWhere (your code last):")
    head = re.sub(r"\nWhat this usually means: [^\n]*", "", head)
    return GradingError(head + NEGATIVE_SLICE + sep + frames)


def _student_call(fn, args, setting, what):
    try:
        return fn(*args)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # noqa: BLE001  (student code may raise anything)
        if setting == "window":
            raise window_error(what, exc) from None
        raise student_error(what, exc) from None


def _call(framework, fn, arrays, setting, value, what) -> dict:
    t = [to_framework(framework, arrays[k]) for k in SOURCES]
    result = _student_call(fn, (*t, int(value)), setting, what)
    out = unpack(result, ("outputs",), what)
    results = numpy_results(out, what)
    batch, n = arrays["queries"].shape[:2]
    check_shape(results["outputs"], (batch, n, arrays["values"].shape[-1]), what)
    return results


MATERIALISED = {
    "window": (
        "\nLikely mistake (materialised-scores): something the size of all "
        "queries at once is built: an (n, n) table (scores, weights or a mask) "
        "or an (n, window, d) band of copied keys (the chapter's band: "
        "TensorFlow's tf.signal.frame copies); loop over query blocks of "
        "`window` tokens and score each block against its own keys and the "
        "previous block's only: at most (window, 2 window) numbers at a time."
    ),
    "chunk": (
        "\nLikely mistake (materialised-states): an (n, n) table or the "
        "cumulative states of every position (the cumsum form: n x d x d_v "
        "numbers) are built; keep ONE running state S (d, d_v) and normaliser "
        "z (d,), add each chunk to them after using them, and compute only a "
        "(chunk, chunk) table inside each chunk."
    ),
}


def _run(targets, setting):
    def run(framework: str, namespace: dict, inputs: dict, gradients=False):
        name = targets[framework]
        fn = lookup(namespace, name)
        value = int(inputs[setting])
        what = _what(name, setting, value)
        if "seed" not in inputs:
            return _call(framework, fn, case_inputs(inputs), setting, value, what)
        return run_long(framework, fn, inputs, setting, value, what)

    return run


def run_long(framework, fn, inputs, setting, value, what) -> dict:
    """A memory case: the call under the address-space cap, every row mixed.
    The float64 draws are freed before the call: only the float32 tensors
    stay mapped (a sandbox's own limit leaves them room)."""
    arrays = case_inputs(inputs)
    t = [to_framework(framework, arrays.pop(k)) for k in SOURCES]
    n, d = int(inputs["length"]), int(inputs["head_dim"])
    result, failure, allowed = call_capped(lambda: fn(*t, int(value)))
    if failure is not None and not out_of_memory(failure):
        if setting == "window":
            raise window_error(what, failure) from None
        raise student_error(what, failure) from None
    if failure is not None:
        sizes = f"one ({n}, {n}) float32 table alone is {n * n * 4 / GiB:.1f} GiB"
        if setting == "window":
            sizes += (
                f", a band of copied keys ({n}, {value}, {d}) "
                f"{n * value * d * 4 / GiB:.1f} GiB"
            )
        if setting == "chunk":
            sizes += (
                f", the cumulative states ({n}, {d}, {d}) {n * d * d * 4 / GiB:.1f} GiB"
            )
        raise GradingError(
            f"{what} ran out of memory on a sequence of {n} positions: the call "
            f"may map about {allowed / GiB:.1f} GiB more than the kernel holds, "
            f"and {sizes}." + MATERIALISED[setting]
        )
    out = numpy_results(unpack(result, ("outputs",), what), what)
    check_shape(out["outputs"], (1, n, d), what)
    return mixed(out["outputs"], inputs["seed"])


run_window = _run(WINDOW_TARGETS, "window")
run_linear = _run(LINEAR_TARGETS, "chunk")
# the notebook and the messages say 1 GiB
assert GiB == HEADROOM
RUNS = {
    "window": Run(
        run_window, cases=("uneven", "window_one", "window_n", "wide", "exact")
    ),
    "window_memory": Run(run_window, cases=("window_long",)),
    "linear": Run(
        run_linear, cases=("chunks", "chunks_even", "chunk_one", "one_chunk")
    ),
    "linear_memory": Run(run_linear, cases=("linear_long",)),
}
