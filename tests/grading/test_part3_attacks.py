"""A hostile student against the Part 3 runners (transformer-block,
tiny-transformer, positions, kv-cache), in process.

Each test is an attack that worked before its fix:

* a complex result (RoPE as a complex product without ``view_as_real``, a
  complex cache) reached the wire, whose decoder refuses non-real dtypes:
  the grader read it as a forged result and flagged the student ``tampered``
  (every later test 0). Now the runner names the mistake; in kv-cache's
  decode it also made the grader raise (KeyError) when feeding the cache back;
* a layer whose ``parameters()`` / ``trainable_weights`` / weight ``copy_`` /
  Keras weight ``.value`` raises made the grader's own code raise: "the grader
  could not check your code"; now it is the student's error;
* the outcome codes of the error checks (positions' odd head_dim,
  tiny-transformer's ValueErrors) were module constants read at call time and
  the helpers private, neither watched by the integrity probe: a student who
  raised AssertionError set ``RAISED_OTHER = 1`` and got the points (seen
  through the real CLI: 5/6 instead of 3/6, no flag). The codes are now bound
  into public helpers (watched with their defaults).

The probe did not watch the runner modules at all in a real kernel (they
were imported after its snapshot): the last test; ``grader/kernel/probe.py``
now preloads them.
"""

import json
import sys

import numpy as np
import pytest
import torch
from support.grading import student_solutions

import attncourse  # noqa: F401  (quiet TF first)
from grader.assignments import kv_cache, positions, tiny_transformer, transformer_block
from grader.checks import verdict
from grader.kernel import probe as probe_module
from grader.kernel.errors import GradingError
from grader.kernel.observations import observation_payload, parse_observation
from grader.kernel.runners import positions as positions_runner
from grader.kernel.runners import tiny_transformer as tiny_runner

TASKS = {
    "transformer-block": transformer_block,
    "tiny-transformer": tiny_transformer,
    "positions": positions,
    "kv-cache": kv_cache,
}
CASES = {a: t.make_cases() for a, t in TASKS.items()}


def namespace(assignment: str, extra: str = "") -> dict:
    """The reference solution's cells (both parts) and ``extra``, run here."""
    import tensorflow as tf

    ns = {"__name__": "__main__", "tf": tf, "torch": torch, "np": np}
    exec(
        "import math\nimport keras\nfrom torch import nn\n"
        "from attncourse import tf as atf\nfrom attncourse import torch as atorch\n",
        ns,
    )
    for part in ("tf", "torch"):
        exec(student_solutions(assignment, "reference")[f"{part}-solution"], ns)
    exec(extra, ns)
    return ns


def grade(assignment: str, check: str, ns: dict, framework="torch") -> None:
    """What grading does: the runner per case (stopping at a GradingError),
    the results over the wire, the verdict. Raises GradingError if it fails;
    anything else escaping is the grader failing."""
    task = TASKS[assignment]
    c = task.CHECKS[check]
    observed = {}
    for case in c.cases:
        observed[case] = c.run(
            framework, ns, CASES[assignment][case], gradients=c.runner.gradients
        )
    payload = observation_payload(assignment, check, framework, observed)
    recorded = parse_observation(json.dumps(payload))  # ValueError: "tampered"
    for case in c.cases:
        inputs = CASES[assignment][case]
        verdict(
            c,
            framework,
            case,
            inputs,
            task.expected(case, inputs),
            recorded["observed"][case],
        )


