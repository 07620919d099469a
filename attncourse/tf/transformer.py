"""The Transformer block in TensorFlow / Keras 3 (differentiable, eager).

Same maths, names and flat parameter dict as ``attncourse.numpy.transformer``:

    norm="pre":  h = x + MHA(LN1(x));   y = h + FFN(LN2(h))   (Xiong et al. 2020)
    norm="post": h = LN1(x + MHA(x));   y = LN2(h + FFN(h))   (Vaswani et al. 2017)

The layers add dropout on the attention weights while training (the weights
they return are the undropped ones). Masks are bool, True = attend.
"""

import keras
import tensorflow as tf

from attncourse import checks
from attncourse.numpy.transformer import (
    _ffn_params,
    _sub,
    block_param_shapes,
    block_params_to_torch,
)

from .masking import causal_mask
from .multihead import (
    MultiHeadAttention,
    _project,
    merge_heads,
    multi_head_attention,
    split_heads,
)

__all__ = [
    "DecoderBlock",
    "TransformerBlock",
    "block_param_shapes",
    "block_params_to_torch",
    "decoder_block",
    "feed_forward",
    "layer_norm",
    "rms_norm",
    "transformer_block",
]


def layer_norm(x, gamma, beta, eps=1e-5):
    """(x - mean) / sqrt(var + eps) * gamma + beta over the last axis (Ba et
    al. 2016), biased variance. x (..., d), gamma and beta (d,)."""
    x = tf.convert_to_tensor(x)
    gamma, beta = tf.cast(gamma, x.dtype), tf.cast(beta, x.dtype)
    checks.norm_inputs(x, gamma, beta)
    mean = tf.reduce_mean(x, axis=-1, keepdims=True)
    var = tf.reduce_mean(tf.square(x - mean), axis=-1, keepdims=True)
    return (x - mean) / tf.sqrt(var + eps) * gamma + beta


def rms_norm(x, gamma, eps=1e-6):
    """x / sqrt(mean(x^2) + eps) * gamma over the last axis (Zhang & Sennrich
    2019). x (..., d), gamma (d,)."""
    x = tf.convert_to_tensor(x)
    gamma = tf.cast(gamma, x.dtype)
    checks.norm_inputs(x, gamma)
    ms = tf.reduce_mean(tf.square(x), axis=-1, keepdims=True)
    return x / tf.sqrt(ms + eps) * gamma


def _activation(x, activation):
    if activation == "relu":
        return tf.nn.relu(x)
    return tf.nn.gelu(x, approximate=False)  # exact GELU (erf)


def feed_forward(x, params, activation="relu"):
    """act(x W_1 + b_1) W_2 + b_2 at every position. x (..., d_model); params
    W_1 (d_model, d_ff), b_1, W_2 (d_ff, d_model), b_2 (or ffn.W_1 ...)."""
    x = tf.convert_to_tensor(x)
    p = {k: tf.cast(v, x.dtype) for k, v in _ffn_params(params).items()}
    checks.ffn_inputs(x, p, activation)
    hidden = _activation(tf.matmul(x, p["W_1"]) + p["b_1"], activation)
    return tf.matmul(hidden, p["W_2"]) + p["b_2"]  # (..., d_model)


def _attention(queries, keys, params, num_heads, mask, drop):
    """MHA of queries over keys (= values); ``drop`` (or None) is applied to
    the weights before they average the values. Returns (outputs, weights)."""
    outputs, weights = multi_head_attention(
        queries, keys, keys, params, num_heads, mask
    )
    if drop is None:
        return outputs, weights
    v = split_heads(_project(keys, params, "v"), num_heads)  # (b, h, m, d_head)
    heads = tf.matmul(drop(weights), v)  # (batch, heads, n, d_head)
    return _project(merge_heads(heads), params, "o"), weights


def sublayer_with_residual(x, sublayer, params, name, norm, eps):
    """One sublayer with its residual connection and its norm ``name``."""
    gamma, beta = params[f"{name}.gamma"], params[f"{name}.beta"]
    if norm == "pre":
        out, weights = sublayer(layer_norm(x, gamma, beta, eps))
        return x + out, weights
    out, weights = sublayer(x)
    return layer_norm(x + out, gamma, beta, eps), weights


