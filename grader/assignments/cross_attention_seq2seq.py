"""Assignment ``cross-attention-seq2seq``: one Bahdanau decoder step.

BahdanauDecoderStepTF(embed_dim, hidden_dim, enc_dim, attn_dim)
(keras.layers.Layer) and BahdanauDecoderStepTorch(...) (nn.Module); weights,
x @ W layout: W_q (hidden_dim, attn_dim), W_k (enc_dim, attn_dim), w_v
(attn_dim,), W_e (embed_dim, hidden_dim), W_c (enc_dim, hidden_dim), W_s
(hidden_dim, hidden_dim), b (hidden_dim,). The chapter's "bahdanau" decoder
(attend with the PREVIOUS state, then update) with a tanh RNN cell in place
of the GRU:

    e_j = w_v . tanh(s_{t-1} W_q + h_j W_k)      scores (batch, src_len)
    alpha = softmax_j(e, src_mask)                src_mask True = real token
    c_t = sum_j alpha_j h_j                       (batch, enc_dim)
    s_t = tanh(e_t W_e + c_t W_c + s_{t-1} W_s + b)

call(embedded, prev_state, enc_outputs, src_mask=None) -> (state, context,
weights). Checks: ``forward`` (no mask, two source lengths), ``masks`` (a
padded batch), ``gradients`` (of sum(state * g_s) + sum(context * g_c)
w.r.t. prev_state, enc_outputs and the seven weights).
"""

from dataclasses import replace

import numpy as np

from grader import numeric
from grader.assignments._common import layer_checks, rng
from grader.assignments.mistakes import inverted_mask, mask_added, mask_zero_fill
from grader.checks import Variant
from grader.kernel.runners.cross_attention_seq2seq import (
    ATTN_DIM,
    EMBED_DIM,
    ENC_DIM,
    HIDDEN_DIM,
    RUNS,
    TARGETS,
    WEIGHTS,
)
from grader.provenance import BUILTIN_ATTENTION, COURSE_ATTENTION

NAME = "cross-attention-seq2seq"
SEED = 4004
# What the solution may not call (grader.provenance flags it for review): the
# course library's scores, attention and decoders, and the built-in layers.
FORBIDDEN = (*COURSE_ATTENTION, *BUILTIN_ATTENTION)
BATCH, SRC_LEN, LONG_SRC_LEN = 3, 5, 7


def _case(r, batch, src_len, lengths=None) -> dict:
    weights = {
        "W_q": r.normal(size=(HIDDEN_DIM, ATTN_DIM)) / np.sqrt(HIDDEN_DIM),
        "W_k": r.normal(size=(ENC_DIM, ATTN_DIM)) / np.sqrt(ENC_DIM),
        "w_v": r.normal(size=(ATTN_DIM,)),
        # the update's three terms scaled so tanh stays unsaturated: a state
        # near +-1 would make a printed "1.0000" look like a reference number
        "W_e": r.normal(size=(EMBED_DIM, HIDDEN_DIM)) / np.sqrt(3 * EMBED_DIM),
        "W_c": r.normal(size=(ENC_DIM, HIDDEN_DIM)) / np.sqrt(3 * ENC_DIM),
        "W_s": r.normal(size=(HIDDEN_DIM, HIDDEN_DIM)) / np.sqrt(3 * HIDDEN_DIM),
        "b": 0.3 * r.normal(size=(HIDDEN_DIM,)),
    }
    mask = (
        np.ones((batch, src_len), dtype=bool)
        if lengths is None
        else numeric.lengths_mask(np.array(lengths), src_len)
    )
    return {
        "embedded": r.normal(size=(batch, EMBED_DIM)),
        "prev_state": np.tanh(r.normal(size=(batch, HIDDEN_DIM))),
        "enc_outputs": r.normal(size=(batch, src_len, ENC_DIM)),
        "src_mask": mask,
        "has_mask": np.array(lengths is not None),
        **weights,
        "upstream_state": r.normal(size=(batch, HIDDEN_DIM)),
        "upstream_context": r.normal(size=(batch, ENC_DIM)),
    }


