"""Assignment ``transformer-block``: the post-LN encoder block of the 2017 paper.

The chapter builds the pre-LN block and motivates post-LN; the assignment asks
for the post-LN one, which the page states as a formula only.

TransformerBlockTF(d_model, num_heads, d_ff) (keras.layers.Layer) and
TransformerBlockTorch(d_model, num_heads, d_ff) (nn.Module); the course's flat
parameter layout (``attn.W_q`` ... ``norm2.beta``) as attributes, the first
"." written "_": attn_W_q, attn_b_q, attn_W_k, attn_b_k, attn_W_v, attn_b_v,
attn_W_o, attn_b_o (W (d_model, d_model), b (d_model,)), norm1_gamma,
norm1_beta (d_model,), ffn_W_1 (d_model, d_ff), ffn_b_1 (d_ff,), ffn_W_2
(d_ff, d_model), ffn_b_2 (d_model,), norm2_gamma, norm2_beta; x @ W layout:

    LN(z) = (z - mean) / sqrt(var + 1e-5) * gamma + beta   over the features,
                                                          biased variance
    h = LN1(x + MHA(x))           heads: contiguous d_head slices, scaled by
                                  1/sqrt(d_head), concatenated, @ W_o + b_o
    y = LN2(h + ReLU(h W_1 + b_1) W_2 + b_2)

call(x, padding_mask=None, return_weights=False); padding_mask bool (batch,
n), True = a real token (keys with False get weight 0, for every query and
head; "mask" would collide with Keras's own mask argument); weights
(batch, num_heads, n, n). Checks: ``forward`` (two lengths, 2 and 4 heads),
``masks`` (a padded batch), ``gradients`` (of sum(outputs * g) w.r.t. x and
the sixteen weights).
"""

import math

import numpy as np

from grader import numeric
from grader.assignments._common import layer_checks, rng
from grader.assignments.mistakes import (
    inverted_mask,
    mask_added,
    mask_ignored,
    mask_zero_fill,
    missing_scale,
    softmax_axis,
)
from grader.checks import Variant
from grader.kernel.runners.transformer_block import (
    D_FF,
    D_MODEL,
    RUNS,
    TARGETS,
    WEIGHTS,
)
from grader.provenance import BUILTIN_ATTENTION, COURSE_ATTENTION

NAME = "transformer-block"
SEED = 7007
EPS = 1e-5
# What the solution may not call (grader.provenance flags it for review): the
# course library's blocks, norms and attention, the built-in attention and
# Transformer layers, and the built-in normalisation layers and functions
# (the exercise is to write the norm: its axis, variance and epsilon).
FORBIDDEN = (
    *COURSE_ATTENTION,
    *BUILTIN_ATTENTION,
    # every normalisation that computes the statistics itself: LayerNorm, and
    # group / instance / batch norm on a reshaped x, which equal it
    "keras.*.*Normalization",
    "keras.*.layer_normalization",
    "keras.*.rms_normalization",
    "keras.*.TransformerEncoder",
    "torch.*.*Norm",
    "torch.*.*Norm[0-9]d",
    "torch.*.*layer_norm*",
    "torch.*.*rms_norm*",
    "torch.*.*group_norm*",
    "torch.*.*instance_norm*",
    "torch.*.*batch_norm*",
    "torch.*.TransformerEncoderLayer",
    "tensorflow.*.*fused_batch_norm*",
    "tensorflow.*.FusedBatchNorm*",
)
SHORT, LONG, PADDED_LEN = 4, 7, 5
LENGTHS = (4, 3, 2)  # every padded sequence has padding: an inverted mask is defined
MARGIN = 1e-3  # |ReLU input| at least this: float32 cannot flip a ReLU's side