def block_forward(
    x, memory, params, num_heads, norm, activation, mask, memory_mask, eps, drop=None
):
    """The encoder block (memory None) or decoder block."""
    p = {k: tf.cast(v, x.dtype) for k, v in params.items()}

    def attend(name, keys, m):
        return lambda h: _attention(
            h, h if keys is None else keys, _sub(p, name), num_heads, m, drop
        )

    def ffn(h):
        return feed_forward(h, _sub(p, "ffn"), activation), None

    h, self_weights = sublayer_with_residual(
        x, attend("attn", None, mask), p, "norm1", norm, eps
    )
    if memory is None:
        y, _ = sublayer_with_residual(h, ffn, p, "norm2", norm, eps)
        return y, self_weights
    h, cross = sublayer_with_residual(
        h, attend("cross", memory, memory_mask), p, "norm2", norm, eps
    )
    y, _ = sublayer_with_residual(h, ffn, p, "norm3", norm, eps)
    return y, self_weights, cross


def _mask(mask):
    return None if mask is None else tf.convert_to_tensor(mask)


def transformer_block(
    x, params, num_heads, *, norm="pre", activation="relu", mask=None, eps=1e-5
):
    """One encoder block with the flat dict ``params``; see the NumPy twin.
    Returns (outputs (batch, n, d_model), weights (batch, num_heads, n, n))."""
    x, mask = tf.convert_to_tensor(x), _mask(mask)
    checks.block_inputs(x, params, num_heads, norm, activation, mask)
    return block_forward(x, None, params, num_heads, norm, activation, mask, None, eps)


def decoder_block(
    x,
    memory,
    params,
    num_heads,
    *,
    norm="pre",
    activation="relu",
    mask=None,
    memory_mask=None,
    eps=1e-5,
):
    """Self-attention, cross-attention to memory, FFN (norm1, norm2, norm3).
    Returns (outputs, self weights, cross weights); see the NumPy twin."""
    x, memory = tf.convert_to_tensor(x), tf.convert_to_tensor(memory)
    mask, memory_mask = _mask(mask), _mask(memory_mask)
    checks.block_inputs(x, params, num_heads, norm, activation, mask, memory)
    if memory_mask is not None:
        checks.check_mask_rank(
            checks.shape_of(memory_mask), checks.dtype_name(memory_mask)
        )
    return block_forward(
        x, memory, params, num_heads, norm, activation, mask, memory_mask, eps
    )


def _with_causal(mask, n, causal):
    """mask AND the (n, n) causal mask when ``causal`` (mask None = all)."""
    if not causal:
        return mask
    if mask is None:
        return causal_mask(n)
    mask = tf.convert_to_tensor(mask)
    checks.check_mask_rank(checks.shape_of(mask), checks.dtype_name(mask))
    return tf.logical_and(mask, causal_mask(n))


class _Block(keras.layers.Layer):
    """Shared by both blocks: the course's MultiHeadAttention layers hold the
    attention weights; norms and FFN are this layer's own variables."""

    CROSS = False

    def __init__(
        self, d_model, num_heads, d_ff, norm, activation, causal, dropout, eps, **kwargs
    ):
        super().__init__(**kwargs)
        checks.block_sizes(d_model, num_heads, d_ff, norm, activation, dropout)
        self.d_model, self.num_heads, self.d_ff = d_model, num_heads, d_ff
        self.norm, self.activation, self.causal = norm, activation, causal
        self.dropout, self.eps = dropout, eps
        dims = (d_model,) * 3
        self.attn = MultiHeadAttention(num_heads, d_model, input_dims=dims)
        self.cross = (
            MultiHeadAttention(num_heads, d_model, input_dims=dims)
            if self.CROSS
            else None
        )
        shapes = block_param_shapes(d_model, d_ff, cross=self.CROSS)
        self._own = {
            name: self.add_weight(name=name, shape=shape, initializer=_init(name))
            for name, shape in shapes.items()
            if not name.startswith(("attn.", "cross."))
        }
        self.drop = keras.layers.Dropout(dropout) if dropout else None
        self.supports_masking = True  # see _token_mask and compute_mask
        self.built = True

    @property
    def params(self) -> dict:
        """name -> variable, in the flat layout of block_param_shapes."""
        params = {f"attn.{k}": v for k, v in self.attn.params.items()}
        if self.cross is not None:
            params.update({f"cross.{k}": v for k, v in self.cross.params.items()})
        params.update(self._own)
        return {name: params[name] for name in self._names()}

    def _names(self):
        return block_param_shapes(self.d_model, self.d_ff, cross=self.CROSS)

    @staticmethod
    def _token_mask(tensor, mask):
        """Keras passes the mask it attached to an input (batch, n), e.g. by
        Embedding(mask_zero=True), as ``mask`` (``memory_mask`` for memory):
        True marks real tokens, so it becomes the padding mask (batch, 1, n)."""
        attached = getattr(tensor, "_keras_mask", None)
        if mask is not None and mask is attached:
            return tf.convert_to_tensor(mask)[:, None, :]
        return mask

    def compute_mask(self, inputs, previous_mask=None):
        """Outputs keep the token mask Keras attached to x (not our attention
        mask): one output per input position."""
        return getattr(inputs, "_keras_mask", None)

    def _dropper(self, training):
        if self.drop is None:
            return None
        return lambda w: self.drop(w, training=training)

    def _config(self):
        return {
            "d_model": self.d_model,
            "num_heads": self.num_heads,
            "d_ff": self.d_ff,
            "norm": self.norm,
            "activation": self.activation,
            "causal": self.causal,
            "dropout": self.dropout,
            "eps": self.eps,
        }

    def get_config(self):
        return {**super().get_config(), **self._config()}