def make_cases(seed: int = SEED) -> dict:
    r = rng(seed)
    return {
        "plain": _case(r, BATCH, SRC_LEN),
        "long_source": _case(r, 2, LONG_SRC_LEN),
        "padded": _case(r, BATCH, SRC_LEN, lengths=(5, 3, 2)),
    }


def _filled_softmax(s, m, axis=-1):
    """softmax(where(m, s, -1e9)) -- what code filling masked scores computes."""
    return numeric.softmax(np.where(m, s, -1e9), axis=axis)


def _forward(
    i,
    query="prev",
    tanh=True,
    mask="ok",
    axis=-1,
    context_in=True,
    state_in=True,
):
    """The reference and its wrong variants. ``query``: prev (s_{t-1}),
    embedding (e_t), new (Luong's order: s_t = tanh(e W_e + s W_s + b) first,
    then attend with it; c_t never enters the state); ``mask``: ok, ignored,
    inverted, added (scores + mask), zero_fill (masked scores set to 0),
    after (softmax, then multiply by the mask), ones (softmax over a size-1
    axis: every weight 1); ``axis`` 0: the softmax over the batch;
    ``context_in`` / ``state_in``: c_t / s_{t-1} enter the state update."""
    x, s, h = i["embedded"], i["prev_state"], i["enc_outputs"]
    m = i["src_mask"] if bool(i["has_mask"]) else np.ones(h.shape[:2], dtype=bool)

    def update(context):
        z = x @ i["W_e"] + i["b"]
        if context is not None:
            z = z + context @ i["W_c"]
        if state_in:
            z = z + s @ i["W_s"]
        return np.tanh(z)

    luong_state = None
    if query == "new":
        luong_state = update(None)
    q = {"prev": s, "embedding": x, "new": luong_state}[query] @ i["W_q"]
    features = q[:, None, :] + h @ i["W_k"]  # (batch, src_len, attn_dim)
    scores = (np.tanh(features) if tanh else features) @ i["w_v"]
    if mask == "ok" and axis == -1:
        w = numeric.masked_softmax(scores, m)
    elif mask == "ignored":
        w = numeric.softmax(scores, axis=axis)
    elif mask == "inverted":
        w = _filled_softmax(scores, ~m, axis)
    elif mask == "added":
        w = numeric.softmax(scores + m, axis=axis)
    elif mask == "zero_fill":
        w = numeric.softmax(np.where(m, scores, 0.0), axis=axis)
    elif mask == "after":
        w = numeric.softmax(scores, axis=axis) * m
    elif mask == "ones":
        w = np.ones_like(scores)
    else:
        w = _filled_softmax(scores, m, axis)
    c = np.einsum("bs,bsd->bd", w, h)
    state = luong_state if query == "new" else update(c if context_in else None)
    return {"state": state, "context": c, "weights": w}


def _backward(i, result) -> dict:
    """Gradients of sum(state * g_s) + sum(context * g_c) for the reference
    (no mask: the gradients check uses the "plain" case)."""
    x, s, h = i["embedded"], i["prev_state"], i["enc_outputs"]
    w, c, new = result["weights"], result["context"], result["state"]
    dz = i["upstream_state"] * (1 - new**2)  # through tanh
    dc = i["upstream_context"] + dz @ i["W_c"].T
    ds = dz @ i["W_s"].T
    dh = w[:, :, None] * dc[:, None, :]  # context = sum_j w_j h_j
    de = numeric.softmax_backward(w, np.einsum("bd,bsd->bs", dc, h))
    u = np.tanh((s @ i["W_q"])[:, None, :] + h @ i["W_k"])
    dpre = de[:, :, None] * i["w_v"] * (1 - u**2)  # (batch, src_len, attn_dim)
    dq = dpre.sum(axis=1)
    ds = ds + dq @ i["W_q"].T
    dh = dh + dpre @ i["W_k"].T
    return {
        "grad_prev_state": ds,
        "grad_enc_outputs": dh,
        "grad_W_q": s.T @ dq,
        "grad_W_k": np.einsum("bsd,bsa->da", h, dpre),
        "grad_w_v": np.einsum("bsa,bs->a", u, de),
        "grad_W_e": x.T @ dz,
        "grad_W_c": c.T @ dz,
        "grad_W_s": s.T @ dz,
        "grad_b": dz.sum(axis=0),
    }


