"""Parameter and mask bridges, framework-neutral: NumPy arrays in, NumPy out.

The canonical layout is the NumPy reference's: row vectors, (in, out)
matrices, flat dicts of arrays. Every course layer has ``layer.params``, a
dict from these names to its storage; ``get_params`` / ``set_params`` copy
them out and in as NumPy arrays, in all three frameworks, so one set of
parameters runs in NumPy, TensorFlow and PyTorch.

This module also holds the one implementation of the layout and mask
converters below; ``attncourse.tf`` and ``attncourse.torch`` re-export them
(or wrap them to return their own tensors).

The built-ins store the same weights differently:

* keras.layers.MultiHeadAttention: per projection an EinsumDense kernel
  (d_in, num_heads, d_head) and bias (num_heads, d_head); output kernel
  (num_heads, d_head, d_out) -- ``mha_params_to_keras``.
* torch.nn.MultiheadAttention: (out, in) matrices; in_proj_weight stacks
  [W_q; W_k; W_v] transposed, (3 d_model, d_model), when the keys and values
  have d_model features, else separate q/k/v_proj_weight -- ``mha_params_to_torch``.
* keras.layers.GRU(reset_after=True): kernel (d_in, 3H) with gate columns in
  the order [z, r, h], recurrent_kernel (H, 3H), bias (2, 3H) = [input;
  recurrent] -- ``gru_params_to_keras``.
* torch.nn.GRU: weight_ih_l0 (3H, d_in) with gate ROWS in the order [r, z, n],
  weight_hh_l0 (3H, H), bias_ih_l0, bias_hh_l0 (3H,) -- ``gru_params_to_torch``.

Masks: ours are bool, True = attend. Keras MHA's attention_mask and torch's
scaled_dot_product_attention agree (True = attend); torch.nn.MultiheadAttention's
bool attn_mask is the opposite (True = NOT allowed) -- ``to_keras_mask``,
``to_sdpa_mask``, ``to_torch_mha_mask``.
"""

import numpy as np

from attncourse import checks

from .seq2seq import GRU_GATES, gru_param_shapes

__all__ = [
    "get_params",
    "gru_params_from_keras",
    "gru_params_from_torch",
    "gru_params_to_keras",
    "gru_params_to_torch",
    "mha_params_to_keras",
    "mha_params_to_torch",
    "set_params",
    "to_keras_mask",
    "to_sdpa_mask",
    "to_torch_mha_mask",
]


def get_params(layer) -> dict:
    """A copy of a course layer's parameters: {name: float64 array}, (in, out)."""
    return {
        name: np.array(v, dtype=np.float64)
        for name, v in checks.course_params(layer).items()
    }


def set_params(layer, params: dict) -> None:
    """Copy {name: array} (as get_params returns) into the layer.

    ``params`` needs exactly the layer's names, each a float array of the
    layer's shape; anything else raises ValueError (TypeError for integer
    arrays) naming the key and the shapes, and changes nothing.
    """
    current = checks.course_params(layer)
    params = {name: np.asarray(v) for name, v in params.items()}
    checks.param_dict({k: np.shape(v) for k, v in current.items()}, params)
    for name, value in params.items():
        layer.params[name] = np.array(value, dtype=np.float64)


# --- multi-head attention ----------------------------------------------------


def _mha_dims(params, num_heads):
    shapes = {k: np.shape(v) for k, v in params.items()}
    d_in = [shapes[f"W_{c}"][0] if f"W_{c}" in shapes else 0 for c in "qkv"]
    d_model, d_out = checks.check_mha_params(
        shapes, (1, 1, d_in[0]), (1, 1, d_in[1]), (1, 1, d_in[2]), num_heads
    )
    return d_in, d_model, d_out


def _biases(params, d_model, d_out):
    """All four biases (zeros where missing), or None if there are none."""
    if not any(f"b_{c}" in params for c in "qkvo"):
        return None
    sizes = {"q": d_model, "k": d_model, "v": d_model, "o": d_out}
    return {
        c: np.asarray(params.get(f"b_{c}", np.zeros(n)), dtype=np.float64)
        for c, n in sizes.items()
    }


def mha_params_to_keras(params: dict, num_heads: int) -> dict:
    """Our MHA params -> keras.layers.MultiHeadAttention weights by path suffix.

    Returns {"query/kernel": (d_q_in, heads, d_head), "query/bias": (heads,
    d_head), "key/...", "value/...", "attention_output/kernel": (heads, d_head,
    d_out), "attention_output/bias": (d_out,)}; no biases if params has none
    (missing ones among present ones become zeros). Our head i owns features
    i * d_head ... (i + 1) * d_head - 1, which is exactly Keras' reshape.
    """
    (d_q, d_k, d_v), d_model, d_out = _mha_dims(params, num_heads)
    d_head = d_model // num_heads
    out = {}
    for name, c, d_in in (("query", "q", d_q), ("key", "k", d_k), ("value", "v", d_v)):
        out[f"{name}/kernel"] = np.reshape(params[f"W_{c}"], (d_in, num_heads, d_head))
    out["attention_output/kernel"] = np.reshape(
        params["W_o"], (num_heads, d_head, d_out)
    )
    biases = _biases(params, d_model, d_out)
    if biases is not None:
        for name, c in (("query", "q"), ("key", "k"), ("value", "v")):
            out[f"{name}/bias"] = biases[c].reshape(num_heads, d_head)
        out["attention_output/bias"] = biases["o"]
    return {k: np.array(v, dtype=np.float64) for k, v in out.items()}


