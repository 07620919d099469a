"""Kernel side of ``kv-cache``: the student's step into a pre-allocated cache.

``gqa_step_<fw>(x_new, cache_k, cache_v, t_past, params, num_heads,
num_kv_heads)`` returns ``(outputs, cache_k, cache_v)``, the caches of a fixed
capacity with the new keys/values written at slots t_past .. t_past + n_new
- 1. ``step`` / ``heads`` call it once on a given (random) cache; ``decode``
runs a whole sequence through it in chunks, feeding back the caches it
returned -- as plain tensors rebuilt from the values it reported, so nothing
but those values reaches the next step (a cache object cannot carry hidden
state) -- and then offers a chunk that does not fit, which must raise a
ValueError naming the capacity; the gradients run differentiates one step
(PyTorch: through copies of the caches, so a step that writes in place
does not write into the leaves being differentiated). Each returned shape is
checked here, against shapes computed from the inputs (no reference values):
the shape mistakes with a known cause are named.
"""

import numpy as np

from grader.kernel.adapters import to_framework
from grader.kernel.runners._common import (
    GradingError,
    Run,
    call_and_unpack,
    call_student,
    lookup,
    numpy_results,
    tensors,
    with_gradients,
)
from grader.kernel.runners.transformer_block import real_results, refuse_unreal

TARGETS = {"tf": "gqa_step_tf", "torch": "gqa_step_torch"}
WEIGHTS = ("W_q", "W_k", "W_v", "W_o")
# H * d_head (12) != d_model (8): a missing output projection is a shape
# error that can be named, not a silent pass
D_MODEL, D_HEAD = 8, 3
OUTPUTS = ("outputs", "cache_k", "cache_v")


def _what(name, t_past, heads, kv_heads, step=None) -> str:
    at = "" if step is None else f" (decoding step {step})"
    return (
        f"{name}(x_new, cache_k, cache_v, t_past={t_past}, params, "
        f"num_heads={heads}, num_kv_heads={kv_heads}){at}"
    )


def check_shapes(
    results, batch, n_new, t_past, capacity, heads, kv_heads, what
) -> None:
    """Raise a GradingError naming the mistake if a result's shape is wrong.
    Complex results are refused first, before a cache is fed back."""
    for key in OUTPUTS:
        refuse_unreal(results[key], f"{what}: {key}")
    outputs = results["outputs"]
    want = (batch, n_new, D_MODEL)
    if outputs is None or outputs.shape != want:
        got = None if outputs is None else tuple(outputs.shape)
        hint = ""
        if got == (batch, n_new, heads * D_HEAD):
            hint = (
                "\nLikely mistake (missing-output-projection): the heads are "
                "concatenated but not multiplied by W_o (num_heads * d_head "
                "-> d_model)."
            )
        raise GradingError(
            f"{what}: outputs have shape {got}, expected (batch, n_new, "
            f"d_model) = {want}.{hint}"
        )
    want = (batch, kv_heads, capacity, D_HEAD)
    for key in ("cache_k", "cache_v"):
        cache = results[key]
        got = None if cache is None else tuple(cache.shape)
        if got == want:
            continue
        hint = ""
        if got is None:
            hint = (
                "\nLikely mistake (cache-not-returned): return the caches with "
                "the new keys and values written in: (outputs, cache_k, "
                "cache_v), also when you wrote into them in place."
            )
        elif got == (batch, kv_heads, capacity + n_new, D_HEAD):
            hint = (
                "\nLikely mistake (cache-grown-by-concat): the new keys were "
                "appended after the whole cache; the cache has a fixed "
                "capacity: write them INTO slots t_past .. t_past + n_new - 1."
            )
        elif got == (batch, heads, capacity, D_HEAD) and heads != kv_heads:
            hint = (
                "\nLikely mistake (cache-holds-repeated-heads): the cache "
                "holds the K/V repeated for all num_heads query heads; keep "
                "the num_kv_heads heads in the cache (that is the memory GQA "
                "saves) and repeat them only to compute the attention."
            )
        elif got is not None and got[:2] == want[:2] and got[3:] == want[3:]:
            hint = (
                "\nLikely mistake (cache-resized): the cache's length changed; "
                "it keeps its capacity (axis 2) and only its slots t_past .. "
                "t_past + n_new - 1 change."
            )
        raise GradingError(
            f"{what}: {key} has shape {got}, expected (batch, num_kv_heads, "
            f"capacity, d_head) = {want}.{hint}"
        )


def _sizes(inputs, x_key):
    return (
        int(inputs["num_heads"]),
        int(inputs["num_kv_heads"]),
        np.asarray(inputs[x_key]).shape[0],
        np.asarray(inputs["cache_k"]).shape[2],
    )


