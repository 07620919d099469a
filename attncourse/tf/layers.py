"""Single-head attention layers for Keras 3 (TensorFlow backend).

Parameters are (in, out) matrices -- x @ W -- created with ``add_weight`` (or
as the kernels of bias-free Dense sublayers), glorot-uniform initialised:

    Q = X_q W_q, K = X_k W_k, V = X_v W_v,  outputs = softmax(Q K^T / sqrt(d_k)) V.

If the input sizes are given at construction the parameters exist at once;
otherwise Keras builds them from the first call's shapes. ``layer.params``
maps W_q, W_k, W_v to the variables.
"""

import keras
import tensorflow as tf

from attncourse import checks

from .pooling import scaled_dot_product_attention

__all__ = [
    "CrossAttention",
    "CustomAttention",
    "CustomAttentionDense",
    "SelfAttention",
    "SelfAttentionDense",
    "StatisticalAttention",
]

_NAMES = ("W_q", "W_k", "W_v")


def _glorot(seed, i):
    """glorot_uniform; seeded layers give their i-th parameter seed + i."""
    return keras.initializers.GlorotUniform(seed=None if seed is None else seed + i)


class AttentionLayer(keras.layers.Layer):
    """The shared base: parameters W_q, W_k, W_v and the three projections."""

    def __init__(self, seed=None, **kwargs):
        super().__init__(**kwargs)
        if seed is not None:
            checks.check_count("seed", seed)
        self.seed = seed

    def create_params(self, shapes):
        """One glorot-uniform variable per name -> shape, set as an attribute."""
        for i, (name, shape) in enumerate(shapes.items()):
            setattr(
                self,
                name,
                self.add_weight(
                    name=name, shape=shape, initializer=_glorot(self.seed, i)
                ),
            )

    @property
    def params(self) -> dict:
        """{"W_q", "W_k", "W_v"} -> the (in, out) variables."""
        if not self.built:
            raise ValueError(
                f"{self.__class__.__name__} has no weights yet: call it once or "
                f"pass its input sizes to the constructor"
            )
        return {name: getattr(self, name) for name in _NAMES}

    def param_shapes(self) -> dict:
        """{"W_q": (in, d_k), "W_k": (in, d_k), "W_v": (in, d_v)} from the sizes."""
        raise NotImplementedError

    def project(self, xq, xk, xv):
        """Q = X_q W_q, K = X_k W_k, V = X_v W_v, in the inputs' dtype."""
        p = {name: tf.cast(w, xq.dtype) for name, w in self.params.items()}
        return tf.matmul(xq, p["W_q"]), tf.matmul(xk, p["W_k"]), tf.matmul(xv, p["W_v"])

    def symbolic_outputs(self, q_shape, k_shape, return_weights):
        """KerasTensors (batch, n_q, d_v) [, weights (batch, n_q, n_k)]."""
        out = keras.KerasTensor((*q_shape[:2], self.d_v), dtype=self.compute_dtype)
        if not return_weights:
            return out
        w_shape = (q_shape[0], q_shape[1], k_shape[1])
        return out, keras.KerasTensor(w_shape, dtype=self.compute_dtype)


