"""Boolean masks (True = attend) and the masked softmax, in TensorFlow.

Masks broadcast, right-aligned, to the scores' shape (batch, num_queries,
num_keys): a key padding mask is (batch, 1, num_keys), a causal mask
(num_queries, num_keys), aligned top-left (the default) or bottom-right.
"""

import tensorflow as tf

from attncourse import checks

__all__ = ["causal_mask", "masked_softmax", "sequence_mask"]


def sequence_mask(valid_lens, num_keys):
    """Padding mask from sequence lengths: True where key index < valid length.

    valid_lens: (batch,) -> mask (batch, 1, num_keys), one length per sequence;
    valid_lens: (batch, num_queries) -> mask (batch, num_queries, num_keys),
    one length per query.
    """
    valid_lens = tf.convert_to_tensor(valid_lens)
    checks.sequence_mask_inputs(valid_lens, num_keys)
    if valid_lens.shape.rank == 1:
        valid_lens = valid_lens[:, None]
    positions = tf.range(int(num_keys), dtype=valid_lens.dtype)
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
    queries = tf.range(int(num_queries))[:, None] + shift
    return tf.range(int(num_keys))[None, :] <= queries


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
        return tf.nn.softmax(scores, axis=-1)
    fill = tf.constant(scores.dtype.min, dtype=scores.dtype)
    weights = tf.nn.softmax(tf.where(mask, scores, fill), axis=-1)
    return weights * tf.cast(mask, scores.dtype)


def _checked_inputs(scores, mask):
    """masked_softmax's scores and mask as tensors, checked."""
    scores = tf.convert_to_tensor(scores)
    mask = None if mask is None else tf.convert_to_tensor(mask)
    checks.softmax_inputs(scores, mask)
    return scores, mask
