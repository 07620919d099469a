"""Kernel side of ``soft-hard-attention``: the student's hard-attention sampler."""

from grader.kernel.runners._common import (
    Run,
    call_and_unpack,
    lookup,
    numpy_results,
    tensors,
    with_gradients,
)

TARGETS = {"tf": "sample_hard_attention_tf", "torch": "sample_hard_attention_torch"}


def run(framework: str, namespace: dict, inputs: dict, gradients: bool = True) -> dict:
    name = TARGETS[framework]
    fn = lookup(namespace, name)
    t = tensors(
        framework, inputs, ("scores", "values", "uniforms"), variables=("scores",)
    )
    g = tensors(framework, inputs, ("upstream",))["upstream"]
    what = f"{name}(scores, values, uniforms)"

    def forward():
        return call_and_unpack(
            what,
            fn,
            (t["scores"], t["values"], t["uniforms"]),
            {},
            ("outputs", "indices", "log_probs"),
        )

    if not gradients:
        return numpy_results(forward(), name)
    return with_gradients(
        framework, forward, {"scores": t["scores"]}, {"log_probs": g}, name
    )


RUNS = {
    "sample": Run(run, cases=("main",)),
    "log_prob": Run(run, cases=("main",), gradients=True),
}
