"""Weight and mask bridges for TensorFlow / Keras 3.

``get_params_numpy`` / ``set_params_numpy`` read and write the course's Keras
layers (MultiHeadAttention, GRU, Encoder, Decoder) as NumPy dicts in the
canonical layout of ``attncourse.numpy.weights``; ``to_keras_mha`` and
``to_keras_gru`` build the Keras built-ins holding the same weights.
The layout converters and the torch mask converters are the framework-neutral
NumPy ones (they accept TF tensors and return NumPy arrays).
"""

import keras
import numpy as np
import tensorflow as tf

from attncourse import checks
from attncourse.numpy.weights import (
    gru_params_from_keras,
    gru_params_from_torch,
    gru_params_to_keras,
    gru_params_to_torch,
    mha_params_to_keras,
    mha_params_to_torch,
    to_sdpa_mask,
    to_torch_gru,
    to_torch_mha,
    to_torch_mha_mask,
)

__all__ = [
    "get_params_numpy",
    "gru_params_from_keras",
    "gru_params_from_torch",
    "gru_params_to_keras",
    "gru_params_to_torch",
    "mha_params_to_keras",
    "mha_params_to_torch",
    "set_params_numpy",
    "to_keras_gru",
    "to_keras_mask",
    "to_keras_mha",
    "to_sdpa_mask",
    "to_torch_gru",
    "to_torch_mha",
    "to_torch_mha_mask",
]


def _slots(module):
    """Canonical name -> (variable, stored transposed?)."""
    if not hasattr(module, "_param_slots"):
        raise TypeError(
            f"get_params_numpy works on MultiHeadAttention, GRU, Encoder and "
            f"Decoder, got {type(module).__name__}"
        )
    return module._param_slots()


def get_params_numpy(module) -> dict:
    """A layer's weights as {name: float64 array} in the canonical layout."""
    return {k: np.array(v.numpy().T if t else v.numpy(), dtype=np.float64)
            for k, (v, t) in _slots(module).items()}


def set_params_numpy(module, params: dict) -> None:
    """Assign {name: array} (canonical layout) to a layer's variables."""
    slots = _slots(module)
    checks.check_weight_keys(list(slots), params)
    for name, (var, transposed) in slots.items():
        value = np.asarray(params[name])
        shape = tuple(var.shape[::-1] if transposed else var.shape)
        checks.check_weight(name, value.shape, shape)
        var.assign((value.T if transposed else value).astype(var.dtype))


def to_keras_mha(params: dict, num_heads: int):
    """A built keras.layers.MultiHeadAttention holding our MHA params.

    Call it as ``layer(queries, values, keys, attention_mask=to_keras_mask(m),
    return_attention_scores=True)`` -- Keras takes VALUES before KEYS.
    """
    weights = mha_params_to_keras(params, num_heads)
    d_q, _, d_head = weights["query/kernel"].shape
    d_k, d_v = weights["key/kernel"].shape[0], weights["value/kernel"].shape[0]
    layer = keras.layers.MultiHeadAttention(
        num_heads, key_dim=d_head, value_dim=d_head,
        use_bias="query/bias" in weights,
        output_shape=weights["attention_output/kernel"].shape[-1])
    layer.build((None, None, d_q), (None, None, d_v), (None, None, d_k))
    for var in layer.weights:
        var.assign(weights["/".join(var.path.split("/")[-2:])].astype(var.dtype))
    return layer


def to_keras_gru(params: dict):
    """A built keras.layers.GRU(reset_after=True, return_sequences=True,
    return_state=True) holding canonical GRU params."""
    kernel, recurrent, bias = gru_params_to_keras(params)
    layer = keras.layers.GRU(recurrent.shape[0], reset_after=True,
                             return_sequences=True, return_state=True)
    layer.build((None, None, kernel.shape[0]))
    layer.set_weights([kernel, recurrent, bias])
    return layer


def to_keras_mask(mask):
    """Our mask -> keras.layers.MultiHeadAttention's attention_mask (tf bool).

    Keras also means True = attend, so only the shape changes: (batch|1,
    n_q|1, n_k), one mask shared by all heads; a 3-D mask is (batch, n_q, n_k)
    already. A per-head mask cannot be expressed and raises ValueError.
    A fully masked row: Keras gives zero weights when it returns the scores,
    but its fused path (return_attention_scores=False) averages all values.
    """
    mask = tf.convert_to_tensor(mask)
    checks.check_mask_rank(checks.shape_of(mask), checks.dtype_name(mask))
    if mask.shape.rank == 3:
        return mask
    mask = tf.reshape(mask, (1,) * (4 - mask.shape.rank) + tuple(mask.shape))
    checks.check_shared_heads(checks.shape_of(mask), "keras.layers.MultiHeadAttention")
    return mask[:, 0]