class SelfAttention(AttentionLayer):
    """Single-head self-attention with parameters W_q, W_k, W_v (add_weight).

    d_k: query/key size; d_v: output size; input_dim: feature size of the
    inputs (None = taken from the first call); seed: int for a reproducible
    init, None = Keras' global RNG. Parameters: W_q, W_k (input_dim, d_k), W_v
    (input_dim, d_v), glorot_uniform.

    ``layer(inputs, attention_mask=None, return_weights=False)``: inputs
    (batch, seq, input_dim); attention_mask bool (True = attend) broadcastable
    to (batch, seq, seq). Returns outputs (batch, seq, d_v), or (outputs,
    weights (batch, seq, seq)). The argument is called ``attention_mask``, not
    ``mask``: Keras fills a call argument named ``mask`` automatically from
    upstream masking layers (Embedding(mask_zero=True), Masking), which would
    silently change what the layer does.

    Example: ``keras.Input(shape=(10, 64))`` -> ``SelfAttention(128, 256)``
    gives output (None, 10, 256) and 64*128 + 64*128 + 64*256 = 32,768 params.
    """

    def __init__(self, d_k, d_v, input_dim=None, seed=None, **kwargs):
        super().__init__(seed, **kwargs)
        checks.attention_layer_sizes(d_k, d_v, input_dim, input_dim_required=False)
        self.d_k, self.d_v, self.input_dim = d_k, d_v, input_dim
        if input_dim is not None:
            self.build((None, None, input_dim))

    def build(self, input_shape):
        """Create W_q, W_k (input_dim, d_k), W_v (input_dim, d_v)."""
        self.input_dim = int(input_shape[-1])
        self.create_params(self.param_shapes())

    def param_shapes(self):
        """W_q, W_k: (input_dim, d_k); W_v: (input_dim, d_v)."""
        n = self.input_dim
        return {"W_q": (n, self.d_k), "W_k": (n, self.d_k), "W_v": (n, self.d_v)}

    def call(self, inputs, attention_mask=None, return_weights=False):
        """inputs (batch, seq, input_dim) -> (batch, seq, d_v) [, weights]."""
        inputs = tf.convert_to_tensor(inputs)
        checks.sequence_input("inputs", inputs, "input_dim", self.input_dim)
        queries, keys, values = self.project(inputs, inputs, inputs)
        outputs, weights = scaled_dot_product_attention(
            queries, keys, values, mask=attention_mask
        )
        return (outputs, weights) if return_weights else outputs

    def compute_output_spec(self, inputs, attention_mask=None, return_weights=False):
        """Symbolic outputs (batch, seq, d_v) [, weights (batch, seq, seq)]."""
        return self.symbolic_outputs(inputs.shape, inputs.shape, return_weights)

    def get_config(self):
        """Constructor arguments, for Keras serialisation (from_config)."""
        return {
            **super().get_config(),
            "d_k": self.d_k,
            "d_v": self.d_v,
            "input_dim": self.input_dim,
            "seed": self.seed,
        }


class SelfAttentionDense(SelfAttention):
    """SelfAttention written with Dense(use_bias=False) sublayers W_q/W_k/W_v.

    Same maths, shapes and parameter count as SelfAttention: a bias-free
    Dense layer computes x @ kernel with kernel (in, out). The kernels are
    ``layer.W_q.kernel`` etc.
    """

    def __init__(self, d_k, d_v, input_dim=None, seed=None, **kwargs):
        AttentionLayer.__init__(self, seed, **kwargs)
        checks.attention_layer_sizes(d_k, d_v, input_dim, input_dim_required=False)
        self.d_k, self.d_v, self.input_dim = d_k, d_v, input_dim
        for i, (name, units) in enumerate(zip(_NAMES, (d_k, d_k, d_v), strict=True)):
            setattr(
                self,
                name,
                keras.layers.Dense(
                    units,
                    use_bias=False,
                    name=name,
                    kernel_initializer=_glorot(seed, i),
                ),
            )
        if input_dim is not None:
            self.build((None, None, input_dim))

    def build(self, input_shape):
        """Build the three Dense sublayers for inputs (batch, seq, input_dim)."""
        self.input_dim = int(input_shape[-1])
        for name in _NAMES:
            getattr(self, name).build(tuple(input_shape))

    @property
    def params(self):
        """{"W_q", "W_k", "W_v"} -> the Dense sublayers' (in, out) kernels."""
        if not self.built:
            return super().params
        return {name: getattr(self, name).kernel for name in _NAMES}

    def project(self, xq, xk, xv):
        """The Dense sublayers: W_q(X_q), W_k(X_k), W_v(X_v)."""
        return self.W_q(xq), self.W_k(xk), self.W_v(xv)


CustomAttention = SelfAttention  # the seed notes' name
CustomAttentionDense = SelfAttentionDense