def _weights(r) -> dict:
    d, f = D_MODEL, D_FF
    w = {}
    for c in "qkvo":
        w[f"attn_W_{c}"] = r.normal(size=(d, d)) / math.sqrt(d)
        w[f"attn_b_{c}"] = 0.2 * r.normal(size=(d,))
    # a small attention update: x + MHA(x) keeps a per-token variance near
    # 0.03, where LN1's epsilon and variance change the outputs clearly
    w["attn_W_o"] *= 0.3
    w["attn_b_o"] *= 0.25
    for n in ("norm1", "norm2"):
        w[f"{n}_gamma"] = 1.0 + 0.3 * r.normal(size=(d,))
        w[f"{n}_beta"] = 0.2 * r.normal(size=(d,))
    w["ffn_W_1"] = r.normal(size=(d, f)) / math.sqrt(d)
    w["ffn_b_1"] = 0.2 * r.normal(size=(f,))
    w["ffn_W_2"] = r.normal(size=(f, d)) / math.sqrt(f)
    w["ffn_b_2"] = 0.2 * r.normal(size=(d,))
    return w


def _case(r, batch, n, heads, lengths=None) -> dict:
    """One case. x is small (std about 0.15, like a fresh embedding) and so
    is the attention's update: with a per-token variance of x + MHA(x) near
    0.03 the norm's epsilon (1e-5 vs 1e-3) and its variance (biased vs
    unbiased) change the outputs clearly. The weights are
    redrawn until no ReLU input lies within MARGIN of 0."""
    mask = (
        np.ones((batch, n), dtype=bool)
        if lengths is None
        else numeric.lengths_mask(np.array(lengths), n)
    )
    while True:
        case = {
            "x": 0.1 * r.normal(size=(batch, n, D_MODEL))
            + 0.1 * r.normal(size=(batch, n, 1)),
            "padding_mask": mask,
            "has_mask": np.array(lengths is not None),
            "num_heads": np.array(heads),
            **_weights(r),
            "upstream": r.normal(size=(batch, n, D_MODEL)),
        }
        if np.min(np.abs(_forward(case, trace=True)["ffn_pre"])) > MARGIN:
            return case


def make_cases(seed: int = SEED) -> dict:
    r = rng(seed)
    return {
        "short": _case(r, 2, SHORT, 2),
        "long": _case(r, 2, LONG, 4),
        "padded": _case(r, 3, PADDED_LEN, 2, lengths=LENGTHS),
    }


def _norm(z, gamma, beta, eps=EPS, axis=-1, ddof=0, center=True, affine=True):
    """LayerNorm over ``axis`` and its wrong variants (``center`` False: no
    mean subtracted, RMSNorm's statistics)."""
    mu = z.mean(axis=axis, keepdims=True) if center else 0.0
    var = np.sum((z - mu) ** 2, axis=axis, keepdims=True) / (z.shape[axis] - ddof)
    zhat = (z - mu) / np.sqrt(var + eps)
    return zhat * gamma + beta if affine else zhat


