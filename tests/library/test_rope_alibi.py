"""RoPE, ALiBi and learned absolute positions: parity, defining properties,
bad input.

RoPE (halves pairing) must rotate each pair (i, i + head_dim/2) by
position * base^(-2i/head_dim), so that q_m . k_n depends only on m - n and norms
are kept; ALiBi must be -slope_h * distance with Press et al.'s slopes.
"""

import math

import numpy as np
import pytest
import tensorflow as tf
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from support.arrays import assert_close, to_np, to_tf, to_torch

import attncourse.numpy as anp
import attncourse.tf as atf
import attncourse.torch as atorch

FRAMEWORKS = {"tf": (atf, to_tf), "torch": (atorch, to_torch)}


def rope_by_hand(x, positions, base=10000.0):
    """Each pair (i, i + h) of x (n, d) times a 2 x 2 rotation matrix."""
    n, d = x.shape
    h = d // 2
    out = np.empty_like(x)
    for p in range(n):
        for i in range(h):
            t = positions[p] * base ** (-2 * i / d)
            rot = np.array([[math.cos(t), -math.sin(t)], [math.sin(t), math.cos(t)]])
            out[p, [i, i + h]] = rot @ x[p, [i, i + h]]
    return out


def rope_interleaved(x, positions, base=10000.0):
    """The RoFormer paper's layout: pairs (2i, 2i + 1)."""
    d = x.shape[-1]
    t = np.asarray(positions, float)[:, None] * base ** (-np.arange(0, d, 2) / d)
    even, odd = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = even * np.cos(t) - odd * np.sin(t)
    out[..., 1::2] = even * np.sin(t) + odd * np.cos(t)
    return out


def press_slopes(n):
    """Press et al.'s reference code (github.com/ofirpress/attention_with_linear
    _biases, models/transformer.py), copied verbatim in logic."""

    def power_of_2(n):
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start * start**i for i in range(n)]

    if math.log2(n).is_integer():
        return power_of_2(n)
    closest = 2 ** math.floor(math.log2(n))
    return power_of_2(closest) + press_slopes(2 * closest)[0::2][: n - closest]


# --- RoPE -----------------------------------------------------------------


def test_rope_matches_rotation_matrices(rng):
    x = rng.normal(size=(6, 8))
    positions = np.array([0, 1, 2, 7, 50, 999])
    assert_close(anp.apply_rope(x, positions), rope_by_hand(x, positions), atol=1e-12)
    assert_close(anp.apply_rope(x), rope_by_hand(x, np.arange(6)), atol=1e-12)
    assert_close(anp.apply_rope(x, np.zeros(6, int)), x, atol=0)  # 0 = identity
    assert_close(
        anp.apply_rope(x, positions, base=100.0),
        rope_by_hand(x, positions, base=100.0),
        atol=1e-12,
    )


CASES = {
    "default (n,)": ((2, 3, 5, 8), None),
    "shared (n,)": ((2, 3, 5, 8), np.array([3, 1, 4, 1, 5])),
    "per batch (batch, n)": (
        (2, 3, 5, 8),
        np.array([[0, 1, 2, 3, 4], [9, 8, 70, 6, 5]]),
    ),
    "rank 3, per batch": ((2, 5, 6), np.array([[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]])),
    "rank 2": ((7, 4), np.arange(7) * 3),
}


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_rope_parity_values_and_gradients(rng, name, fw):
    shape, positions = CASES[name]
    module, convert = FRAMEWORKS[fw]
    x, w = rng.normal(size=shape), rng.normal(size=shape)
    ref = anp.apply_rope(x, positions)
    # the rotation is orthogonal: d(w . R x)/dx = R^T w = rotation by -angle
    back = -np.arange(shape[-2]) if positions is None else -positions
    ref_grad = anp.apply_rope(w, back)
    pos = None if positions is None else convert(positions)
    if fw == "tf":
        xt = tf.Variable(to_tf(x))
        with tf.GradientTape() as tape:
            out = module.apply_rope(xt, pos)
            loss = tf.reduce_sum(out * to_tf(w))
        grad = tape.gradient(loss, xt)
    else:
        xt = to_torch(x).requires_grad_()
        out = module.apply_rope(xt, pos)
        (out * to_torch(w)).sum().backward()
        grad = xt.grad
    assert tuple(out.shape) == shape
    assert_close(out, ref, what="values")
    assert_close(grad, ref_grad, what="gradients")


