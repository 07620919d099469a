"""Kernel side of ``builtin-layers``: the student's calls of the built-in layers."""

import numpy as np

from grader.kernel.adapters import unpack
from grader.kernel.runners._common import (
    GradingError,
    Run,
    call_student,
    lookup,
    numpy_results,
    tensors,
    with_gradients,
)

TARGETS = {"tf": "builtin_mha_tf", "torch": "builtin_mha_torch"}
WEIGHTS = ("W_q", "W_k", "W_v", "W_o")
BIASES = ("b_q", "b_k", "b_v", "b_o")
INPUTS = ("queries", "keys", "values")
D_MODEL, N_Q, N_K, BATCH = 8, 3, 5, 2
AVERAGED_HINT = (
    "Likely mistake (averaged-weights): torch.nn.MultiheadAttention averages the "
    "heads' weights by default; pass average_attn_weights=False (and "
    "need_weights=True) to get one map per head, (batch, num_heads, n_q, n_k)."
)


def run(framework: str, namespace: dict, inputs: dict, gradients: bool = True) -> dict:
    name = TARGETS[framework]
    fn = lookup(namespace, name)
    heads = int(inputs["num_heads"])
    params = {w: np.array(inputs[w], dtype=np.float64) for w in WEIGHTS + BIASES}
    t = tensors(
        framework, inputs, INPUTS + ("key_mask",), variables=INPUTS if gradients else ()
    )
    mask = t["key_mask"] if bool(inputs["has_mask"]) else None
    what = f"{name}(queries, keys, values, params, num_heads={heads}, key_mask=...)"
    qkv = tuple(t[x] for x in INPUTS)

    def forward():
        out = call_student(what, fn, *qkv, dict(params), heads, mask)
        return unpack(out, ("outputs", "weights"), what)

    if gradients:
        g = tensors(framework, inputs, ("upstream",))["upstream"]
        return with_gradients(
            framework, forward, {x: t[x] for x in INPUTS}, {"outputs": g}, name
        )
    results = numpy_results(forward(), name)
    w = results["weights"]
    if framework == "torch" and w.shape == (BATCH, N_Q, N_K):
        raise GradingError(
            f"{name}: weights have shape {w.shape}, expected (batch, num_heads, "
            f"n_q, n_k) = {(BATCH, heads, N_Q, N_K)}.\n{AVERAGED_HINT}"
        )
    return results


RUNS = {
    "forward": Run(run, cases=("two_heads", "four_heads")),
    "masks": Run(run, cases=("padded", "padded_four_heads")),
    "gradients": Run(run, cases=("two_heads",), gradients=True),
}