def expected(case: str, inputs: dict) -> dict:
    result = _forward(inputs)
    if case == "plain":
        result.update(_backward(inputs, result))
    return result


# Each variant cites where learners report the mistake (issue threads of the
# anchors and of tutorials built on them).
VARIANTS = (
    # the seed notes' style 2 (the old PyTorch tutorial's AttnDecoderRNN) call
    # the embedded token the query
    Variant(
        "query-from-embedding",
        "the query is the embedded token e_t; in a Bahdanau step the query is "
        "the decoder's PREVIOUS state: prev_state @ W_q.",
        lambda i: _forward(i, query="embedding"),
    ),
    Variant(
        "query-from-new-state",
        "the state is updated first and the new state s_t is the query "
        "(Luong's order, and c_t never reaches the state); a Bahdanau step "
        "attends with the PREVIOUS state s_{t-1}, then feeds c_t into the update.",
        lambda i: _forward(i, query="new"),
    ),
    # the scoring-functions chapter: without tanh the score is linear
    Variant(
        "missing-tanh",
        "the tanh is missing from the score: w_v . (s_{t-1} W_q + h_j W_k) is "
        "linear, its query term is the same for every source position and "
        "cancels in the softmax, so the weights ignore the decoder state; "
        "score = w_v . tanh(s_{t-1} W_q + h_j W_k).",
        lambda i: _forward(i, tanh=False),
    ),
    # PetrochukM/PyTorch-NLP#2 (nn.Softmax(dim=0) over the batch)
    Variant(
        "softmax-over-batch",
        "the softmax runs over the batch axis (axis 0); each decoder step "
        "needs a distribution over the source positions: normalise the "
        "(batch, src_len) scores over the last axis.",
        lambda i: _forward(i, axis=0),
    ),
    # localminimum/R-net#8, DEEP-PolyU/KEQA_WSDM19#2: softmax over a size-1 axis
    Variant(
        "softmax-over-size-1-axis",
        "every weight is 1: the softmax ran over an axis of size 1 (scores "
        "shaped (batch, src_len, 1), normalised over the last axis); "
        "normalise over the source positions.",
        lambda i: _forward(i, mask="ones"),
    ),
    Variant(
        "context-missing",
        "the weights and the context are right, but the new state does not "
        "use the context: s_t = tanh(e_t W_e + c_t W_c + s_{t-1} W_s + b) -- "
        "without c_t W_c the attention cannot affect the decoder.",
        lambda i: _forward(i, context_in=False),
    ),
    # tensorflow/tensorflow#38248 and #26990 (nmt_with_attention: self.gru(x)
    # without initial_state=hidden)
    Variant(
        "previous-state-ignored",
        "the state update ignores the previous state (the cell starts from "
        "zeros at every step): s_t = tanh(e_t W_e + c_t W_c + s_{t-1} W_s + b).",
        lambda i: _forward(i, state_in=False),
    ),
)

PADDED = ("padded",)
MASK_VARIANTS = (
    inverted_mask(lambda i: _forward(i, mask="inverted"), "src_mask"),
    # tensorflow/tensorflow#43941, pytorch/tutorials#593,
    # MaximumEntropy/Seq2Seq-PyTorch#6
    Variant(
        "mask-ignored",
        "src_mask is not applied: padded source positions still receive "
        "weight, so the context mixes in what the encoder wrote at the padding.",
        lambda i: _forward(i, mask="ignored"),
        cases=PADDED,
    ),
    mask_added(lambda i: _forward(i, mask="added"), cases=PADDED),
    mask_zero_fill(lambda i: _forward(i, mask="zero_fill"), cases=PADDED),
    Variant(
        "mask-after-softmax",
        "the weights are multiplied by the mask after the softmax, so the "
        "real positions' weights no longer sum to 1; mask the SCORES before "
        "the softmax (fill the padding with -1e9).",
        lambda i: _forward(i, mask="after"),
        cases=PADDED,
    ),
)


