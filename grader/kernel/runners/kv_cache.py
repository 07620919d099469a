"""Kernel side of ``kv-cache``: the student's decoding step with a KV cache.

``gqa_step_<fw>(x_new, cache_k, cache_v, params, num_heads, num_kv_heads)``
returns ``(outputs, new_cache_k, new_cache_v)``. ``step`` / ``heads`` call it
once on a given (random) cache; ``decode`` runs a whole sequence through it in
chunks from an empty cache, feeding back the cache it returned -- as plain
tensors rebuilt from the values it reported, so nothing but those values
reaches the next step (a cache object cannot carry hidden state); the
gradients run differentiates one step. Each returned shape is checked here,
against shapes computed from the inputs (no reference values): the shape
mistakes with a known cause are named.
"""

import numpy as np

from grader.kernel.adapters import to_framework
from grader.kernel.runners._common import (
    GradingError,
    Run,
    call_and_unpack,
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
OUTPUTS = ("outputs", "new_cache_k", "new_cache_v")


def _what(name, heads, kv_heads, step=None) -> str:
    at = "" if step is None else f" (decoding step {step})"
    return (
        f"{name}(x_new, cache_k, cache_v, params, num_heads={heads}, "
        f"num_kv_heads={kv_heads}){at}"
    )


def check_shapes(
    results, batch, n_new, t_past, heads, kv_heads, what, past=None
) -> None:
    """Raise a GradingError naming the mistake if a result's shape is wrong.

    ``past``: the caches that went in (NumPy), to tell a cache returned
    unchanged from one holding only the new tokens when t_past == n_new.
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
    want = (batch, kv_heads, t_past + n_new, D_HEAD)
    for key in ("new_cache_k", "new_cache_v"):
        cache = results[key]
        got = None if cache is None else tuple(cache.shape)
        if got == want:
            continue
        hint = ""
        if got == (batch, heads, t_past + n_new, D_HEAD) and heads != kv_heads:
            hint = (
                "\nLikely mistake (cache-holds-repeated-heads): the cache "
                "holds the K/V repeated for all num_heads query heads; keep "
                "the num_kv_heads heads in the cache (that is the memory GQA "
                "saves) and repeat them only to compute the attention."
            )
        elif got == (batch, kv_heads, t_past, D_HEAD) and (
            past is None
            or t_past != n_new
            or np.allclose(cache, past[key == "new_cache_v"], atol=1e-6)
        ):
            hint = (
                "\nLikely mistake (cache-without-new-keys): the cache comes "
                "back as it went in; return the old cache with the new "
                "tokens' keys and values appended (the next step needs them)."
            )
        elif got == (batch, kv_heads, n_new, D_HEAD) and t_past:
            hint = (
                "\nLikely mistake (cache-holds-only-new-keys): the returned "
                "cache holds only the new tokens; append them to the old "
                "cache along the time axis (axis 2)."
            )
        raise GradingError(
            f"{what}: {key} has shape {got}, expected (batch, num_kv_heads, "
            f"t_past + n_new, d_head) = {want}.{hint}"
        )


def _sizes(inputs, x_key):
    return (
        int(inputs["num_heads"]),
        int(inputs["num_kv_heads"]),
        np.asarray(inputs[x_key]).shape[0],
    )


def run_step(
    framework: str, namespace: dict, inputs: dict, gradients: bool = False
) -> dict:
    name = TARGETS[framework]
    fn = lookup(namespace, name)
    heads, kv_heads, batch = _sizes(inputs, "x_new")
    sources = ("x_new", "cache_k", "cache_v", *WEIGHTS)
    t = tensors(framework, inputs, sources, variables=sources if gradients else ())
    params = {w: t[w] for w in WEIGHTS}
    what = _what(name, heads, kv_heads)

    n_new, t_past = inputs["x_new"].shape[1], inputs["cache_k"].shape[2]
    past = (np.asarray(inputs["cache_k"]), np.asarray(inputs["cache_v"]))

    def forward():
        # a fresh dict per call: what the student does to it stays in that call
        args = (t["x_new"], t["cache_k"], t["cache_v"], dict(params), heads, kv_heads)
        out = call_and_unpack(what, fn, args, {}, OUTPUTS)
        # the shapes before any loss is taken: a named mistake, not a
        # broadcasting error in the grader's loss
        shown = numpy_results(out, name)
        check_shapes(shown, batch, n_new, t_past, heads, kv_heads, what, past)
        return shown if not gradients else out

    if not gradients:
        return forward()
    g = tensors(framework, inputs, ("upstream",))["upstream"]
    return with_gradients(
        framework, forward, {s: t[s] for s in sources}, {"outputs": g}, name
    )


def run_decode(
    framework: str, namespace: dict, inputs: dict, gradients: bool = False
) -> dict:
    """The sequence ``x`` in chunks of ``chunks`` tokens from an empty cache."""
    name = TARGETS[framework]
    fn = lookup(namespace, name)
    heads, kv_heads, batch = _sizes(inputs, "x")
    x = np.asarray(inputs["x"])
    params = tensors(framework, inputs, WEIGHTS)
    empty = np.zeros((batch, kv_heads, 0, D_HEAD), dtype=np.float32)
    cache_k = cache_v = to_framework(framework, empty)
    outputs, start = [], 0
    results = {"new_cache_k": empty, "new_cache_v": empty}
    for step, n_new in enumerate(int(n) for n in inputs["chunks"]):
        what = _what(name, heads, kv_heads, step)
        chunk = to_framework(framework, x[:, start : start + n_new])
        args = (chunk, cache_k, cache_v, dict(params), heads, kv_heads)
        past = (results["new_cache_k"], results["new_cache_v"])
        results = numpy_results(call_and_unpack(what, fn, args, {}, OUTPUTS), name)
        check_shapes(results, batch, n_new, start, heads, kv_heads, what, past)
        outputs.append(results["outputs"])
        # only the reported values go on: plain tensors, no student object
        cache_k = to_framework(framework, results["new_cache_k"])
        cache_v = to_framework(framework, results["new_cache_v"])
        start += n_new
    return {
        "outputs": np.concatenate(outputs, axis=1),
        "new_cache_k": results["new_cache_k"],
        "new_cache_v": results["new_cache_v"],
    }


checked_step = real_results(run_step, TARGETS)
RUNS = {
    "step": Run(checked_step, cases=("chunk", "prefill")),
    "heads": Run(checked_step, cases=("mha", "mqa")),
    "decode": Run(real_results(run_decode, TARGETS), cases=("decode",)),
    "gradients": Run(checked_step, cases=("chunk",), gradients=True),
}