def _forward(
    i,
    norm="post",
    res_attn=True,
    res_ffn=True,
    eps=EPS,
    axis=-1,
    ddof=0,
    center=True,
    affine=True,
    shared_norm=False,
    scale="d_head",
    softmax_over=-1,
    out_proj=True,
    activation="relu",
    mask="ok",
    trace=False,
):
    """The reference and its wrong variants.

    ``norm``: post (LN(x + f(x))), pre (x + f(LN(x))), branch (the norm on
    the sublayer's output: x + LN(f(x))), no_final (post-LN without the
    second norm: y = h + FFN(h)); ``res_attn`` / ``res_ffn``:
    the residual connections; ``eps``, ``axis``, ``ddof``, ``center``,
    ``affine``: the norm's epsilon, axis, variance (ddof 1: unbiased), mean
    subtraction and gamma/beta; ``shared_norm``: norm1's gamma and beta in
    both norms; ``scale``: d_head, none, d_model; ``softmax_over``: -1 keys,
    -2 queries; ``out_proj``: W_o and b_o applied; ``activation``: relu,
    gelu (exact), none; ``mask``: ok, inverted, ignored, added (scores +
    mask), zero_fill (hidden scores set to 0). ``trace`` adds the
    intermediate values the backward pass needs."""
    x = i["x"]
    h = int(i["num_heads"])
    d_head = D_MODEL // h
    second = "norm1" if shared_norm else "norm2"

    def ln(z, which):
        return _norm(
            z, i[f"{which}_gamma"], i[f"{which}_beta"], eps, axis, ddof, center, affine
        )

    def attention(a):
        q, k, v = (
            numeric.split_heads(a @ i[f"attn_W_{c}"] + i[f"attn_b_{c}"], h)
            for c in "qkv"
        )
        div = {"d_head": d_head, "none": 1.0, "d_model": D_MODEL}[scale]
        s = q @ np.swapaxes(k, -1, -2) / math.sqrt(div)
        m = np.ones(s.shape, dtype=bool)
        if bool(i["has_mask"]) and mask != "ignored":
            pad = np.broadcast_to(i["padding_mask"][:, None, None, :], s.shape)
            if mask == "added":
                s = s + pad
            elif mask == "zero_fill":
                s = np.where(pad, s, 0.0)
            else:
                m = ~pad if mask == "inverted" else pad
        if softmax_over == -1:
            w = numeric.masked_softmax(s, m)
        else:
            w = numeric.softmax(np.where(m, s, -1e9), axis=softmax_over) * m
        concat = numeric.merge_heads(w @ v)
        out = concat @ i["attn_W_o"] + i["attn_b_o"] if out_proj else concat
        return out, {"q": q, "k": k, "v": v, "weights": w, "concat": concat}

    def ffn(z):
        u = z @ i["ffn_W_1"] + i["ffn_b_1"]
        act = {
            "relu": lambda t: np.maximum(t, 0.0),
            "gelu": lambda t: 0.5 * t * (1.0 + _erf(t / math.sqrt(2.0))),
            "none": lambda t: t,
        }[activation]
        return act(u) @ i["ffn_W_2"] + i["ffn_b_2"], u

    if norm == "pre":
        a = ln(x, "norm1")
        attn, saved = attention(a)
        hid = (x if res_attn else 0.0) + attn
        z = ln(hid, second)
        f, u = ffn(z)
        y = (hid if res_ffn else 0.0) + f
    elif norm == "branch":  # x + LN1(MHA(x)), h + LN2(FFN(h))
        a = x
        attn, saved = attention(x)
        s1 = attn
        hid = x + ln(attn, "norm1")
        z = hid
        f, u = ffn(hid)
        s2 = f
        y = hid + ln(f, second)
    else:  # "post" (and "no_final": the second norm left out)
        a = x
        attn, saved = attention(x)
        s1 = (x if res_attn else 0.0) + attn
        hid = ln(s1, "norm1")
        z = hid
        f, u = ffn(hid)
        s2 = (hid if res_ffn else 0.0) + f
        y = s2 if norm == "no_final" else ln(s2, second)
    result = {"outputs": y, "weights": saved["weights"]}
    if trace:
        result.update(saved, a=a, hid=hid, z=z, ffn_pre=u)
        if norm != "pre":
            result.update(s1=s1, s2=s2)
    return result


def _erf(t):
    return np.vectorize(math.erf, otypes=[float])(t)


def _norm_backward(z, gamma, grad, eps=EPS):
    """Gradients (dz, dgamma, dbeta) of sum(LN(z) * grad) over the last axis."""
    mu = z.mean(axis=-1, keepdims=True)
    inv = 1.0 / np.sqrt(((z - mu) ** 2).mean(axis=-1, keepdims=True) + eps)
    zhat = (z - mu) * inv
    g = grad * gamma
    dz = inv * (
        g - g.mean(axis=-1, keepdims=True) - zhat * (g * zhat).mean(-1, keepdims=True)
    )
    flat = (-1, zhat.shape[-1])
    return dz, (grad * zhat).reshape(flat).sum(0), grad.reshape(flat).sum(0)


