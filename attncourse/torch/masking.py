"""Boolean masks (True = attend) and the masked softmax, in PyTorch.

Masks broadcast, right-aligned, to the scores' shape (batch, num_queries,
num_keys): a key padding mask is (batch, 1, num_keys), a causal mask
(num_queries, num_keys), aligned top-left (the default) or bottom-right. Same
polarity as the boolean ``attn_mask`` of
torch.nn.functional.scaled_dot_product_attention (True = take part).
"""

import torch

from attncourse import checks

__all__ = ["causal_mask", "masked_softmax", "sequence_mask"]


def sequence_mask(valid_lens, num_keys):
    """Padding mask from sequence lengths: True where key index < valid length.

    valid_lens: (batch,) -> mask (batch, 1, num_keys), one length per sequence;
    valid_lens: (batch, num_queries) -> mask (batch, num_queries, num_keys),
    one length per query.
    """
    valid_lens = torch.as_tensor(valid_lens)
    checks.sequence_mask_inputs(valid_lens, num_keys)
    if valid_lens.dim() == 1:
        valid_lens = valid_lens[:, None]
    positions = torch.arange(int(num_keys), device=valid_lens.device)
    return positions < valid_lens[..., None]


def causal_mask(num_queries, num_keys=None, *, align="top_left"):
    """(num_queries, num_keys) bool mask, True where query i may see key j.

    num_keys defaults to num_queries. align="top_left": key j <= query i, so
    query i sees keys 0..i (the diagonal included) and no position sees the
    future. align="bottom_right": j <= i + (num_keys - num_queries), for
    queries that are the LAST num_queries positions of the keys' sequence
    (a decoder with a KV cache); with num_keys == num_queries both agree.
    """
    num_keys = num_queries if num_keys is None else num_keys
    checks.causal_mask_inputs(num_queries, num_keys, align)
    shift = int(num_keys) - int(num_queries) if align == "bottom_right" else 0
    queries = torch.arange(int(num_queries))[:, None] + shift
    return torch.arange(int(num_keys))[None, :] <= queries


def masked_softmax(scores, mask=None):
    """Softmax of scores (..., num_keys) over the last axis, ignoring masked keys.

    scores: (batch, num_queries, num_keys) (any leading axes work); mask: bool,
    True = attend, broadcastable to scores. Returns weights of the scores'
    shape: non-negative, summing to 1 over the unmasked keys of each row, and
    exactly 0 on masked keys.

    A fully masked row gets all-zero weights, no NaN and finite (zero)
    gradients: masked scores are filled with the most negative finite float,
    the softmax is taken, and the result is multiplied by the mask. (Filling
    with -inf instead would give 0/0 = NaN for such rows.)
    """
    scores, mask = _checked_inputs(scores, mask)
    if mask is None:
        return torch.softmax(scores, dim=-1)
    fill = torch.finfo(scores.dtype).min
    weights = torch.softmax(scores.masked_fill(~mask, fill), dim=-1)
    return weights * mask.to(scores.dtype)


def _checked_inputs(scores, mask):
    """masked_softmax's scores and mask as tensors (the mask on the scores'
    device), checked."""
    scores = torch.as_tensor(scores)
    mask = None if mask is None else torch.as_tensor(mask, device=scores.device)
    checks.softmax_inputs(scores, mask)
    return scores, mask