COMPLEX = {
    ("positions", "rope", "torch"): """
_honest = apply_rope_torch
def apply_rope_torch(x, positions=None):  # a complex product, never made real
    h = x.shape[-1] // 2
    if x.shape[-1] % 2:
        raise ValueError("odd head_dim")
    y = _honest(x, positions)
    return torch.complex(y[..., :h], y[..., h:])
""",
    ("positions", "rope", "tf"): """
_honest = apply_rope_tf
def apply_rope_tf(x, positions=None):
    return tf.complex(_honest(x, positions), tf.zeros_like(x))
""",
    ("positions", "gradients", "torch"): """
_honest = rope_scores_torch
def rope_scores_torch(*args):
    return _honest(*args).to(torch.complex64)
""",
    ("kv-cache", "step", "torch"): """
_honest = gqa_step_torch
def gqa_step_torch(*args):
    out, k, v = _honest(*args)
    return out, k.to(torch.complex64), v
""",
    ("kv-cache", "decode", "torch"): """
_honest = gqa_step_torch
def gqa_step_torch(*args):
    out, k, v = _honest(*args)
    return out, k.to(torch.complex64), v
""",
    ("tiny-transformer", "duplicate", "torch"): """
_honest = duplicate_token_score_torch
def duplicate_token_score_torch(weights, tokens):
    return _honest(weights, tokens).to(torch.complex64)
""",
    ("transformer-block", "forward", "torch"): """
class TransformerBlockTorch(TransformerBlockTorch):
    def forward(self, *args, **kwargs):
        out, weights = super().forward(*args, **kwargs)
        return out.to(torch.complex64), weights
""",
}


@pytest.mark.parametrize(("assignment", "check", "framework"), list(COMPLEX))
def test_a_complex_result_is_a_named_mistake_not_a_forged_result(
    assignment, check, framework
):
    ns = namespace(assignment, COMPLEX[assignment, check, framework])
    with pytest.raises(GradingError, match="return real numbers"):
        grade(assignment, check, ns, framework)


def test_real_parts_of_a_complex_rope_pass():
    """The honest complex-product RoPE (real and imaginary parts as the
    neighbours of each pair) is not refused."""
    ns = namespace(
        "positions",
        """
def apply_rope_torch(x, positions=None):
    h = x.shape[-1] // 2
    if x.shape[-1] % 2:
        raise ValueError("odd head_dim")
    if positions is None:
        positions = torch.arange(x.shape[-2])
    theta = torch.as_tensor(positions).double()[..., None] / 10000.0 ** (
        torch.arange(h).double() / h)
    if theta.dim() == 3 and x.dim() == 4:
        theta = theta[:, None]
    z = torch.complex(x[..., 0::2].double(), x[..., 1::2].double())
    z = z * torch.polar(torch.ones_like(theta), theta)
    return torch.stack([z.real, z.imag], dim=-1).flatten(-2)
""",
    )
    for check in positions.CHECKS:
        grade("positions", check, ns)


BLOCK_RAISES = {
    "parameters": (
        "torch",
        "def parameters(self, recurse=True):\n        raise RuntimeError('mine')",
    ),
    "trainable_weights": (
        "tf",
        "@property\n    def trainable_weights(self):\n"
        "        raise RuntimeError('mine')",
    ),
    "copy_": (
        "torch",
        """def __init__(self, *args):
        super().__init__(*args)

        class P(nn.Parameter):
            def copy_(self, *a, **k):
                raise RuntimeError('mine')

        self.attn_W_q = P(torch.zeros(8, 8))""",
    ),
    "shape": (
        "torch",
        """def __init__(self, *args):
        super().__init__(*args)
        del self._parameters["attn_W_q"]

        class Odd:
            shape = ("a", "b")

        self.attn_W_q = Odd()""",
    ),
}


@pytest.mark.parametrize("what", list(BLOCK_RAISES))
def test_a_layer_that_raises_under_the_weight_copy_is_the_students_error(what):
    framework, body = BLOCK_RAISES[what]
    cls = "TransformerBlockTF" if framework == "tf" else "TransformerBlockTorch"
    ns = namespace("transformer-block", f"class {cls}({cls}):\n    {body}\n")
    with pytest.raises(GradingError, match="copying the weights into") as info:
        grade("transformer-block", "forward", ns, framework)
    assert "grader could not check" not in str(info.value)