class CrossAttention(AttentionLayer):
    """Cross-attention: queries from sequence A, keys and values from B.

    d_k, d_v as in SelfAttention; input_dim: features of A, context_dim:
    features of B (both None = taken from the first call; input_dim given and
    context_dim None -> context_dim = input_dim, as in the NumPy and PyTorch
    twins). Parameters: W_q (input_dim, d_k), W_k (context_dim, d_k), W_v
    (context_dim, d_v).

    ``layer(inputs, context, attention_mask=None, return_weights=False)``:
    inputs A (batch, len_a, input_dim), context B (batch, len_b, context_dim),
    mask broadcastable to (batch, len_a, len_b). Returns outputs
    (batch, len_a, d_v) [, weights (batch, len_a, len_b)].
    """

    def __init__(self, d_k, d_v, input_dim=None, context_dim=None, seed=None, **kwargs):
        super().__init__(seed, **kwargs)
        if input_dim is not None and context_dim is None:
            context_dim = input_dim
        checks.attention_layer_sizes(
            d_k, d_v, input_dim, context_dim, input_dim_required=False
        )
        self.d_k, self.d_v = d_k, d_v
        self.input_dim, self.context_dim = input_dim, context_dim
        if input_dim is not None:
            self.build((None, None, input_dim), (None, None, context_dim))

    def build(self, inputs_shape, context_shape):
        """Create the parameters from the shapes of inputs (A) and context (B)."""
        if self.context_dim is not None:  # given without input_dim
            checks.check_features(
                "context", tuple(context_shape), "context_dim", self.context_dim
            )
        self.input_dim = int(inputs_shape[-1])
        self.context_dim = int(context_shape[-1])
        self.create_params(self.param_shapes())

    def param_shapes(self):
        """W_q: (input_dim, d_k); W_k: (context_dim, d_k); W_v: (context_dim, d_v)."""
        return {
            "W_q": (self.input_dim, self.d_k),
            "W_k": (self.context_dim, self.d_k),
            "W_v": (self.context_dim, self.d_v),
        }

    def call(self, inputs, context, attention_mask=None, return_weights=False):
        """inputs (b, len_a, input_dim), context (b, len_b, context_dim)."""
        inputs, context = tf.convert_to_tensor(inputs), tf.convert_to_tensor(context)
        checks.cross_attention_inputs(inputs, context, self.input_dim, self.context_dim)
        queries, keys, values = self.project(inputs, context, context)
        outputs, weights = scaled_dot_product_attention(
            queries, keys, values, mask=attention_mask
        )
        return (outputs, weights) if return_weights else outputs

    def compute_output_spec(
        self, inputs, context, attention_mask=None, return_weights=False
    ):
        """Symbolic outputs (batch, len_a, d_v) [, weights (batch, len_a, len_b)]."""
        return self.symbolic_outputs(inputs.shape, context.shape, return_weights)

    def get_config(self):
        """Constructor arguments, for Keras serialisation (from_config)."""
        return {
            **super().get_config(),
            "d_k": self.d_k,
            "d_v": self.d_v,
            "input_dim": self.input_dim,
            "context_dim": self.context_dim,
            "seed": self.seed,
        }


class StatisticalAttention(CrossAttention):
    """The "statistical modelling" variant: Q from B, K from A, V from [A; B].

    a (batch, seq, input_dim), b (batch, seq, context_dim) must have the same
    batch size and length (their features are concatenated). Parameters: W_q
    (context_dim, d_k), W_k (input_dim, d_k), W_v (input_dim + context_dim,
    d_v).

    ``layer(a, b, attention_mask=None, return_weights=False)`` -> outputs
    (batch, seq, d_v) [, weights (batch, seq, seq)]: query i (from b) scores
    every key j (from a) and averages the joint vectors [a_j; b_j] W_v.
    """

    def build(self, a_shape, b_shape):
        """Create the parameters from the shapes of a and b."""
        if self.context_dim is not None:  # given without input_dim
            checks.check_features("b", tuple(b_shape), "context_dim", self.context_dim)
        self.input_dim, self.context_dim = int(a_shape[-1]), int(b_shape[-1])
        self.create_params(self.param_shapes())

    def param_shapes(self):
        """W_q: (context_dim, d_k); W_k: (input_dim, d_k); W_v: (in + ctx, d_v)."""
        return {
            "W_q": (self.context_dim, self.d_k),
            "W_k": (self.input_dim, self.d_k),
            "W_v": (self.input_dim + self.context_dim, self.d_v),
        }

    def call(self, a, b, attention_mask=None, return_weights=False):
        """a (batch, seq, input_dim), b (batch, seq, context_dim)."""
        a, b = tf.convert_to_tensor(a), tf.convert_to_tensor(b)
        checks.statistical_attention_inputs(a, b, self.input_dim, self.context_dim)
        joint = tf.concat([a, b], axis=-1)  # (batch, seq, in + ctx)
        queries, keys, values = self.project(b, a, joint)
        outputs, weights = scaled_dot_product_attention(
            queries, keys, values, mask=attention_mask
        )
        return (outputs, weights) if return_weights else outputs

    def compute_output_spec(self, a, b, attention_mask=None, return_weights=False):
        """Symbolic outputs (batch, seq, d_v) [, weights (batch, seq, seq)]."""
        return self.symbolic_outputs(b.shape, a.shape, return_weights)
