"""The three framework modules expose the same names with the same signatures."""

import inspect

import pytest

import attncourse.numpy as anp
import attncourse.tf as atf
import attncourse.torch as atorch

MODULES = {"numpy": anp, "tf": atf, "torch": atorch}


def test_same_public_names():
    names = {k: set(m.__all__) for k, m in MODULES.items()}
    assert names["numpy"], "the NumPy reference exports nothing"
    for k in ("tf", "torch"):
        assert names[k] == names["numpy"], (
            f"attncourse.{k} differs from attncourse.numpy: only in {k}: "
            f"{sorted(names[k] - names['numpy'])}, missing from {k}: "
            f"{sorted(names['numpy'] - names[k])}"
        )


def _params(obj):
    target = obj.__init__ if inspect.isclass(obj) else obj
    return [p for p in inspect.signature(target).parameters if p != "self"]


@pytest.mark.parametrize("name", sorted(anp.__all__))
def test_same_signature(name):
    ref = _params(getattr(anp, name))
    for k in ("tf", "torch"):
        other = getattr(MODULES[k], name)
        got = _params(other)
        # Keras/torch layers may add framework keywords (name, dtype, **kwargs)
        # after the shared ones, never before or instead of them.
        assert got[: len(ref)] == ref, f"{k}.{name}{got} != numpy.{name}{ref}"
