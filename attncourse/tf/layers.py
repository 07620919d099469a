"""Single-head attention layers for Keras 3 (TensorFlow backend).

Weights are (in, out) matrices -- x @ W -- created with ``add_weight`` (or as
the kernels of bias-free Dense sublayers), glorot-uniform initialised:

    Q = X_q W_q, K = X_k W_k, V = X_v W_v,  outputs = softmax(Q K^T / sqrt(d_k)) V.

If the input sizes are given at construction the weights exist at once;
otherwise Keras builds them from the first call's shapes.
"""

import keras
import numpy as np
import tensorflow as tf

from attncourse import checks

from .pooling import scaled_dot_product_attention

__all__ = [
    "CrossAttention",
    "CustomAttention",
    "CustomAttentionDense",
    "StatisticalAttention",
    "get_weights_numpy",
    "set_weights_numpy",
]

_NAMES = ("W_q", "W_k", "W_v")


def _float_input(name, x, dim_name, dim):
    x = tf.convert_to_tensor(x)
    checks.check_float(name, x)
    checks.check_sequence(name, checks.shape_of(x), dim_name, dim)
    return x


class _Attention(keras.layers.Layer):
    """Shared machinery: weight creation, projection, attention, output spec."""

    def _init(self, seed):
        """glorot_uniform, seeded if ``seed`` is an int (a new seed per weight)."""
        if seed is not None:
            checks.check_count("seed", seed)
        self.seed, self._num_inits = seed, 0

    def _initializer(self):
        seed = None if self.seed is None else self.seed + self._num_inits
        self._num_inits += 1
        return keras.initializers.GlorotUniform(seed=seed)

    def _create(self, shapes):
        for name, shape in zip(_NAMES, shapes, strict=True):
            var = self.add_weight(name=name, shape=shape,
                                  initializer=self._initializer())
            setattr(self, name, var)

    def kernels(self) -> dict:
        """{"W_q", "W_k", "W_v"} -> the (in, out) kernel variables."""
        if not self.built:
            raise ValueError(
                f"{self.__class__.__name__} has no weights yet: call it once or "
                f"pass its input sizes to the constructor"
            )
        return {name: getattr(self, name) for name in _NAMES}

    def weight_shapes(self) -> dict:
        """{"W_q", "W_k", "W_v"} -> (in, out) shapes."""
        return {k: checks.shape_of(v) for k, v in self.kernels().items()}

    def _project(self, name, x):
        return tf.matmul(x, tf.cast(getattr(self, name), x.dtype))

    def _attend(self, xq, xk, xv, attention_mask, return_weights):
        q = self._project("W_q", xq)
        k = self._project("W_k", xk)
        v = self._project("W_v", xv)
        out, weights = scaled_dot_product_attention(q, k, v, mask=attention_mask)
        return (out, weights) if return_weights else out

    def _spec(self, q_shape, k_shape, return_weights):
        out = keras.KerasTensor((*q_shape[:2], self.d_v), dtype=self.compute_dtype)
        if not return_weights:
            return out
        w_shape = (q_shape[0], q_shape[1], k_shape[1])
        return out, keras.KerasTensor(w_shape, dtype=self.compute_dtype)


