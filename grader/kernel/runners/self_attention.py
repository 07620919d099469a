"""Kernel side of ``self-attention``: the student's Keras layer / PyTorch module."""

from grader.kernel.adapters import inject_weights, unpack
from grader.kernel.runners._common import (
    Run,
    call_student,
    lookup,
    numpy_results,
    tensors,
    with_gradients,
)

TARGETS = {"tf": "SelfAttentionTF", "torch": "SelfAttentionTorch"}
WEIGHTS = ("W_q", "W_k", "W_v")
INPUT_DIM, D_K, D_V, SEQ = 6, 4, 3, 5


def _build(framework, cls, inputs):
    causal = bool(inputs["causal"])
    if framework == "tf":
        return call_student(
            f"SelfAttentionTF(d_k={D_K}, d_v={D_V}, causal=...)",
            cls,
            D_K,
            D_V,
            causal=causal,
        )
    return call_student(
        f"SelfAttentionTorch(input_dim={INPUT_DIM}, d_k={D_K}, d_v={D_V}, causal=...)",
        cls,
        INPUT_DIM,
        D_K,
        D_V,
        causal=causal,
    )


def run(framework: str, namespace: dict, inputs: dict, gradients: bool = True) -> dict:
    name = TARGETS[framework]
    cls = lookup(namespace, name)
    t = tensors(framework, inputs, ("inputs", "attention_mask"), variables=("inputs",))
    mask = t["attention_mask"] if bool(inputs["has_mask"]) else None
    layer = _build(framework, cls, inputs)
    if framework == "tf":
        call_student(
            f"{name}(...)(inputs) (the first call builds the weights)",
            layer,
            t["inputs"],
        )
    variables = inject_weights(framework, layer, {w: inputs[w] for w in WEIGHTS}, name)
    what = f"{name}(...)(inputs, attention_mask=..., return_weights=True)"
    kwargs = {"attention_mask": mask, "return_weights": True}
    results = numpy_results(
        unpack(
            call_student(what, layer, t["inputs"], **kwargs),
            ("outputs", "weights"),
            what,
        ),
        name,
    )
    if not gradients:
        return results

    def forward():
        out = call_student(f"{name}(...)(inputs)", layer, t["inputs"])
        return unpack(out, ("outputs",), f"{name}(...)(inputs)")

    g = tensors(framework, inputs, ("upstream",))["upstream"]
    grads = with_gradients(
        framework, forward, {**variables, "inputs": t["inputs"]}, {"outputs": g}, name
    )
    results.update({k: v for k, v in grads.items() if k.startswith("grad_")})
    return results


RUNS = {
    "forward": Run(run, cases=("plain",)),
    "masks": Run(run, cases=("padded", "causal", "causal_padded")),
    "gradients": Run(run, cases=("plain",), gradients=True),
}