def _hidden(i):
    """Positions of the weights that must be 0 (padding), or None."""
    return ~i["src_mask"] if bool(i["has_mask"]) else None


NOTES = {
    "plain": (
        f"batch {BATCH}, src_len {SRC_LEN}, embed_dim {EMBED_DIM}, hidden_dim "
        f"{HIDDEN_DIM}, enc_dim {ENC_DIM}, attn_dim {ATTN_DIM}; no mask"
    ),
    "long_source": f"batch 2, src_len {LONG_SRC_LEN}; no mask",
    "padded": "src_mask (batch, src_len) for source lengths 5, 3 and 2",
}
REMINDER = (
    "scores w_v . tanh(prev_state W_q + h_j W_k) over the source positions, "
    "padding (src_mask False) hidden, context = sum_j weights_j h_j, "
    "state = tanh(embedded W_e + context W_c + prev_state W_s + b)."
)
CHECKS = layer_checks(
    RUNS,
    TARGETS,
    variants=VARIANTS,
    mask_variants=MASK_VARIANTS,
    notes=NOTES,
    reminder=REMINDER,
    # the inputs' gradients first: a mistake that leaves a weight unused (no
    # gradient at all) is named by the verdict before "no gradient reaches"
    grads=(
        "grad_prev_state",
        "grad_enc_outputs",
        *(f"grad_{w}" for w in WEIGHTS),
    ),
    grad_reminder="gradients of sum(state * g_s) + sum(context * g_c) must "
    "reach prev_state, enc_outputs and all seven weights (check the forward "
    "test first).",
    hidden=_hidden,
)
# the step's three outputs, in the order the verdict compares them
for _name in ("forward", "masks"):
    CHECKS[_name] = replace(CHECKS[_name], compare=("weights", "context", "state"))


def crosscheck(case: str, inputs: dict, exp: dict) -> None:
    """The reference agrees with the library's additive score and soft
    attention (NumPy forward, PyTorch float64 autograd for the gradients)."""
    import torch

    import attncourse.numpy as anp
    import attncourse.torch as atorch

    p = {w: inputs[w] for w in WEIGHTS}
    s, h, x = inputs["prev_state"], inputs["enc_outputs"], inputs["embedded"]
    mask = inputs["src_mask"][:, None, :] if bool(inputs["has_mask"]) else None
    scores = anp.additive_score(s[:, None, :], h, p["W_q"], p["W_k"], p["w_v"])
    context, weights = anp.soft_attention(scores, h, mask)
    state = np.tanh(x @ p["W_e"] + context[:, 0] @ p["W_c"] + s @ p["W_s"] + p["b"])
    np.testing.assert_allclose(weights[:, 0], exp["weights"], atol=1e-12)
    np.testing.assert_allclose(context[:, 0], exp["context"], atol=1e-12)
    np.testing.assert_allclose(state, exp["state"], atol=1e-12)
    if case != "plain":
        return
    t = {k: torch.tensor(v, requires_grad=True) for k, v in p.items()}
    st = torch.tensor(s, requires_grad=True)
    ht = torch.tensor(h, requires_grad=True)
    sc = atorch.additive_score(st[:, None, :], ht, t["W_q"], t["W_k"], t["w_v"])
    ctx, _ = atorch.soft_attention(sc, ht)
    ctx = ctx[:, 0]
    new = torch.tanh(
        torch.tensor(x) @ t["W_e"] + ctx @ t["W_c"] + st @ t["W_s"] + t["b"]
    )
    loss = (new * torch.tensor(inputs["upstream_state"])).sum() + (
        ctx * torch.tensor(inputs["upstream_context"])
    ).sum()
    loss.backward()
    got = {f"grad_{k}": v.grad for k, v in t.items()}
    got.update(grad_prev_state=st.grad, grad_enc_outputs=ht.grad)
    for key, grad in got.items():
        np.testing.assert_allclose(grad.numpy(), exp[key], atol=1e-10, err_msg=key)