@settings(max_examples=25, deadline=None)
@given(
    m=st.integers(-3000, 3000),
    n=st.integers(-3000, 3000),
    shift=st.integers(-3000, 3000),
    half=st.integers(1, 16),
    seed=st.integers(0, 2**31 - 1),
)
def test_rope_scores_depend_only_on_the_offset(m, n, shift, half, seed):
    g = np.random.default_rng(seed)
    q, k = g.normal(size=(1, 2 * half)), g.normal(size=(1, 2 * half))

    def score(a, b):
        return (anp.apply_rope(q, [a]) @ anp.apply_rope(k, [b]).T).item()

    ref = score(m, n)
    assert score(m + shift, n + shift) == pytest.approx(ref, abs=1e-9)
    assert score(m - n, 0) == pytest.approx(ref, abs=1e-9)


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_rope_relative_property_in_float32(rng, fw):
    module, convert = FRAMEWORKS[fw]
    q, k = rng.normal(size=(1, 16)), rng.normal(size=(1, 16))
    scores = []
    for shift in (0, 17, 400):
        qr = to_np(module.apply_rope(convert(q), convert(np.array([5 + shift]))))
        kr = to_np(module.apply_rope(convert(k), convert(np.array([2 + shift]))))
        scores.append((qr @ kr.T).item())
    assert_close(np.array(scores), np.full(3, scores[0]), atol=1e-4)


def test_rope_keeps_norms(rng):
    x = rng.normal(size=(3, 9, 10))
    positions = rng.integers(0, 5000, size=(3, 9))
    norms = np.linalg.norm(x, axis=-1)
    assert_close(np.linalg.norm(anp.apply_rope(x, positions), axis=-1), norms)
    for module, convert in FRAMEWORKS.values():
        out = to_np(module.apply_rope(convert(x), convert(positions)))
        assert_close(np.linalg.norm(out, axis=-1), norms)


def test_halves_and_interleaved_agree_up_to_a_permutation(rng):
    d = 12
    h = d // 2
    x, k = rng.normal(size=(5, d)), rng.normal(size=(5, d))
    positions = np.array([0, 3, 8, 21, 400])
    perm = np.stack([np.arange(h), np.arange(h) + h], axis=-1).ravel()
    assert perm.tolist()[:4] == [0, h, 1, h + 1]
    halves = anp.apply_rope(x, positions)
    assert_close(rope_interleaved(x[:, perm], positions), halves[:, perm], atol=1e-12)
    # scores are the same in either layout (the same permutation on q and k)
    scores_halves = halves @ anp.apply_rope(k, positions).T
    scores_inter = (
        rope_interleaved(x[:, perm], positions)
        @ rope_interleaved(k[:, perm], positions).T
    )
    assert_close(scores_inter, scores_halves, atol=1e-12)
    # without the permutation, the two layouts are different rotations
    assert not np.allclose(rope_interleaved(x, positions), halves)


def test_rope_traces_with_unknown_sizes():
    fn = tf.function(
        atf.apply_rope,
        input_signature=[tf.TensorSpec((None, 2, None, 8), tf.float32)],
    )
    x = np.random.default_rng(0).normal(size=(3, 2, 5, 8))
    assert_close(fn(to_tf(x)), anp.apply_rope(x))


# --- ALiBi ----------------------------------------------------------------


def test_alibi_slopes_power_of_two():
    assert_close(anp.alibi_slopes(8), 2.0 ** -np.arange(1, 9), atol=0)
    for heads in (1, 2, 4, 16, 32):
        expected = 2.0 ** (-8 * np.arange(1, heads + 1) / heads)
        assert_close(anp.alibi_slopes(heads), expected, atol=1e-15)


@pytest.mark.parametrize("heads", [3, 5, 6, 7, 12, 20, 24, 33])
def test_alibi_slopes_other_head_counts_follow_press_et_al(heads):
    ref = np.array(press_slopes(heads))
    assert_close(anp.alibi_slopes(heads), ref, atol=1e-15)
    for module, _ in FRAMEWORKS.values():
        assert_close(module.alibi_slopes(heads), ref)
    assert len(set(ref)) == heads  # no two heads share a slope


@pytest.mark.parametrize("sizes", [(4, 6, None), (6, 1, 9), (3, 4, 10), (8, 0, 3)])
def test_alibi_bias_is_minus_slope_times_distance(sizes):
    heads, n_q, n_k = sizes
    bias = anp.alibi_bias(heads, n_q, n_k)
    n_k = n_q if n_k is None else n_k
    assert bias.shape == (heads, n_q, n_k)
    slopes = anp.alibi_slopes(heads)
    for h in range(heads):
        for i in range(n_q):
            pos = n_k - n_q + i  # bottom-right aligned
            for j in range(n_k):
                assert bias[h, i, j] == -slopes[h] * abs(pos - j)
    for module, _ in FRAMEWORKS.values():
        got = module.alibi_bias(*sizes)
        assert tuple(got.shape) == bias.shape
        assert_close(got, bias)


