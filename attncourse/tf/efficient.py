"""Tiled (FlashAttention-style) attention: online softmax forward, logsumexp, recomputing backward."""

__all__ = []
