"""The tiny decoder-only Transformer (attncourse.*.tiny), the head scores and
the induction task: NumPy == TF == torch forward for the same parameters,
TF == torch gradients, scores of hand-built attention maps, clear errors for
bad input, and a short training run that forms induction heads."""

import numpy as np
import pytest
import tensorflow as tf
import torch

import attncourse.numpy as anp
import attncourse.tf as atf
import attncourse.torch as atorch
from attncourse import tasks
from tests.support.arrays import ATOL, to_np

POSITIONS = ("learned", "sinusoidal", "rope", "alibi", "none")
SIZES = {
    "vocab_size": 11,
    "d_model": 16,
    "num_heads": 2,
    "num_layers": 2,
    "max_len": 12,
}


def _models(positions="learned", mlp=False, layer_norm=False, seed=0):
    """The NumPy reference and TF / torch models holding its parameters."""
    kw = {"mlp": mlp, "positions": positions, "layer_norm": layer_norm}
    ref = anp.TinyTransformer(*SIZES.values(), seed=seed, **kw)
    m_tf = atf.TinyTransformer(*SIZES.values(), **kw)
    m_pt = atorch.TinyTransformer(*SIZES.values(), **kw)
    atf.set_params(m_tf, anp.get_params(ref))
    atorch.set_params(m_pt, anp.get_params(ref))
    return ref, m_tf, m_pt


@pytest.mark.parametrize("positions", POSITIONS)
@pytest.mark.parametrize("mlp, layer_norm", [(False, False), (True, True)])
def test_forward_parity_numpy_tf_torch(positions, mlp, layer_norm):
    ref, m_tf, m_pt = _models(positions, mlp, layer_norm)
    tokens = tasks.induction_task(3, 5, 11, seed=1)  # (3, 10)
    logits, weights = ref(tokens, return_weights=True)
    assert logits.shape == (3, 10, 11) and len(weights) == 2
    assert weights[0].shape == (3, 2, 10, 10)
    np.testing.assert_allclose(weights[1].sum(-1), 1.0, atol=1e-12)
    assert np.all(np.triu(weights[0], k=1) == 0)  # causal
    l_tf, w_tf = m_tf(tf.constant(tokens), return_weights=True)
    with torch.no_grad():
        l_pt, w_pt = m_pt(torch.tensor(tokens), return_weights=True)
    for got in (l_tf, l_pt):
        np.testing.assert_allclose(to_np(got), logits, atol=ATOL, rtol=1e-5)
    for got in (w_tf, w_pt):
        for layer, expected in enumerate(weights):
            np.testing.assert_allclose(to_np(got[layer]), expected, atol=ATOL)


def test_gradients_tf_equal_torch():
    ref, m_tf, m_pt = _models("learned", mlp=True, layer_norm=True)
    tokens = tasks.induction_task(4, 5, 11, seed=2)
    with tf.GradientTape() as tape:
        loss_tf = atf.next_token_loss(
            m_tf(tf.constant(tokens)), tf.constant(tokens), only_repeats=True
        )
    names = list(m_tf.params)
    g_tf = tape.gradient(loss_tf, [m_tf.params[n] for n in names])
    x = torch.tensor(tokens)
    loss_pt = atorch.next_token_loss(m_pt(x), x, only_repeats=True)
    loss_pt.backward()
    assert abs(float(loss_tf) - loss_pt.item()) < 1e-5
    assert names == list(m_pt.params)
    for name, g in zip(names, g_tf, strict=True):
        g = tf.convert_to_tensor(g)  # embed's gradient is IndexedSlices
        np.testing.assert_allclose(
            to_np(g), to_np(m_pt.params[name].grad), atol=1e-5, err_msg=name
        )


