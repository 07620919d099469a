"""Sliding-window (local) and linear attention in NumPy (the float64 reference).

Sliding window (Child et al. 2019; Beltagy et al. 2020): query i attends only
to the ``window`` keys i - window + 1 .. i (causal; the query's own key
counts) or, with causal=False, to the keys j with |i - j| < window (a band of
2 window - 1 keys). As a mask it is ``sliding_window_mask``; as a computation
it is a band: each query's scores against its own keys only, (b, n, window)
numbers instead of (b, n, n), so memory grows as n * window.

Linear attention (Katharopoulos et al. 2020) replaces exp(q . k) by
phi(q) . phi(k) for a positive feature map phi (elu(x) + 1). Then

    out_i = phi(q_i) S / (phi(q_i) . z),   S = sum_j phi(k_j) v_j^T  (d, d_v)
                                           z = sum_j phi(k_j)        (d,)

and the sums are formed once: cost linear in n. Causal: S_i and z_i sum only
j <= i, a running state of fixed size (d, d_v) that ``linear_attention_step``
updates one token at a time -- a recurrent network with a matrix memory.
"""

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from attncourse import checks

from .masking import masked_softmax

__all__ = [
    "elu_feature_map",
    "linear_attention",
    "linear_attention_step",
    "sliding_window_attention",
    "sliding_window_mask",
]


def sliding_window_mask(num_queries, window, num_keys=None, causal=True):
    """(num_queries, num_keys) bool mask, True where query i may see key j.

    causal=True: i - window < j <= i, the last ``window`` keys up to and
    including the query's own (window = num_keys is the causal mask).
    causal=False: |i - j| < window, window - 1 keys on each side. num_keys
    defaults to num_queries; window must be 1..num_keys.
    """
    num_keys = num_queries if num_keys is None else num_keys
    checks.sliding_window_mask_inputs(num_queries, window, num_keys, causal)
    offset = np.arange(num_queries)[:, None] - np.arange(num_keys)[None, :]
    if causal:
        return (offset >= 0) & (offset < window)  # i - window < j <= i
    return np.abs(offset) < window


def key_band(x, window, causal):
    """x (..., n, d) -> the band (..., n, width, d) of a strided VIEW, no copy:
    band[..., i, w, :] = x[..., i - window + 1 + w, :] (zeros outside 0..n-1);
    width = window (causal) or 2 window - 1. Also the (n, width) bool mask of
    the band entries that are real keys."""
    n, width = x.shape[-2], window if causal else 2 * window - 1
    pad = [(0, 0)] * x.ndim
    pad[-2] = (window - 1, width - window)  # zero rows before (and after)
    padded = np.pad(x, pad)  # (..., n + width - 1, d)
    band = sliding_window_view(padded, width, axis=-2)  # (..., n, d, width)
    keys = np.arange(n)[:, None] - window + 1 + np.arange(width)  # (n, width)
    return np.swapaxes(band, -1, -2), (keys >= 0) & (keys < n)


def banded_attention(q, k, v, window, causal, scale):
    """The banded computation on (..., n, d) arrays (no checks)."""
    k_band, real = key_band(k, window, causal)  # (..., n, width, d), (n, width)
    v_band, _ = key_band(v, window, causal)  # (..., n, width, d_v)
    scores = np.einsum("...nd,...nwd->...nw", q, k_band) * scale  # (..., n, width)
    weights = masked_softmax(scores, real)  # (..., n, width)
    return np.einsum("...nw,...nwd->...nd", weights, v_band), weights


def sliding_window_attention(queries, keys, values, window, causal=True, scale=None):
    """Attention of each query to the keys in its window, computed as a band.

    queries (b, n, d), keys (b, n, d), values (b, n, d_v): self-attention
    lengths (num_queries == num_keys). The keys are padded with window - 1
    zero rows in front (and behind, causal=False) and viewed through a
    sliding window (strides, no copy), so the scores are (b, n, width),
    width = window (causal) or 2 window - 1 (causal=False, |i - j| <
    window): memory O(n * window), never (n, n). Equal to
    scaled_dot_product_attention with sliding_window_mask(n, window,
    causal=causal). scale defaults to 1/sqrt(d).

    Returns (outputs (b, n, d_v), band_weights (b, n, width)):
    band_weights[:, i, w] is the weight of key i - window + 1 + w, zero where
    that key does not exist (before 0 or after n - 1).
    """
    queries, keys, values = (np.asarray(x) for x in (queries, keys, values))
    checks.sliding_window_inputs(queries, keys, values, window, causal)
    scale = 1.0 / np.sqrt(queries.shape[-1]) if scale is None else scale
    return banded_attention(queries, keys, values, int(window), causal, scale)


