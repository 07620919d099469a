"""Which tiles a causal mask leaves to compute: the same integer arithmetic for
the NumPy, TensorFlow and PyTorch tiled attentions (``*.efficient``)."""


def _diagonal(causal, align, num_queries, num_keys):
    """None without a causal mask, else the shift of its diagonal: query i
    sees key j iff j <= i + shift (0 top-left, nk - nq bottom-right)."""
    if not causal:
        return None
    return num_keys - num_queries if align == "bottom_right" else 0


def _key_stop(end_q, num_keys, diagonal):
    """Key blocks start below this index: with a causal diagonal, a block whose
    first key lies after the last query of the block (end_q - 1 + diagonal)
    is skipped."""
    if diagonal is None:
        return num_keys
    return max(0, min(num_keys, end_q + diagonal))
