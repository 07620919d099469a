"""Part 3 -- the Transformer block: norms, feed-forward, encoder and decoder blocks."""

__all__: list[str] = []
