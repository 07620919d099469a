"""The kernel adapters read a student's objects only through call_student.

Found by a hostile review of the cross-attention-seq2seq assignment: a result
container or tensor subclass that raises inside the grader's own code got "the
grader could not check your code" (blaming the grader); an honest module whose
weights sit in an nn.ParameterDict was refused as "not a registered
nn.Parameter". Each case failed before the fix in grader/kernel/adapters.py.
"""

import numpy as np
import pytest
import torch
from torch import nn

from grader.kernel import adapters
from grader.kernel.errors import GradingError

NAMES = ("state", "context", "weights")


class Boom(tuple):
    def __iter__(self):
        raise RuntimeError("boom from __iter__")


class Liar(tuple):
    def __len__(self):
        return 3


def test_a_container_that_raises_is_the_students_error():
    with pytest.raises(GradingError) as error:
        adapters.unpack(Boom((1, 2, 3)), NAMES, "step(...)")
    message = str(error.value)
    assert "reading the result of step(...) raised RuntimeError" in message
    assert "boom from __iter__" in message and "could not check" not in message


def test_a_container_is_read_once_whatever_its_len_says():
    with pytest.raises(GradingError, match=r"got a Liar of 2 items"):
        adapters.unpack(Liar((1, 2)), NAMES, "step(...)")
    assert adapters.unpack([1, 2, 3], NAMES, "step(...)") == {
        "state": 1,
        "context": 2,
        "weights": 3,
    }
    with pytest.raises(GradingError, match=r"single tensor \(out\), got a list"):
        adapters.unpack([1, 2], ("out",), "f(...)")


class Evil(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func is torch.Tensor.to:
            raise RuntimeError("no .to for the grader")
        return super().__torch_function__(func, types, args, kwargs or {})


def test_the_graders_loss_on_a_hostile_tensor_is_the_students_error():
    x = torch.ones(2, 3, requires_grad=True)
    upstream = torch.ones(2, 3)

    def run():
        return (x * 2).as_subclass(Evil)

    def loss(result):
        return adapters.weighted_sum("torch", result, upstream)

    with pytest.raises(GradingError) as error:
        adapters.torch_gradients(run, {"x": x}, loss)
    message = str(error.value)
    assert "the loss sum(result * upstream) on your results raised RuntimeError" in (
        message
    )
    assert "could not check" not in message
    honest = adapters.torch_gradients(lambda: x * 2, {"x": x}, loss)[1]["x"]
    assert torch.equal(honest, torch.full((2, 3), 2.0))


class DictModule(nn.Module):
    """Honest: the weights live in an nn.ParameterDict, read as attributes."""

    def __init__(self):
        super().__init__()
        self.p = nn.ParameterDict({"W_q": nn.Parameter(torch.zeros(3, 2))})

    def __getattr__(self, name):
        if name == "W_q":
            return self.p[name]
        return super().__getattr__(name)


class Stray(nn.Module):
    """Hostile or mistaken: a Parameter the module does not own."""

    def __init__(self):
        super().__init__()
        object.__setattr__(self, "W_q", nn.Parameter(torch.zeros(3, 2)))


def test_weights_count_under_any_registration_path():
    w = np.arange(6.0).reshape(3, 2)
    layer = DictModule()
    found = adapters.inject_weights("torch", layer, {"W_q": w}, "Step")
    assert found["W_q"] is layer.p["W_q"] and np.array_equal(
        layer.p["W_q"].detach().numpy(), w
    )
    with pytest.raises(GradingError, match="not a registered nn.Parameter"):
        adapters.inject_weights("torch", Stray(), {"W_q": w}, "Step")