def mha_params_to_torch(params: dict) -> dict:
    """Our MHA params -> a state_dict for torch.nn.MultiheadAttention.

    torch stores (out, in) matrices, so every W is transposed. With keys and
    values of d_model features: in_proj_weight = [W_q^T; W_k^T; W_v^T]
    (3 d_model, d_model); otherwise (kdim / vdim) q_proj_weight, k_proj_weight,
    v_proj_weight. Biases: in_proj_bias = [b_q; b_k; b_v], out_proj.bias.
    """
    (d_q, d_k, d_v), d_model, d_out = _mha_dims(params, 1)
    checks.check_torch_mha_dims(d_q, d_model, d_out)
    W = {c: np.asarray(params[f"W_{c}"], dtype=np.float64).T for c in "qkvo"}
    if d_k == d_v == d_model:
        out = {"in_proj_weight": np.concatenate([W["q"], W["k"], W["v"]], 0)}
    else:
        out = {f"{c}_proj_weight": W[c] for c in "qkv"}
    out["out_proj.weight"] = W["o"]
    biases = _biases(params, d_model, d_out)
    if biases is not None:
        out["in_proj_bias"] = np.concatenate([biases[c] for c in "qkv"])
        out["out_proj.bias"] = biases["o"]
    return out


# --- GRU -----------------------------------------------------------------------

KERAS_GATES = ("z", "r", "n")  # Keras calls n "h"; torch and ours: r, z, n


def _gru_hidden(params):
    """Validate canonical GRU params; return the hidden size."""
    shapes = {k: np.shape(v) for k, v in params.items()}
    checks.check_weight_keys(list(gru_param_shapes(1, 1)), shapes)
    d_in, hidden = shapes["W_xr"]
    for name, shape in gru_param_shapes(d_in, hidden).items():
        checks.check_weight(name, shapes[name], shape)
    return hidden


def gru_params_to_keras(params: dict) -> list:
    """Canonical GRU params -> [kernel, recurrent_kernel, bias] for
    keras.layers.GRU(reset_after=True): gate columns in the order [z, r, h]."""
    _gru_hidden(params)
    p = {k: np.asarray(v, dtype=np.float64) for k, v in params.items()}
    kernel = np.concatenate([p[f"W_x{g}"] for g in KERAS_GATES], axis=1)
    recurrent = np.concatenate([p[f"W_h{g}"] for g in KERAS_GATES], axis=1)
    bias = np.stack(
        [np.concatenate([p[f"b_{s}{g}"] for g in KERAS_GATES]) for s in "xh"]
    )
    return [kernel, recurrent, bias]


def gru_params_from_keras(kernel, recurrent_kernel, bias) -> dict:
    """keras.layers.GRU(reset_after=True) weights -> canonical GRU params."""
    kernel, recurrent_kernel, bias = (
        np.asarray(t, dtype=np.float64) for t in (kernel, recurrent_kernel, bias)
    )
    hidden = recurrent_kernel.shape[0]
    checks.check_weight("kernel", kernel.shape, (None, 3 * hidden))
    checks.check_weight(
        "recurrent_kernel", recurrent_kernel.shape, (hidden, 3 * hidden)
    )
    checks.check_weight("bias", bias.shape, (2, 3 * hidden))
    params = {}
    for i, g in enumerate(KERAS_GATES):
        cols = slice(i * hidden, (i + 1) * hidden)
        params.update(
            {
                f"W_x{g}": kernel[:, cols],
                f"W_h{g}": recurrent_kernel[:, cols],
                f"b_x{g}": bias[0, cols],
                f"b_h{g}": bias[1, cols],
            }
        )
    return params


def gru_params_to_torch(params: dict) -> dict:
    """Canonical GRU params -> a state_dict for a one-layer torch.nn.GRU:
    (out, in) matrices with gate rows in the order [r, z, n]."""
    _gru_hidden(params)
    p = {k: np.asarray(v, dtype=np.float64) for k, v in params.items()}
    return {
        "weight_ih_l0": np.concatenate([p[f"W_x{g}"].T for g in GRU_GATES], 0),
        "weight_hh_l0": np.concatenate([p[f"W_h{g}"].T for g in GRU_GATES], 0),
        "bias_ih_l0": np.concatenate([p[f"b_x{g}"] for g in GRU_GATES]),
        "bias_hh_l0": np.concatenate([p[f"b_h{g}"] for g in GRU_GATES]),
    }


