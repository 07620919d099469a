"""Sliding-window (local) and linear attention."""

__all__ = []
