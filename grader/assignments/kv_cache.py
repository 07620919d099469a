"""Assignment ``kv-cache``: one decoding step of grouped-query attention.

gqa_step_tf / gqa_step_torch(x_new, cache_k, cache_v, params, num_heads,
num_kv_heads) -> (outputs, new_cache_k, new_cache_v). x_new (batch, n_new,
d_model) is a chunk of new tokens, the caches (batch, num_kv_heads, t_past,
d_head) hold the keys and values of the t_past tokens before it (t_past may
be 0); params W_q (d_model, H*d_head), W_k / W_v (d_model, G*d_head), W_o
(H*d_head, d_model), x @ W, no biases; heads are contiguous blocks of
features (as in multi-head-attention). Query head h reads kv head
h // (H // G) (repeat_interleave); the new keys/values are appended after the
old ones; the causal mask is bottom-right aligned (query i of the chunk sits
at position t_past + i):

    new_cache_k = concat(cache_k, split(x_new W_k, G))        (time axis 2)
    head_h = softmax(Q_h K_g^T / sqrt(d_head), causal) V_g,   g = h // (H // G)
    outputs = concat_h(head_h) W_o

Checks: ``step`` (a chunk of 2 on a cache of 3; a prefill of 3 on an empty
cache, GQA H=4 G=2), ``heads`` (MHA H=G=4, MQA G=1), ``decode`` (a sequence
of 7 through the student's function in chunks 3, 1, 2, 1 from an empty cache,
its own cache fed back: outputs equal to the full causal pass, the final
cache), ``gradients`` (of sum(outputs * g) w.r.t. x_new, both caches and the
four weights).
"""

import math

import numpy as np

from grader import numeric
from grader.assignments._common import rng
from grader.assignments.mistakes import missing_scale
from grader.checks import Check, Variant
from grader.kernel.runners.kv_cache import D_HEAD, D_MODEL, RUNS, TARGETS, WEIGHTS
from grader.provenance import BUILTIN_ATTENTION, COURSE_ATTENTION

NAME = "kv-cache"
SEED = 9009
# What the solution may not call (grader.provenance flags it for review): the
# course library's attention, masks and decoding (Part 3, helper D's
# attncourse.<fw>.decoding), and the built-ins (SDPA with enable_gqa, keras
# GroupQueryAttention are in BUILTIN_ATTENTION).
FORBIDDEN = (*COURSE_ATTENTION, *BUILTIN_ATTENTION)
BATCH = 2
CHUNKS = (3, 1, 2, 1)  # the decode check: a prefill, tokens and a chunk


def _weights(r, heads, kv_heads) -> dict:
    s = 1 / math.sqrt(D_MODEL)
    return {
        "W_q": r.normal(size=(D_MODEL, heads * D_HEAD)) * s,
        "W_k": r.normal(size=(D_MODEL, kv_heads * D_HEAD)) * s,
        "W_v": r.normal(size=(D_MODEL, kv_heads * D_HEAD)) * s,
        "W_o": r.normal(size=(heads * D_HEAD, D_MODEL)) / math.sqrt(heads * D_HEAD),
    }


def _step_case(r, heads, kv_heads, t_past, n_new) -> dict:
    # the cache is random, not the projection of any tokens: code that
    # ignores it (recomputing from tokens it kept) cannot pass
    return {
        "x_new": r.normal(size=(BATCH, n_new, D_MODEL)),
        "cache_k": r.normal(size=(BATCH, kv_heads, t_past, D_HEAD)),
        "cache_v": r.normal(size=(BATCH, kv_heads, t_past, D_HEAD)),
        **_weights(r, heads, kv_heads),
        "num_heads": np.array(heads),
        "num_kv_heads": np.array(kv_heads),
        "upstream": r.normal(size=(BATCH, n_new, D_MODEL)),
    }