def run_step(
    framework: str, namespace: dict, inputs: dict, gradients: bool = False
) -> dict:
    name = TARGETS[framework]
    fn = lookup(namespace, name)
    heads, kv_heads, batch, capacity = _sizes(inputs, "x_new")
    t_past = int(inputs["t_past"])
    sources = ("x_new", "cache_k", "cache_v", *WEIGHTS)
    t = tensors(framework, inputs, sources, variables=sources if gradients else ())
    params = {w: t[w] for w in WEIGHTS}
    what = _what(name, t_past, heads, kv_heads)
    n_new = inputs["x_new"].shape[1]

    def caches():
        """Fresh caches per call: a step may write into them in place (in
        PyTorch, copies of the leaves whose gradients are taken)."""
        if framework == "torch":
            return t["cache_k"].clone(), t["cache_v"].clone()
        if gradients:
            return t["cache_k"], t["cache_v"]
        return (to_framework(framework, inputs[k]) for k in ("cache_k", "cache_v"))

    def forward():
        # a fresh dict per call: what the student does to it stays in that call
        cache_k, cache_v = caches()
        args = (t["x_new"], cache_k, cache_v, t_past, dict(params), heads, kv_heads)
        out = call_and_unpack(what, fn, args, {}, OUTPUTS)
        # the shapes before any loss is taken: a named mistake, not a
        # broadcasting error in the grader's loss
        shown = numpy_results(out, name)
        check_shapes(shown, batch, n_new, t_past, capacity, heads, kv_heads, what)
        return shown if not gradients else out

    if not gradients:
        return forward()
    g = tensors(framework, inputs, ("upstream",))["upstream"]
    return with_gradients(
        framework, forward, {s: t[s] for s in sources}, {"outputs": g}, name
    )


def _overflow(framework, fn, name, x, cache_k, cache_v, t_past, params, sizes):
    """A chunk that does not fit must raise a ValueError naming the capacity."""
    heads, kv_heads, batch, capacity = sizes
    chunk = to_framework(framework, x)
    what = _what(name, t_past, heads, kv_heads) + (
        f" with {x.shape[1]} new tokens and capacity {capacity}"
    )
    args = (chunk, cache_k, cache_v, t_past, dict(params), heads, kv_heads)
    try:
        fn(*args)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # noqa: BLE001  (student code may raise anything)
        kind = type(exc).__name__
        if not isinstance(exc, ValueError):
            raise GradingError(
                f"{what} raised {kind}, not ValueError.\nLikely mistake "
                f"(capacity-not-checked): check t_past + n_new <= capacity "
                f"first and raise ValueError naming the capacity."
            ) from None
        # the message as a plain str (str.lower), whatever the student's
        # exception does in __str__
        message = str.lower(call_student(f"str() of the {kind} of {what}", str, exc))
        if "capacity" in message:
            return
        raise GradingError(
            f"{what} raised {kind}({message[:200]!r}); the message must name "
            f"the capacity (e.g. 'the chunk does not fit: capacity "
            f"{capacity}, t_past {t_past}, n_new {x.shape[1]}')."
        ) from None
    raise GradingError(
        f"{what} returned; the chunk does not fit ({t_past} + {x.shape[1]} > "
        f"{capacity}).\nLikely mistake (capacity-not-checked): check t_past + "
        f"n_new <= capacity before writing and raise ValueError naming the "
        f"capacity."
    )


def run_decode(
    framework: str, namespace: dict, inputs: dict, gradients: bool = False
) -> dict:
    """The sequence ``x`` in chunks of ``chunks`` tokens into the cache of
    ``cache_k``/``cache_v`` (noise), then a chunk of ``overflow`` tokens."""
    name = TARGETS[framework]
    fn = lookup(namespace, name)
    sizes = _sizes(inputs, "x")
    heads, kv_heads, batch, capacity = sizes
    x = np.asarray(inputs["x"])
    params = tensors(framework, inputs, WEIGHTS)
    results = {k: np.asarray(inputs[k], dtype=np.float32) for k in OUTPUTS[1:]}
    outputs, start = [], 0
    for step, n_new in enumerate(int(n) for n in inputs["chunks"]):
        what = _what(name, start, heads, kv_heads, step)
        chunk = to_framework(framework, x[:, start : start + n_new])
        # only the reported values go on: plain tensors, no student object
        cache_k = to_framework(framework, results["cache_k"])
        cache_v = to_framework(framework, results["cache_v"])
        args = (chunk, cache_k, cache_v, start, dict(params), heads, kv_heads)
        results = numpy_results(call_and_unpack(what, fn, args, {}, OUTPUTS), name)
        check_shapes(results, batch, n_new, start, capacity, heads, kv_heads, what)
        outputs.append(results["outputs"])
        start += n_new
    extra = np.repeat(x[:, -1:], int(inputs["overflow"]), axis=1)
    caches = [to_framework(framework, results[k]) for k in OUTPUTS[1:]]
    _overflow(framework, fn, name, extra, *caches, start, params, sizes)
    return {
        "outputs": np.concatenate(outputs, axis=1),
        "cache_k": results["cache_k"],
        "cache_v": results["cache_v"],
    }


checked_step = real_results(run_step, TARGETS)
RUNS = {
    "step": Run(checked_step, cases=("chunk", "prefill")),
    "heads": Run(checked_step, cases=("mha", "mqa")),
    "decode": Run(real_results(run_decode, TARGETS), cases=("decode",)),
    "gradients": Run(checked_step, cases=("chunk",), gradients=True),
}
