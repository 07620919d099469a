"""A tiny decoder-only Transformer in TensorFlow / Keras 3, its training loop
and the head scores. Same maths, parameter names and signatures as
``attncourse.numpy.tiny`` (read its docstring):

    x = E[tokens] (+ P[:n]);  x = x + MHA(x) per layer (+ FFN(x) if mlp);
    logits = x @ W_U + b_U   (layer_norm=True: pre-LN before each sublayer).

``train_tiny`` trains on next-token cross-entropy with Adam (epsilon 1e-8,
PyTorch's default) in a step compiled once with ``tf.function``, on the
minibatches of ``attncourse.tasks.batch_indices`` (the torch loop draws the
same).
"""

import math

import keras
import numpy as np
import tensorflow as tf

from attncourse import checks, tasks
from attncourse.numpy.tiny import _initial_value, tiny_param_shapes

from . import positional
from .masking import causal_mask, masked_softmax
from .multihead import merge_heads, split_heads
from .sparse import banded_attention, elu_feature_map, linear_attention_on_features

__all__ = [
    "TinyTransformer",
    "induction_score",
    "next_token_loss",
    "repeat_mask",
    "previous_token_score",
    "tiny_param_shapes",
    "tiny_transformer",
    "train_tiny",
]


def _layer_norm(x, p, prefix, eps=1e-5):
    mean = tf.reduce_mean(x, -1, keepdims=True)
    var = tf.reduce_mean((x - mean) ** 2, -1, keepdims=True)
    return (x - mean) / tf.sqrt(var + eps) * p[prefix + "gamma"] + p[prefix + "beta"]


def attention_sublayer(x, p, pre, num_heads, positions, head_mask, attention, window):
    """Causal multi-head self-attention of one layer; returns (out, weights):
    softmax weights (batch, heads, n, n), the band (batch, heads, n, window)
    for "window", None for "linear" (it forms no weights)."""
    n = x.shape[1]
    q, k, v = (
        split_heads(tf.matmul(x, p[f"{pre}W_{c}"]) + p[f"{pre}b_{c}"], num_heads)
        for c in "qkv"
    )  # each (batch, heads, n, d_head)
    if positions == "rope":
        q, k = positional.apply_rope(q), positional.apply_rope(k)
    if attention == "window":  # the band of the last `window` keys
        scale = 1.0 / math.sqrt(q.shape[-1])
        heads, weights = banded_attention(q, k, v, window, True, scale)
    elif attention == "linear":  # elu + 1 features, a running state
        heads = linear_attention_on_features(
            elu_feature_map(q), elu_feature_map(k), v, True, 1e-6
        )
        weights = None
    else:  # softmax over the (n, n) causal scores
        scores = tf.matmul(q, k, transpose_b=True) / math.sqrt(q.shape[-1])
        if positions == "alibi":
            scores = scores + tf.cast(positional.alibi_bias(num_heads, n), scores.dtype)
        weights = masked_softmax(scores, causal_mask(n))  # (batch, heads, n, n)
        heads = tf.matmul(weights, v)  # (batch, heads, n, d_head)
    if head_mask is not None:
        heads = heads * tf.cast(head_mask, heads.dtype)[:, None, None]
    out = tf.matmul(merge_heads(heads), p[f"{pre}W_o"]) + p[f"{pre}b_o"]
    return out, weights


def tiny_transformer(
    tokens,
    params,
    num_heads,
    num_layers,
    *,
    positions="learned",
    mlp=False,
    layer_norm=False,
    head_mask=None,
    attention="softmax",
    window=None,
):
    """The forward pass with the parameters ``params`` (tiny_param_shapes).

    tokens (batch, n) int; head_mask: optional (num_layers, num_heads)
    factors on each head's output (0 = ablate that head); attention
    "softmax", "linear" or "window" (with window=w), see TinyTransformer.
    Returns (logits (batch, n, vocab_size), [weights per layer]): (batch,
    heads, n, n) for softmax, the band (batch, heads, n, w) for "window"
    (sparse.sliding_window_attention's layout), None for "linear".
    """
    checks.tiny_attention(attention, window, positions)
    p = {name: tf.convert_to_tensor(v) for name, v in params.items()}
    x = tf.gather(p["embed"], tokens)  # (batch, n, d_model)
    n, d_model = tokens.shape[1], x.shape[-1]
    if positions == "learned":
        x = x + p["pos"][:n]
    elif positions == "sinusoidal":
        table = positional.sinusoidal_positional_encoding(n, d_model)
        x = x + tf.cast(table, x.dtype)

    def norm(x, prefix):  # pre-LN, or the identity (the default)
        return _layer_norm(x, p, prefix) if layer_norm else x

    all_weights = []
    for layer in range(num_layers):
        pre = f"layer{layer}."
        mask = None if head_mask is None else head_mask[layer]
        out, weights = attention_sublayer(
            norm(x, pre + "norm1."),
            p,
            pre + "attn.",
            num_heads,
            positions,
            mask,
            attention,
            window,
        )
        x = x + out  # the residual stream
        all_weights.append(weights)
        if mlp:
            h = tf.matmul(norm(x, pre + "norm2."), p[pre + "ffn.W_1"])
            h = tf.nn.relu(h + p[pre + "ffn.b_1"])
            x = x + tf.matmul(h, p[pre + "ffn.W_2"]) + p[pre + "ffn.b_2"]
    x = norm(x, "norm_f.")
    logits = tf.matmul(x, p["unembed.W"]) + p["unembed.b"]
    return logits, all_weights


