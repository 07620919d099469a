"""Assignment ``kv-cache``: one decoding step into a pre-allocated GQA cache.

The chapter grows its cache by concatenation (``gqa_step``); the assignment
asks for the fixed-capacity cache that serving code allocates once.
gqa_step_tf / gqa_step_torch(x_new, cache_k, cache_v, t_past, params,
num_heads, num_kv_heads) -> (outputs, cache_k, cache_v). x_new (batch, n_new,
d_model) is a chunk of new tokens; the caches (batch, num_kv_heads, capacity,
d_head) hold the keys and values of the t_past tokens before it in slots
0 .. t_past - 1 (t_past may be 0), the slots after them hold no valid data
(the grader fills them with noise); params W_q (d_model, H*d_head), W_k / W_v
(d_model, G*d_head), W_o (H*d_head, d_model), x @ W, no biases; heads are
contiguous blocks of features. The step writes the new keys/values into
slots t_past .. t_past + n_new - 1 (every other slot unchanged), query head h
reads kv head h // (H // G), and query i of the chunk (position t_past + i)
sees the filled slots 0 .. t_past + i (bottom-right causal, never an
unfilled slot); a chunk that does not fit (t_past + n_new > capacity) raises
a ValueError that names the capacity:

    cache_k[:, :, t_past : t_past + n_new] = split(x_new W_k, G)
    head_h = softmax(Q_h K_g[:t_past + i + 1]^T / sqrt(d_head)) V_g,  g = h // (H // G)
    outputs = concat_h(head_h) W_o

Checks: ``step`` (a chunk of 2 on a cache of 3 in 8 slots; a prefill of 3
into an empty cache of 5, GQA H=4 G=2), ``heads`` (MHA H=G=4, MQA G=1 with
the chunk filling the cache exactly), ``decode`` (a sequence of 7 through the
student's function in chunks 3, 1, 2, 1 into 9 slots, its own cache fed back:
outputs equal to the full causal pass, the final cache; then a chunk that
does not fit must raise), ``gradients`` (of sum(outputs * g) w.r.t. x_new,
both caches and the four weights).
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
DECODE_CAPACITY = 9  # two slots to spare after the 7 tokens
OVERFLOW = 3  # the decode check's last chunk: 7 + 3 > 9 must raise


def _weights(r, heads, kv_heads) -> dict:
    s = 1 / math.sqrt(D_MODEL)
    return {
        "W_q": r.normal(size=(D_MODEL, heads * D_HEAD)) * s,
        "W_k": r.normal(size=(D_MODEL, kv_heads * D_HEAD)) * s,
        "W_v": r.normal(size=(D_MODEL, kv_heads * D_HEAD)) * s,
        "W_o": r.normal(size=(heads * D_HEAD, D_MODEL)) / math.sqrt(heads * D_HEAD),
    }


def _step_case(r, heads, kv_heads, t_past, n_new, capacity) -> dict:
    # the whole cache is random: the filled slots are not the projection of
    # any tokens (code that recomputes them cannot pass), and the unfilled
    # ones are noise that no query may read and the step must leave alone
    shape = (BATCH, kv_heads, capacity, D_HEAD)
    return {
        "x_new": r.normal(size=(BATCH, n_new, D_MODEL)),
        "cache_k": r.normal(size=shape),
        "cache_v": r.normal(size=shape),
        "t_past": np.array(t_past),
        **_weights(r, heads, kv_heads),
        "num_heads": np.array(heads),
        "num_kv_heads": np.array(kv_heads),
        "upstream": r.normal(size=(BATCH, n_new, D_MODEL)),
    }


def make_cases(seed: int = SEED) -> dict:
    r = rng(seed)
    shape = (BATCH, 2, DECODE_CAPACITY, D_HEAD)
    return {
        "chunk": _step_case(r, 4, 2, 3, 2, 8),
        "prefill": _step_case(r, 4, 2, 0, 3, 5),
        "mha": _step_case(r, 4, 4, 3, 2, 7),
        "mqa": _step_case(r, 4, 1, 3, 2, 5),  # the chunk fills the cache
        "decode": {
            "x": r.normal(size=(BATCH, sum(CHUNKS), D_MODEL)),
            "cache_k": r.normal(size=shape),
            "cache_v": r.normal(size=shape),
            **_weights(r, 4, 2),
            "num_heads": np.array(4),
            "num_kv_heads": np.array(2),
            "chunks": np.array(CHUNKS),
            "overflow": np.array(OVERFLOW),
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


def _allowed(n, t_past, capacity, mask):
    """(n_new, capacity): may query i of the chunk read slot j? ``mask``:
    filled (j <= t_past + i), capacity (bottom-right to the whole cache: j <=
    capacity - n_new + i, unfilled slots included), top_left (j <= i), none
    (every filled slot, j < t_past + n_new)."""
    i, j = np.arange(n)[:, None], np.arange(capacity)[None, :]
    return {
        "filled": j <= t_past + i,
        "capacity": j <= capacity - n + i,
        "top_left": j <= i,
        "none": j < t_past + n + 0 * i,
    }[mask]


def _step(
    i,
    x,
    cache_k,
    cache_v,
    t_past,
    write="t_past",
    mask="filled",
    store=True,
    repeat="interleave",
    values="W_v",
    scale="d_head",
    split="ok",
):
    """One step and its wrong variants -> (outputs, cache_k, cache_v, (q, k,
    v, weights) with the repeated k, v over all slots). ``write``: t_past,
    zero (the new keys into slots 0 .. n_new - 1); ``mask``: see _allowed;
    ``store``: the written caches returned (False: the input caches);
    ``repeat``: interleave, tile; ``values``: the weight projecting the
    values."""
    heads, kv_heads = int(i["num_heads"]), int(i["num_kv_heads"])
    q = _split(x @ i["W_q"], heads, split)
    k_new = _split(x @ i["W_k"], kv_heads, split)
    v_new = _split(x @ i[values], kv_heads, split)
    n, capacity = x.shape[1], cache_k.shape[2]
    at = t_past if write == "t_past" else 0
    k_all, v_all = cache_k.copy(), cache_v.copy()
    k_all[:, :, at : at + n] = k_new
    v_all[:, :, at : at + n] = v_new
    group = heads // kv_heads
    if repeat == "interleave":
        k, v = np.repeat(k_all, group, axis=1), np.repeat(v_all, group, axis=1)
    else:
        k, v = np.tile(k_all, (1, group, 1, 1)), np.tile(v_all, (1, group, 1, 1))
    div = {"d_head": D_HEAD, "d_model": D_MODEL, "none": 1.0}[scale]
    s = q @ np.swapaxes(k, -1, -2) / math.sqrt(div)
    w = numeric.masked_softmax(s, _allowed(n, t_past, capacity, mask))
    out = _merge(w @ v, split) @ i["W_o"]
    if not store:
        k_all, v_all = cache_k, cache_v
    return out, k_all, v_all, (q, k, v, w)


def _result(out, k, v) -> dict:
    return {"outputs": out, "cache_k": k, "cache_v": v}


def _one_step(i, **bug) -> dict:
    t_past = int(i["t_past"])
    return _result(*_step(i, i["x_new"], i["cache_k"], i["cache_v"], t_past, **bug)[:3])


def _decode(i, **bug) -> dict:
    """The sequence in CHUNKS through _step, its own cache fed back."""
    x = i["x"]
    k, v = i["cache_k"], i["cache_v"]
    outs, start = [], 0
    for n in (int(c) for c in i["chunks"]):
        out, k, v, _ = _step(i, x[:, start : start + n], k, v, start, **bug)
        outs.append(out)
        start += n
    return _result(np.concatenate(outs, axis=1), k, v)


def full_pass(i) -> dict:
    """The whole sequence in one causal pass (no cache): what cached decoding
    must reproduce, step by step; the cache is every token's keys/values in
    the first slots and the initial noise after them."""
    heads, kv_heads = int(i["num_heads"]), int(i["num_kv_heads"])
    x = i["x"]
    q = _split(x @ i["W_q"], heads)
    k, v = _split(x @ i["W_k"], kv_heads), _split(x @ i["W_v"], kv_heads)
    kv_of = np.arange(heads) // (heads // kv_heads)  # query head h -> kv head
    n = x.shape[1]
    s = np.einsum("bhqd,bhkd->bhqk", q, k[:, kv_of]) / math.sqrt(D_HEAD)
    w = numeric.masked_softmax(s, np.tril(np.ones((n, n), dtype=bool)))
    out = _merge(np.einsum("bhqk,bhkd->bhqd", w, v[:, kv_of])) @ i["W_o"]
    cache_k, cache_v = i["cache_k"].copy(), i["cache_v"].copy()
    cache_k[:, :, :n], cache_v[:, :, :n] = k, v
    return _result(out, cache_k, cache_v)


def _backward(i) -> dict:
    """Gradients of sum(outputs * upstream) for one (correct) step: the
    overwritten and the unfilled slots of the input caches get 0."""
    x, t_past = i["x_new"], int(i["t_past"])
    n = x.shape[1]
    heads, kv_heads = int(i["num_heads"]), int(i["num_kv_heads"])
    group = heads // kv_heads
    _, _, _, (q, k, v, w) = _step(i, x, i["cache_k"], i["cache_v"], t_past)
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
    new = slice(t_past, t_past + n)
    dq_m = _merge(dq)
    dk_m, dv_m = _merge(dk[:, :, new]), _merge(dv[:, :, new])
    dk[:, :, new], dv[:, :, new] = 0.0, 0.0  # overwritten: no gradient
    return {
        "grad_x_new": dq_m @ i["W_q"].T + dk_m @ i["W_k"].T + dv_m @ i["W_v"].T,
        "grad_cache_k": dk,
        "grad_cache_v": dv,
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
# alignment a non-empty cache); a split without transpose is right for 1
# token; slots to spare after the chunk for a mask that reads them
GQA = ("chunk", "prefill", "decode")
CHUNKED = ("chunk", "decode")
MULTI = ("chunk", "prefill", "mha", "mqa", "decode")
PAST = ("chunk", "mha", "mqa", "decode")
SPARE = ("chunk", "prefill", "mha", "decode")
VARIANTS = (
    _variant(
        "write-at-zero",
        "the new keys and values are written into slots 0 .. n_new - 1, over "
        "the cached tokens; they belong right after them: slots t_past .. "
        "t_past + n_new - 1 (cache[:, :, t_past : t_past + n_new] = new).",
        {"write": "zero"},
        PAST,
    ),
    # the concat cache's bottom-right mask reused with the key length = capacity
    _variant(
        "attends-unfilled-slots",
        "the causal mask is aligned to the end of the CACHE (query i sees "
        "slots 0 .. capacity - n_new + i), so the queries read unfilled "
        "slots that hold no token; query i of the chunk sits at t_past + i "
        "and sees slots 0 .. t_past + i only.",
        {"mask": "capacity"},
        SPARE,
    ),
    # the Hugging Face / SDPA is_causal pitfall (pytorch/pytorch#108108)
    _variant(
        "top-left-mask",
        "the causal mask is aligned top-left (query i sees slots 0..i, as "
        "torch's is_causal=True does when there are fewer queries than keys); "
        "the new tokens come after the t_past cached ones: query i of the "
        "chunk sees slots 0 .. t_past + i.",
        {"mask": "top_left"},
        PAST,
    ),
    _variant(
        "no-causal-mask",
        "there is no causal mask inside the chunk: each new token also sees "
        "the new tokens after it. With n_new > 1, query i of the chunk may "
        "see slots 0 .. t_past + i only.",
        {"mask": "none"},
        MULTI,
    ),
    _variant(
        "cache-not-updated",
        "the caches come back as they went in: the step must WRITE the new "
        "keys and values into slots t_past .. t_past + n_new - 1 and return "
        "the written caches (in TensorFlow a new tensor: tensors are "
        "immutable).",
        {"store": False},
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
    "(GQA); a cache of 8 slots holding 3 tokens and a chunk of 2 new ones",
    "prefill": "GQA 4/2, an empty cache of 5 slots (t_past 0) and 3 new tokens",
    "mha": "num_heads 4, num_kv_heads 4 (MHA): 7 slots, 3 cached, 2 new tokens",
    "mqa": "num_heads 4, num_kv_heads 1 (MQA): 5 slots, 3 cached, 2 new "
    "tokens (the chunk fills the cache)",
    "decode": f"GQA 4/2: a sequence of 7 tokens decoded into an empty cache "
    f"of {DECODE_CAPACITY} slots in chunks of 3, 1, 2, 1, the returned cache "
    "fed back; outputs (all steps, in order) compared with one causal pass, "
    "and the final cache",
}
REMINDER = (
    "split x_new @ W_q into num_heads heads and x_new @ W_k, x_new @ W_v into "
    "num_kv_heads heads (contiguous features), write them into slots t_past "
    ".. t_past + n_new - 1 of the caches (axis 2; the other slots unchanged), "
    "query head h reads kv head h // (num_heads // num_kv_heads), "
    "softmax(Q K^T / sqrt(d_head)) where query i sees slots 0 .. t_past + i "
    "only, concatenate the heads in order, then W_o; return the caches."
)
COMPARE = ("outputs", "cache_k", "cache_v")
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
    attncourse.numpy decoding: decode_step on the filled slots, chunk by
    chunk for the decode case, and grouped_query_attention's full causal
    pass), with the chunked decode of _step, and with a float64 PyTorch
    autograd implementation that writes into the cache in place (outputs,
    caches, gradients)."""
    import torch

    import attncourse.numpy as anp

    heads, kv_heads = int(inputs["num_heads"]), int(inputs["num_kv_heads"])
    params = {w: inputs[w] for w in WEIGHTS}
    if case == "decode":
        x = inputs["x"]
        n = x.shape[1]
        for key, value in _decode(inputs).items():
            np.testing.assert_allclose(value, exp[key], atol=1e-12, err_msg=key)
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
        np.testing.assert_allclose(cache.keys, exp["cache_k"][:, :, :n], atol=1e-12)
        np.testing.assert_allclose(cache.values, exp["cache_v"][:, :, :n], atol=1e-12)
        np.testing.assert_array_equal(
            exp["cache_k"][:, :, n:], inputs["cache_k"][:, :, n:]
        )
        return
    t_past, n_new = int(inputs["t_past"]), inputs["x_new"].shape[1]
    filled = (inputs["cache_k"][:, :, :t_past], inputs["cache_v"][:, :, :t_past])
    out, cache = anp.decode_step(
        inputs["x_new"], params, heads, kv_heads, anp.KVCache(*filled)
    )
    np.testing.assert_allclose(out, exp["outputs"], atol=1e-12)
    end = t_past + n_new
    np.testing.assert_allclose(cache.keys, exp["cache_k"][:, :, :end], atol=1e-12)
    np.testing.assert_allclose(cache.values, exp["cache_v"][:, :, :end], atol=1e-12)
    for key in ("cache_k", "cache_v"):  # the unfilled slots are left alone
        np.testing.assert_array_equal(exp[key][:, :, end:], inputs[key][:, :, end:])
    names = ("x_new", "cache_k", "cache_v", *WEIGHTS)
    t = {n: torch.tensor(inputs[n], requires_grad=True) for n in names}
    b = t["x_new"].shape[0]

    def split(z, count):
        return z.reshape(b, n_new, count, D_HEAD).transpose(1, 2)

    q = split(t["x_new"] @ t["W_q"], heads)
    k, v = t["cache_k"].clone(), t["cache_v"].clone()
    k[:, :, t_past:end] = split(t["x_new"] @ t["W_k"], kv_heads)
    v[:, :, t_past:end] = split(t["x_new"] @ t["W_v"], kv_heads)
    group = heads // kv_heads
    kr = k[:, :, :end].repeat_interleave(group, dim=1)
    vr = v[:, :, :end].repeat_interleave(group, dim=1)
    allowed = torch.ones(n_new, end, dtype=torch.bool).tril(t_past)
    scores = q @ kr.transpose(-1, -2) / D_HEAD**0.5
    w = torch.softmax(scores.masked_fill(~allowed, -torch.inf), dim=-1)
    out = (w @ vr).transpose(1, 2).reshape(b, n_new, heads * D_HEAD) @ t["W_o"]
    for key, value in (("outputs", out), ("cache_k", k), ("cache_v", v)):
        np.testing.assert_allclose(value.detach().numpy(), exp[key], atol=1e-12)
    if case != "chunk":
        return
    (out * torch.tensor(inputs["upstream"])).sum().backward()
    for n in names:
        np.testing.assert_allclose(
            t[n].grad.numpy(), exp[f"grad_{n}"], atol=1e-10, err_msg=n
        )
