"""Kernel side of ``addressing``: the student's soft_lookup on the grading inputs."""

from grader.kernel.runners._common import (
    Run,
    call_and_unpack,
    lookup,
    tensors,
    with_gradients,
)

TARGETS = {"tf": "soft_lookup_tf", "torch": "soft_lookup_torch"}


def run(framework: str, namespace: dict, inputs: dict, gradients: bool = True) -> dict:
    name = TARGETS[framework]
    fn = lookup(namespace, name)
    t = tensors(
        framework,
        inputs,
        ("queries", "keys", "values", "beta"),
        variables=("queries", "beta"),
    )
    g = tensors(framework, inputs, ("upstream",))["upstream"]
    what = f"{name}(queries, keys, values, beta)"

    def forward():
        return call_and_unpack(
            what,
            fn,
            (t["queries"], t["keys"], t["values"], t["beta"]),
            {},
            ("outputs", "weights"),
        )

    sources = {"beta": t["beta"], "queries": t["queries"]}
    return with_gradients(framework, forward, sources, {"outputs": g}, name)


RUNS = {"soft_lookup": Run(run, cases=("main",), gradients=True)}
