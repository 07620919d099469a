"""Tiled (flash) attention: forward, logsumexp and backward against the naive way.

The naive reference is scaled_dot_product_attention with the combined mask
(mask AND causal_mask); the logsumexp reference is computed directly from the
scores here. Gradients: torch's FlashAttention against autograd on the naive
version, tf's custom gradient against GradientTape on the naive version (eager
and in tf.function), the NumPy backward against both, tf against torch.
causal=True with align="bottom_right" is checked against causal_mask(...,
align="bottom_right"). Causal skipping is checked by behaviour (NaN keys that
only a skipped block holds leave everything finite) and by counting the tiles
computed.
"""

import numpy as np
import pytest
import tensorflow as tf
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import attncourse.numpy as anp
import attncourse.tf as atf
import attncourse.torch as atorch

MODS = {"numpy": anp, "tf": atf, "torch": atorch}
CONVERT = {
    "numpy": np.asarray,
    "tf": tf.convert_to_tensor,  # keeps the dtype: float64 stays float64
    "torch": lambda x: torch.from_numpy(np.ascontiguousarray(x)),
}
MASK_KINDS = ("none", "padding", "full", "2d")


def to_np(x):
    return x.detach().numpy() if hasattr(x, "detach") else np.asarray(x)


def make_inputs(rng, b, nq, nk, d=4, d_v=3, kind="none", dtype=np.float64):
    """queries, keys, values and a mask of the given kind (rows may be empty)."""
    q, k = rng.normal(size=(b, nq, d)), rng.normal(size=(b, nk, d))
    v = rng.normal(size=(b, nk, d_v))
    mask = {
        "none": None,
        "padding": rng.random((b, 1, nk)) < 0.7,
        "full": rng.random((b, nq, nk)) < 0.6,
        "2d": rng.random((nq, nk)) < 0.6,
    }[kind]
    return q.astype(dtype), k.astype(dtype), v.astype(dtype), mask


def combined(mask, causal, nq, nk, align="top_left"):
    """The naive version's mask: mask AND causal_mask (None if neither)."""
    if not causal:
        return mask
    below = anp.causal_mask(nq, nk, align=align)
    return below if mask is None else mask & below


def direct_logsumexp(q, k, mask, scale=None):
    """log sum_j exp(s_ij) over the visible keys, straight from the definition."""
    scale = 1 / np.sqrt(q.shape[-1]) if scale is None else scale
    e = np.exp(q @ k.transpose(0, 2, 1) * scale)  # small scores: no overflow
    e = e if mask is None else np.where(mask, e, 0)
    with np.errstate(divide="ignore"):
        return np.log(e.sum(-1))


def naive_numpy(q, k, v, mask, causal, scale=None, align="top_left"):
    full = combined(mask, causal, q.shape[1], k.shape[1], align)
    out, _ = anp.scaled_dot_product_attention(q, k, v, mask=full, scale=scale)
    return out, direct_logsumexp(q, k, full, scale)


# --- forward: outputs and logsumexp == naive, any block sizes ------------------


@st.composite
def cases(draw):
    b, nq, nk = (
        draw(st.integers(1, 2)),
        draw(st.integers(1, 9)),
        draw(st.integers(1, 9)),
    )
    kw = {
        "causal": draw(st.booleans()),
        "block_q": draw(st.integers(1, 10)),
        "block_k": draw(st.integers(1, 10)),
        "align": draw(st.sampled_from(["top_left", "bottom_right"])),
    }
    kind = draw(st.sampled_from(MASK_KINDS))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    return make_inputs(rng, b, nq, nk, kind=kind), kw


@pytest.mark.parametrize(
    "fw, n", [("numpy", 40), ("torch", 15), ("tf", 8)], ids=["numpy", "torch", "tf"]
)
def test_forward_equals_naive_for_any_block_sizes(fw, n):
    @settings(max_examples=n, deadline=None)
    @given(case=cases())
    def check(case):
        (q, k, v, mask), kw = case
        c = CONVERT[fw]
        out, lse = MODS[fw].flash_attention(
            c(q), c(k), c(v), mask=None if mask is None else c(mask), **kw
        )
        want_out, want_lse = naive_numpy(q, k, v, mask, kw["causal"], align=kw["align"])
        np.testing.assert_allclose(to_np(out), want_out, atol=1e-12)
        np.testing.assert_allclose(to_np(lse), want_lse, atol=1e-12)  # -inf == -inf

    check()


