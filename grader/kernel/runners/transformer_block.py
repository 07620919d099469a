"""Kernel side of ``transformer-block``: the student's pre-LN encoder block."""

from grader.kernel.adapters import inject_weights, unpack
from grader.kernel.runners._common import (
    Run,
    call_student,
    lookup,
    numpy_results,
    tensors,
    with_gradients,
)

TARGETS = {"tf": "TransformerBlockTF", "torch": "TransformerBlockTorch"}
# The course's flat parameter dict ("attn.W_q", "norm1.gamma", "ffn.W_1", ...)
# as attribute names: the first "." becomes "_" (self.attn_W_q, ...).
WEIGHTS = (
    "attn_W_q",
    "attn_b_q",
    "attn_W_k",
    "attn_b_k",
    "attn_W_v",
    "attn_b_v",
    "attn_W_o",
    "attn_b_o",
    "norm1_gamma",
    "norm1_beta",
    "ffn_W_1",
    "ffn_b_1",
    "ffn_W_2",
    "ffn_b_2",
    "norm2_gamma",
    "norm2_beta",
)
D_MODEL, D_FF = 8, 16


def run(framework: str, namespace: dict, inputs: dict, gradients: bool = True) -> dict:
    name = TARGETS[framework]
    cls = lookup(namespace, name)
    heads = int(inputs["num_heads"])
    t = tensors(
        framework,
        inputs,
        ("x", "padding_mask"),
        variables=("x",) if gradients else (),
    )
    mask = t["padding_mask"] if bool(inputs["has_mask"]) else None
    layer = call_student(
        f"{name}(d_model={D_MODEL}, num_heads={heads}, d_ff={D_FF})",
        cls,
        D_MODEL,
        heads,
        D_FF,
    )
    if framework == "tf":
        call_student(f"{name}(...)(x) (first call)", layer, t["x"])
    variables = inject_weights(framework, layer, {w: inputs[w] for w in WEIGHTS}, name)
    what = f"{name}(...)(x, padding_mask=..., return_weights=True)"
    out = call_student(what, layer, t["x"], padding_mask=mask, return_weights=True)
    results = numpy_results(unpack(out, ("outputs", "weights"), what), name)
    if not gradients:
        return results

    def forward():
        what = f"{name}(...)(x)"
        return unpack(call_student(what, layer, t["x"]), ("outputs",), what)

    g = tensors(framework, inputs, ("upstream",))["upstream"]
    sources = {"x": t["x"], **variables}
    grads = with_gradients(framework, forward, sources, {"outputs": g}, name)
    results.update({k: v for k, v in grads.items() if k.startswith("grad_")})
    return results


RUNS = {
    "forward": Run(run, cases=("short", "long")),
    "masks": Run(run, cases=("padded",)),
    "gradients": Run(run, cases=("short",), gradients=True),
}