def _dense_backward(x, W, grad):
    """(dx, dW, db) of sum((x @ W + b) * grad)."""
    return (
        grad @ W.T,
        np.einsum("bni,bno->io", x, grad),
        grad.reshape(-1, grad.shape[-1]).sum(0),
    )


def _backward(i, t) -> dict:
    """Gradients of sum(outputs * upstream) for the post-LN reference (``t``:
    the traced forward pass)."""
    h = int(i["num_heads"])
    g = i["upstream"]
    out = {}
    # y = LN2(s2),  s2 = hid + relu(u) W_2 + b_2,  u = hid W_1 + b_1
    ds2, out["grad_norm2_gamma"], out["grad_norm2_beta"] = _norm_backward(
        t["s2"], i["norm2_gamma"], g
    )
    r = np.maximum(t["ffn_pre"], 0.0)
    dr, out["grad_ffn_W_2"], out["grad_ffn_b_2"] = _dense_backward(r, i["ffn_W_2"], ds2)
    du = dr * (t["ffn_pre"] > 0)
    dhid, out["grad_ffn_W_1"], out["grad_ffn_b_1"] = _dense_backward(
        t["hid"], i["ffn_W_1"], du
    )
    dhid = dhid + ds2
    # hid = LN1(s1),  s1 = x + concat W_o + b_o
    ds1, out["grad_norm1_gamma"], out["grad_norm1_beta"] = _norm_backward(
        t["s1"], i["norm1_gamma"], dhid
    )
    dconcat, out["grad_attn_W_o"], out["grad_attn_b_o"] = _dense_backward(
        t["concat"], i["attn_W_o"], ds1
    )
    dq, dk, dv = numeric.attention_backward(
        t["q"],
        t["k"],
        t["v"],
        t["weights"],
        numeric.split_heads(dconcat, h),
        1.0 / math.sqrt(D_MODEL // h),
    )
    dx = ds1
    for c, dp in zip("qkv", (dq, dk, dv), strict=True):
        dx_c, out[f"grad_attn_W_{c}"], out[f"grad_attn_b_{c}"] = _dense_backward(
            i["x"], i[f"attn_W_{c}"], numeric.merge_heads(dp)
        )
        dx = dx + dx_c
    out["grad_x"] = dx
    return out


def expected(case: str, inputs: dict) -> dict:
    t = _forward(inputs, trace=True)
    result = {"outputs": t["outputs"], "weights": t["weights"]}
    if case == "short":
        result.update(_backward(inputs, t))
    return result


# Each variant cites where learners report the mistake.
VARIANTS = (
    # the chapter's own block (and GPT-2's): the norm moved into the branch
    Variant(
        "pre-ln",
        "the block is PRE-LN, x + MHA(LN1(x)) and h + FFN(LN2(h)) (the "
        "chapter's block, GPT-2's); this exercise asks for the POST-LN block "
        "of the 2017 paper: h = LN1(x + MHA(x)), y = LN2(h + FFN(h)) -- the "
        "sublayers read the stream itself, and the norm comes AFTER each "
        "residual addition.",
        lambda i: _forward(i, norm="pre"),
    ),
    # the norm wrapped around the sublayer's output instead of the sum
    Variant(
        "norm-on-branch",
        "the norm is applied to the sublayer's output before the residual "
        "is added, x + LN1(MHA(x)); post-LN normalises the SUM: h = LN1(x + "
        "MHA(x)), y = LN2(h + FFN(h)), so the block's output is normalised.",
        lambda i: _forward(i, norm="branch"),
    ),
    Variant(
        "missing-second-norm",
        "the second norm is missing: y = h + FFN(h); post-LN normalises after "
        "BOTH residual additions, y = LN2(h + FFN(h)) with norm2_gamma and "
        "norm2_beta.",
        lambda i: _forward(i, norm="no_final"),
    ),
    Variant(
        "missing-attention-residual",
        "the residual connection around the attention is missing: h = "
        "LN1(x + MHA(x)), not LN1(MHA(x)).",
        lambda i: _forward(i, res_attn=False),
    ),
    Variant(
        "missing-ffn-residual",
        "the residual connection around the feed-forward network is "
        "missing: y = LN2(h + FFN(h)), not LN2(FFN(h)).",
        lambda i: _forward(i, res_ffn=False),
    ),
    # mean/var over dim=1 of (batch, n, d_model): the positions
    Variant(
        "layer-norm-axis",
        "the LayerNorm statistics run over the positions (axis 1) instead "
        "of the features: each token is normalised on its own, mean and "
        "variance over the LAST axis (keepdims), so a padding token cannot "
        "change the other tokens.",
        lambda i: _forward(i, axis=1),
    ),
    # torch.var / Tensor.std default to the unbiased estimator (correction=1)
    Variant(
        "unbiased-variance",
        "the variance is the unbiased estimate (divided by d_model - 1, "
        "torch.var's and Tensor.std's default); LayerNorm uses the biased "
        "one: mean((x - mean)^2), i.e. x.var(dim=-1, unbiased=False, "
        "keepdim=True) or correction=0.",
        lambda i: _forward(i, ddof=1),
    ),
    # keras.layers.LayerNormalization(epsilon=1e-3) by default
    Variant(
        "layer-norm-epsilon",
        "the LayerNorm epsilon is 1e-3 (keras.layers.LayerNormalization's "
        "default); the interface asks for 1e-5 (torch.nn.LayerNorm's): "
        "(x - mean) / sqrt(var + 1e-5).",
        lambda i: _forward(i, eps=1e-3),
    ),
    Variant(
        "rms-norm-instead-of-layer-norm",
        "the norm does not subtract the mean (RMSNorm's statistics, "
        "x / sqrt(mean(x^2) + eps)); LayerNorm centres first: (x - mean) / "
        "sqrt(var + eps).",
        lambda i: _forward(i, center=False),
    ),
    Variant(
        "norm-without-gamma-beta",
        "the norms ignore their gamma and beta: LN(x) = (x - mean) / "
        "sqrt(var + eps) * gamma + beta, with norm1_* after the attention's "
        "residual addition and norm2_* after the feed-forward network's.",
        lambda i: _forward(i, affine=False),
    ),
    Variant(
        "norm1-used-twice",
        "the second norm uses norm1's gamma and beta; the norm after the "
        "feed-forward network's residual addition has its own weights, "
        "norm2_gamma and norm2_beta.",
        lambda i: _forward(i, shared_norm=True),
    ),
    missing_scale(lambda i: _forward(i, scale="none"), "sqrt(d_head)"),
    Variant(
        "scale-uses-d_model",
        "the scores are divided by sqrt(d_model); each head scales by "
        "sqrt(d_head), d_head = d_model // num_heads.",
        lambda i: _forward(i, scale="d_model"),
    ),
    softmax_axis(lambda i: _forward(i, softmax_over=-2)),
    Variant(
        "missing-output-projection",
        "the attention's output projection is missing: concatenate the "
        "heads, then apply attn_W_o and attn_b_o before the residual.",
        lambda i: _forward(i, out_proj=False),
    ),
    # GPT/BERT code uses GELU; this block (like the 2017 paper) uses ReLU
    Variant(
        "gelu-instead-of-relu",
        "the feed-forward network uses GELU; this block's activation is "
        "ReLU: max(0, h W_1 + b_1) W_2 + b_2.",
        lambda i: _forward(i, activation="gelu"),
    ),
    Variant(
        "missing-activation",
        "the feed-forward network has no activation, so its two linear maps "
        "collapse into one; apply ReLU between them: max(0, h W_1 + b_1) "
        "W_2 + b_2.",
        lambda i: _forward(i, activation="none"),
    ),
)

PADDED = ("padded",)
MASK_VARIANTS = (
    inverted_mask(lambda i: _forward(i, mask="inverted"), "padding_mask"),
    mask_ignored(lambda i: _forward(i, mask="ignored"), "padding_mask"),
    mask_added(lambda i: _forward(i, mask="added"), cases=PADDED),
    mask_zero_fill(lambda i: _forward(i, mask="zero_fill"), cases=PADDED),
    # what torch.nn.TransformerEncoderLayer's inference fast path returns
    Variant(
        "padding-outputs-zeroed",
        "the outputs at the padding positions are set to 0; the mask only "
        "hides the padding KEYS, and a padding position's own output is "
        "computed like any other (it attends to the real tokens).",
        lambda i: _zeroed_padding(_forward(i), i),
        cases=PADDED,
    ),
)


def _zeroed_padding(result: dict, i: dict) -> dict:
    keep = i["padding_mask"][:, :, None]
    return dict(result, outputs=np.where(keep, result["outputs"], 0.0))


def _hidden(i):
    """Positions of the weights that must be 0 (padding keys), or None."""
    return ~i["padding_mask"][:, None, None, :] if bool(i["has_mask"]) else None


NOTES = {
    "short": f"batch 2, {SHORT} positions, d_model {D_MODEL}, 2 heads, d_ff {D_FF}",
    "long": f"batch 2, {LONG} positions, 4 heads (d_head 2)",
    "padded": (
        f"batch 3, {PADDED_LEN} positions, 2 heads, padding_mask (batch, n) for "
        f"lengths {', '.join(map(str, LENGTHS))}"
    ),
}
REMINDER = (
    "post-LN: h = LN1(x + MHA(x)), y = LN2(h + ReLU(h W_1 + b_1) W_2 + b_2); "
    "LN over the last axis with the biased variance and eps 1e-5, then "
    "* gamma + beta; MHA with biases, contiguous heads, 1/sqrt(d_head), "
    "concatenated heads @ attn_W_o + attn_b_o."
)
CHECKS = layer_checks(
    RUNS,
    TARGETS,
    variants=VARIANTS,
    mask_variants=MASK_VARIANTS,
    notes=NOTES,
    reminder=REMINDER,
    # the input's gradient first: a mistake that leaves a weight unused (no
    # gradient at all) is named by the verdict before "no gradient reaches"
    grads=("grad_x", *(f"grad_{w}" for w in WEIGHTS)),
    grad_reminder="gradients of sum(outputs * g) must reach x and all "
    "sixteen weights (check the forward test first).",
    hidden=_hidden,
)


def library_params(inputs: dict) -> dict:
    """The weights in the course's flat layout ("attn.W_q", ...)."""
    return {w.replace("_", ".", 1): inputs[w] for w in WEIGHTS}


def crosscheck(case: str, inputs: dict, exp: dict) -> None:
    """The reference agrees with the library's transformer_block (NumPy
    forward, PyTorch float64 autograd for the gradients) and with
    torch.nn.TransformerEncoderLayer (norm_first=False, ReLU, eps 1e-5,
    weights copied, float64 autograd; nn.MultiheadAttention on x for
    the weights)."""
    _crosscheck_library(case, inputs, exp)
    _crosscheck_torch_layer(case, inputs, exp)


def _crosscheck_library(case: str, inputs: dict, exp: dict) -> None:
    import torch

    import attncourse.numpy as anp
    import attncourse.torch as atorch

    h = int(inputs["num_heads"])
    params = library_params(inputs)
    mask = (
        inputs["padding_mask"][:, None, None, :] if bool(inputs["has_mask"]) else None
    )
    out, w = anp.transformer_block(inputs["x"], params, h, norm="post", mask=mask)
    np.testing.assert_allclose(out, exp["outputs"], atol=1e-12)
    np.testing.assert_allclose(w, exp["weights"], atol=1e-12)
    if case != "short":
        return
    t = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}
    x = torch.tensor(inputs["x"], requires_grad=True)
    y, _ = atorch.transformer_block(x, t, h, norm="post")
    (y * torch.tensor(inputs["upstream"])).sum().backward()
    got = {"grad_x": x.grad}
    got.update({f"grad_{k.replace('.', '_', 1)}": v.grad for k, v in t.items()})
    assert set(got) == {k for k in exp if k.startswith("grad_")}
    for key, grad in got.items():
        np.testing.assert_allclose(grad.numpy(), exp[key], atol=1e-10, err_msg=key)