def test_alibi_is_a_fixed_linear_bias_per_head():
    bias = anp.alibi_bias(6, 10)
    slopes = anp.alibi_slopes(6)
    # each step back in the past costs the same: the head's slope
    causal = np.tril(np.ones((10, 10), bool), -1)
    steps = bias[:, :, 1:] - bias[:, :, :-1]  # (heads, n, n - 1)
    for h in range(6):
        assert_close(steps[h][causal[:, 1:]], np.full(causal[:, 1:].sum(), slopes[h]))
    # it depends on the distance only: rows of a longer bias agree
    assert_close(anp.alibi_bias(6, 4, 10), bias[:, -4:], atol=0)
    assert np.all(np.diagonal(bias, axis1=1, axis2=2) == 0)
    assert np.all(bias <= 0)


# --- learned absolute positions -------------------------------------------


def test_learned_table_parity_and_gradient(rng):
    x = rng.normal(size=(2, 5, 4))
    layer = anp.LearnedPositionalEmbedding(4, max_len=7, seed=0)
    table = layer.params["table"]
    assert table.shape == (7, 4)
    assert_close(layer(x), x + table[:5], atol=0)
    positions = np.array([[6, 0, 1, 1, 2], [3, 3, 3, 3, 3]])
    ref = layer(x, positions)
    assert_close(ref, x + table[positions], atol=0)
    tl = atf.LearnedPositionalEmbedding(4, max_len=7)
    tl.table.assign(to_tf(table))
    with tf.GradientTape() as tape:
        out = tl(to_tf(x), to_tf(positions))
        loss = tf.reduce_sum(out)
    assert_close(out, ref)
    assert [w.name for w in tl.trainable_weights] == ["table"]
    counts = np.zeros((7, 4))
    np.add.at(counts, positions, 1.0)  # each use of a row adds its gradient
    assert_close(tf.convert_to_tensor(tape.gradient(loss, tl.table)), counts)
    pl = atorch.LearnedPositionalEmbedding(4, max_len=7)
    with torch.no_grad():
        pl.table.copy_(to_torch(table))
    out = pl(to_torch(x), torch.as_tensor(positions))
    out.sum().backward()
    assert_close(out, ref)
    assert_close(pl.table.grad, counts)
    assert [n for n, _ in pl.named_parameters()] == ["table"]


# --- bad input: one message in all three frameworks ------------------------


def _messages(call, error=ValueError):
    out = []
    for module, convert in [(anp, np.asarray), *FRAMEWORKS.values()]:
        with pytest.raises(error) as info:
            call(module, convert)
        out.append(str(info.value))
    # Keras adds a header naming the layer; the message itself is the same
    assert all(out[0] in m for m in out[1:]), out
    return out[0]


def test_rope_odd_head_dim(rng):
    x = rng.normal(size=(2, 4, 7))
    msg = _messages(lambda m, c: m.apply_rope(c(x)))
    assert "head_dim must be even" in msg and "(2, 4, 7)" in msg


@pytest.mark.parametrize(
    "positions, says",
    [
        (np.arange(5), "(n,) = (4,) or (batch, n) = (2, 4), got (5,)"),
        (np.zeros((3, 4), int), "or (batch, n) = (2, 4), got (3, 4)"),
        (np.zeros((2, 1, 4), int), "got (2, 1, 4)"),
    ],
)
def test_rope_positions_of_the_wrong_shape(rng, positions, says):
    x = rng.normal(size=(2, 4, 6))
    msg = _messages(lambda m, c: m.apply_rope(c(x), c(positions)))
    assert says in msg, msg


def test_rope_per_batch_positions_need_a_batch_axis(rng):
    x = rng.normal(size=(4, 6))
    msg = _messages(lambda m, c: m.apply_rope(c(x), c(np.zeros((1, 4), int))))
    assert msg == "positions must have shape (n,) = (4,), got (1, 4)"


def test_rope_float_positions(rng):
    x = rng.normal(size=(2, 4, 6))
    positions = np.arange(4.0, dtype=np.float32)
    msg = _messages(lambda m, c: m.apply_rope(c(x), c(positions)), TypeError)
    assert msg == "positions must be integers, got dtype float32"


def test_alibi_more_queries_than_keys():
    msg = _messages(lambda m, c: m.alibi_bias(4, 5, 3))
    assert "num_queries=5 must be <= num_keys=3" in msg
    assert "must be >= 1" in _messages(lambda m, c: m.alibi_slopes(0))


@pytest.mark.parametrize(
    "positions, says",
    [
        (None, "sequence length 5 exceeds max_len=4"),
        (np.array([0, 1, 2, 3, 4]), "[0, max_len) = [0, 4)"),
        (np.array([[0, 1, 2, 3, 0], [0, -1, 0, 0, 0]]), "from -1 to 3"),
    ],
)
def test_learned_positions_beyond_the_table(rng, positions, says):
    x = rng.normal(size=(2, 5, 3))

    def call(m, c):
        layer = m.LearnedPositionalEmbedding(3, max_len=4)
        return layer(c(x), None if positions is None else c(positions))

    msg = _messages(call)
    assert says in msg and "max_len" in msg, msg