class CustomAttention(_Attention):
    """Single-head self-attention with weights W_q, W_k, W_v (add_weight).

    d_k: query/key size; d_v: output size; input_dim: feature size of the
    inputs (None = taken from the first call); seed: int for a reproducible
    init, None = Keras' global RNG. Weights: W_q, W_k (input_dim, d_k), W_v
    (input_dim, d_v), glorot_uniform.

    ``layer(inputs, attention_mask=None, return_weights=False)``: inputs
    (batch, seq, input_dim); attention_mask bool (True = attend) broadcastable
    to (batch, seq, seq). Returns outputs (batch, seq, d_v), or (outputs,
    weights (batch, seq, seq)). The argument is called ``attention_mask``, not
    ``mask``: Keras fills a call argument named ``mask`` automatically from
    upstream masking layers (Embedding(mask_zero=True), Masking), which would
    silently change what the layer does.

    Example: ``keras.Input(shape=(10, 64))`` -> ``CustomAttention(128, 256)``
    gives output (None, 10, 256) and 64*128 + 64*128 + 64*256 = 32,768 params.
    """

    def __init__(self, d_k, d_v, input_dim=None, seed=None, **kwargs):
        super().__init__(**kwargs)
        self._init(seed)
        for name, value in (("d_k", d_k), ("d_v", d_v)):
            checks.check_count(name, value)
        if input_dim is not None:
            checks.check_count("input_dim", input_dim)
        self.d_k, self.d_v, self.input_dim = d_k, d_v, input_dim
        if input_dim is not None:
            self.build((None, None, input_dim))

    def build(self, input_shape):
        """Create the weights for inputs (batch, seq, input_dim)."""
        dim = int(input_shape[-1])
        if self.input_dim is not None:
            checks.check_features("inputs", tuple(input_shape), "input_dim",
                                  self.input_dim)
        self.input_dim = dim
        self._create([(dim, self.d_k), (dim, self.d_k), (dim, self.d_v)])

    def call(self, inputs, attention_mask=None, return_weights=False):
        """inputs (batch, seq, input_dim) -> (batch, seq, d_v) [, weights]."""
        x = _float_input("inputs", inputs, "input_dim", self.input_dim)
        return self._attend(x, x, x, attention_mask, return_weights)

    def compute_output_spec(self, inputs, attention_mask=None,
                            return_weights=False):
        """Symbolic outputs (batch, seq, d_v) [, weights (batch, seq, seq)]."""
        return self._spec(inputs.shape, inputs.shape, return_weights)

    def get_config(self):
        """Constructor arguments, for Keras serialisation (from_config)."""
        return {**super().get_config(), "d_k": self.d_k, "d_v": self.d_v,
                "input_dim": self.input_dim, "seed": self.seed}


class CustomAttentionDense(CustomAttention):
    """CustomAttention written with Dense(use_bias=False) sublayers W_q/W_k/W_v.

    Same maths, shapes and parameter count as CustomAttention: a bias-free
    Dense layer computes x @ kernel with kernel (in, out). The kernels are
    ``layer.W_q.kernel`` etc.
    """

    def __init__(self, d_k, d_v, input_dim=None, seed=None, **kwargs):
        keras.layers.Layer.__init__(self, **kwargs)
        self._init(seed)
        for name, value in (("d_k", d_k), ("d_v", d_v)):
            checks.check_count(name, value)
        self.d_k, self.d_v, self.input_dim = d_k, d_v, input_dim
        for name, units in zip(_NAMES, (d_k, d_k, d_v), strict=True):
            dense = keras.layers.Dense(units, use_bias=False, name=name,
                                       kernel_initializer=self._initializer())
            setattr(self, name, dense)
        if input_dim is not None:
            checks.check_count("input_dim", input_dim)
            self.build((None, None, input_dim))

    def build(self, input_shape):
        """Build the three Dense sublayers for inputs (batch, seq, input_dim)."""
        if self.input_dim is not None:
            checks.check_features("inputs", tuple(input_shape), "input_dim",
                                  self.input_dim)
        self.input_dim = int(input_shape[-1])
        for name in _NAMES:
            getattr(self, name).build(tuple(input_shape))

    def kernels(self):
        """{"W_q", "W_k", "W_v"} -> the Dense sublayers' (in, out) kernels."""
        if not self.built:
            return super().kernels()
        return {name: getattr(self, name).kernel for name in _NAMES}

    def _project(self, name, x):
        return getattr(self, name)(x)