def make_cases(seed: int = SEED) -> dict:
    r = rng(seed)
    return {
        "chunk": _step_case(r, 4, 2, 3, 2),
        "prefill": _step_case(r, 4, 2, 0, 3),
        "mha": _step_case(r, 4, 4, 3, 2),
        "mqa": _step_case(r, 4, 1, 3, 2),
        "decode": {
            "x": r.normal(size=(BATCH, sum(CHUNKS), D_MODEL)),
            **_weights(r, 4, 2),
            "num_heads": np.array(4),
            "num_kv_heads": np.array(2),
            "chunks": np.array(CHUNKS),
        },
    }


def _split(x, count, how="ok"):
    """(batch, n, count * d_head) -> (batch, count, n, d_head)."""
    b, n, f = x.shape
    if how == "ok":
        return x.reshape(b, n, count, f // count).transpose(0, 2, 1, 3)
    return x.reshape(b, count, n, f // count)  # no transpose: mixes positions


def _merge(x, how="ok"):
    b, h, n, dh = x.shape
    if how == "ok":
        return x.transpose(0, 2, 1, 3).reshape(b, n, h * dh)
    return x.reshape(b, n, h * dh)


def _causal(n_q, n_k, shift):
    """Query i sees key j <= i + shift (shift t_past: bottom-right)."""
    return np.arange(n_k)[None, :] <= np.arange(n_q)[:, None] + shift


def _step(
    i,
    x,
    cache_k,
    cache_v,
    mask="bottom_right",
    repeat="interleave",
    order="old_first",
    values="W_v",
    scale="d_head",
    split="ok",
):
    """One step and its wrong variants -> (outputs, new_cache_k, new_cache_v,
    (q, k, v, weights) with the repeated k, v). ``mask``: bottom_right,
    top_left (query i sees keys 0..i: torch SDPA's is_causal with fewer
    queries than keys), top_left_chunks (top-left only when n_new > 1, none
    for one token), none; ``repeat``: interleave, tile; ``order``: old_first,
    new_first; ``values``: the weight projecting the values."""
    heads, kv_heads = int(i["num_heads"]), int(i["num_kv_heads"])
    q = _split(x @ i["W_q"], heads, split)
    k_new = _split(x @ i["W_k"], kv_heads, split)
    v_new = _split(x @ i[values], kv_heads, split)
    first = order == "old_first"
    k_all = np.concatenate((cache_k, k_new) if first else (k_new, cache_k), axis=2)
    v_all = np.concatenate((cache_v, v_new) if first else (v_new, cache_v), axis=2)
    group = heads // kv_heads
    if repeat == "interleave":
        k, v = np.repeat(k_all, group, axis=1), np.repeat(v_all, group, axis=1)
    else:
        k, v = np.tile(k_all, (1, group, 1, 1)), np.tile(v_all, (1, group, 1, 1))
    div = {"d_head": D_HEAD, "d_model": D_MODEL, "none": 1.0}[scale]
    s = q @ np.swapaxes(k, -1, -2) / math.sqrt(div)
    n, t = s.shape[-2:]
    m = np.ones((n, t), dtype=bool)
    if mask == "bottom_right":
        m = _causal(n, t, t - n)
    elif mask == "top_left" or (mask == "top_left_chunks" and n > 1):
        m = _causal(n, t, 0)
    w = numeric.softmax(np.where(m, s, -1e9))
    out = _merge(w @ v, split) @ i["W_o"]
    return out, k_all, v_all, (q, k, v, w)


def _result(out, k, v) -> dict:
    return {"outputs": out, "new_cache_k": k, "new_cache_v": v}


def _one_step(i, **bug) -> dict:
    return _result(*_step(i, i["x_new"], i["cache_k"], i["cache_v"], **bug)[:3])


def _decode(i, **bug) -> dict:
    """The sequence in CHUNKS through _step, its own cache fed back."""
    x = i["x"]
    shape = (x.shape[0], int(i["num_kv_heads"]), 0, D_HEAD)
    k, v = np.zeros(shape), np.zeros(shape)
    outs, start = [], 0
    for n in (int(c) for c in i["chunks"]):
        out, k, v, _ = _step(i, x[:, start : start + n], k, v, **bug)
        outs.append(out)
        start += n
    return _result(np.concatenate(outs, axis=1), k, v)


def full_pass(i) -> dict:
    """The whole sequence in one causal pass (no cache): what cached decoding
    must reproduce, step by step; the cache is every token's keys/values."""
    heads, kv_heads = int(i["num_heads"]), int(i["num_kv_heads"])
    x = i["x"]
    q = _split(x @ i["W_q"], heads)
    k, v = _split(x @ i["W_k"], kv_heads), _split(x @ i["W_v"], kv_heads)
    kv_of = np.arange(heads) // (heads // kv_heads)  # query head h -> kv head
    n = x.shape[1]
    s = np.einsum("bhqd,bhkd->bhqk", q, k[:, kv_of]) / math.sqrt(D_HEAD)
    w = numeric.masked_softmax(s, np.tril(np.ones((n, n), dtype=bool)))
    out = _merge(np.einsum("bhqk,bhkd->bhqd", w, v[:, kv_of])) @ i["W_o"]
    return _result(out, k, v)


def _backward(i) -> dict:
    """Gradients of sum(outputs * upstream) for one (correct) step."""
    x, t_past = i["x_new"], i["cache_k"].shape[2]
    heads, kv_heads = int(i["num_heads"]), int(i["num_kv_heads"])
    group = heads // kv_heads
    _, _, _, (q, k, v, w) = _step(i, x, i["cache_k"], i["cache_v"])
    g = i["upstream"]
    concat = _merge(w @ v)
    d_heads = _split(g @ i["W_o"].T, heads)
    dw = d_heads @ np.swapaxes(v, -1, -2)
    dv_rep = np.swapaxes(w, -1, -2) @ d_heads
    ds = numeric.softmax_backward(w, dw) / math.sqrt(D_HEAD)
    dq = ds @ k
    dk_rep = np.swapaxes(ds, -1, -2) @ q

    def fold(d):  # query head h = kv head * group + r: sum over r
        b, _, t, dh = d.shape
        return d.reshape(b, kv_heads, group, t, dh).sum(axis=2)

    dk, dv = fold(dk_rep), fold(dv_rep)
    dq_m = _merge(dq)
    dk_m, dv_m = _merge(dk[:, :, t_past:]), _merge(dv[:, :, t_past:])
    return {
        "grad_x_new": dq_m @ i["W_q"].T + dk_m @ i["W_k"].T + dv_m @ i["W_v"].T,
        "grad_cache_k": dk[:, :, :t_past],
        "grad_cache_v": dv[:, :, :t_past],
        "grad_W_q": np.einsum("bnd,bne->de", x, dq_m),
        "grad_W_k": np.einsum("bnd,bne->de", x, dk_m),
        "grad_W_v": np.einsum("bnd,bne->de", x, dv_m),
        "grad_W_o": np.einsum("bnd,bne->de", concat, g),
    }


def expected(case: str, inputs: dict) -> dict:
    if case == "decode":
        return full_pass(inputs)
    result = _one_step(inputs)
    if case == "chunk":
        result.update(_backward(inputs))
    return result


def _compute(**bug):
    """What code with ``bug`` returns: one step, or the chunked decode."""

    def compute(i):
        return _decode(i, **bug) if "chunks" in i else _one_step(i, **bug)

    return compute


def _variant(tag, hint, bug, cases=None) -> Variant:
    return Variant(tag, hint, _compute(**bug), cases)


# the cases where each mistake shows: tile == repeat_interleave when H == G or
# G == 1; the alignment and the mask inside a chunk need n_new > 1 (and the
# alignment a non-empty cache); a split without transpose is right for 1 token
GQA = ("chunk", "prefill", "decode")
CHUNKED = ("chunk", "decode")
MULTI = ("chunk", "prefill", "mha", "mqa", "decode")
TOP_LEFT = (
    "the causal mask is aligned top-left (query i sees keys 0..i, as "
    "torch's is_causal=True does when there are fewer queries than keys); the "
    "new tokens are the LAST n_new positions: query i of the chunk sits at "
    "t_past + i and sees keys 0..t_past + i (bottom-right alignment)."
)
VARIANTS = (
    # the Hugging Face / SDPA is_causal pitfall (pytorch/pytorch#108108):
    # top-left alignment with a non-empty cache
    _variant("top-left-mask", TOP_LEFT, {"mask": "top_left"}, (*CHUNKED, "mha", "mqa")),
    # the same, with no mask at all for a single token (is_causal=n_new > 1)
    _variant(
        "top-left-mask-for-chunks",
        TOP_LEFT + " (A single new token needs no mask; a chunk does.)",
        {"mask": "top_left_chunks"},
        CHUNKED,
    ),
    Variant(
        "no-causal-mask",
        "there is no causal mask inside the chunk: each new token also sees "
        "the new tokens after it. With n_new > 1, query i of the chunk may "
        "see keys 0..t_past + i only.",
        _compute(mask="none"),
        MULTI,
    ),
    _variant(
        "repeat-kv-tiled",
        "the K/V heads are repeated in the wrong order (tile: kv heads "
        "0, 1, 0, 1); query head h reads kv head h // (num_heads // "
        "num_kv_heads): repeat each kv head for its group of consecutive "
        "query heads (repeat_interleave / tf.repeat, kv heads 0, 0, 1, 1).",
        {"repeat": "tile"},
        GQA,
    ),
    _variant(
        "new-keys-first",
        "the new keys and values are put BEFORE the cached ones; the cache "
        "keeps time order: concat(cache, new) along the time axis.",
        {"order": "new_first"},
        ("chunk", "mha", "mqa", "decode"),
    ),
    _variant(
        "values-from-W_k",
        "the values are projected with W_k; the cache stores V = x_new @ W_v.",
        {"values": "W_k"},
    ),
    _variant(
        "scale-uses-d_model",
        "the scores are divided by sqrt(d_model); each head scales by "
        "sqrt(d_head), d_head = W_q.shape[1] // num_heads.",
        {"scale": "d_model"},
    ),
    missing_scale(
        _compute(scale="none"),
        "sqrt(d_head)",
    ),
    _variant(
        "head-split-without-transpose",
        "wrong head split: reshaping (batch, n, heads * d_head) straight to "
        "(batch, heads, n, d_head) mixes positions when n_new > 1; reshape "
        "to (batch, n, heads, d_head), then move the head axis forward (and "
        "back before W_o).",
        {"split": "no_transpose"},
        MULTI,
    ),
)

NOTES = {
    "chunk": "batch 2, d_model 8, d_head 3, num_heads 4, num_kv_heads 2 "
    "(GQA); a cache of 3 tokens and a chunk of 2 new ones",
    "prefill": "GQA 4/2, an empty cache (t_past 0) and 3 new tokens",
    "mha": "num_heads 4, num_kv_heads 4 (MHA): cache of 3, 2 new tokens",
    "mqa": "num_heads 4, num_kv_heads 1 (MQA): cache of 3, 2 new tokens",
    "decode": "GQA 4/2: a sequence of 7 tokens decoded from an empty cache "
    "in chunks of 3, 1, 2, 1, the returned cache fed back; outputs "
    "(all steps, in order) compared with one causal pass",
}
REMINDER = (
    "split x_new @ W_q into num_heads heads and x_new @ W_k, x_new @ W_v into "
    "num_kv_heads heads (contiguous features), append them after the cache "
    "(axis 2), query head h reads kv head h // (num_heads // num_kv_heads), "
    "softmax(Q K^T / sqrt(d_head)) with query i at position t_past + i "
    "(bottom-right causal mask), concatenate the heads in order, then W_o."
)
COMPARE = ("outputs", "new_cache_k", "new_cache_v")
GRADS = (
    "grad_x_new",
    "grad_cache_k",
    "grad_cache_v",
    *(f"grad_{w}" for w in WEIGHTS),
)
COMMON = {"targets": TARGETS, "case_notes": NOTES, "reminder": REMINDER}
CHECKS = {
    name: Check(
        name=name, runner=RUNS[name], compare=COMPARE, variants=VARIANTS, **COMMON
    )
    for name in ("step", "heads", "decode")
}
CHECKS["gradients"] = Check(
    name="gradients",
    runner=RUNS["gradients"],
    compare=GRADS,
    variants=VARIANTS,
    targets=TARGETS,
    case_notes=NOTES,
    reminder="gradients of sum(outputs * g) must reach x_new, cache_k, "
    "cache_v and the four weights (check the step test first).",
)


def crosscheck(case: str, inputs: dict, exp: dict) -> None:
    """The reference agrees with the course library (helper D's
    attncourse.numpy decoding: decode_step on the given cache, chunk by chunk
    for the decode case, and grouped_query_attention's full causal pass),
    with the chunked decode of _step, and with a float64 PyTorch autograd
    implementation (outputs, caches, gradients)."""
    import torch

    import attncourse.numpy as anp

    heads, kv_heads = int(inputs["num_heads"]), int(inputs["num_kv_heads"])
    params = {w: inputs[w] for w in WEIGHTS}
    if case == "decode":
        x = inputs["x"]
        for key, value in _decode(inputs).items():
            np.testing.assert_allclose(value, exp[key], atol=1e-12, err_msg=key)
        n = x.shape[1]
        causal = np.tril(np.ones((n, n), dtype=bool))
        out, _ = anp.grouped_query_attention(x, x, x, params, heads, kv_heads, causal)
        np.testing.assert_allclose(out, exp["outputs"], atol=1e-12)
        cache, outs, start = None, [], 0
        for c in (int(c) for c in inputs["chunks"]):
            chunk = x[:, start : start + c]
            out, cache = anp.decode_step(chunk, params, heads, kv_heads, cache)
            outs.append(out)
            start += c
        np.testing.assert_allclose(np.concatenate(outs, 1), exp["outputs"], atol=1e-12)
        np.testing.assert_allclose(cache.keys, exp["new_cache_k"], atol=1e-12)
        np.testing.assert_allclose(cache.values, exp["new_cache_v"], atol=1e-12)
        return
    given = anp.KVCache(inputs["cache_k"], inputs["cache_v"])
    out, cache = anp.decode_step(inputs["x_new"], params, heads, kv_heads, given)
    np.testing.assert_allclose(out, exp["outputs"], atol=1e-12)
    np.testing.assert_allclose(cache.keys, exp["new_cache_k"], atol=1e-12)
    np.testing.assert_allclose(cache.values, exp["new_cache_v"], atol=1e-12)
    names = ("x_new", "cache_k", "cache_v", *WEIGHTS)
    t = {n: torch.tensor(inputs[n], requires_grad=True) for n in names}
    b, n_new, _ = t["x_new"].shape

    def split(z, count):
        return z.reshape(b, n_new, count, D_HEAD).transpose(1, 2)

    q = split(t["x_new"] @ t["W_q"], heads)
    k = torch.cat([t["cache_k"], split(t["x_new"] @ t["W_k"], kv_heads)], dim=2)
    v = torch.cat([t["cache_v"], split(t["x_new"] @ t["W_v"], kv_heads)], dim=2)
    group = heads // kv_heads
    kr, vr = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    total = k.shape[2]
    allowed = torch.ones(n_new, total, dtype=torch.bool).tril(total - n_new)
    scores = q @ kr.transpose(-1, -2) / D_HEAD**0.5
    w = torch.softmax(scores.masked_fill(~allowed, -torch.inf), dim=-1)
    out = (w @ vr).transpose(1, 2).reshape(b, n_new, heads * D_HEAD) @ t["W_o"]
    for key, value in (("outputs", out), ("new_cache_k", k), ("new_cache_v", v)):
        np.testing.assert_allclose(value.detach().numpy(), exp[key], atol=1e-12)
    if case != "chunk":
        return
    (out * torch.tensor(inputs["upstream"])).sum().backward()
    for n in names:
        np.testing.assert_allclose(
            t[n].grad.numpy(), exp[f"grad_{n}"], atol=1e-10, err_msg=n
        )