def _initializer(name, shape):
    """As attncourse.numpy.tiny's initial values, drawn by Keras."""
    leaf = name.rsplit(".", 1)[-1]
    if leaf == "gamma":
        return "ones"
    if leaf.startswith(("b", "beta")):
        return "zeros"
    if name in ("embed", "pos"):
        return keras.initializers.RandomNormal(stddev=1.0 / math.sqrt(shape[1]))
    return "glorot_uniform"


class TinyTransformer(keras.layers.Layer):
    """A decoder-only Transformer (see ``attncourse.numpy.TinyTransformer``).

    ``model.params`` maps the canonical names of tiny_param_shapes to the
    Keras variables; initial values as the NumPy model's, drawn by Keras.
    """

    def __init__(
        self,
        vocab_size,
        d_model,
        num_heads,
        num_layers,
        max_len,
        *,
        mlp=False,
        positions="learned",
        layer_norm=False,
        d_ff=None,
        attention="softmax",
        window=None,
        seed=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        checks.tiny_sizes(
            vocab_size, d_model, num_heads, num_layers, max_len, positions
        )
        self.vocab_size, self.d_model = int(vocab_size), int(d_model)
        self.num_heads, self.num_layers = int(num_heads), int(num_layers)
        self.max_len, self.mlp, self.positions = int(max_len), mlp, positions
        self.layer_norm = bool(layer_norm)
        checks.tiny_attention(attention, window, positions)
        self.attention = attention
        self.window = None if window is None else int(window)
        self.d_ff = d_ff
        shapes = tiny_param_shapes(
            vocab_size,
            d_model,
            num_layers,
            max_len,
            mlp=mlp,
            positions=positions,
            layer_norm=layer_norm,
            d_ff=d_ff,
        )
        # seed: the NumPy model's initial values (the same for any framework)
        rng = None if seed is None else np.random.default_rng(seed)
        self._params = {
            name: self.add_weight(
                name=name.replace(".", "_"),
                shape=shape,
                initializer=(
                    _initializer(name, shape)
                    if rng is None
                    else keras.initializers.Constant(_initial_value(name, shape, rng))
                ),
            )
            for name, shape in shapes.items()
        }
        self.built = True

    @property
    def params(self) -> dict:
        """name -> variable, in the layout of tiny_param_shapes."""
        return dict(self._params)

    def call(self, tokens, return_weights=False, head_mask=None):
        """logits (batch, n, vocab_size), plus the list of per-layer weights
        if return_weights: (batch, heads, n, n) for softmax, the band (batch,
        heads, n, window) for "window", None for "linear"."""
        tokens = tf.convert_to_tensor(tokens)
        checks.tiny_tokens(tokens, self.vocab_size, self.max_len, self.positions)
        if head_mask is not None:
            head_mask = tf.convert_to_tensor(head_mask)
            checks.head_mask_input(head_mask, self.num_layers, self.num_heads)
        logits, weights = tiny_transformer(
            tokens,
            self.params,
            self.num_heads,
            self.num_layers,
            positions=self.positions,
            mlp=self.mlp,
            layer_norm=self.layer_norm,
            head_mask=head_mask,
            attention=self.attention,
            window=self.window,
        )
        return (logits, weights) if return_weights else logits

    def get_config(self):
        return {
            **super().get_config(),
            **{
                k: getattr(self, k)
                for k in (
                    "vocab_size",
                    "d_model",
                    "num_heads",
                    "num_layers",
                    "max_len",
                    "mlp",
                    "positions",
                    "layer_norm",
                    "d_ff",
                    "attention",
                    "window",
                )
            },
        }


def repeat_mask(tokens):
    """bool (batch, n - 1): True where position i < n - 1 holds a token that
    occurred earlier in its row (where an induction head can predict i + 1)."""
    n = int(tokens.shape[1])
    same = tokens[:, :, None] == tokens[:, None, :]  # (batch, i, j)
    below = tf.constant(np.tri(n, k=-1, dtype=bool))
    return tf.reduce_any(tf.logical_and(same, below), axis=2)[:, :-1]


def next_token_loss(logits, tokens, only_repeats=False):
    """Mean cross-entropy of logits[:, i] against tokens[:, i + 1], over all
    positions i < n - 1 or, with only_repeats, over those whose token
    occurred earlier in the row (repeat_mask): the second copy of an
    induction_task row."""
    losses = tf.nn.sparse_softmax_cross_entropy_with_logits(
        tokens[:, 1:], logits[:, :-1]
    )  # (batch, n - 1)
    if not only_repeats:
        return tf.reduce_mean(losses)
    mask = tf.cast(repeat_mask(tokens), losses.dtype)
    return tf.reduce_sum(losses * mask) / tf.maximum(tf.reduce_sum(mask), 1.0)


def _adam_step(model, n, batch_size, learning_rate, only_repeats, clip_norm):
    """The model's compiled Adam step for rows of n tokens and these
    settings, with Adam reset.

    Traced once per model and settings and kept on the model, so training the
    same model again (from another seed's weights, after set_params) reuses
    the graph instead of tracing it anew; Adam's variables go back to their
    values right after build, as a fresh optimizer's.
    """
    key = (n, int(batch_size), float(learning_rate), bool(only_repeats), clip_norm)
    steps = model.__dict__.get("_adam_steps")
    if steps is None:  # object.__setattr__: not a Keras-tracked attribute
        steps = {}
        object.__setattr__(model, "_adam_steps", steps)
    if key not in steps:
        variables = list(model.params.values())
        optimizer = keras.optimizers.Adam(learning_rate, epsilon=1e-8)
        optimizer.build(variables)  # Adam's slots now, not inside the trace
        initial = [v.numpy() for v in optimizer.variables]
        signature = [
            tf.TensorSpec((None, n), tf.int64),  # all training rows
            tf.TensorSpec((int(batch_size),), tf.int64),  # one step's row ids
        ]

        @tf.function(input_signature=signature)
        def step(tokens, batch):
            x = tf.gather(tokens, batch)  # (batch_size, n)
            with tf.GradientTape() as tape:
                loss = next_token_loss(model(x), x, only_repeats)
            grads = tape.gradient(loss, variables)
            grads, _ = tf.clip_by_global_norm(grads, clip_norm)
            optimizer.apply_gradients(zip(grads, variables, strict=True))
            return loss

        steps[key] = (step, optimizer, initial)
    step, optimizer, initial = steps[key]
    for variable, value in zip(optimizer.variables, initial, strict=True):
        variable.assign(value)
    return step


def train_tiny(
    model,
    tokens,
    steps,
    batch_size,
    learning_rate,
    *,
    seed=0,
    only_repeats=False,
    clip_norm=1.0,
):
    """Adam on next_token_loss; returns the losses (steps,) as NumPy.

    tokens: int (N, n) training rows; step s uses rows
    ``tasks.batch_indices(N, steps, batch_size, seed)[s]``, so a torch model
    trained with the same arguments sees the same batches. The gradient's
    global norm is clipped to clip_norm. Each call starts a fresh Adam; the
    step is compiled once per model and settings (tf.function), so a second
    call on the same model (e.g. after set_params) does not trace again.
    """
    tokens = tf.cast(tf.convert_to_tensor(np.asarray(tokens)), tf.int64)
    checks.tiny_tokens(tokens, model.vocab_size, model.max_len, model.positions)
    rows = tasks.batch_indices(int(tokens.shape[0]), steps, batch_size, seed)
    n, clip_norm = int(tokens.shape[1]), float(clip_norm)
    step = _adam_step(model, n, batch_size, learning_rate, only_repeats, clip_norm)
    losses = [step(tokens, batch) for batch in tf.constant(rows)]
    return np.array([float(loss) for loss in losses])


def previous_token_score(weights):
    """(heads,): each head's mean weight on the previous token, over the
    batch and the queries i >= 1 (weights[b, h, i, i - 1]); 1 = a pure
    previous-token head. weights (batch, heads, n, n), n >= 2."""
    weights = tf.convert_to_tensor(weights)
    checks.head_weights_input(weights)
    below = tf.linalg.diag_part(weights, k=-1)  # (batch, heads, n - 1)
    return tf.reduce_mean(below, axis=(0, 2))


def induction_score(weights, tokens):
    """(heads,): each head's mean weight on the token AFTER an earlier copy of
    the current token, sum over j < i with tokens[b, j] == tokens[b, i] of
    weights[b, h, i, j + 1], averaged over the queries (b, i) whose token
    occurred before; 1 = a pure induction head. weights (batch, heads, n, n),
    tokens int (batch, n); no repeated token -> ValueError."""
    weights, tokens = tf.convert_to_tensor(weights), tf.convert_to_tensor(tokens)
    checks.induction_score_inputs(weights, tokens)
    n = int(tokens.shape[1])
    same = tokens[:, :, None] == tokens[:, None, :]  # (batch, i, j)
    below = tf.constant(np.tri(n, k=-1, dtype=bool))
    earlier = tf.logical_and(same, below)  # j < i
    repeated = tf.reduce_any(earlier, axis=2)  # (batch, i): the set Q
    count = int(tf.reduce_sum(tf.cast(repeated, tf.int32)))
    checks.check_repeated_tokens(count, checks.shape_of(tokens))
    # j + 1 <= i for every j < i: pair key column j with weight column j + 1
    total = tf.einsum(
        "bij,bhij->h",
        tf.cast(earlier[:, :, :-1], weights.dtype),
        weights[..., 1:],
    )
    return total / count
