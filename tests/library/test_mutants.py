"""Mutants that survived the fast tier (``-m "not slow"``): each test here was seen
to fail with the library line it guards broken in a copy of the tree (the
mutation is named in each docstring), and to pass with it restored.
"""

import inspect

import keras
import numpy as np
import pytest
import torch
from support.arrays import assert_close, to_np, to_tf, to_torch
from support.clipping import assert_clipped, tf_step_norms, torch_step_norms

import attncourse.numpy as anp
import attncourse.tf as atf
import attncourse.torch as atorch
from attncourse import tasks

FRAMEWORKS = {
    "numpy": (anp, np.asarray),
    "tf": (atf, to_tf),
    "torch": (atorch, to_torch),
}


# --- cosine score: the default eps (scoring.py, cosine_score) -------------------


@pytest.mark.parametrize("name", sorted(FRAMEWORKS))
def test_cosine_default_eps_leaves_small_but_nonzero_norms_alone(name):
    """cosine_score(..., eps=1e-8): with the default eps, vectors of norm 1e-6
    .. 1e-2 (far above eps) score their true cosine, as q.k / (|q| |k|) in
    float64 and torch's F.cosine_similarity (whose eps is 1e-8 too) give it.
    Mutant: the default eps raised by orders of magnitude (1e-8 -> 1e-3)
    clamps those norms and shrinks the scores."""
    module, convert = FRAMEWORKS[name]
    rng = np.random.default_rng(0)
    directions = rng.normal(size=(1, 8, 6))
    directions /= np.linalg.norm(directions, axis=-1, keepdims=True)
    norms = np.logspace(-6, -2, 8)[None, :, None]  # one norm per vector
    queries, keys = norms * directions, norms[:, ::-1] * rng.normal(size=(1, 8, 6))
    expected = (queries @ keys.transpose(0, 2, 1)) / (
        np.linalg.norm(queries, axis=-1)[..., None]
        * np.linalg.norm(keys, axis=-1)[:, None, :]
    )
    builtin = torch.nn.functional.cosine_similarity(
        torch.as_tensor(queries)[:, :, None], torch.as_tensor(keys)[:, None], dim=-1
    ).numpy()
    np.testing.assert_allclose(builtin, expected, rtol=1e-10)
    got = to_np(module.cosine_score(convert(queries), convert(keys)))
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-6)


# --- Keras get_config: every constructor argument (tf layers) -------------------

# a non-default value for every argument that has a default, so that a dropped
# key comes back as the default and differs
TINY_OPTIONS = {"mlp": True, "positions": "rope", "layer_norm": True, "d_ff": 12}
TINY_OPTIONS |= {"attention": "window", "window": 3}
KERAS_LAYERS = {
    "SelfAttention": lambda: atf.SelfAttention(3, 4, input_dim=5, seed=7),
    "SelfAttentionDense": lambda: atf.SelfAttentionDense(3, 4, input_dim=5, seed=7),
    "CrossAttention": lambda: atf.CrossAttention(
        3, 4, input_dim=5, context_dim=6, seed=7
    ),
    "StatisticalAttention": lambda: atf.StatisticalAttention(
        3, 4, input_dim=5, context_dim=6, seed=7
    ),
    "MultiHeadAttention": lambda: atf.MultiHeadAttention(
        2, 8, d_out=5, use_bias=False, input_dims=(6, 4, 7)
    ),
    "GroupedQueryAttention": lambda: atf.GroupedQueryAttention(4, 2, 8, use_bias=False),
    "PositionalEncoding": lambda: atf.PositionalEncoding(6, max_len=7),
    "LearnedPositionalEmbedding": lambda: atf.LearnedPositionalEmbedding(6, 7, seed=3),
    "GRU": lambda: atf.GRU(3, 4),
    "Encoder": lambda: atf.Encoder(11, 3, 4, bidirectional=True),
    "Decoder": lambda: atf.Decoder(11, 3, 4, "location", max_src_len=9),
    "TransformerBlock": lambda: atf.TransformerBlock(
        8, 2, 16, norm="post", activation="gelu", causal=True, dropout=0.1, eps=1e-3
    ),
    "DecoderBlock": lambda: atf.DecoderBlock(
        8, 2, 16, norm="post", activation="gelu", causal=False, dropout=0.1, eps=1e-3
    ),
    "TinyTransformer": lambda: atf.TinyTransformer(11, 8, 2, 1, 9, **TINY_OPTIONS),
}
# constructor arguments that are not configuration: TinyTransformer's seed
# only draws the initial weights (the NumPy model's), which Keras saves apart
NOT_IN_CONFIG = {"TinyTransformer": {"seed"}}


