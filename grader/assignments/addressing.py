"""Assignment ``addressing``: a soft dictionary with a distance score.

soft_lookup_{tf,torch}(queries, keys, values, beta) -> (outputs, weights) with
scores s_ij = -beta * ||q_i - k_j||^2, weights = softmax over keys,
outputs = weights @ values. One check per framework, ``soft_lookup``: outputs,
weights, and the gradients w.r.t. beta and the queries.
"""

import numpy as np

from grader import numeric
from grader.assignments._common import rng
from grader.checks import Check, Variant
from grader.kernel.runners.addressing import RUNS, TARGETS
from grader.provenance import BUILTIN_ATTENTION, COURSE_ATTENTION

NAME = "addressing"
SEED = 1001
# What the solution may not call (grader.provenance flags it for review): the
# course library's own implementation and the built-in attention layers.
FORBIDDEN = (*COURSE_ATTENTION, *BUILTIN_ATTENTION)


def make_cases(seed: int = SEED) -> dict:
    r = rng(seed)
    return {
        "main": {
            "queries": r.normal(size=(2, 3, 4)),
            "keys": r.normal(size=(2, 5, 4)),
            "values": r.normal(size=(2, 5, 3)),
            "beta": np.array(0.7),
            "upstream": r.normal(size=(2, 3, 3)),
        }
    }


def _sq_dist(q, k):
    return np.sum((q[:, :, None, :] - k[:, None, :, :]) ** 2, axis=-1)


def _lookup(inputs, scores, axis=-1):
    weights = numeric.softmax(scores, axis=axis)
    return {"outputs": weights @ inputs["values"], "weights": weights}


def expected(case: str, inputs: dict) -> dict:
    q, k, v, beta, g = (
        inputs[n] for n in ("queries", "keys", "values", "beta", "upstream")
    )
    d2 = _sq_dist(q, k)
    result = _lookup(inputs, -beta * d2)
    w = result["weights"]
    ds = numeric.softmax_backward(w, g @ np.swapaxes(v, -1, -2))
    result["grad_beta"] = np.sum(ds * -d2)
    # d s_ij / d q_i = -2 beta (q_i - k_j)
    result["grad_queries"] = -2 * beta * (ds.sum(-1, keepdims=True) * q - ds @ k)
    return result


def _variant(scores_fn, axis=-1):
    def compute(inputs):
        return _lookup(inputs, scores_fn(inputs), axis)

    return compute


def _d2(i):
    return _sq_dist(i["queries"], i["keys"])


# Each variant cites where learners report the mistake.
VARIANTS = (
    # PetrochukM/PyTorch-NLP#2, MicrosoftDocs/pytorchfundamentals#21
    Variant(
        "softmax-axis",
        "the softmax runs over the queries axis; each query needs a distribution "
        "over the keys, so normalise over the last axis (axis=-1).",
        _variant(lambda i: -i["beta"] * _d2(i), axis=1),
    ),
    Variant(
        "score-sign",
        "the score has the wrong sign: nearer keys must get larger scores, so "
        "use -beta * ||q - k||^2 (you attend most to the farthest key).",
        _variant(lambda i: i["beta"] * _d2(i)),
    ),
    Variant(
        "distance-not-squared",
        "the distance is not squared: the score is -beta times the SQUARED "
        "Euclidean distance ||q - k||^2.",
        _variant(lambda i: -i["beta"] * np.sqrt(_d2(i))),
    ),
    Variant(
        "beta-divides",
        "beta divides the distance; it multiplies it (a larger beta makes the "
        "lookup sharper).",
        _variant(lambda i: -_d2(i) / i["beta"]),
    ),
    # d2l 11.2 "Attention Pooling by Similarity": the Gaussian kernel
    # exp(-||q - k||^2 / 2) (https://d2l.ai/chapter_attention-mechanisms-and-
    # transformers/attention-pooling.html)
    Variant(
        "halved-distance",
        "the squared distance is halved (the Gaussian kernel's "
        "-||q - k||^2 / 2); this lookup scores with -beta * ||q - k||^2, no 1/2.",
        _variant(lambda i: -i["beta"] * _d2(i) / 2),
    ),
    # d2l's parametric Nadaraya-Watson pooling -((q - k) w)^2 / 2
    # (d2l-ai/d2l-en chapter_attention-mechanisms/nadaraya-waston.md)
    Variant(
        "beta-squared",
        "beta multiplies the difference before squaring, -(beta * (q - k))^2 "
        "= -beta^2 ||q - k||^2; it multiplies the squared distance once: "
        "-beta * ||q - k||^2.",
        _variant(lambda i: -(i["beta"] ** 2) * _d2(i)),
    ),
    Variant(
        "beta-ignored",
        "beta is ignored: the score is -beta * ||q - k||^2.",
        _variant(lambda i: -_d2(i)),
    ),
    Variant(
        "dot-product-score",
        "you scored with a dot product; this lookup scores with the negative "
        "squared distance -beta * ||q - k||^2 (the two differ by -beta*||k||^2, "
        "which is not the same for every key).",
        _variant(
            lambda i: i["beta"] * np.einsum("bqd,bkd->bqk", i["queries"], i["keys"])
        ),
    ),
)


CHECKS = {
    "soft_lookup": Check(
        name="soft_lookup",
        runner=RUNS["soft_lookup"],
        targets=TARGETS,
        compare=("weights", "outputs", "grad_beta", "grad_queries"),
        variants=VARIANTS,
        case_notes={"main": "batch 2, 3 queries, 5 keys, beta = 0.7"},
        reminder="scores -beta * ||q_i - k_j||^2, softmax over the keys (last "
        "axis), outputs = weights @ values, all in framework operations.",
    ),
}


def crosscheck(case: str, inputs: dict, exp: dict) -> None:
    """The reference agrees with the attncourse library (NumPy and TensorFlow)."""
    import tensorflow as tf

    import attncourse.numpy as anp
    import attncourse.tf as atf

    q, k, v, beta = (inputs[n] for n in ("queries", "keys", "values", "beta"))
    # ||q - k||^2 = |q|^2 - 2 q.k + |k|^2, through the library's dot_score
    d2 = (
        np.sum(q**2, -1)[:, :, None]
        - 2 * anp.dot_score(q, k)
        + np.sum(k**2, -1)[:, None, :]
    )
    out, w = anp.soft_attention(-beta * d2, v)
    np.testing.assert_allclose(out, exp["outputs"], atol=1e-10)
    np.testing.assert_allclose(w, exp["weights"], atol=1e-10)
    qt, bt = tf.Variable(q), tf.Variable(beta)
    with tf.GradientTape() as tape:
        d2t = (
            tf.reduce_sum(qt**2, -1)[:, :, None]
            - 2 * atf.dot_score(qt, k)
            + np.sum(k**2, -1)[:, None, :]
        )
        out_t, _ = atf.soft_attention(-bt * d2t, tf.constant(v))
        loss = tf.reduce_sum(out_t * inputs["upstream"])
    gb, gq = tape.gradient(loss, [bt, qt])
    np.testing.assert_allclose(gb.numpy(), exp["grad_beta"], atol=1e-9)
    np.testing.assert_allclose(gq.numpy(), exp["grad_queries"], atol=1e-9)