def test_head_mask_zero_removes_a_heads_output():
    ref, _, m_pt = _models()
    tokens = tasks.induction_task(2, 5, 11, seed=3)
    mask = np.ones((2, 2))
    mask[1, 0] = 0.0
    a = ref(tokens, head_mask=mask)
    # the same as zeroing that head's rows of W_o by hand
    hand = anp.TinyTransformer(*SIZES.values())
    hand.params = {k: v.copy() for k, v in ref.params.items()}
    hand.params["layer1.attn.W_o"][:8] = 0.0
    np.testing.assert_allclose(a, hand(tokens), atol=1e-12)
    assert np.abs(a - ref(tokens)).max() > 1e-3
    with torch.no_grad():
        got = m_pt(torch.tensor(tokens), head_mask=torch.tensor(mask))
    np.testing.assert_allclose(to_np(got), a, atol=ATOL)


# --- head scores -------------------------------------------------------------


def _previous_token_map(batch, n):
    w = np.zeros((batch, 1, n, n))
    w[:, 0, 0, 0] = 1.0
    w[:, 0, np.arange(1, n), np.arange(n - 1)] = 1.0
    return w


def _induction_map(tokens):
    """Attend from i to j + 1 for the earlier copy j of tokens[i]; else to 0."""
    batch, n = tokens.shape
    w = np.zeros((batch, 1, n, n))
    for b in range(batch):
        for i in range(n):
            earlier = [j for j in range(i) if tokens[b, j] == tokens[b, i]]
            w[b, 0, i, earlier[0] + 1 if earlier else 0] = 1.0
    return w


SCORE_MODULES = [(anp, np.asarray), (atf, tf.constant), (atorch, torch.tensor)]


@pytest.mark.parametrize("mod, conv", SCORE_MODULES)
def test_pure_maps_score_one(mod, conv):
    tokens = tasks.induction_task(3, 6, 20, seed=4, min_repeat=3)
    prev, ind = _previous_token_map(3, 12), _induction_map(tokens)
    both = np.concatenate([prev, ind], axis=1)  # heads: previous, induction
    p = to_np(mod.previous_token_score(conv(both)))
    s = to_np(mod.induction_score(conv(both), conv(tokens)))
    np.testing.assert_allclose(
        p, [1.0, np.mean(ind[:, 0, 1:, :-1].diagonal(axis1=-2, axis2=-1))], atol=1e-6
    )
    assert s[1] == pytest.approx(1.0) and s[0] == pytest.approx(0.0)


def test_induction_score_counts_every_earlier_copy():
    tokens = np.array([[1, 2, 1, 3, 1]])
    w = np.zeros((1, 1, 5, 5))
    w[0, 0, 2, 1] = 1.0  # query 2 (token 1): copy at 0, weight on key 1
    w[0, 0, 4, 1], w[0, 0, 4, 3] = 0.25, 0.5  # query 4: copies at 0 and 2
    for i in (0, 1, 3):
        w[0, 0, i, 0] = 1.0
    # Q = {2, 4}: (1.0 + (0.25 + 0.5)) / 2
    assert anp.induction_score(w, tokens)[0] == pytest.approx(0.875)


@pytest.mark.parametrize("mod, conv", SCORE_MODULES[1:])
def test_scores_match_numpy_on_random_maps(mod, conv):
    rng = np.random.default_rng(5)
    w = rng.random((4, 3, 9, 9)) * np.tri(9)
    w = (w / w.sum(-1, keepdims=True)).astype(np.float32)
    tokens = rng.integers(0, 4, size=(4, 9))
    np.testing.assert_allclose(
        to_np(mod.previous_token_score(conv(w))), anp.previous_token_score(w), atol=1e-6
    )
    np.testing.assert_allclose(
        to_np(mod.induction_score(conv(w), conv(tokens))),
        anp.induction_score(w, tokens),
        atol=1e-6,
    )


