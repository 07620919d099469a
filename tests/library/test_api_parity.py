"""The three framework modules expose the same names with the same signatures.

The same parameter names, kinds and defaults, for functions, constructors, the
call method (NumPy ``__call__``, Keras ``call``, torch ``forward``) and every
public method of the NumPy classes. Only names that one framework alone can
provide are missing elsewhere; FRAMEWORK_ONLY lists each with its reason, and
no module carries a function that only raises to fill the gap.
"""

import ast
import inspect
import textwrap

import pytest

import attncourse.numpy as anp
import attncourse.tf as atf
import attncourse.torch as atorch

MODULES = {"numpy": anp, "tf": atf, "torch": atorch}
CALL = {"numpy": "__call__", "tf": "call", "torch": "forward"}

_TRAINING = "training needs autograd, which the NumPy reference does not have"
_EVALUATES = "evaluates a model that train_seq2seq trained (tf and torch only)"
FRAMEWORK_ONLY = {  # name -> (the modules that have it, why only those)
    "build_seq2seq": ({"tf", "torch"}, "builds the pair that train_seq2seq trains"),
    "train_seq2seq": ({"tf", "torch"}, _TRAINING),
    "train_and_evaluate": ({"tf", "torch"}, _TRAINING),
    "teacher_forced_predict": ({"tf", "torch"}, _EVALUATES),
    "greedy_translate": ({"tf", "torch"}, _EVALUATES),
    "sequence_accuracy": ({"tf", "torch"}, _EVALUATES),
    "to_keras_mha": ({"tf"}, "returns a keras.layers.MultiHeadAttention"),
    "to_keras_gru": ({"tf"}, "returns a keras.layers.GRU"),
    "to_torch_mha": ({"torch"}, "returns a torch.nn.MultiheadAttention"),
    "to_torch_gru": ({"torch"}, "returns a torch.nn.GRU"),
    "train_tiny": ({"tf", "torch"}, _TRAINING),
    "next_token_loss": ({"tf", "torch"}, "the loss train_tiny differentiates"),
    "repeat_mask": ({"tf", "torch"}, "the positions next_token_loss scores"),
    "FlashAttention": ({"torch"}, "a torch.autograd.Function (tf: tf.custom_gradient)"),
}
SHARED = sorted(anp.__all__)


@pytest.mark.parametrize("fw", MODULES)
def test_same_public_names_but_the_framework_only_ones(fw):
    expected = set(SHARED) | {
        n for n, (where, _) in FRAMEWORK_ONLY.items() if fw in where
    }
    got = set(MODULES[fw].__all__)
    assert got == expected, (
        f"attncourse.{fw}: unexpected {sorted(got - expected)}, missing "
        f"{sorted(expected - got)} (a name only some frameworks can have "
        f"belongs in FRAMEWORK_ONLY, with its reason)"
    )
    for name in got:
        assert hasattr(MODULES[fw], name), f"attncourse.{fw}.{name} is in __all__"


def test_framework_only_names_are_really_missing_elsewhere():
    for name, (where, reason) in FRAMEWORK_ONLY.items():
        assert reason and where < set(MODULES), name
        for fw in set(MODULES) - where:
            assert not hasattr(MODULES[fw], name), (
                f"attncourse.{fw}.{name} exists: a stub for parity?"
            )


