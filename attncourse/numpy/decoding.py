"""Decoding with a KV cache; multi-query and grouped-query attention (NumPy).

Grouped-query attention (GQA; Ainslie et al. 2023) gives num_heads query heads
only num_kv_heads key/value heads: query head h reads kv head
h // (num_heads // num_kv_heads), a group of consecutive query heads per kv head
(torch's repeat_interleave, the order of scaled_dot_product_attention's
enable_gqa=True and of keras.layers.GroupQueryAttention). num_kv_heads ==
num_heads is multi-head attention, num_kv_heads == 1 multi-query attention
(MQA; Shazeer 2019).

Shapes: x (batch, n, d_model); queries are split into (batch, num_heads, n,
head_dim), keys and values into (batch, num_kv_heads, n, head_dim). A KV cache
holds the keys and values of every token seen so far, (batch, num_kv_heads, t,
head_dim). A decoding step appends the new tokens' keys and values and lets
their queries -- the LAST n_new of the t positions -- attend with the
bottom-right aligned causal mask causal_mask(n_new, t, align="bottom_right").
"""

import math

import numpy as np

from attncourse import checks

from .masking import causal_mask, masked_softmax
from .multihead import _head_mask, _init, _project, merge_heads, split_heads

__all__ = [
    "GroupedQueryAttention",
    "KVCache",
    "decode_step",
    "grouped_query_attention",
    "kv_cache_bytes",
    "repeat_kv",
]