FAKE_KERAS_WEIGHT = """
class Fake:  # passes as a tracked weight, but its .value raises
    shape = (8, 8)
    def assign(self, value):
        self.v = tf.constant(value)
    @property
    def value(self):
        raise RuntimeError("mine")

class TransformerBlockTF(TransformerBlockTF):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.__dict__["attn_W_q"] = Fake()
        self.__dict__["attn_W_q"].v = tf.zeros((8, 8))
    @property
    def trainable_weights(self):
        return [*super().trainable_weights, self.__dict__["attn_W_q"]]
    def attention(self, a, padding_mask=None):
        fake = self.__dict__["attn_W_q"]
        self.__dict__["attn_W_q"] = fake.v
        try:
            return super().attention(a, padding_mask)
        finally:
            self.__dict__["attn_W_q"] = fake
"""


def test_a_fake_keras_weight_is_the_students_error_in_the_gradients():
    ns = namespace("transformer-block", FAKE_KERAS_WEIGHT)
    with pytest.raises(GradingError, match=r"attn_W_q\.value raised RuntimeError"):
        grade("transformer-block", "gradients", ns, "tf")


def test_a_parameter_subclass_is_refused_by_name():
    """A subclass could redefine .grad (what the gradient check reads)."""
    ns = namespace(
        "transformer-block",
        """
class P(nn.Parameter):
    pass

class TransformerBlockTorch(TransformerBlockTorch):
    def __init__(self, *args):
        super().__init__(*args)
        self.attn_W_q = P(torch.zeros(8, 8))
""",
    )
    with pytest.raises(GradingError, match="attn_W_q is not a plain nn.Parameter"):
        grade("transformer-block", "gradients", ns)


ASSERTS = """
def apply_rope_torch(x, positions=None, _honest=apply_rope_torch):
    assert x.shape[-1] % 2 == 0, "odd head_dim"  # AssertionError, not ValueError
    return _honest(x, positions)
"""


def test_rebinding_the_outcome_codes_changes_nothing(monkeypatch):
    """The attack that got 2 points unflagged through the CLI before the fix."""
    ns = namespace("positions", ASSERTS)
    with pytest.raises(GradingError, match="odd-head-dim-wrong-error"):
        grade("positions", "rope", ns)
    monkeypatch.setattr(positions_runner, "RAISED_OTHER", 1)
    monkeypatch.setattr(positions_runner, "RETURNED", 1)
    with pytest.raises(GradingError, match="odd-head-dim-wrong-error"):
        grade("positions", "rope", ns)
    monkeypatch.setattr(tiny_runner, "OTHER_ERROR", 1)
    monkeypatch.setattr(tiny_runner, "RETURNED", 1)
    ns = namespace("tiny-transformer")
    grade("tiny-transformer", "errors", ns)  # still the true outcomes


@pytest.mark.parametrize(
    ("module", "name"),
    [
        (positions_runner, "odd_outcome"),
        (tiny_runner, "outcome"),
        (tiny_runner, "head_index"),
    ],
)
def test_the_outcome_helpers_are_watched_by_the_probe(monkeypatch, module, name):
    """Once the runner module is loaded before the snapshot, replacing a
    helper (or its bound codes) is reported."""
    probe = probe_module.Probe()
    assert not [c for c in probe.changes() if module.__name__ in c]
    func = getattr(module, name)
    if func.__defaults__ is not None:  # the codes: every outcome "right"
        monkeypatch.setattr(func, "__defaults__", ((1, 1, 1),))
        assert f"{module.__name__}.{name}" in probe.changes()
        monkeypatch.undo()
        assert not [c for c in probe.changes() if module.__name__ in c]
    monkeypatch.setattr(module, name, lambda *a, **k: 1)
    assert f"{module.__name__}.{name}" in probe.changes()


def test_the_probe_preloads_the_runner_modules():
    assert all(
        f"grader.kernel.runners.{m}" in probe_module.PRELOAD
        or "grader.kernel.runners.*" in probe_module.PRELOAD
        for m in ("transformer_block", "tiny_transformer", "positions", "kv_cache")
    ), (probe_module.PRELOAD, sys.version)