def _only_raises(fn) -> bool:
    """True if the body (after the docstring) only raises or only makes one
    discarded call (a helper that raises), as parity stubs do."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    body = tree.body[0].body
    if (
        body
        and isinstance(body[0], ast.Expr)
        and isinstance(body[0].value, ast.Constant)
        and isinstance(body[0].value.value, str)
    ):
        body = body[1:]
    return all(isinstance(s, ast.Raise) for s in body) or (
        len(body) == 1
        and isinstance(body[0], ast.Expr)
        and isinstance(body[0].value, ast.Call)
    )


def test_the_stub_detector_sees_stubs():
    def refuse(name):
        raise NotImplementedError(name)

    def stub(x):
        """Not available here."""
        refuse("stub")

    def raises(x):
        """Not available here."""
        raise NotImplementedError

    def real(x):
        """Validates, then computes."""
        if x is None:
            raise ValueError("x")
        return x

    assert _only_raises(stub) and _only_raises(raises) and not _only_raises(real)


@pytest.mark.parametrize("fw", MODULES)
def test_no_public_function_only_raises(fw):
    module = MODULES[fw]
    stubs = [
        name
        for name in module.__all__
        if inspect.isfunction(getattr(module, name))
        and _only_raises(getattr(module, name))
    ]
    assert not stubs, f"attncourse.{fw} has functions that only raise: {stubs}"


def _parameters(fn):
    return [p for p in inspect.signature(fn).parameters.values() if p.name != "self"]


def signature_mismatch(ref, other) -> str | None:
    """Why ``other`` cannot be called like ``ref`` (None if it can).

    The first parameters must match ``ref``'s in name, kind and default; a
    framework may add parameters after them only if a call that is valid for
    ``ref`` stays valid (they have defaults, or are *args / **kwargs).
    """
    ref_params, other_params = _parameters(ref), _parameters(other)
    for i, want in enumerate(ref_params):
        if i >= len(other_params):
            return f"missing parameter {want.name!r}"
        got = other_params[i]
        for what in ("name", "kind", "default"):
            if getattr(got, what) != getattr(want, what):
                return (
                    f"parameter {i} {what}: {getattr(got, what)!r}, "
                    f"reference {getattr(want, what)!r}"
                )
    for extra in other_params[len(ref_params) :]:
        if extra.default is inspect.Parameter.empty and extra.kind not in (
            inspect.Parameter.VAR_POSITIONAL,
            inspect.Parameter.VAR_KEYWORD,
        ):
            return f"extra required parameter {extra.name!r}"
    return None


def test_the_signature_check_sees_kinds_and_defaults():
    def ref(x, n=1, *, seed=0): ...

    def same(x, n=1, *, seed=0, **kwargs): ...

    def other_default(x, n=2, *, seed=0): ...

    def positional_seed(x, n=1, seed=0): ...

    def extra_required(x, n=1, *, seed=0, name): ...

    assert signature_mismatch(ref, same) is None
    assert "default" in signature_mismatch(ref, other_default)
    assert "kind" in signature_mismatch(ref, positional_seed)
    assert "extra required" in signature_mismatch(ref, extra_required)


def _callables(fw, name):
    """(label, callable) pairs to compare for ``name`` in framework ``fw``."""
    obj = getattr(MODULES[fw], name)
    if not inspect.isclass(obj):
        return [(name, obj)]
    ref_cls = getattr(anp, name)
    pairs = [(f"{name}.__init__", obj.__init__)]
    if "__call__" in dir(ref_cls):
        # a layer (not a plain container such as KVCache): compare its call
        pairs.append((f"{name}.<call>", getattr(obj, CALL[fw])))
    for method, _ in inspect.getmembers(ref_cls, inspect.isfunction):
        if not method.startswith("_"):
            pairs.append((f"{name}.{method}", getattr(obj, method, None)))
    return pairs


@pytest.mark.parametrize("name", SHARED)
def test_same_signature(name):
    reference = dict(_callables("numpy", name))
    for fw in ("tf", "torch"):
        for label, fn in _callables(fw, name):
            assert fn is not None, f"{fw}: {label} is missing"
            why = signature_mismatch(reference[label], fn)
            assert why is None, f"{fw}: {label}: {why}"


@pytest.mark.parametrize("fw", MODULES)
def test_custom_attention_is_the_seed_notes_name_for_self_attention(fw):
    module = MODULES[fw]
    assert module.CustomAttention is module.SelfAttention
    assert module.CustomAttentionDense is module.SelfAttentionDense
