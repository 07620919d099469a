"""Part 3 -- decoding: the KV cache, multi-query and grouped-query attention."""

__all__: list[str] = []
