"""Assignment ``soft-hard-attention``: sampling hard attention by inverse CDF.

sample_hard_attention_{tf,torch}(scores, values, uniforms) ->
(outputs, indices, log_probs): p = softmax(scores) over keys; for each query
the chosen key is the smallest j with u < p_0 + ... + p_j (inverse-CDF
sampling with the given uniform numbers); outputs = values[b, j]; log_probs =
log p_j, differentiable w.r.t. the scores (REINFORCE needs its gradient).

Checks: ``sample`` (indices, outputs) and ``log_prob`` (log_probs and their
gradient w.r.t. the scores).
"""

import numpy as np

from grader import numeric
from grader.assignments._common import rng
from grader.checks import Check, Variant
from grader.kernel.runners.soft_hard_attention import RUNS, TARGETS
from grader.provenance import BUILTIN_ATTENTION, COURSE_ATTENTION

NAME = "soft-hard-attention"
SEED = 3003
# What the solution may not call (grader.provenance flags it for review): the
# course library's own implementation and the built-in attention layers.
FORBIDDEN = (*COURSE_ATTENTION, *BUILTIN_ATTENTION)
MARGIN = 2e-3  # uniforms stay this far from every CDF boundary (float32-safe)


def _inverse_cdf(p, u):
    cdf = np.cumsum(p, axis=-1)
    idx = np.sum(cdf <= u[..., None], axis=-1)
    return np.minimum(idx, p.shape[-1] - 1)


def make_cases(seed: int = SEED) -> dict:
    r = rng(seed)
    scores = 1.5 * r.normal(size=(3, 4, 6))
    values = r.normal(size=(3, 6, 3))
    boundaries = np.cumsum(numeric.softmax(scores), axis=-1)
    uniforms = r.uniform(size=(3, 4))
    for idx in np.ndindex(uniforms.shape):
        while np.min(np.abs(uniforms[idx] - boundaries[idx])) < MARGIN:
            uniforms[idx] = r.uniform()
    return {
        "main": {
            "scores": scores,
            "values": values,
            "uniforms": uniforms,
            "upstream": r.normal(size=(3, 4)),
        }
    }


def _gather(values, idx):
    return np.take_along_axis(values, idx[..., None], axis=1)


def _hard(inputs, probs_fn=None):
    s, v, u = inputs["scores"], inputs["values"], inputs["uniforms"]
    p = numeric.softmax(s) if probs_fn is None else probs_fn(s)
    idx = _inverse_cdf(p, u)
    return {"indices": idx.astype(np.int64), "outputs": _gather(v, idx)}


def expected(case: str, inputs: dict) -> dict:
    s, g = inputs["scores"], inputs["upstream"]
    result = _hard(inputs)
    p = numeric.softmax(s)
    idx = result["indices"]
    logp = np.log(p)
    result["log_probs"] = np.take_along_axis(logp, idx[..., None], -1)[..., 0]
    onehot = np.eye(s.shape[-1])[idx]
    result["grad_scores"] = g[..., None] * (onehot - p)
    return result


def _exclusive_cdf(p):
    """tf.cumsum(p, exclusive=True): [0, p_0, p_0 + p_1, ...], one key late."""
    return np.cumsum(p, axis=-1) - p


def _hard_cdf(inputs, cdf_fn):
    """Inverse-CDF sampling with a wrong running sum ``cdf_fn(scores)``."""
    s, v, u = inputs["scores"], inputs["values"], inputs["uniforms"]
    idx = np.minimum(np.sum(cdf_fn(s) <= u[..., None], axis=-1), s.shape[-1] - 1)
    return {"indices": idx.astype(np.int64), "outputs": _gather(v, idx)}


def _argmax(i):
    idx = np.argmax(i["scores"], axis=-1)
    return {"indices": idx, "outputs": _gather(i["values"], idx)}


def _log_probs(i, fn):
    idx = expected("main", i)["indices"]
    chosen = np.take_along_axis(fn(i["scores"]), idx[..., None], -1)[..., 0]
    return {"log_probs": chosen}


