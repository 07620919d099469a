"""Kernel side of ``scoring-functions``: the student's three score functions."""

from grader.kernel.runners._common import (
    Run,
    call_and_unpack,
    lookup,
    numpy_results,
    tensors,
)

FUNCTIONS = {
    "additive": ("additive_score", ("queries", "keys", "W", "b", "v")),
    "projected_dot": ("projected_dot_score", ("queries", "keys", "W_q", "W_k")),
    "bilinear": ("bilinear_score", ("queries", "keys", "W")),
}


def targets(kind: str) -> dict:
    base, _ = FUNCTIONS[kind]
    return {f: f"{base}_{f}" for f in ("tf", "torch")}


def _runner(kind):
    base, arg_names = FUNCTIONS[kind]

    def run(
        framework: str, namespace: dict, inputs: dict, gradients: bool = False
    ) -> dict:
        name = f"{base}_{framework}"
        fn = lookup(namespace, name)
        t = tensors(framework, inputs, arg_names)
        what = f"{name}({', '.join(arg_names)})"
        out = call_and_unpack(what, fn, tuple(t[n] for n in arg_names), {}, ("scores",))
        return numpy_results(out, name)

    return run


RUNS = {kind: Run(_runner(kind), cases=(kind,)) for kind in FUNCTIONS}