def _init(name):
    if name.endswith("gamma"):
        return "ones"
    return "glorot_uniform" if ".W_" in name else "zeros"


class TransformerBlock(_Block):
    """An encoder block holding its parameters (see transformer_block);
    ``causal=True`` is the decoder-only (GPT) block. ``dropout`` drops
    attention weights when training. ``params``: the flat dict of
    block_param_shapes(d_model, d_ff) (Glorot matrices, zero biases, gamma 1,
    beta 0)."""

    def __init__(
        self,
        d_model,
        num_heads,
        d_ff,
        *,
        norm="pre",
        activation="relu",
        causal=False,
        dropout=0.0,
        eps=1e-5,
        **kwargs,
    ):
        super().__init__(
            d_model, num_heads, d_ff, norm, activation, causal, dropout, eps, **kwargs
        )

    def call(self, x, mask=None, return_weights=False, training=None):
        """x (batch, n, d_model) -> outputs [, weights (batch, heads, n, n)]."""
        mask = self._token_mask(x, mask)
        x = tf.convert_to_tensor(x)
        checks.sequence_input("x", x, "d_model", self.d_model)
        mask = _with_causal(mask, x.shape[1], self.causal)
        checks.block_inputs(
            x, self.params, self.num_heads, self.norm, self.activation, mask
        )
        out, weights = block_forward(
            x,
            None,
            self.params,
            self.num_heads,
            self.norm,
            self.activation,
            mask,
            None,
            self.eps,
            self._dropper(training),
        )
        return (out, weights) if return_weights else out


class DecoderBlock(_Block):
    """A decoder block holding its parameters (see decoder_block): causal
    self-attention (unless causal=False), cross-attention to the memory, FFN.
    ``params``: block_param_shapes(d_model, d_ff, cross=True)."""

    CROSS = True

    def __init__(
        self,
        d_model,
        num_heads,
        d_ff,
        *,
        norm="pre",
        activation="relu",
        causal=True,
        dropout=0.0,
        eps=1e-5,
        **kwargs,
    ):
        super().__init__(
            d_model, num_heads, d_ff, norm, activation, causal, dropout, eps, **kwargs
        )

    def call(
        self,
        x,
        memory,
        mask=None,
        memory_mask=None,
        return_weights=False,
        training=None,
    ):
        """x (batch, n, d_model), memory (batch, m, d_model) -> outputs [, self
        weights, cross weights]."""
        if mask is None:  # as Keras fills it for TransformerBlock
            mask = getattr(x, "_keras_mask", None)
        mask = self._token_mask(x, mask)
        memory_mask = _mask(self._token_mask(memory, memory_mask))
        x, memory = tf.convert_to_tensor(x), tf.convert_to_tensor(memory)
        checks.sequence_input("x", x, "d_model", self.d_model)
        mask = _with_causal(mask, x.shape[1], self.causal)
        checks.block_inputs(
            x, self.params, self.num_heads, self.norm, self.activation, mask, memory
        )
        if memory_mask is not None:
            checks.check_mask_rank(
                checks.shape_of(memory_mask), checks.dtype_name(memory_mask)
            )
        out, self_w, cross_w = block_forward(
            x,
            memory,
            self.params,
            self.num_heads,
            self.norm,
            self.activation,
            mask,
            memory_mask,
            self.eps,
            self._dropper(training),
        )
        return (out, self_w, cross_w) if return_weights else out