@pytest.mark.parametrize("mod, conv", SCORE_MODULES)
def test_score_errors(mod, conv):
    with pytest.raises(ValueError, match="n >= 2"):
        mod.previous_token_score(conv(np.ones((1, 1, 1, 1), np.float32)))
    with pytest.raises(ValueError, match="as many queries as keys"):
        mod.previous_token_score(conv(np.ones((1, 1, 3, 4), np.float32)))
    with pytest.raises(ValueError, match="4 axes"):
        mod.previous_token_score(conv(np.ones((3, 3), np.float32)))
    w = conv(np.full((2, 1, 4, 4), 0.25, np.float32))
    with pytest.raises(ValueError, match="no repeated token"):
        mod.induction_score(w, conv(np.array([[0, 1, 2, 3], [3, 2, 1, 0]])))
    with pytest.raises(ValueError, match="tokens must have shape"):
        mod.induction_score(w, conv(np.zeros((2, 5), np.int64)))
    with pytest.raises(TypeError, match="integer"):
        mod.induction_score(w, conv(np.zeros((2, 4), np.float32)))


# --- bad input and lengths -------------------------------------------------


MODEL_MODULES = [(anp, np.asarray), (atf, tf.constant), (atorch, torch.tensor)]


@pytest.mark.parametrize("mod, conv", MODEL_MODULES)
def test_learned_positions_stop_at_max_len_others_run_longer(mod, conv):
    long = conv(tasks.induction_task(2, 8, 11, seed=6, distinct=False))  # n = 16
    model = mod.TinyTransformer(*SIZES.values())
    with pytest.raises(ValueError, match="max_len=12"):
        model(long)
    for positions in ("sinusoidal", "rope", "alibi", "none"):
        model = mod.TinyTransformer(*SIZES.values(), positions=positions)
        assert tuple(model(long).shape) == (2, 16, 11)


@pytest.mark.parametrize("mod, conv", MODEL_MODULES)
def test_model_input_errors(mod, conv):
    with pytest.raises(ValueError, match="positions must be one of"):
        mod.TinyTransformer(*SIZES.values(), positions="absolute")
    with pytest.raises(ValueError, match="not divisible by num_heads"):
        mod.TinyTransformer(11, 16, 3, 2, 12)
    with pytest.raises(ValueError, match="head size .* must be even"):
        mod.TinyTransformer(11, 6, 2, 2, 12, positions="rope")
    model = mod.TinyTransformer(*SIZES.values())
    with pytest.raises(ValueError, match=r"\[0, 11\)"):
        model(conv(np.array([[0, 11]])))
    with pytest.raises(TypeError, match="integer token ids"):
        model(conv(np.zeros((1, 3), np.float32)))
    with pytest.raises(ValueError, match="2 axes"):
        model(conv(np.zeros((3,), np.int64)))
    with pytest.raises(ValueError, match="head_mask must have shape"):
        model(
            conv(np.zeros((1, 3), np.int64)),
            head_mask=conv(np.ones((2, 3), np.float32)),
        )


def test_param_names_and_shapes_agree():
    shapes = anp.tiny_param_shapes(11, 16, 2, 12, mlp=True, layer_norm=True)
    for mod in (atf, atorch):
        model = mod.TinyTransformer(*SIZES.values(), mlp=True, layer_norm=True)
        assert {k: tuple(v.shape) for k, v in model.params.items()} == shapes
    bare = anp.tiny_param_shapes(11, 16, 2, 12, positions="rope")
    assert "pos" not in bare and not any("norm" in k for k in bare)


# --- the induction task --------------------------------------------------------


def test_induction_task_rows_repeat():
    tokens = tasks.induction_task(5, 6, 20, seed=7)
    assert tokens.shape == (5, 12) and tokens.dtype == np.int64
    np.testing.assert_array_equal(tokens[:, :6], tokens[:, 6:])
    assert all(len(set(row[:6])) == 6 for row in tokens)  # distinct
    np.testing.assert_array_equal(tokens, tasks.induction_task(5, 6, 20, seed=7))


def test_induction_task_min_repeat_varies_the_distance():
    tokens = tasks.induction_task(200, 6, 20, seed=8, min_repeat=2)
    distances = set()
    for row in tokens:
        first = {t: i for i, t in reversed(list(enumerate(row)))}
        gaps = {i - first[t] for i, t in enumerate(row) if first[t] < i}
        assert len(gaps) == 1  # one repeated block, one distance per row
        distances |= gaps
        length = gaps.pop()
        np.testing.assert_array_equal(row[-length:], row[-2 * length : -length])
    assert distances == set(range(2, 7))


