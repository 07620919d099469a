"""Weight and mask bridges for PyTorch.

``get_params_numpy`` / ``set_params_numpy`` read and write the course's
modules (MultiHeadAttention, GRU, Encoder, Decoder) as NumPy dicts in the
canonical layout of ``attncourse.numpy.weights`` (nn.Linear weights are
transposed on the way); ``to_torch_mha`` and ``to_torch_gru`` build the torch
built-ins holding the same weights. ``to_torch_mha_mask`` and ``to_sdpa_mask``
convert our masks (True = attend) for nn.MultiheadAttention (True = NOT
allowed!) and F.scaled_dot_product_attention (True = attend). The layout
converters and ``to_keras_mask`` are the framework-neutral NumPy ones.
"""

import numpy as np
import torch
from torch import nn

from attncourse import checks
from attncourse.numpy.weights import (
    gru_params_from_keras,
    gru_params_from_torch,
    gru_params_to_keras,
    gru_params_to_torch,
    mha_params_to_keras,
    mha_params_to_torch,
    to_keras_gru,
    to_keras_mask,
    to_keras_mha,
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
    """Canonical name -> (parameter, stored transposed?)."""
    if not hasattr(module, "_param_slots"):
        raise TypeError(
            f"get_params_numpy works on MultiHeadAttention, GRU, Encoder and "
            f"Decoder, got {type(module).__name__}"
        )
    return module._param_slots()


def get_params_numpy(module) -> dict:
    """A module's weights as {name: float64 array} in the canonical layout."""
    out = {}
    for name, (p, transposed) in _slots(module).items():
        value = p.detach().cpu().numpy()
        out[name] = np.array(value.T if transposed else value, dtype=np.float64)
    return out


@torch.no_grad()
def set_params_numpy(module, params: dict) -> None:
    """Copy {name: array} (canonical layout) into a module's parameters."""
    slots = _slots(module)
    checks.check_weight_keys(list(slots), params)
    for name, (p, transposed) in slots.items():
        value = np.asarray(params[name])
        shape = tuple(p.shape[::-1] if transposed else p.shape)
        checks.check_weight(name, value.shape, shape)
        p.copy_(torch.as_tensor(value.T if transposed else value))


def _load(module, state_dict):
    dtype = torch.get_default_dtype()
    module.load_state_dict({k: torch.as_tensor(v, dtype=dtype)
                            for k, v in state_dict.items()})
    return module


def to_torch_mha(params: dict, num_heads: int):
    """An nn.MultiheadAttention(batch_first=True) holding our MHA params.

    torch needs d_q_in == d_model == d_out (ValueError otherwise); keys and
    values may have other sizes (kdim, vdim). Call it as ``mha(queries, keys,
    values, attn_mask=to_torch_mha_mask(m, num_heads), need_weights=True,
    average_attn_weights=False)`` to get per-head weights.
    """
    state = mha_params_to_torch(params)
    d_model = state["out_proj.weight"].shape[0]
    d_k, d_v = np.shape(params["W_k"])[0], np.shape(params["W_v"])[0]
    mha = nn.MultiheadAttention(d_model, num_heads, bias="in_proj_bias" in state,
                                kdim=d_k, vdim=d_v, batch_first=True)
    return _load(mha, state)


def to_torch_gru(params: dict):
    """A one-layer nn.GRU(batch_first=True) holding canonical GRU params."""
    state = gru_params_to_torch(params)
    hidden, d_in = state["weight_ih_l0"].shape[0] // 3, state["weight_ih_l0"].shape[1]
    return _load(nn.GRU(d_in, hidden, batch_first=True), state)


def _mask_4d(mask):
    """Our bool mask as 4-D (batch|1, heads|1, n_q|1, n_k); 3-D gets the head axis."""
    mask = torch.as_tensor(mask)
    checks.check_mask_rank(checks.shape_of(mask), checks.dtype_name(mask))
    if mask.dim() == 3:
        mask = mask[:, None]
    return mask.reshape((1,) * (4 - mask.dim()) + tuple(mask.shape))


def to_sdpa_mask(mask):
    """Our mask -> F.scaled_dot_product_attention's bool attn_mask.

    SDPA also means True = attend (the opposite of nn.MultiheadAttention!)
    and broadcasts the mask to its scores; for head-split inputs (batch,
    heads, n, d_head) only a 3-D (batch, n_q, n_k) mask changes: it gets the
    head axis. (Do not use it for 3-D SDPA inputs: there the 3-D mask is
    already right.) A fully masked row gives zeros in torch 2.13, as ours
    does; older torch versions returned NaN.
    """
    mask = torch.as_tensor(mask)
    checks.check_mask_rank(checks.shape_of(mask), checks.dtype_name(mask))
    return mask[:, None] if mask.dim() == 3 else mask


def to_torch_mha_mask(mask, num_heads, num_queries=None):
    """Our mask -> nn.MultiheadAttention's bool attn_mask: True = NOT allowed.

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
        return ~m[0, 0].expand(n_q, n_k)
    return ~m.expand(batch, num_heads, n_q, n_k).reshape(batch * num_heads, n_q, n_k)
