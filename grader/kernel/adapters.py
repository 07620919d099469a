"""Move reference data into TensorFlow / PyTorch and student results back out.

Float arrays go in as float32 (what the notebooks use); integer and boolean
arrays keep their kind. Results come back as NumPy arrays (float64 for floats)
or None (e.g. a gradient that never reached a weight).
"""

import numpy as np

from grader.kernel.errors import GradingError, call_student

FRAMEWORKS = ("tf", "torch")
REAL = "biuf"  # the dtype kinds a result may have (those the wire format takes)
UNREAL = {
    "c": "complex numbers",
    "O": "Python objects",
    "U": "text",
    "S": "bytes",
    "V": "raw records",
    "m": "time spans",
    "M": "dates",
}


def to_framework(framework: str, x, *, variable=False):
    """A NumPy array as a TF tensor (or tf.Variable) / torch tensor (requires_grad)."""
    x = np.asarray(x)
    if framework == "tf":
        import tensorflow as tf

        kinds = {"f": tf.float32, "b": tf.bool, "i": tf.int64, "u": tf.int64}
        dtype = kinds[x.dtype.kind]
        t = tf.constant(x, dtype=dtype)
        return tf.Variable(t) if variable else t
    if framework == "torch":
        import torch

        dtype = {
            "f": torch.float32,
            "b": torch.bool,
            "i": torch.int64,
            "u": torch.int64,
        }[x.dtype.kind]
        t = torch.tensor(x, dtype=dtype)
        return t.requires_grad_(True) if variable else t
    raise ValueError(f"unknown framework {framework!r}; use one of {FRAMEWORKS}")


def to_numpy(x, what: str = "result"):
    """A student's tensor / variable / array / number as a NumPy array (or None).

    Real numbers only (bool, int, uint, float; floats as float64): anything
    else -- complex, objects, text, records -- is the student's error (the
    wire format refuses those dtypes, and reading one there means forgery)."""
    if x is None:
        return None
    try:
        if hasattr(x, "detach"):  # torch
            x = x.detach().cpu().numpy()
        elif hasattr(x, "numpy"):  # tf tensors and variables, Keras variables
            x = x.numpy()
        elif hasattr(x, "value") and hasattr(x.value, "numpy"):
            x = x.value.numpy()
        x = np.asarray(x)
    except Exception as exc:  # noqa: BLE001
        raise GradingError(
            f"{what} could not be converted to an array ({type(exc).__name__}: "
            f"{exc}); return a TensorFlow or PyTorch tensor"
        ) from None
    if x.dtype.kind == "f":
        return x.astype(np.float64)
    if x.dtype.kind in REAL:
        return x
    hint = (
        "; a computation with complex numbers must end in real ones "
        "(torch.view_as_real, tf.math.real / tf.math.imag)"
        if x.dtype.kind == "c"
        else ""
    )
    raise GradingError(
        f"{what} has dtype {x.dtype} ({UNREAL.get(x.dtype.kind, 'not numbers')}): "
        f"return real numbers (a float, int or bool tensor){hint}."
    )


def unpack(result, names: tuple[str, ...], what: str) -> dict:
    """Split a student's return value into the named parts, checking the arity.

    A tuple or list is read once, through ``call_student``: a subclass whose
    ``__iter__`` or ``__len__`` raises (or disagree) is the student's error."""
    kind = type(result).__name__
    if isinstance(result, tuple | list):
        result = call_student(f"reading the result of {what}", tuple, result)
    if len(names) == 1:
        if isinstance(result, tuple):
            raise GradingError(
                f"{what} should return a single tensor ({names[0]}), "
                f"got a {kind} of {len(result)} items"
            )
        return {names[0]: result}
    if not isinstance(result, tuple) or len(result) != len(names):
        got = f"a {kind} of {len(result)} items" if isinstance(result, tuple) else kind
        raise GradingError(
            f"{what} should return a tuple ({', '.join(names)}), got {got}"
        )
    return dict(zip(names, result, strict=True))


# The grader's loss runs on the student's result objects (their arithmetic,
# ``.to``, ``__torch_function__``): what they raise is the student's error.
LOSS = "the loss sum(result * upstream) on your results"