class CrossAttention(_Attention):
    """Cross-attention: queries from sequence A, keys and values from B.

    d_k, d_v as in CustomAttention; input_dim: features of A, context_dim:
    features of B (both None = taken from the first call; input_dim given and
    context_dim None -> context_dim = input_dim, as in the NumPy and PyTorch
    twins). Weights: W_q (input_dim, d_k), W_k (context_dim, d_k), W_v
    (context_dim, d_v).

    ``layer(inputs, context, attention_mask=None, return_weights=False)``:
    inputs A (batch, len_a, input_dim), context B (batch, len_b, context_dim),
    mask broadcastable to (batch, len_a, len_b). Returns outputs
    (batch, len_a, d_v) [, weights (batch, len_a, len_b)].
    """

    _arg_names = ("inputs", "context")

    def __init__(self, d_k, d_v, input_dim=None, context_dim=None, seed=None,
                 **kwargs):
        super().__init__(**kwargs)
        self._init(seed)
        for name, value in (("d_k", d_k), ("d_v", d_v)):
            checks.check_count(name, value)
        if input_dim is not None and context_dim is None:
            context_dim = input_dim
        self.d_k, self.d_v = d_k, d_v
        self.input_dim, self.context_dim = input_dim, context_dim
        if input_dim is not None:
            checks.check_count("input_dim", input_dim)
            checks.check_count("context_dim", context_dim)
            self.build((None, None, input_dim), (None, None, context_dim))

    def _shapes(self, a, b):
        d_k, d_v = self.d_k, self.d_v
        return [(a, d_k), (b, d_k), (b, d_v)]

    def build(self, inputs_shape, context_shape):
        """Create the weights from the shapes of inputs (A) and context (B)."""
        name_a, name_b = self._arg_names
        for name, shape, dim_name, dim in (
            (name_a, inputs_shape, "input_dim", self.input_dim),
            (name_b, context_shape, "context_dim", self.context_dim),
        ):
            if dim is not None:
                checks.check_features(name, tuple(shape), dim_name, dim)
        self.input_dim = int(inputs_shape[-1])
        self.context_dim = int(context_shape[-1])
        self._create(self._shapes(self.input_dim, self.context_dim))

    def call(self, inputs, context, attention_mask=None, return_weights=False):
        """inputs (b, len_a, input_dim), context (b, len_b, context_dim)."""
        a = _float_input("inputs", inputs, "input_dim", self.input_dim)
        b = _float_input("context", context, "context_dim", self.context_dim)
        checks.check_same_dtype(inputs=a, context=b)
        checks.check_same_batch("inputs", checks.shape_of(a), "context",
                                checks.shape_of(b))
        return self._attend(a, b, b, attention_mask, return_weights)

    def compute_output_spec(self, inputs, context, attention_mask=None,
                            return_weights=False):
        """Symbolic outputs (batch, len_a, d_v) [, weights (batch, len_a, len_b)]."""
        return self._spec(inputs.shape, context.shape, return_weights)

    def get_config(self):
        """Constructor arguments, for Keras serialisation (from_config)."""
        return {**super().get_config(), "d_k": self.d_k, "d_v": self.d_v,
                "input_dim": self.input_dim, "context_dim": self.context_dim,
                "seed": self.seed}


class StatisticalAttention(CrossAttention):
    """The "statistical modelling" variant: Q from B, K from A, V from [A; B].

    a (batch, seq, input_dim), b (batch, seq, context_dim) must have the same
    batch size and length (their features are concatenated). Weights: W_q
    (context_dim, d_k), W_k (input_dim, d_k), W_v (input_dim + context_dim,
    d_v).

    ``layer(a, b, attention_mask=None, return_weights=False)`` -> outputs
    (batch, seq, d_v) [, weights (batch, seq, seq)]: query i (from b) scores
    every key j (from a) and averages the joint vectors [a_j; b_j] W_v.
    """

    _arg_names = ("a", "b")

    def _shapes(self, a, b):
        return [(b, self.d_k), (a, self.d_k), (a + b, self.d_v)]

    def build(self, a_shape, b_shape):
        """Create the weights from the shapes of a and b."""
        super().build(a_shape, b_shape)

    def call(self, a, b, attention_mask=None, return_weights=False):
        """a (batch, seq, input_dim), b (batch, seq, context_dim)."""
        a = _float_input("a", a, "input_dim", self.input_dim)
        b = _float_input("b", b, "context_dim", self.context_dim)
        checks.check_same_dtype(a=a, b=b)
        checks.check_same_length("a", checks.shape_of(a), "b", checks.shape_of(b))
        joint = tf.concat([a, b], axis=-1)
        return self._attend(b, a, joint, attention_mask, return_weights)

    def compute_output_spec(self, a, b, attention_mask=None, return_weights=False):
        """Symbolic outputs (batch, seq, d_v) [, weights (batch, seq, seq)]."""
        return self._spec(b.shape, a.shape, return_weights)


def get_weights_numpy(layer) -> dict:
    """{"W_q", "W_k", "W_v"} -> NumPy copies of the kernels, (in, out) layout."""
    return {name: np.array(v.numpy()) for name, v in layer.kernels().items()}


def set_weights_numpy(layer, weights: dict) -> None:
    """Assign NumPy arrays in (in, out) layout to the layer's kernels.

    ``weights`` needs exactly the keys W_q, W_k, W_v with the layer's shapes;
    anything else raises ValueError naming the key and the shapes.
    """
    kernels = layer.kernels()
    checks.check_weight_keys(kernels, weights)
    arrays = {name: np.asarray(w) for name, w in weights.items()}
    for name, w in arrays.items():
        checks.check_float(name, w)
        checks.check_weight(name, checks.shape_of(w),
                            checks.shape_of(kernels[name]))
    for name, w in arrays.items():
        kernels[name].assign(w.astype(kernels[name].dtype))