def test_every_keras_layer_of_the_library_is_checked():
    layers = {
        name
        for name in atf.__all__
        if inspect.isclass(getattr(atf, name))
        and issubclass(getattr(atf, name), keras.layers.Layer)
        and getattr(atf, name).__name__ == name  # not an alias (CustomAttention)
    }
    assert layers == set(KERAS_LAYERS)


@pytest.mark.parametrize("name", sorted(KERAS_LAYERS))
def test_keras_get_config_holds_every_constructor_argument(name):
    """get_config of each tf layer: every argument of __init__ (from its
    signature) with the value given, and from_config rebuilds a layer with the
    same config and the same weight shapes. Mutant: a key dropped from a
    get_config (CrossAttention's context_dim, GroupedQueryAttention's
    use_bias): the clone gets the default (W_k (5, d_k) for (6, d_k); biases
    that the original has not)."""
    layer = KERAS_LAYERS[name]()
    cls = type(layer)
    config = layer.get_config()
    arguments = [
        p.name
        for p in inspect.signature(cls.__init__).parameters.values()
        if p.name != "self" and p.kind is not inspect.Parameter.VAR_KEYWORD
    ]
    missing = set(arguments) - set(config) - NOT_IN_CONFIG.get(name, set())
    assert not missing, f"{name}.get_config() lacks {sorted(missing)}"
    clone = cls.from_config(config)
    assert clone.get_config() == config
    assert [tuple(w.shape) for w in clone.weights] == [
        tuple(w.shape) for w in layer.weights
    ]


def test_keras_cross_attention_clone_computes_the_same():
    """CrossAttention.get_config -> from_config -> set_weights: the clone
    attends from A (input_dim 5) over B (context_dim 6) exactly as the layer.
    Mutant: context_dim dropped from get_config (the clone takes input_dim)."""
    rng = np.random.default_rng(1)
    layer = atf.CrossAttention(3, 4, input_dim=5, context_dim=6)
    clone = atf.CrossAttention.from_config(layer.get_config())
    clone.set_weights(layer.get_weights())
    a, b = to_tf(rng.normal(size=(2, 3, 5))), to_tf(rng.normal(size=(2, 4, 6)))
    assert_close(clone(a, b), layer(a, b))


# --- gradient clipping in train_tiny (tiny.py) ---------------------------------

CLIP = 1e-3  # far below the unclipped gradient norm of a fresh model


def _tiny_setup():
    train = tasks.induction_task(64, 5, 11, seed=3)
    start = anp.get_params(anp.TinyTransformer(11, 8, 2, 1, 10, seed=4))
    return train, start


@pytest.fixture
def one_torch_thread():
    """One intra-op thread: a tiny model gains nothing from more, and a
    loaded machine's threads fight (as in test_tiny.py)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_torch_train_tiny_clips_the_global_gradient_norm(monkeypatch, one_torch_thread):
    """train_tiny: clip_grad_norm_(model.parameters(), clip_norm) before each
    Adam step; the global L2 norm the optimizer sees is clip_norm. Mutant: the
    clip removed (Adam's near scale-invariance hides it from the losses)."""
    norms = torch_step_norms(monkeypatch)
    train, start = _tiny_setup()
    model = atorch.TinyTransformer(11, 8, 2, 1, 10)
    atorch.set_params(model, start)
    atorch.train_tiny(model, train, 3, 8, 0.01, clip_norm=CLIP)
    assert_clipped(norms(), CLIP, steps=3)


def test_tf_train_tiny_clips_the_global_gradient_norm(monkeypatch):
    """train_tiny: tf.clip_by_global_norm(grads, clip_norm) in the compiled
    step before apply_gradients. Mutant: the clip removed."""
    norms = tf_step_norms(monkeypatch)
    train, start = _tiny_setup()
    model = atf.TinyTransformer(11, 8, 2, 1, 10)
    atf.set_params(model, start)
    atf.train_tiny(model, train, 3, 8, 0.01, clip_norm=CLIP)
    assert_clipped(norms(), CLIP, steps=3)