def tf_gradients(framework_fn, sources: dict, loss_fn):
    """Run ``framework_fn`` under a GradientTape; gradients of ``loss_fn(result)``.

    ``sources`` maps names to tensors/variables to differentiate with respect to.
    Returns (result, {name: gradient or None}).
    """
    import tensorflow as tf

    # Keras 3 variables wrap a tf.Variable in ``.value``; tapes need the latter
    targets = [
        s.value
        if not isinstance(s, tf.Variable | tf.Tensor)
        and isinstance(getattr(s, "value", None), tf.Variable)
        else s
        for s in sources.values()
    ]
    with tf.GradientTape(persistent=True) as tape:
        for s in targets:
            if not isinstance(s, tf.Variable):
                tape.watch(s)
        result = framework_fn()
        loss = call_student(LOSS, loss_fn, result)
    try:
        grads = tape.gradient(loss, targets)
    except Exception as exc:  # noqa: BLE001
        raise GradingError(
            f"could not differentiate your result ({type(exc).__name__}: {exc}); "
            f"keep the computation in TensorFlow operations"
        ) from None
    return result, dict(zip(sources, grads, strict=True))


def torch_gradients(framework_fn, sources: dict, loss_fn):
    """Like tf_gradients for PyTorch: ``sources`` are leaf tensors / Parameters."""
    import torch

    for s in sources.values():
        s.grad = None
    result = framework_fn()
    loss = call_student(LOSS, loss_fn, result)
    if not (isinstance(loss, torch.Tensor) and loss.requires_grad):
        return result, dict.fromkeys(sources)
    call_student("backward through your result", loss.backward)
    return result, {k: s.grad for k, s in sources.items()}


def weighted_sum(framework: str, tensor, upstream):
    """sum(tensor * upstream): the scalar whose gradient the graders compare."""
    if framework == "tf":
        import tensorflow as tf

        return tf.reduce_sum(tf.cast(tensor, tf.float32) * upstream)
    import torch

    if not isinstance(tensor, torch.Tensor):
        tensor = torch.as_tensor(np.asarray(tensor))
    return torch.sum(tensor.to(torch.float32) * upstream)


def inject_weights(framework: str, layer, weights: dict, owner: str) -> dict:
    """Copy reference weights into a student's layer; returns name -> variable.

    Checks the interface first: each weight exists under its name, has the
    (d_in, d_out) shape, and is a trainable weight of the layer (Keras
    ``add_weight``) / a registered ``nn.Parameter`` (PyTorch).
    """
    found = {}
    for name, w in weights.items():
        w = np.asarray(w)
        var = getattr(layer, name, None)
        if var is None or not hasattr(var, "shape"):
            raise GradingError(
                f"{owner} has no weight attribute {name}: the interface asks for "
                f"self.{name} of shape {w.shape} (tests copy known weights into it)"
            )
        shape = tuple(int(d) for d in var.shape)
        if shape != w.shape:
            if shape == w.shape[::-1]:
                raise GradingError(
                    f"{owner}.{name} has shape {shape}, but the interface asks for "
                    f"{w.shape} = (d_in, d_out).\nLikely mistake (transposed-weights): "
                    f"the course stores weights as (d_in, d_out) and computes x @ W; "
                    f"nn.Linear stores (d_out, d_in) -- do not copy that layout."
                )
            raise GradingError(
                f"{owner}.{name} has shape {shape}; the interface asks for {w.shape}"
            )
        if framework == "tf":
            tracked = any(v is var for v in getattr(layer, "trainable_weights", []))
            if not (hasattr(var, "assign") and tracked):
                raise GradingError(
                    f"{owner}.{name} is not a trainable weight of the layer.\nLikely "
                    f"mistake (not-a-trainable-weight): create it with "
                    f"self.add_weight(...) so Keras tracks and trains it."
                )
            var.assign(w.astype(np.float32))
        else:
            import torch
            from torch import nn

            # any registration path counts (self.W, an nn.ParameterDict behind
            # __getattr__, a submodule's weight): the variable is the module's
            registered = any(p is var for p in layer.parameters())
            if not (isinstance(var, nn.Parameter) and registered):
                raise GradingError(
                    f"{owner}.{name} is not a registered nn.Parameter.\nLikely "
                    f"mistake (not-a-parameter): wrap it as self.{name} = "
                    f"nn.Parameter(...) so the module's optimiser trains it."
                )
            with torch.no_grad():
                var.copy_(torch.as_tensor(w, dtype=var.dtype))
        found[name] = var
    return found