def test_induction_task_and_accuracy_errors():
    with pytest.raises(ValueError, match="vocab_size=5"):
        tasks.induction_task(2, 6, 5)
    with pytest.raises(ValueError, match="min_repeat=7 must be <= half_len=6"):
        tasks.induction_task(2, 6, 20, min_repeat=7)
    assert tasks.induction_task(2, 6, 5, distinct=False).shape == (2, 12)
    tokens = tasks.induction_task(4, 5, 20, seed=9)
    perfect = np.roll(tokens, -1, axis=1)  # predict tokens[i + 1] everywhere
    assert tasks.induction_accuracy(perfect, tokens) == 1.0
    assert tasks.induction_accuracy(np.zeros_like(tokens) - 1, tokens) == 0.0
    with pytest.raises(ValueError, match="argmax"):
        tasks.induction_accuracy(perfect[:, :-1], tokens)


# --- training ------------------------------------------------------------------


@pytest.fixture
def one_torch_thread():
    """Tiny matmuls: one thread beats several fighting over two cores."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_tf_training_again_reuses_the_step_and_starts_adam_afresh():
    """A second train_tiny on the same model (after set_params) traces no new
    step, and gives the losses and weights of a fresh model: Adam's moments
    and step count are reset, not carried over from the first run."""
    train = tasks.induction_task(64, 5, 11, seed=3)
    args = (train, 6, 8, 0.01)
    start = anp.get_params(anp.TinyTransformer(*SIZES.values(), seed=4))
    model = atf.TinyTransformer(*SIZES.values())
    atf.train_tiny(model, *args, seed=1)  # a first run, other batches
    atf.set_params(model, start)
    again = atf.train_tiny(model, *args, seed=2)
    fresh = atf.TinyTransformer(*SIZES.values())
    atf.set_params(fresh, start)
    expected = atf.train_tiny(fresh, *args, seed=2)
    np.testing.assert_array_equal(again, expected)
    for name, value in atf.get_params(fresh).items():
        np.testing.assert_array_equal(atf.get_params(model)[name], value, name)
    ((step, _, _),) = model._adam_steps.values()
    assert step.experimental_get_tracing_count() == 1
    atf.train_tiny(model, *args[:3], 0.02, seed=2)  # other settings: new step
    assert len(model._adam_steps) == 2


@pytest.mark.parametrize("mod", [atorch, atf], ids=["torch", "tf"])
def test_two_layer_model_learns_induction(mod, one_torch_thread):
    """300 Adam steps: far above chance (1/64), with a previous-token head in
    layer 1 and an induction head in layer 2 (as in the chapter)."""
    train = tasks.induction_task(4096, 8, 64, seed=100, min_repeat=2)
    test = tasks.induction_task(256, 8, 64, seed=200, min_repeat=2)
    ref = anp.TinyTransformer(64, 32, 2, 2, 16, seed=0)
    model = mod.TinyTransformer(64, 32, 2, 2, 16)
    mod.set_params(model, anp.get_params(ref))
    losses = mod.train_tiny(model, train, 300, 32, 0.01, only_repeats=True)
    assert losses.shape == (300,) and losses[-20:].mean() < 0.5 * losses[:20].mean()
    ref.params = mod.get_params(model)
    logits, weights = ref(test, return_weights=True)
    assert tasks.induction_accuracy(logits.argmax(-1), test) > 0.5
    assert anp.previous_token_score(weights[0]).max() > 0.5
    assert anp.induction_score(weights[1], test).max() > 0.5
    # zeroing both layer-2 heads brings accuracy back near chance
    ablated = ref(test, head_mask=np.array([[1.0, 1.0], [0.0, 0.0]]))
    assert tasks.induction_accuracy(ablated.argmax(-1), test) < 0.2


def test_a_seed_gives_every_framework_the_numpy_models_initial_weights():
    tokens = np.random.default_rng(1).integers(0, 10, size=(2, 6))
    ref = anp.TinyTransformer(10, 16, 2, 2, 8, seed=3)
    tf_model = atf.TinyTransformer(10, 16, 2, 2, 8, seed=3)
    torch_model = atorch.TinyTransformer(10, 16, 2, 2, 8, seed=3)
    for name, value in ref.params.items():
        np.testing.assert_allclose(
            np.asarray(tf_model.params[name]), value, atol=1e-6, err_msg=name
        )
        np.testing.assert_allclose(
            torch_model.params[name].detach().numpy(), value, atol=1e-6, err_msg=name
        )
    expected = ref(tokens)
    np.testing.assert_allclose(tf_model(tokens).numpy(), expected, atol=1e-5)
    got = torch_model(torch.as_tensor(tokens)).detach().numpy()
    np.testing.assert_allclose(got, expected, atol=1e-5)
    other = anp.TinyTransformer(10, 16, 2, 2, 8, seed=4)
    assert not np.allclose(other.params["embed"], ref.params["embed"])


# --- attention="linear" and attention="window" (attncourse.*.sparse) ---------

VARIANTS = [
    {"attention": "linear"},
    {"attention": "window", "window": 3},
]
VARIANT_IDS = ["linear", "window3"]


def _variant_models(kw, positions="learned", mlp=False, layer_norm=False):
    """The NumPy reference and TF / torch models of one attention variant,
    all holding the reference's parameters."""
    kw = {"positions": positions, "mlp": mlp, "layer_norm": layer_norm, **kw}
    ref = anp.TinyTransformer(*SIZES.values(), seed=0, **kw)
    m_tf = atf.TinyTransformer(*SIZES.values(), **kw)
    m_pt = atorch.TinyTransformer(*SIZES.values(), **kw)
    atf.set_params(m_tf, anp.get_params(ref))
    atorch.set_params(m_pt, anp.get_params(ref))
    return ref, m_tf, m_pt


