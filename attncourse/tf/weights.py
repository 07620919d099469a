"""Parameter and mask bridges for TensorFlow / Keras 3.

``get_params`` / ``set_params`` read and write the course's Keras layers as
NumPy dicts in the canonical layout of ``attncourse.numpy.weights``;
``to_keras_mha`` and ``to_keras_gru`` build the Keras built-ins holding the
same parameters. The layout converters and the torch mask converters are the
framework-neutral NumPy ones (they accept TF tensors and return NumPy arrays);
``to_keras_mask`` returns a tf bool tensor.
"""

import keras
import numpy as np
import tensorflow as tf

from attncourse import checks
from attncourse.numpy import weights as neutral
from attncourse.numpy.weights import (
    gru_params_from_keras,
    gru_params_from_torch,
    gru_params_to_keras,
    gru_params_to_torch,
    mha_params_to_keras,
    mha_params_to_torch,
    to_sdpa_mask,
    to_torch_mha_mask,
)

__all__ = [
    "get_params",
    "gru_params_from_keras",
    "gru_params_from_torch",
    "gru_params_to_keras",
    "gru_params_to_torch",
    "mha_params_to_keras",
    "mha_params_to_torch",
    "set_params",
    "to_keras_gru",
    "to_keras_mask",
    "to_keras_mha",
    "to_sdpa_mask",
    "to_torch_mha_mask",
]


def get_params(layer) -> dict:
    """A copy of a course layer's parameters: {name: float64 array}, (in, out)."""
    return {
        name: np.array(v.numpy(), dtype=np.float64)
        for name, v in checks.course_params(layer).items()
    }


def set_params(layer, params: dict) -> None:
    """Assign {name: array} (as get_params returns) to the layer's variables.

    ``params`` needs exactly the layer's names, each a float array of the
    layer's shape; anything else raises ValueError (TypeError for integer
    arrays) naming the key and the shapes, and changes nothing.
    """
    current = checks.course_params(layer)
    params = {name: np.asarray(v) for name, v in params.items()}
    checks.param_dict({k: checks.shape_of(v) for k, v in current.items()}, params)
    for name, value in params.items():
        current[name].assign(value.astype(current[name].dtype))


def to_keras_mha(params: dict, num_heads: int):
    """A built keras.layers.MultiHeadAttention holding our MHA params.

    Call it as ``layer(queries, values, keys, attention_mask=to_keras_mask(m),
    return_attention_scores=True)`` -- Keras takes VALUES before KEYS.
    """
    weights = mha_params_to_keras(params, num_heads)
    d_q, _, d_head = weights["query/kernel"].shape
    d_k, d_v = weights["key/kernel"].shape[0], weights["value/kernel"].shape[0]
    layer = keras.layers.MultiHeadAttention(
        num_heads,
        key_dim=d_head,
        value_dim=d_head,
        use_bias="query/bias" in weights,
        output_shape=weights["attention_output/kernel"].shape[-1],
    )
    layer.build((None, None, d_q), (None, None, d_v), (None, None, d_k))
    for var in layer.weights:
        var.assign(weights["/".join(var.path.split("/")[-2:])].astype(var.dtype))
    return layer


def to_keras_gru(params: dict):
    """A built keras.layers.GRU(reset_after=True, return_sequences=True,
    return_state=True) holding canonical GRU params."""
    kernel, recurrent, bias = gru_params_to_keras(params)
    layer = keras.layers.GRU(
        recurrent.shape[0], reset_after=True, return_sequences=True, return_state=True
    )
    layer.build((None, None, kernel.shape[0]))
    layer.set_weights([kernel, recurrent, bias])
    return layer


def to_keras_mask(mask, num_heads=None):
    """Our mask -> keras.layers.MultiHeadAttention's attention_mask, a tf bool
    tensor: (batch|1, n_q|1, n_k) if shared by the heads, else (batch|1,
    num_heads, n_q|1, n_k); see ``attncourse.numpy.to_keras_mask``."""
    return tf.constant(neutral.to_keras_mask(np.asarray(mask), num_heads))