def repeat_kv(x, num_heads):
    """(batch, num_kv_heads, n, head_dim) -> (batch, num_heads, n, head_dim).

    Query head h gets kv head h // (num_heads // num_kv_heads): each kv head is
    repeated for a group of consecutive query heads (kv 0, 0, 1, 1, ...).
    """
    x = np.asarray(x)
    checks.repeat_kv_inputs(x, num_heads)
    return np.repeat(x, num_heads // x.shape[1], axis=1)


def _attend(q, k, v, mask):
    """q (batch, H, n_q, dh) over k, v (batch, G, n_k, dh): heads, weights."""
    k, v = repeat_kv(k, q.shape[1]), repeat_kv(v, q.shape[1])  # (b, H, n_k, dh)
    scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(q.shape[-1])
    weights = masked_softmax(scores, _head_mask(mask))  # (batch, H, n_q, n_k)
    return weights @ v, weights  # (batch, H, n_q, dh)


def grouped_query_attention(
    queries, keys, values, params, num_heads, num_kv_heads, mask=None
):
    """Multi-head attention whose num_heads query heads share num_kv_heads
    key/value heads.

    params: W_q (d_q_in, num_heads * head_dim), W_k (d_k_in, num_kv_heads *
    head_dim), W_v (d_v_in, num_kv_heads * head_dim), W_o (num_heads *
    head_dim, d_out); optional biases b_q, b_k, b_v, b_o of their columns.
    mask: bool, True = attend, broadcastable to (batch, num_heads, n_q, n_k);
    a 3-D mask means (batch, n_q, n_k).
    Returns (outputs (batch, n_q, d_out), weights (batch, num_heads, n_q, n_k)).
    """
    queries, keys, values = (np.asarray(t) for t in (queries, keys, values))
    checks.gqa_inputs(queries, keys, values, params, num_heads, num_kv_heads)
    p = {name: np.asarray(w, dtype=queries.dtype) for name, w in params.items()}
    q = split_heads(_project(queries, p, "q"), num_heads)  # (b, H, n_q, dh)
    k = split_heads(_project(keys, p, "k"), num_kv_heads)  # (b, G, n_k, dh)
    v = split_heads(_project(values, p, "v"), num_kv_heads)  # (b, G, n_k, dh)
    heads, weights = _attend(q, k, v, mask)
    return _project(merge_heads(heads), p, "o"), weights  # (b, n_q, d_out)


class KVCache:
    """The keys and values of the t tokens seen so far, each (batch,
    num_kv_heads, t, head_dim). ``append`` returns a longer cache (the old
    one is left as it is)."""

    def __init__(self, keys, values):
        keys, values = np.asarray(keys), np.asarray(values)
        checks.kv_cache_inputs(keys, values)
        self.keys, self.values = keys, values

    @property
    def length(self) -> int:
        """t, the number of cached tokens."""
        return int(self.keys.shape[2])

    @property
    def nbytes(self) -> int:
        """Bytes held by the keys and values."""
        return int(self.keys.nbytes + self.values.nbytes)

    def append(self, keys, values):
        """A cache of t + n_new tokens: these (batch, num_kv_heads, n_new,
        head_dim) keys and values after the cached ones."""
        keys, values = np.asarray(keys), np.asarray(values)
        checks.kv_cache_append(checks.shape_of(self.keys), keys, values)
        return KVCache(
            np.concatenate([self.keys, keys], axis=2),
            np.concatenate([self.values, values], axis=2),
        )

    def __repr__(self):
        b, g, t, dh = self.keys.shape
        return f"KVCache(batch={b}, num_kv_heads={g}, length={t}, head_dim={dh})"


def decode_step(x, params, num_heads, num_kv_heads, cache=None, mask=None):
    """Causal grouped-query self-attention over the cache and n_new new tokens.

    x: (batch, n_new, d_model), the new tokens (a prompt chunk or one token);
    params: as for grouped_query_attention; cache: the KVCache of the t_past
    tokens before x, or None (t_past = 0). mask: bool broadcastable to (batch,
    num_heads, n_new, t_past + n_new); default the bottom-right aligned causal
    mask causal_mask(n_new, t_past + n_new, align="bottom_right").
    Returns (outputs (batch, n_new, d_out), the KVCache of all t_past + n_new
    tokens).
    """
    x = np.asarray(x)
    mask = None if mask is None else np.asarray(mask)
    checks.decode_step_inputs(
        x, params, num_heads, num_kv_heads, cache, mask, cache_type=KVCache
    )
    p = {name: np.asarray(w, dtype=x.dtype) for name, w in params.items()}
    q = split_heads(_project(x, p, "q"), num_heads)  # (b, H, n_new, dh)
    k = split_heads(_project(x, p, "k"), num_kv_heads)  # (b, G, n_new, dh)
    v = split_heads(_project(x, p, "v"), num_kv_heads)  # (b, G, n_new, dh)
    cache = KVCache(k, v) if cache is None else cache.append(k, v)  # t tokens
    if mask is None:
        mask = causal_mask(x.shape[1], cache.length, align="bottom_right")
    heads, _ = _attend(q, cache.keys, cache.values, mask)
    return _project(merge_heads(heads), p, "o"), cache  # (b, n_new, d_out)


def gqa_param_shapes(d_model, num_heads, num_kv_heads, use_bias=True):
    """name -> shape for a GQA layer of width d_model (head_dim = d_model //
    num_heads): W_q (d_model, d_model), W_k and W_v (d_model, num_kv_heads *
    head_dim), W_o (d_model, d_model), and with use_bias the biases."""
    kv = num_kv_heads * (d_model // num_heads)
    cols = {"q": d_model, "k": kv, "v": kv, "o": d_model}
    shapes = {f"W_{c}": (d_model, n) for c, n in cols.items()}
    if use_bias:
        shapes.update({f"b_{c}": (n,) for c, n in cols.items()})
    return shapes


class GroupedQueryAttention:
    """Causal self-attention with num_kv_heads key/value heads and a KV cache.

    ``layer(x, cache)`` returns (outputs, cache): pass the returned cache to
    the next call, which may bring one token or a chunk of several. ``params``
    holds glorot-uniform matrices and zero biases (gqa_param_shapes).
    """

    def __init__(self, num_heads, num_kv_heads, d_model, use_bias=True):
        checks.gqa_sizes(num_heads, num_kv_heads, d_model)
        self.num_heads, self.num_kv_heads, self.d_model = (
            num_heads,
            num_kv_heads,
            d_model,
        )
        self.head_dim, self.use_bias = d_model // num_heads, use_bias
        shapes = gqa_param_shapes(d_model, num_heads, num_kv_heads, use_bias)
        self.params = {name: _init(name, shape) for name, shape in shapes.items()}

    def __call__(self, x, cache=None, attention_mask=None):
        """(outputs (batch, n_new, d_model), KVCache of all tokens so far)."""
        return decode_step(
            x, self.params, self.num_heads, self.num_kv_heads, cache, attention_mask
        )


def kv_cache_bytes(num_layers, num_kv_heads, head_dim, seq_len, batch=1, dtype_bytes=4):
    """Bytes of a KV cache: keys and values (2) for every layer, kv head,
    feature, cached token and sequence, at dtype_bytes each (4 for float32,
    2 for float16 / bfloat16)."""
    sizes = {
        "num_layers": num_layers,
        "num_kv_heads": num_kv_heads,
        "head_dim": head_dim,
        "seq_len": seq_len,
        "batch": batch,
        "dtype_bytes": dtype_bytes,
    }
    checks.kv_cache_bytes_inputs(**sizes)
    return 2 * math.prod(int(s) for s in sizes.values())
