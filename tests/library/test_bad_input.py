"""Bad input raises the same exception, with the same message, in all frameworks.

Each case is a function of a framework module and a converter; it must raise
the given exception type with a message that names the offending shapes or
dtypes. Keras wraps errors raised inside a layer's call() in extra text, so for
TF layers the NumPy message must appear *inside* the TF message.
"""

import re

import numpy as np
import pytest
import tensorflow as tf
import torch

import attncourse.numpy as anp
import attncourse.tf as atf
import attncourse.torch as atorch

MODS = {"numpy": anp, "tf": atf, "torch": atorch}
CONVERT = {
    "numpy": np.asarray,
    "tf": tf.convert_to_tensor,  # keeps the NumPy dtype (float32 stays float32)
    "torch": lambda x: torch.from_numpy(np.ascontiguousarray(x)),
}
GENERATORS = {
    "numpy": lambda: np.random.default_rng(0),
    "tf": lambda: tf.random.Generator.from_seed(0),
    "torch": lambda: torch.Generator().manual_seed(0),
}


def arr(*shape, dtype=np.float32):
    return np.random.default_rng(0).normal(size=shape).astype(dtype)


Q, K, V = arr(2, 3, 4), arr(2, 5, 4), arr(2, 5, 2)

# name -> (call(mod, c), exception type, exact text that must appear)
CASES = {
    "dot feature sizes": (
        lambda m, c: m.dot_score(c(Q), c(arr(2, 5, 6))),
        ValueError,
        "dot-product scores need queries and keys of the same feature size, got "
        "queries (2, 3, 4) (d_q=4) and keys (2, 5, 6) (d_k=6)",
    ),
    "scaled dot feature sizes": (
        lambda m, c: m.scaled_dot_product_attention(c(Q), c(arr(2, 5, 3)), c(V)),
        ValueError,
        "got queries (2, 3, 4) (d_q=4) and keys (2, 5, 3) (d_k=3)",
    ),
    "batch mismatch": (
        lambda m, c: m.scaled_dot_product_attention(
            c(Q), c(arr(3, 5, 4)), c(arr(3, 5, 2))
        ),
        ValueError,
        "queries and keys must have the same batch size, got queries "
        "(2, 3, 4) and keys (3, 5, 4)",
    ),
    "batch mismatch additive": (
        lambda m, c: m.additive_score(
            c(Q), c(arr(1, 5, 4)), c(arr(4, 3)), c(arr(4, 3)), c(arr(3))
        ),
        ValueError,
        "got queries (2, 3, 4) and keys (1, 5, 4)",
    ),
    "values do not pair with keys": (
        lambda m, c: m.scaled_dot_product_attention(c(Q), c(K), c(arr(2, 6, 2))),
        ValueError,
        "values must pair with keys (same batch and num_keys), got "
        "keys (2, 5, 4) and values (2, 6, 2)",
    ),
    "values do not pair with scores": (
        lambda m, c: m.soft_attention(c(arr(2, 3, 5)), c(arr(2, 4, 2))),
        ValueError,
        "values must pair with the scores' keys (same batch, num_keys = "
        "scores.shape[-1]), got scores (2, 3, 5) and values (2, 4, 2)",
    ),
    "mask wrong shape": (
        lambda m, c: m.masked_softmax(c(arr(2, 3, 5)), c(np.ones((2, 4, 5), bool))),
        ValueError,
        "mask of shape (2, 4, 5) does not broadcast to the attention "
        "scores of shape (2, 3, 5)",
    ),
    "mask wrong shape in sdpa": (
        lambda m, c: m.scaled_dot_product_attention(
            c(Q), c(K), c(V), mask=c(np.ones((3, 4), bool))
        ),
        ValueError,
        "mask of shape (3, 4) does not broadcast to the attention "
        "scores of shape (2, 3, 5)",
    ),
    "float mask": (
        lambda m, c: m.masked_softmax(
            c(arr(2, 3, 5)), c(np.ones((2, 1, 5), np.float32))
        ),
        TypeError,
        "mask must be boolean with True = attend, got dtype float32",
    ),
    "int mask": (
        lambda m, c: m.scaled_dot_product_attention(
            c(Q), c(K), c(V), mask=c(np.ones((2, 1, 5), np.int64))
        ),
        TypeError,
        "mask must be boolean with True = attend, got dtype int64",
    ),
    "valid_lens wrong shape": (
        lambda m, c: m.scaled_dot_product_attention(
            c(Q), c(K), c(V), valid_lens=c(np.array([1, 2, 3]))
        ),
        ValueError,
        "valid_lens must have shape (batch,) = (2,) or (batch, "
        "num_queries) = (2, 3), got (3,)",
    ),
    "additive W_k shape": (
        lambda m, c: m.additive_score(
            c(Q), c(arr(2, 5, 6)), c(arr(4, 3)), c(arr(5, 3)), c(arr(3))
        ),
        ValueError,
        "weight W_k must have shape (6, 3), got (5, 3)",
    ),
    "additive w_v shape": (
        lambda m, c: m.additive_score(
            c(Q), c(K), c(arr(4, 3)), c(arr(4, 3)), c(arr(4))
        ),
        ValueError,
        "weight w_v must have shape (3,), got (4,)",
    ),
    "bilinear W shape": (
        lambda m, c: m.bilinear_score(c(Q), c(arr(2, 5, 6)), c(arr(6, 4))),
        ValueError,
        "weight W must have shape (4, 6), got (6, 4)",
    ),
    "concat w shape": (
        lambda m, c: m.concat_score(c(Q), c(K), c(arr(4))),
        ValueError,
        "weight w must have shape (8,), got (4,)",
    ),
    "integer queries": (
        lambda m, c: m.dot_score(c(np.ones((2, 3, 4), np.int64)), c(K)),
        TypeError,
        "queries must be a floating-point tensor, got dtype int64",
    ),
    "integer values": (
        lambda m, c: m.scaled_dot_product_attention(
            c(Q), c(K), c(np.ones((2, 5, 2), np.int32))
        ),
        TypeError,
        "values must be a floating-point tensor, got dtype int32",
    ),
    "mixed float dtypes": (
        lambda m, c: m.dot_score(c(Q), c(K.astype(np.float64))),
        TypeError,
        "queries and keys must have the same dtype, got queries float32, keys float64",
    ),
    "integer layer input": (
        lambda m, c: m.CustomAttention(3, 2, 4)(c(np.ones((2, 3, 4), np.int64))),
        TypeError,
        "inputs must be a floating-point tensor, got dtype int64",
    ),
    "layer input feature size": (
        lambda m, c: m.CustomAttention(3, 2, 4)(c(arr(2, 3, 5))),
        ValueError,
        "inputs must have input_dim=4 features on the last axis, got shape (2, 3, 5)",
    ),
    "layer mask shape": (
        lambda m, c: m.CustomAttention(3, 2, 4)(
            c(Q), attention_mask=c(np.ones((2, 1, 4), bool))
        ),
        ValueError,
        "mask of shape (2, 1, 4) does not broadcast to the attention "
        "scores of shape (2, 3, 3)",
    ),
    "cross attention batch": (
        lambda m, c: m.CrossAttention(3, 2, 4, 6)(c(Q), c(arr(1, 5, 6))),
        ValueError,
        "inputs (2, 3, 4) and context (1, 5, 6) must have the same batch size",
    ),
    "statistical attention lengths": (
        lambda m, c: m.StatisticalAttention(3, 2, 4, 6)(c(Q), c(arr(2, 5, 6))),
        ValueError,
        "a (2, 3, 4) and b (2, 5, 6) must have the same batch size and "
        "sequence length to be concatenated on the last axis",
    ),
    "statistical attention batch": (
        lambda m, c: m.StatisticalAttention(3, 2, 4, 6)(c(Q), c(arr(1, 3, 6))),
        ValueError,
        "a (2, 3, 4) and b (1, 3, 6) must have the same batch size",
    ),
    "score_fn shape": (
        lambda m, c: m.key_value_attention(
            c(Q), c(K), c(V), lambda q, k: m.dot_score(q, q)
        ),
        ValueError,
        "score_fn must return scores of shape (batch, num_queries, "
        "num_keys) = (2, 3, 5), got (2, 3, 3)",
    ),
    "sample without generator": (
        lambda m, c: m.hard_attention(c(arr(2, 3, 5)), c(V), mode="sample"),
        ValueError,
        "mode='sample' needs an explicit random generator "
        "(generator=...), got generator=None",
    ),
    "unknown hard mode": (
        lambda m, c: m.hard_attention(c(arr(2, 3, 5)), c(V), mode="max"),
        ValueError,
        "mode must be one of ('argmax', 'sample'), got 'max'",
    ),
    "hard attention values": (
        lambda m, c: m.hard_attention(c(arr(2, 3, 5)), c(arr(2, 4, 2))),
        ValueError,
        "got scores (2, 3, 5) and values (2, 4, 2)",
    ),
    "rank-2 queries": (
        lambda m, c: m.dot_score(c(arr(3, 4)), c(K)),
        ValueError,
        "queries must have 3 axes (batch, num_queries, d_q), got shape (3, 4)",
    ),
}


