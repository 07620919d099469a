"""Kernel side of ``transformer-block``: the student's post-LN encoder block.

Also the Part 3 runners' shared guard, ``real_results``: a result that is not
made of real numbers (a complex tensor) is the student's error here, named
-- the grader's decoder refuses such arrays, so unchecked it would read as a
forged result.
"""

import numpy as np

from grader.kernel.adapters import inject_weights, unpack
from grader.kernel.runners._common import (
    GradingError,
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
REAL = "biuf"  # the dtype kinds a result may have (the wire format's)


def refuse_unreal(value, what: str) -> None:
    """GradingError unless ``value`` (a NumPy result or None) is real numbers."""
    kind = None if value is None else np.asarray(value).dtype.kind
    if kind is not None and kind not in REAL:
        raise GradingError(
            f"{what} has dtype {np.asarray(value).dtype}: return real numbers "
            f"(float tensors); a computation with complex numbers must end in "
            f"real ones (torch.view_as_real, tf.math.real / tf.math.imag)."
        )


def real_results(run_fn, targets: dict):
    """``run_fn`` with every result checked by ``refuse_unreal``."""

    def checked(framework, namespace, inputs, gradients=False):
        results = run_fn(framework, namespace, inputs, gradients=gradients)
        for key, value in results.items():
            refuse_unreal(value, f"{targets[framework]}: {key}")
        return results

    return checked


def plain_weights(framework: str, found: dict, owner: str) -> dict:
    """The injected weights as what the gradient code may touch without
    calling the student's code: a tf.Variable (a Keras variable's ``.value``,
    read through ``call_student``) / a plain ``nn.Parameter`` (a subclass
    could redefine ``.grad``)."""
    plain = {}
    for name, var in found.items():
        if framework == "tf":
            import tensorflow as tf

            if not isinstance(var, tf.Variable):
                var = call_student(f"{owner}.{name}.value", getattr, var, "value")
            ok = isinstance(var, tf.Variable)
        else:
            from torch import nn

            ok = type(var) is nn.Parameter
        if not ok:
            kind = "Keras weight (add_weight)" if framework == "tf" else "nn.Parameter"
            raise GradingError(
                f"{owner}.{name} is not a plain {kind} (got "
                f"{type(var).__name__}); create it as the interface says"
            )
        plain[name] = var
    return plain


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
    # the checks read the student's layer (its attributes, parameters(),
    # trainable_weights, copy_/assign): what they raise is the student's error
    found = call_student(
        f"copying the weights into {name}",
        inject_weights,
        framework,
        layer,
        {w: inputs[w] for w in WEIGHTS},
        name,
    )
    variables = plain_weights(framework, found, name)
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


checked_run = real_results(run, TARGETS)
RUNS = {
    "forward": Run(checked_run, cases=("short", "long")),
    "masks": Run(checked_run, cases=("padded",)),
    "gradients": Run(checked_run, cases=("short",), gradients=True),
}