def gru_params_from_torch(state_dict: dict) -> dict:
    """A one-layer torch.nn.GRU state_dict (arrays) -> canonical GRU params."""
    sd = {
        k: np.asarray(state_dict[k], dtype=np.float64)
        for k in ("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0")
    }
    hidden = sd["weight_hh_l0"].shape[1]
    checks.check_weight("weight_ih_l0", sd["weight_ih_l0"].shape, (3 * hidden, None))
    checks.check_weight("weight_hh_l0", sd["weight_hh_l0"].shape, (3 * hidden, hidden))
    for name in ("bias_ih_l0", "bias_hh_l0"):
        checks.check_weight(name, sd[name].shape, (3 * hidden,))
    params = {}
    for i, g in enumerate(GRU_GATES):
        rows = slice(i * hidden, (i + 1) * hidden)
        params.update(
            {
                f"W_x{g}": sd["weight_ih_l0"][rows].T,
                f"W_h{g}": sd["weight_hh_l0"][rows].T,
                f"b_x{g}": sd["bias_ih_l0"][rows],
                f"b_h{g}": sd["bias_hh_l0"][rows],
            }
        )
    return params


# --- masks -----------------------------------------------------------------------


def _mask_4d(mask):
    """Our bool mask (True = attend) as 4-D (batch|1, heads|1, n_q|1, n_k).

    A 3-D mask is (batch, n_q, n_k) and gets the head axis, as in
    multi_head_attention; shorter masks get leading axes of size 1.
    """
    mask = np.asarray(mask)
    checks.check_mask_rank(mask.shape, checks.dtype_name(mask))
    if mask.ndim == 3:
        mask = mask[:, None]
    return mask.reshape((1,) * (4 - mask.ndim) + mask.shape)


def to_keras_mask(mask, num_heads=None):
    """Our mask -> keras.layers.MultiHeadAttention's attention_mask.

    Keras also means True = attend, so only the shape changes. A mask shared
    by all heads becomes (batch|1, n_q|1, n_k); Keras adds the head axis. A
    per-head mask (batch|1, num_heads, n_q|1, n_k) stays 4-D, and Keras 3
    masks head h with slice h (it only adds missing axes, on both its paths).
    A per-head mask needs ``num_heads``, so that a wrong head axis raises
    ValueError here instead of a broadcasting error inside Keras; given with
    a shared mask, it is checked too.
    A fully masked row: Keras gives zero weights when it returns the scores,
    but its fused path (return_attention_scores=False) averages all values.
    """
    m = _mask_4d(mask)
    heads = m.shape[1]
    if num_heads is not None:
        checks.check_positive("num_heads", num_heads)
        checks.check_mask_heads(heads, int(num_heads))
    if heads == 1:
        return m[:, 0]
    if num_heads is None:
        raise ValueError(
            f"a per-head mask (batch, heads, n_q, n_k) = {m.shape} needs "
            f"num_heads: call to_keras_mask(mask, num_heads={heads}) if the "
            f"layer has {heads} heads"
        )
    return m


def to_sdpa_mask(mask):
    """Our mask -> F.scaled_dot_product_attention's bool attn_mask.

    SDPA also means True = attend (the opposite of nn.MultiheadAttention!)
    and broadcasts the mask to its scores; for head-split inputs (batch,
    heads, n, d_head) only a 3-D (batch, n_q, n_k) mask changes: it gets the
    head axis. (Do not use it for 3-D SDPA inputs: there the 3-D mask is
    already right.) A fully masked row gives zeros in torch 2.13, as ours
    does; older torch versions returned NaN.
    """
    mask = np.asarray(mask)
    checks.check_mask_rank(mask.shape, checks.dtype_name(mask))
    return mask[:, None] if mask.ndim == 3 else mask


def to_torch_mha_mask(mask, num_heads, num_queries=None):
    """Our mask -> torch.nn.MultiheadAttention's bool attn_mask: True = NOT allowed.

    torch does not broadcast this mask: it must be (n_q, n_k), shared by all
    sequences and heads, or (batch * num_heads, n_q, n_k) with row b * num_heads
    + h for sequence b, head h. Shared masks give the 2-D form, others the 3-D
    one. A mask whose query axis has size 1 (a padding mask) is repeated to
    num_queries rows if given; for padding alone torch's key_padding_mask
    (batch, n_k), True = ignore, is simpler. A per-head mask with a batch
    axis of 1 gives (num_heads, n_q, n_k), valid for batch 1 only. Beware:
    torch returns NaN for a fully masked row, where ours gives zeros.
    """
    m = _mask_4d(mask)
    batch, heads, n_q, n_k = m.shape
    checks.check_mask_heads(heads, num_heads)
    if n_q == 1 and num_queries is not None:
        n_q = num_queries
    if batch == 1 and heads == 1:
        return ~np.broadcast_to(m[0, 0], (n_q, n_k))
    full = np.broadcast_to(m, (batch, num_heads, n_q, n_k))
    return ~full.reshape(batch * num_heads, n_q, n_k)
