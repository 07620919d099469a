"""Parameter and mask bridges for PyTorch.

``get_params`` / ``set_params`` read and write the course's modules as NumPy
dicts in the canonical layout of ``attncourse.numpy.weights`` (an nn.Linear's
weight (out, in) is read and written as its transpose, W (in, out));
``to_torch_mha`` and ``to_torch_gru`` build the torch built-ins holding the
same parameters. ``to_torch_mha_mask`` and ``to_sdpa_mask`` convert our masks
(True = attend) for nn.MultiheadAttention (True = NOT allowed!) and
F.scaled_dot_product_attention (True = attend): they are the NumPy
converters, returning torch bool tensors on the mask's device. The layout
converters and ``to_keras_mask`` are the framework-neutral NumPy ones.
"""

import numpy as np
import torch
from torch import nn

from attncourse import checks
from attncourse.numpy import weights as neutral
from attncourse.numpy.weights import (
    gru_params_from_keras,
    gru_params_from_torch,
    gru_params_to_keras,
    gru_params_to_torch,
    mha_params_to_keras,
    mha_params_to_torch,
    to_keras_mask,
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
    "to_keras_mask",
    "to_sdpa_mask",
    "to_torch_gru",
    "to_torch_mha",
    "to_torch_mha_mask",
]


def get_params(layer) -> dict:
    """A copy of a course module's parameters: {name: float64 array}, (in, out)."""
    return {
        name: np.array(t.detach().cpu().numpy(), dtype=np.float64)
        for name, t in checks.course_params(layer).items()
    }


@torch.no_grad()
def set_params(layer, params: dict) -> None:
    """Copy {name: array} (as get_params returns) into the module's parameters.

    ``params`` needs exactly the module's names, each a float array of the
    module's shape; anything else raises ValueError (TypeError for integer
    arrays) naming the key and the shapes, and changes nothing. An nn.Linear
    weight receives the transpose of its W.
    """
    current = checks.course_params(layer)
    params = {name: np.asarray(v) for name, v in params.items()}
    checks.param_dict({k: checks.shape_of(v) for k, v in current.items()}, params)
    for name, value in params.items():
        current[name].copy_(torch.as_tensor(value))


def _load(module, state_dict):
    dtype = torch.get_default_dtype()
    module.load_state_dict(
        {k: torch.as_tensor(v, dtype=dtype) for k, v in state_dict.items()}
    )
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
    mha = nn.MultiheadAttention(
        d_model,
        num_heads,
        bias="in_proj_bias" in state,
        kdim=d_k,
        vdim=d_v,
        batch_first=True,
    )
    return _load(mha, state)


def to_torch_gru(params: dict):
    """A one-layer nn.GRU(batch_first=True) holding canonical GRU params."""
    state = gru_params_to_torch(params)
    hidden, d_in = state["weight_ih_l0"].shape[0] // 3, state["weight_ih_l0"].shape[1]
    return _load(nn.GRU(d_in, hidden, batch_first=True), state)


def _on_device_of(array, mask):
    """A NumPy result as a torch tensor on the device of the input mask."""
    device = mask.device if isinstance(mask, torch.Tensor) else None
    return torch.as_tensor(np.ascontiguousarray(array), device=device)


def _numpy(mask):
    return mask.detach().cpu().numpy() if isinstance(mask, torch.Tensor) else mask


def to_sdpa_mask(mask):
    """Our mask -> F.scaled_dot_product_attention's bool attn_mask, a torch
    tensor; see ``attncourse.numpy.to_sdpa_mask`` (same conversion)."""
    return _on_device_of(neutral.to_sdpa_mask(_numpy(mask)), mask)


def to_torch_mha_mask(mask, num_heads, num_queries=None):
    """Our mask -> nn.MultiheadAttention's bool attn_mask (True = NOT allowed),
    a torch tensor; see ``attncourse.numpy.to_torch_mha_mask``."""
    return _on_device_of(
        neutral.to_torch_mha_mask(_numpy(mask), num_heads, num_queries), mask
    )