@pytest.mark.parametrize("mod, conv", MODEL_MODULES)
def test_softmax_is_the_default_and_a_full_window_equals_it(mod, conv):
    tokens = conv(tasks.induction_task(3, 5, 11, seed=1))  # n = 10
    start = anp.get_params(anp.TinyTransformer(*SIZES.values(), mlp=True, seed=5))
    outputs = {}
    for name, kw in [
        ("default", {}),
        ("softmax", {"attention": "softmax"}),
        ("window", {"attention": "window", "window": 10}),
    ]:
        model = mod.TinyTransformer(*SIZES.values(), mlp=True, **kw)
        mod.set_params(model, start)
        outputs[name] = to_np(model(tokens))
    np.testing.assert_array_equal(outputs["softmax"], outputs["default"])
    np.testing.assert_allclose(outputs["window"], outputs["default"], atol=ATOL)


@pytest.mark.parametrize("kw", VARIANTS, ids=VARIANT_IDS)
@pytest.mark.parametrize("positions", ["learned", "rope", "none"])
def test_variant_forward_parity_numpy_tf_torch(kw, positions):
    ref, m_tf, m_pt = _variant_models(kw, positions, mlp=True, layer_norm=True)
    tokens = tasks.induction_task(3, 5, 11, seed=1)  # (3, 10)
    logits, weights = ref(tokens, return_weights=True)
    l_tf, w_tf = m_tf(tf.constant(tokens), return_weights=True)
    with torch.no_grad():
        l_pt, w_pt = m_pt(torch.tensor(tokens), return_weights=True)
    for got in (l_tf, l_pt):
        np.testing.assert_allclose(to_np(got), logits, atol=ATOL, rtol=1e-5)
    if kw["attention"] == "linear":  # no weights are formed
        assert weights == w_tf == w_pt == [None, None]
        return
    assert weights[0].shape == (3, 2, 10, 3)  # the band of each query
    np.testing.assert_allclose(weights[1].sum(-1), 1.0, atol=1e-12)
    assert np.all(weights[0][:, :, 0, :2] == 0)  # keys -2 and -1 do not exist
    for got in (w_tf, w_pt):
        for layer, expected in enumerate(weights):
            np.testing.assert_allclose(to_np(got[layer]), expected, atol=ATOL)