@pytest.mark.parametrize("fw", MODS)
@pytest.mark.parametrize("kind", MASK_KINDS)
def test_attention_logsumexp_is_the_direct_logsumexp(fw, kind, rng):
    q, k, _, mask = make_inputs(rng, 2, 5, 7, kind=kind)
    c = CONVERT[fw]
    for causal, align in (
        (False, "top_left"),
        (True, "top_left"),
        (True, "bottom_right"),
    ):
        got = MODS[fw].attention_logsumexp(
            c(q),
            c(k),
            None if mask is None else c(mask),
            causal=causal,
            scale=0.3,
            align=align,
        )
        full = combined(mask, causal, 5, 7, align)
        want = direct_logsumexp(q, k, full, scale=0.3)
        np.testing.assert_allclose(to_np(got), want, atol=1e-12)


@pytest.mark.parametrize("fw", MODS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_dtype_follows_the_inputs(fw, dtype, rng):
    q, k, v, mask = make_inputs(rng, 2, 6, 5, kind="padding", dtype=dtype)
    c = CONVERT[fw]
    out, lse = MODS[fw].flash_attention(
        c(q), c(k), c(v), c(mask), causal=True, block_q=4, block_k=2, scale=0.5
    )
    assert to_np(out).dtype == dtype and to_np(lse).dtype == dtype
    want_out, want_lse = naive_numpy(q, k, v, mask, True, scale=0.5)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(to_np(out), want_out, atol=tol, rtol=tol)
    np.testing.assert_allclose(to_np(lse), want_lse, atol=tol, rtol=tol)


@pytest.mark.parametrize("fw", MODS)
@pytest.mark.parametrize(("nq", "nk"), [(0, 5), (4, 0), (0, 0)])
def test_empty_sequences_give_empty_or_masked_results(fw, nq, nk, rng):
    """No query: empty outputs; no key: every row fully masked (0, -inf)."""
    q, k, v = (rng.normal(size=(2, n, d)) for n, d in ((nq, 3), (nk, 3), (nk, 2)))
    c = CONVERT[fw]
    out, lse = MODS[fw].flash_attention(c(q), c(k), c(v), block_q=2, block_k=2)
    assert to_np(out).shape == (2, nq, 2) and to_np(lse).shape == (2, nq)
    assert np.all(to_np(out) == 0) and np.all(to_np(lse) == -np.inf)
    grads = MODS[fw].flash_attention_backward(
        c(q), c(k), c(v), out, lse, c(np.ones((2, nq, 2))), block_q=2, block_k=2
    )
    assert [to_np(g).shape for g in grads] == [q.shape, k.shape, v.shape]
    assert all(np.all(to_np(g) == 0) for g in grads)


# --- gradients -------------------------------------------------------------------

GRAD_CASES = {  # (nq, nk, mask kind, causal, block_q, block_k[, align])
    "square-causal": (7, 7, "none", True, 3, 2),
    "wide-causal-padding": (5, 9, "padding", True, 2, 4),
    "tall-causal": (9, 4, "none", True, 4, 3),
    "full-mask": (6, 8, "full", False, 4, 3),
    "one-tile": (4, 5, "2d", True, 64, 64),
    "wide-bottom-right": (5, 11, "padding", True, 2, 3, "bottom_right"),
    "tall-bottom-right": (9, 4, "none", True, 2, 3, "bottom_right"),
}


def grad_inputs(name, dtype=np.float64):
    nq, nk, kind, causal, bq, bk, *align = GRAD_CASES[name]
    rng = np.random.default_rng(len(name))
    q, k, v, mask = make_inputs(rng, 2, nq, nk, kind=kind, dtype=dtype)
    kw = {"mask": mask, "causal": causal, "block_q": bq, "block_k": bk}
    kw["align"] = align[0] if align else "top_left"
    return q, k, v, rng.normal(size=(2, nq, 3)).astype(dtype), kw


def torch_grads(q, k, v, g, kw, flash):
    qkv = [torch.tensor(x, requires_grad=True) for x in (q, k, v)]
    mask = None if kw["mask"] is None else torch.tensor(kw["mask"])
    if flash:
        out, _ = atorch.flash_attention(*qkv, **{**kw, "mask": mask})
    else:
        full = combined(
            kw["mask"],
            kw["causal"],
            q.shape[1],
            k.shape[1],
            kw.get("align", "top_left"),
        )
        full = None if full is None else torch.tensor(full)
        out, _ = atorch.scaled_dot_product_attention(*qkv, mask=full)
    return torch.autograd.grad((out * torch.tensor(g)).sum(), qkv)


def tf_grads(q, k, v, g, kw, flash, function=False):
    def grads(q, k, v):
        with tf.GradientTape() as tape:
            tape.watch([q, k, v])
            if flash:
                out, _ = atf.flash_attention(q, k, v, **kw)
            else:
                full = combined(
                    kw["mask"],
                    kw["causal"],
                    q.shape[1],
                    k.shape[1],
                    kw.get("align", "top_left"),
                )
                out, _ = atf.scaled_dot_product_attention(q, k, v, mask=full)
            loss = tf.reduce_sum(out * g)
        return tape.gradient(loss, [q, k, v])

    grads = tf.function(grads) if function else grads
    return grads(*(tf.constant(x) for x in (q, k, v)))


def numpy_grads(q, k, v, g, kw):
    out, lse = anp.flash_attention(q, k, v, **kw)
    return anp.flash_attention_backward(q, k, v, out, lse, g, **kw)


def assert_grads_close(got, want, tol=1e-10):
    for name, a, b in zip("qkv", got, want, strict=True):
        a, b = to_np(a), to_np(b)
        assert np.all(np.isfinite(a)), f"grad_{name} is not finite"
        np.testing.assert_allclose(a, b, atol=tol, rtol=tol, err_msg=f"grad_{name}")


@pytest.mark.parametrize("name", GRAD_CASES)
def test_gradients_equal_autograd_on_the_naive_version(name):
    q, k, v, g, kw = grad_inputs(name)
    torch_flash = torch_grads(q, k, v, g, kw, flash=True)
    torch_naive = torch_grads(q, k, v, g, kw, flash=False)
    tf_flash = tf_grads(q, k, v, g, kw, flash=True)
    tf_naive = tf_grads(q, k, v, g, kw, flash=False)
    assert_grads_close(torch_flash, torch_naive)
    assert_grads_close(tf_flash, tf_naive)
    assert_grads_close(numpy_grads(q, k, v, g, kw), torch_naive)
    assert_grads_close(numpy_grads(q, k, v, g, kw), tf_naive)
    assert_grads_close(tf_flash, torch_flash)


@pytest.mark.parametrize("name", ["square-causal", "wide-causal-padding"])
def test_gradients_in_float32(name):
    q, k, v, g, kw = grad_inputs(name, dtype=np.float32)
    want = torch_grads(*(x.astype(np.float64) for x in (q, k, v, g)), kw, flash=False)
    for got in (torch_grads(q, k, v, g, kw, True), tf_grads(q, k, v, g, kw, True)):
        assert all(to_np(x).dtype == np.float32 for x in got)
        assert_grads_close(got, want, tol=1e-4)


def test_tf_gradient_inside_tf_function():
    q, k, v, g, kw = grad_inputs("wide-causal-padding")
    traced = tf_grads(q, k, v, g, kw, flash=True, function=True)
    assert_grads_close(traced, tf_grads(q, k, v, g, kw, flash=False))


def test_torch_gradcheck_float64():
    q, k, v, _, kw = grad_inputs("wide-causal-padding")
    kw["mask"] = torch.tensor(kw["mask"][:1, :, :4])  # padding (1, 1, 4)
    qkv = [torch.tensor(x[:1, :4], requires_grad=True) for x in (q, k, v)]
    assert torch.autograd.gradcheck(
        lambda q, k, v: atorch.flash_attention(q, k, v, **kw)[0], qkv
    )


def test_torch_saves_inputs_outputs_and_one_row_tensor():
    q, k, v, _, kw = grad_inputs("square-causal")
    qkv = [torch.tensor(x, requires_grad=True) for x in (q, k, v)]
    out, lse = atorch.flash_attention(*qkv, **kw)
    saved = out.grad_fn.saved_tensors
    assert [tuple(t.shape) for t in saved] == [
        (2, 7, 4),
        (2, 7, 4),
        (2, 7, 3),
        (2, 7, 3),
        (2, 7),  # logsumexp: the only (b, nq) tensor, no (b, nq, nk) weights
    ]
    for t, x in zip(saved, [*qkv, out, lse], strict=True):
        assert t.data_ptr() == x.data_ptr()
    assert not lse.requires_grad  # logsumexp carries no gradient


# --- fully masked rows -------------------------------------------------------


@pytest.mark.parametrize("fw", MODS)
def test_fully_masked_rows_give_zeros_minus_inf_and_zero_gradients(fw, rng):
    q, k, v, mask = make_inputs(rng, 2, 5, 6, kind="full")
    mask[0, 2] = False  # one query sees no key
    mask[1] = False  # a whole sequence sees nothing
    g = rng.normal(size=(2, 5, 3))
    kw = {"mask": mask, "block_q": 2, "block_k": 4}
    c = CONVERT[fw]
    out, lse = MODS[fw].flash_attention(c(q), c(k), c(v), **{**kw, "mask": c(mask)})
    out, lse = to_np(out), to_np(lse)
    assert np.all(out[0, 2] == 0) and np.all(out[1] == 0)
    assert lse[0, 2] == -np.inf and np.all(lse[1] == -np.inf)
    assert np.all(np.isfinite(np.delete(lse[0], 2)))
    grads = {
        "numpy": lambda: numpy_grads(q, k, v, g, kw),
        "tf": lambda: tf_grads(q, k, v, g, kw, flash=True),
        "torch": lambda: torch_grads(q, k, v, g, kw, flash=True),
    }[fw]()
    gq, gk, gv = (to_np(x) for x in grads)
    for x in (gq, gk, gv):
        assert np.all(np.isfinite(x))
        assert np.all(x[1] == 0)  # nothing of sequence 1 reaches the loss
    assert np.all(gq[0, 2] == 0)


# --- causal: key blocks above the diagonal are skipped --------------------------


@pytest.mark.parametrize("fw", MODS)
def test_causal_never_reads_key_blocks_above_the_diagonal(fw, rng):
    """Keys 4..9 lie above the diagonal of every query (nq = 4): with block_k
    = 2 they fill whole blocks that causal skips, so NaN there, which would
    poison any tile that read it (0 * NaN = NaN), leaves everything finite."""
    q, k, v, _ = make_inputs(rng, 2, 4, 10)
    g = rng.normal(size=(2, 4, 3))
    want_out, want_lse = naive_numpy(q, k[:, :4], v[:, :4], None, causal=True)
    k[:, 4:], v[:, 4:] = np.nan, np.inf
    kw = {"mask": None, "causal": True, "block_q": 2, "block_k": 2}
    c = CONVERT[fw]
    out, lse = MODS[fw].flash_attention(c(q), c(k), c(v), **kw)
    np.testing.assert_allclose(to_np(out), want_out, atol=1e-12)
    np.testing.assert_allclose(to_np(lse), want_lse, atol=1e-12)
    grads = {
        "numpy": lambda: numpy_grads(q, k, v, g, kw),
        "tf": lambda: tf_grads(q, k, v, g, kw, flash=True),
        "torch": lambda: torch_grads(q, k, v, g, kw, flash=True),
    }[fw]()
    for x in grads:
        assert np.all(np.isfinite(to_np(x)))
    assert np.all(to_np(grads[1])[:, 4:] == 0) and np.all(to_np(grads[2])[:, 4:] == 0)


@pytest.mark.parametrize("fw", MODS)
@pytest.mark.parametrize("causal, tiles", [(False, 16), (True, 10)])
def test_causal_computes_only_the_tiles_on_or_below_the_diagonal(
    fw, causal, tiles, monkeypatch, rng
):
    """n = 8 in 2 x 2 tiles: 16 tiles, of which 4 + 3 + 2 + 1 = 10 touch the
    diagonal or lie below it; the causal mask is built only for the 4 on it."""
    module = MODS[fw].efficient
    visible, calls = module._visible, []

    def counting(mask, causal, start_q, end_q, start_k, end_k, *rest):
        calls.append((start_q, start_k))
        return visible(mask, causal, start_q, end_q, start_k, end_k, *rest)

    monkeypatch.setattr(module, "_visible", counting)
    q, k, v, _ = make_inputs(rng, 1, 8, 8)
    c = CONVERT[fw]
    out, lse = MODS[fw].flash_attention(
        c(q), c(k), c(v), causal=causal, block_q=2, block_k=2
    )
    assert len(calls) == tiles
    assert all(start_k <= start_q for start_q, start_k in calls) or not causal
    want_out, _ = naive_numpy(q, k, v, None, causal)
    np.testing.assert_allclose(to_np(out), want_out, atol=1e-12)
    calls.clear()
    g = rng.normal(size=(1, 8, 3))
    kw = {"mask": None, "causal": causal, "block_q": 2, "block_k": 2}
    MODS[fw].flash_attention_backward(c(q), c(k), c(v), out, lse, c(g), **kw)
    assert len(calls) == tiles  # the backward skips the same blocks


# --- bad input -----------------------------------------------------------------

Q, K, V = (np.zeros(s) for s in [(2, 3, 4), (2, 5, 4), (2, 5, 2)])
BAD = {  # name -> (keyword changes or (q, k, v), exception, text in the message)
    "block_q=0": ({"block_q": 0}, ValueError, "block_q must be a positive int"),
    "block_k=-1": ({"block_k": -1}, ValueError, ">= 1), got -1"),
    "block_q=2.5": ({"block_q": 2.5}, TypeError, "got float 2.5"),
    "mask shape": (
        {"mask": np.ones((2, 4, 5), bool)},
        ValueError,
        "mask of shape (2, 4, 5) does not broadcast to the scores "
        "(batch, num_queries, num_keys) = (2, 3, 5)",
    ),
    "mask rank": (
        {"mask": np.ones((1, 2, 3, 5), bool)},
        ValueError,
        "mask of shape (1, 2, 3, 5) does not broadcast",
    ),
    "mask dtype": ({"mask": np.ones((3, 5))}, TypeError, "mask must be boolean"),
    "causal": ({"causal": "yes"}, TypeError, "causal must be True or False"),
    "align": ({"align": "bottom"}, ValueError, "align must be 'top_left'"),
    "scale": ({"scale": "0.5"}, TypeError, "scale must be None"),
    "features": (
        (Q, np.zeros((2, 5, 3)), V),
        ValueError,
        "queries and keys of the same feature size",
    ),
    "rank": ((Q[0], K, V), ValueError, "queries must have 3 axes"),
    "values": ((Q, K, V[:, :4]), ValueError, "values must pair with keys"),
}


@pytest.mark.parametrize("fw", MODS)
@pytest.mark.parametrize("name", BAD)
def test_bad_input_is_refused_with_a_clear_message(fw, name):
    change, error, text = BAD[name]
    c = CONVERT[fw]
    qkv, kw = (change, {}) if isinstance(change, tuple) else ((Q, K, V), change)
    if isinstance(kw.get("mask"), np.ndarray):
        kw = {**kw, "mask": c(kw["mask"])}
    with pytest.raises(error) as info:
        MODS[fw].flash_attention(*(c(x) for x in qkv), **kw)
    assert text in str(info.value)


@pytest.mark.parametrize("fw", MODS)
def test_backward_refuses_a_logsumexp_of_the_wrong_shape(fw):
    c = CONVERT[fw]
    out, g = np.zeros((2, 3, 2)), np.zeros((2, 3, 2))
    with pytest.raises(ValueError, match=r"logsumexp must have shape \(batch, num_q"):
        MODS[fw].flash_attention_backward(
            c(Q), c(K), c(V), c(out), c(np.zeros((2, 5))), c(g)
        )
    with pytest.raises(TypeError, match="must have the same dtype"):
        MODS[fw].flash_attention_backward(
            c(Q), c(K), c(V), c(out), c(np.zeros((2, 3), np.float32)), c(g)
        )