def _crosscheck_torch_layer(case: str, inputs: dict, exp: dict) -> None:
    import torch
    from torch import nn

    h = int(inputs["num_heads"])
    layer = nn.TransformerEncoderLayer(
        D_MODEL,
        h,
        D_FF,
        dropout=0.0,
        activation="relu",
        layer_norm_eps=EPS,
        batch_first=True,
        norm_first=False,
        dtype=torch.float64,
    )
    layer.train()  # no fast path: it zeroes the outputs at padded positions
    p = {k: torch.tensor(v) for k, v in inputs.items() if k in WEIGHTS}
    with torch.no_grad():
        sa = layer.self_attn
        sa.in_proj_weight.copy_(torch.cat([p[f"attn_W_{c}"] for c in "qkv"], 1).T)
        sa.in_proj_bias.copy_(torch.cat([p[f"attn_b_{c}"] for c in "qkv"]))
        sa.out_proj.weight.copy_(p["attn_W_o"].T)
        sa.out_proj.bias.copy_(p["attn_b_o"])
        layer.linear1.weight.copy_(p["ffn_W_1"].T)
        layer.linear1.bias.copy_(p["ffn_b_1"])
        layer.linear2.weight.copy_(p["ffn_W_2"].T)
        layer.linear2.bias.copy_(p["ffn_b_2"])
        for n in ("norm1", "norm2"):
            getattr(layer, n).weight.copy_(p[f"{n}_gamma"])
            getattr(layer, n).bias.copy_(p[f"{n}_beta"])
    x = torch.tensor(inputs["x"], requires_grad=True)
    pad = torch.tensor(~inputs["padding_mask"]) if bool(inputs["has_mask"]) else None
    y = layer(x, src_key_padding_mask=pad)
    np.testing.assert_allclose(y.detach().numpy(), exp["outputs"], atol=1e-12)
    _, w = sa(
        *(x,) * 3,
        key_padding_mask=pad,
        need_weights=True,
        average_attn_weights=False,
    )
    np.testing.assert_allclose(w.detach().numpy(), exp["weights"], atol=1e-12)
    if case != "short":
        return
    (y * torch.tensor(inputs["upstream"])).sum().backward()
    got = {
        "grad_x": x.grad,
        "grad_attn_W_o": sa.out_proj.weight.grad.T,
        "grad_attn_b_o": sa.out_proj.bias.grad,
        "grad_ffn_W_1": layer.linear1.weight.grad.T,
        "grad_ffn_b_1": layer.linear1.bias.grad,
        "grad_ffn_W_2": layer.linear2.weight.grad.T,
        "grad_ffn_b_2": layer.linear2.bias.grad,
    }
    for j, c in enumerate("qkv"):
        rows = slice(j * D_MODEL, (j + 1) * D_MODEL)
        got[f"grad_attn_W_{c}"] = sa.in_proj_weight.grad[rows].T
        got[f"grad_attn_b_{c}"] = sa.in_proj_bias.grad[rows]
    for n in ("norm1", "norm2"):
        got[f"grad_{n}_gamma"] = getattr(layer, n).weight.grad
        got[f"grad_{n}_beta"] = getattr(layer, n).bias.grad
    assert set(got) == {k for k in exp if k.startswith("grad_")}
    for key, grad in got.items():
        np.testing.assert_allclose(grad.numpy(), exp[key], atol=1e-10, err_msg=key)