SAMPLE_VARIANTS = (
    Variant(
        "argmax-not-sampled",
        "you picked the most probable key (argmax); sample instead: the key is "
        "the smallest j with u < p_0 + ... + p_j for the given uniform u.",
        _argmax,
    ),
    Variant(
        "softmax-axis",
        "the softmax runs over the queries axis; each query's distribution is "
        "over the keys (last axis).",
        lambda i: _hard(i, lambda s: numeric.softmax(s, axis=1)),
    ),
    Variant(
        "unnormalised-probabilities",
        "the cumulative sum is taken over unnormalised exp(scores) (or the raw "
        "scores); sample from the probabilities p = softmax(scores).",
        lambda i: _hard(i, np.exp),
    ),
    Variant(
        "cdf-from-the-end",
        "the cumulative sum runs from the last key; it starts at key 0.",
        lambda i: {
            k: v
            for k, v in _hard(
                {**i, "scores": i["scores"][..., ::-1], "values": i["values"][:, ::-1]}
            ).items()
            if k == "outputs"
        },
    ),
    # skyzh/tiny-llm#32: the sampler's cumulative sum ran over the
    # log-probabilities, not the probabilities (exp(log_p))
    Variant(
        "cdf-of-log-probabilities",
        "the cumulative sum runs over log-probabilities (all negative, so every "
        "draw lands on the last key); exponentiate first: cumsum(exp(log_p)).",
        lambda i: _hard_cdf(i, lambda s: np.cumsum(np.log(numeric.softmax(s)), -1)),
    ),
    # pytorch/pytorch#42173 (tf.cumsum(exclusive=True) gives [0, a, a + b]) and
    # ScalingIntelligence/KernelBench#109 (exclusive and inclusive sums mixed up)
    Variant(
        "exclusive-cdf",
        "the cumulative sum is exclusive ([0, p_0, p_0 + p_1, ...]), so the "
        "index is one key too far; use the inclusive sum p_0 + ... + p_j "
        "(tf.cumsum without exclusive=True, torch.cumsum).",
        lambda i: _hard_cdf(i, lambda s: _exclusive_cdf(numeric.softmax(s))),
    ),
    # kelvinxu/arctic-captions#9: stochastic (hard) attention uses the sampled
    # location; the expected value sum_j p_j v_j is the soft (deterministic) one
    Variant(
        "soft-attention-output",
        "outputs is the soft-attention average softmax(scores) @ values; hard "
        "attention returns the sampled key's value, values[b, index].",
        lambda i: {"outputs": numeric.softmax(i["scores"]) @ i["values"]},
    ),
)

LOG_PROB_VARIANTS = (
    Variant(
        "probability-not-log",
        "you returned the probability p_j; return its logarithm log p_j.",
        lambda i: _log_probs(i, numeric.softmax),
    ),
    # kevinzakka/recurrent-visual-attention#10: the REINFORCE loss is
    # -log_pi * reward; the log-probability itself has no minus sign
    Variant(
        "negated-log-prob",
        "log_probs has the wrong sign: return log p_j (<= 0); the minus sign "
        "belongs to a REINFORCE loss, -log p_j * reward, not here.",
        lambda i: _log_probs(i, lambda s: -np.log(numeric.softmax(s))),
    ),
    Variant(
        "unnormalised-log-probability",
        "log_probs is the raw score s_j; the log-probability is "
        "s_j - logsumexp(s) (log_softmax).",
        lambda i: _log_probs(i, lambda s: s),
    ),
    Variant(
        "softmax-axis",
        "the softmax runs over the queries axis; normalise over the keys.",
        lambda i: _log_probs(i, lambda s: np.log(numeric.softmax(s, axis=1))),
    ),
)


NOTE = {"main": "batch 3, 4 queries, 6 keys, uniforms kept away from CDF boundaries"}
CHECKS = {
    "sample": Check(
        name="sample",
        runner=RUNS["sample"],
        targets=TARGETS,
        compare=("indices", "outputs"),
        variants=SAMPLE_VARIANTS,
        case_notes=NOTE,
        reminder="index = smallest j with u < cumsum(softmax(scores))[j]; outputs = "
        "values[b, index].",
    ),
    "log_prob": Check(
        name="log_prob",
        runner=RUNS["log_prob"],
        targets=TARGETS,
        compare=("log_probs", "grad_scores"),
        variants=SAMPLE_VARIANTS + LOG_PROB_VARIANTS,
        case_notes=NOTE,
        reminder="log_probs = log softmax(scores)[index], computed with framework "
        "operations so it has a gradient w.r.t. the scores.",
    ),
}


def crosscheck(case: str, inputs: dict, exp: dict) -> None:
    """Outputs/log-probs agree with attncourse.numpy.hard_attention given the
    chosen keys; the gradient with PyTorch autograd through the library."""
    import torch

    import attncourse.numpy as anp
    import attncourse.torch as atorch

    s, v = inputs["scores"], inputs["values"]
    w = anp.masked_softmax(s)
    # keep only the chosen key's weight: argmax mode then picks exactly it
    onehot = np.eye(s.shape[-1])[exp["indices"]]
    out, idx, logp = anp.hard_attention(w * onehot, v, mode="argmax")
    np.testing.assert_array_equal(idx, exp["indices"])
    np.testing.assert_allclose(out, exp["outputs"], atol=1e-12)
    np.testing.assert_allclose(logp, exp["log_probs"], atol=1e-12)
    # inverse-CDF sampling is sampling: a fine grid of u reproduces p
    p = w[0, 0]
    grid = (np.arange(4000) + 0.5) / 4000
    freq = (
        np.bincount(
            _inverse_cdf(np.broadcast_to(p, (4000, p.size)), grid), minlength=p.size
        )
        / grid.size
    )
    np.testing.assert_allclose(freq, p, atol=1e-3)
    st = torch.tensor(s, requires_grad=True)
    logp_t = torch.log(atorch.masked_softmax(st))
    idx = torch.as_tensor(exp["indices"])[..., None]
    chosen = torch.gather(logp_t, -1, idx)[..., 0]
    (chosen * torch.as_tensor(inputs["upstream"])).sum().backward()
    np.testing.assert_allclose(st.grad.numpy(), exp["grad_scores"], atol=1e-12)
