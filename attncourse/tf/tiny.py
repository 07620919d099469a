"""Part 3 -- a tiny decoder-only Transformer that learns on CPU."""

__all__: list[str] = []