@pytest.mark.parametrize("kw", VARIANTS, ids=VARIANT_IDS)
def test_variant_gradients_tf_equal_torch(kw):
    _, m_tf, m_pt = _variant_models(kw, "rope", mlp=True, layer_norm=True)
    tokens = tasks.induction_task(4, 5, 11, seed=2)
    with tf.GradientTape() as tape:
        loss_tf = atf.next_token_loss(
            m_tf(tf.constant(tokens)), tf.constant(tokens), only_repeats=True
        )
    names = list(m_tf.params)
    g_tf = tape.gradient(loss_tf, [m_tf.params[n] for n in names])
    x = torch.tensor(tokens)
    atorch.next_token_loss(m_pt(x), x, only_repeats=True).backward()
    for name, g in zip(names, g_tf, strict=True):
        np.testing.assert_allclose(
            to_np(tf.convert_to_tensor(g)),
            to_np(m_pt.params[name].grad),
            atol=1e-5,
            err_msg=name,
        )


@pytest.mark.parametrize("kw", VARIANTS, ids=VARIANT_IDS)
def test_variants_are_causal(kw):
    ref = anp.TinyTransformer(*SIZES.values(), seed=0, mlp=True, **kw)
    tokens = tasks.induction_task(2, 5, 11, seed=3)
    changed = tokens.copy()
    changed[:, 6] = (changed[:, 6] + 1) % 11
    a, b = ref(tokens), ref(changed)
    np.testing.assert_allclose(a[:, :6], b[:, :6], atol=1e-12)
    assert not np.allclose(a[:, 6:], b[:, 6:])


@pytest.mark.parametrize("kw", VARIANTS, ids=VARIANT_IDS)
def test_variants_train_alike_in_tf_and_torch(kw, one_torch_thread):
    """A few train_tiny steps (forward + backward + Adam, the TF step
    compiled): the same first loss in both frameworks, then close ones (Adam's
    first steps move each weight by about lr * sign(gradient), so rounding in
    near-zero gradients shows, as it does for softmax attention)."""
    _, m_tf, m_pt = _variant_models(kw)
    train = tasks.induction_task(64, 5, 11, seed=3)
    losses_tf = atf.train_tiny(m_tf, train, 5, 8, 0.01, only_repeats=True)
    losses_pt = atorch.train_tiny(m_pt, train, 5, 8, 0.01, only_repeats=True)
    assert np.isfinite(losses_tf).all() and np.isfinite(losses_pt).all()
    np.testing.assert_allclose(losses_tf[0], losses_pt[0], atol=1e-5)
    np.testing.assert_allclose(losses_tf, losses_pt, atol=0.05)


@pytest.mark.parametrize("mod, conv", MODEL_MODULES)
def test_attention_option_errors(mod, conv):
    with pytest.raises(ValueError, match="attention must be one of"):
        mod.TinyTransformer(*SIZES.values(), attention="local")
    with pytest.raises(ValueError, match="needs window=w"):
        mod.TinyTransformer(*SIZES.values(), attention="window")
    with pytest.raises(ValueError, match="window must be >= 1"):
        mod.TinyTransformer(*SIZES.values(), attention="window", window=0)
    with pytest.raises(ValueError, match="goes with attention='window'"):
        mod.TinyTransformer(*SIZES.values(), window=4)
    with pytest.raises(ValueError, match="alibi"):
        mod.TinyTransformer(*SIZES.values(), attention="linear", positions="alibi")
    model = mod.TinyTransformer(*SIZES.values(), attention="window", window=4)
    assert (model.attention, model.window) == ("window", 4)


def test_tf_config_records_the_attention():
    model = atf.TinyTransformer(*SIZES.values(), attention="window", window=4)
    config = model.get_config()
    assert (config["attention"], config["window"]) == ("window", 4)
