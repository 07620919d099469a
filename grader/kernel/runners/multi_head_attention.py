"""Kernel side of ``multi-head-attention``: the student's multi-head layers."""

from grader.kernel.adapters import inject_weights, unpack
from grader.kernel.runners._common import (
    Run,
    call_student,
    lookup,
    numpy_results,
    tensors,
    with_gradients,
)

TARGETS = {"tf": "MultiHeadAttentionTF", "torch": "MultiHeadAttentionTorch"}
WEIGHTS = ("W_q", "W_k", "W_v", "W_o")
D_MODEL, N_Q, N_K = 8, 3, 4


def run(framework: str, namespace: dict, inputs: dict, gradients: bool = True) -> dict:
    name = TARGETS[framework]
    cls = lookup(namespace, name)
    heads = int(inputs["num_heads"])
    t = tensors(framework, inputs, ("queries", "keys", "values", "attention_mask"))
    mask = t["attention_mask"] if bool(inputs["has_mask"]) else None
    layer = call_student(
        f"{name}(num_heads={heads}, d_model={D_MODEL})", cls, heads, D_MODEL
    )
    qkv = (t["queries"], t["keys"], t["values"])
    if framework == "tf":
        call_student(f"{name}(...)(queries, keys, values) (first call)", layer, *qkv)
    variables = inject_weights(framework, layer, {w: inputs[w] for w in WEIGHTS}, name)
    what = (
        f"{name}(...)(queries, keys, values, attention_mask=..., return_weights=True)"
    )
    out = call_student(what, layer, *qkv, attention_mask=mask, return_weights=True)
    results = numpy_results(unpack(out, ("outputs", "weights"), what), name)
    if not gradients:
        return results

    def forward():
        what = f"{name}(...)(queries, keys, values)"
        return unpack(call_student(what, layer, *qkv), ("outputs",), what)

    g = tensors(framework, inputs, ("upstream",))["upstream"]
    grads = with_gradients(framework, forward, variables, {"outputs": g}, name)
    results.update({k: v for k, v in grads.items() if k.startswith("grad_")})
    return results


RUNS = {
    "forward": Run(run, cases=("two_heads", "four_heads")),
    "masks": Run(run, cases=("padded",)),
    "gradients": Run(run, cases=("two_heads",), gradients=True),
}