def _message(fw, case):
    call, exc, _ = CASES[case]
    with pytest.raises(exc) as info:
        call(MODS[fw], CONVERT[fw])
    return str(info.value)


@pytest.mark.parametrize("fw", MODS)
@pytest.mark.parametrize("case", CASES)
def test_bad_input_raises_with_shapes(fw, case):
    call, exc, text = CASES[case]
    with pytest.raises(exc, match=re.escape(text)):
        call(MODS[fw], CONVERT[fw])


@pytest.mark.parametrize("case", CASES)
def test_same_message_in_every_framework(case):
    ref = _message("numpy", case)
    assert _message("torch", case) == ref
    assert ref in _message("tf", case)  # Keras may wrap errors from call()


@pytest.mark.parametrize("fw", MODS)
def test_wrong_generator_type(fw):
    other = "torch" if fw != "torch" else "numpy"
    c = CONVERT[fw]
    with pytest.raises(TypeError, match="generator must be a .*, got "):
        MODS[fw].hard_attention(c(arr(2, 3, 5)), c(V), "sample", GENERATORS[other]())


@pytest.mark.parametrize("fw", ["numpy", "torch"])
@pytest.mark.parametrize(
    "name",
    [
        "CustomAttention",
        "CustomAttentionDense",
        "CrossAttention",
        "StatisticalAttention",
    ],
)
def test_layers_without_input_dim(fw, name):
    """NumPy and PyTorch create weights at once; Keras builds on the first call."""
    with pytest.raises(
        ValueError,
        match=re.escape(
            "input_dim is required here (weights are created at construction), "
            "got input_dim=None"
        ),
    ):
        getattr(MODS[fw], name)(3, 2)
    assert not getattr(atf, name)(3, 2).built