def elu_feature_map(x):
    """phi(x) = elu(x) + 1: x + 1 for x > 0, exp(x) for x <= 0. Positive, so
    phi(q) . phi(k) > 0 plays the part of exp(q . k) (Katharopoulos et al.).
    The two branches, not elu(x) + 1 = (exp(x) - 1) + 1, which rounds to 0 for
    very negative x: the features stay strictly positive."""
    x = np.asarray(x)
    checks.check_float("x", x)
    return np.where(x > 0, x + 1.0, np.exp(np.minimum(x, 0.0)))


def _features(feature_map, **inputs):
    """phi of each named input, checked to keep its leading axes."""
    phi = elu_feature_map if feature_map is None else feature_map
    features = {name: np.asarray(phi(x)) for name, x in inputs.items()}
    checks.feature_map_outputs(inputs, features)
    return features.values()


def linear_attention_on_features(fq, fk, v, causal, eps):
    """Linear attention from the features phi(q), phi(k) (..., n, r)."""
    if causal:  # prefix sums: S_i = sum_{j<=i} phi(k_j) v_j^T, z_i likewise
        outer = fk[..., :, None] * v[..., None, :]  # (..., n, r, d_v)
        state = np.cumsum(outer, axis=-3)  # (..., n, r, d_v)
        normaliser = np.cumsum(fk, axis=-2)  # (..., n, r)
        numerator = np.einsum("...nr,...nre->...ne", fq, state)  # (..., n, d_v)
        denominator = np.einsum("...nr,...nr->...n", fq, normaliser)  # (..., n)
    else:  # one state for all queries: S = phi(K)^T V, z = sum_j phi(k_j)
        state = np.swapaxes(fk, -1, -2) @ v  # (..., r, d_v)
        normaliser = fk.sum(axis=-2)  # (..., r)
        numerator = fq @ state  # (..., nq, d_v)
        denominator = np.einsum("...nr,...r->...n", fq, normaliser)  # (..., nq)
    return numerator / (denominator[..., None] + eps)  # (..., nq, d_v)


def linear_attention(queries, keys, values, causal=False, feature_map=None, eps=1e-6):
    """out_i = phi(q_i) S / (phi(q_i) . z + eps), no (nq, nk) table.

    queries (b, nq, d), keys (b, nk, d), values (b, nk, d_v); feature_map
    phi: (..., d) -> (..., r), positive values (default elu_feature_map, r =
    d). Non-causal: S = phi(K)^T V (b, r, d_v) and z = sum_j phi(k_j) (b, r),
    formed once: time O(n r d_v), memory O(r d_v) beyond the inputs.
    Causal (nq == nk): query i uses S_i, z_i summed over j <= i, taken as
    cumulative sums along the sequence (the cumsum formulation, not chunked):
    all n states at once, memory O(n r d_v), linear in n;
    linear_attention_step is the recurrent form with O(r d_v) memory. Equal
    to the quadratic form (A @ V) / (A.sum(-1) + eps) with A = phi(Q)
    phi(K)^T (times causal_mask(n) if causal). Returns outputs (b, nq, d_v).
    """
    queries, keys, values = (np.asarray(x) for x in (queries, keys, values))
    checks.linear_attention_inputs(queries, keys, values, causal, feature_map, eps)
    fq, fk = _features(feature_map, queries=queries, keys=keys)  # (b, n, r)
    return linear_attention_on_features(fq, fk, values, causal, eps)


def linear_attention_step(
    state, normaliser, query, key, value, feature_map=None, eps=1e-6
):
    """One token of causal linear attention: the fixed-size memory.

    query, key (b, d) and value (b, d_v) of the new token; state (b, r,
    d_v) = sum of phi(k_j) v_j^T and normaliser (b, r) = sum of phi(k_j)
    over the tokens so far (both None at the start: zeros). First the new
    token is written, then read:

        state += phi(k) v^T;   normaliser += phi(k)
        output = phi(q) state / (phi(q) . normaliser + eps)

    Returns (output (b, d_v), state, normaliser). Looping over a sequence
    gives linear_attention(..., causal=True), with O(r d_v) memory per row.
    """
    query, key, value = (np.asarray(x) for x in (query, key, value))
    state, normaliser = (  # None: the start of a sequence
        None if x is None else np.asarray(x) for x in (state, normaliser)
    )
    checks.linear_step_inputs(state, normaliser, query, key, value, feature_map, eps)
    fq, fk = _features(feature_map, query=query, key=key)  # (b, r)
    if state is None:  # an empty memory
        state = np.zeros(fk.shape + value.shape[-1:], dtype=value.dtype)
        normaliser = np.zeros_like(fk)
    checks.check_state_features(fk, state)
    state = state + fk[:, :, None] * value[:, None, :]  # (b, r, d_v)
    normaliser = normaliser + fk  # (b, r)
    numerator = np.einsum("br,bre->be", fq, state)  # (b, d_v)
    denominator = np.einsum("br,br->b", fq, normaliser)  # (b,)
    return numerator / (denominator[:, None] + eps), state, normaliser
