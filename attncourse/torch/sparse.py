"""Sliding-window (local) and linear attention in PyTorch (differentiable).

Same maths, names and signatures as ``attncourse.numpy.sparse`` (read its
docstring): sliding_window_attention scores each query against the band of
its own ``window`` keys, (b, n, window) numbers, never (b, n, n); linear
attention replaces exp(q . k) by phi(q) . phi(k) with phi = elu + 1, so the
sums over keys are formed once (or, causal, as a running state).
"""

import math

import torch
import torch.nn.functional as F

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
    offset = torch.arange(int(num_queries))[:, None] - torch.arange(int(num_keys))
    if causal:
        return (offset >= 0) & (offset < window)  # i - window < j <= i
    return offset.abs() < window


def key_band(x, window, causal):
    """x (..., n, d) -> the band (..., n, width, d) of a strided VIEW
    (Tensor.unfold, no copy): band[..., i, w, :] = x[..., i - window + 1 + w,
    :] (zeros outside 0..n-1), width = window (causal) or 2 window - 1; also
    the (n, width) bool mask of the band entries that are real keys."""
    n, width = x.shape[-2], window if causal else 2 * window - 1
    padded = F.pad(x, (0, 0, window - 1, width - window))  # (..., n + width - 1, d)
    band = padded.unfold(-2, width, 1)  # (..., n, d, width)
    keys = torch.arange(n, device=x.device)[:, None] - window + 1  # (n, 1)
    keys = keys + torch.arange(width, device=x.device)  # (n, width)
    return band.transpose(-1, -2), (keys >= 0) & (keys < n)


def banded_attention(q, k, v, window, causal, scale):
    """The banded computation on (..., n, d) tensors (no checks)."""
    k_band, real = key_band(k, window, causal)  # (..., n, width, d), (n, width)
    v_band, _ = key_band(v, window, causal)  # (..., n, width, d_v)
    scores = torch.einsum("...nd,...nwd->...nw", q, k_band) * scale  # (.., n, width)
    weights = masked_softmax(scores, real)  # (..., n, width)
    return torch.einsum("...nw,...nwd->...nd", weights, v_band), weights


def sliding_window_attention(queries, keys, values, window, causal=True, scale=None):
    """Attention of each query to the keys in its window, computed as a band.

    queries (b, n, d), keys (b, n, d), values (b, n, d_v) (num_queries ==
    num_keys); scores (b, n, width), width = window (causal) or 2 window - 1
    (causal=False, |i - j| < window): memory O(n * window), never (n, n).
    Equal to scaled_dot_product_attention with sliding_window_mask. scale
    defaults to 1/sqrt(d). Returns (outputs (b, n, d_v), band_weights (b, n,
    width)); band_weights[:, i, w] is the weight of key i - window + 1 + w,
    zero where that key does not exist.
    """
    queries, keys, values = (torch.as_tensor(x) for x in (queries, keys, values))
    checks.sliding_window_inputs(queries, keys, values, window, causal)
    scale = 1.0 / math.sqrt(queries.shape[-1]) if scale is None else scale
    return banded_attention(queries, keys, values, int(window), causal, scale)


def elu_feature_map(x):
    """phi(x) = elu(x) + 1: x + 1 for x > 0, exp(x) for x <= 0. Written as
    the two branches, not F.elu(x) + 1, which rounds to 0 in float32 for
    x < -17 (elu(x) = -1 + exp(x)): the features stay strictly positive."""
    x = torch.as_tensor(x)
    checks.check_float("x", x)
    return torch.where(x > 0, x + 1.0, torch.exp(x.clamp(max=0.0)))


def _features(feature_map, **inputs):
    """phi of each named input, checked to keep its leading axes."""
    phi = elu_feature_map if feature_map is None else feature_map
    features = {name: torch.as_tensor(phi(x)) for name, x in inputs.items()}
    checks.feature_map_outputs(inputs, features)
    return features.values()


def linear_attention_on_features(fq, fk, v, causal, eps):
    """Linear attention from the features phi(q), phi(k) (..., n, r)."""
    if causal:  # prefix sums: S_i = sum_{j<=i} phi(k_j) v_j^T, z_i likewise
        outer = fk[..., :, None] * v[..., None, :]  # (..., n, r, d_v)
        state = outer.cumsum(dim=-3)  # (..., n, r, d_v)
        normaliser = fk.cumsum(dim=-2)  # (..., n, r)
        numerator = torch.einsum("...nr,...nre->...ne", fq, state)  # (..., n, d_v)
        denominator = torch.einsum("...nr,...nr->...n", fq, normaliser)  # (..., n)
    else:  # one state for all queries: S = phi(K)^T V, z = sum_j phi(k_j)
        state = fk.transpose(-1, -2) @ v  # (..., r, d_v)
        normaliser = fk.sum(dim=-2)  # (..., r)
        numerator = fq @ state  # (..., nq, d_v)
        denominator = torch.einsum("...nr,...r->...n", fq, normaliser)  # (..., nq)
    return numerator / (denominator[..., None] + eps)  # (..., nq, d_v)


def linear_attention(queries, keys, values, causal=False, feature_map=None, eps=1e-6):
    """out_i = phi(q_i) S / (phi(q_i) . z + eps), no (nq, nk) table.

    queries (b, nq, d), keys (b, nk, d), values (b, nk, d_v); feature_map
    phi (..., d) -> (..., r), default elu_feature_map. Non-causal: S =
    phi(K)^T V and z = sum_j phi(k_j) once. Causal (nq == nk): S_i, z_i as
    cumulative sums over j <= i (the cumsum formulation: memory O(n r d_v),
    linear in n; linear_attention_step is the O(r d_v) recurrent form).
    Returns outputs (b, nq, d_v).
    """
    queries, keys, values = (torch.as_tensor(x) for x in (queries, keys, values))
    checks.linear_attention_inputs(queries, keys, values, causal, feature_map, eps)
    fq, fk = _features(feature_map, queries=queries, keys=keys)  # (b, n, r)
    return linear_attention_on_features(fq, fk, values, causal, eps)


def linear_attention_step(
    state, normaliser, query, key, value, feature_map=None, eps=1e-6
):
    """One token of causal linear attention: the fixed-size memory.

    query, key (b, d), value (b, d_v); state (b, r, d_v) and normaliser (b,
    r) so far (both None at the start: zeros). Writes, then reads:

        state += phi(k) v^T;   normaliser += phi(k)
        output = phi(q) state / (phi(q) . normaliser + eps)

    Returns (output (b, d_v), state, normaliser).
    """
    query, key, value = (torch.as_tensor(x) for x in (query, key, value))
    state, normaliser = (  # None: the start of a sequence
        None if x is None else torch.as_tensor(x) for x in (state, normaliser)
    )
    checks.linear_step_inputs(state, normaliser, query, key, value, feature_map, eps)
    fq, fk = _features(feature_map, query=query, key=key)  # (b, r)
    if state is None:  # an empty memory
        state = fk.new_zeros(fk.shape + value.shape[-1:])
        normaliser = torch.zeros_like(fk)
    checks.check_state_features(fk, state)
    state = state + fk[:, :, None] * value[:, None, :]  # (b, r, d_v)
    normaliser = normaliser + fk  # (b, r)
    numerator = torch.einsum("br,bre->be", fq, state)  # (b, d_v)
    denominator = torch.einsum("br,br->b", fq, normaliser)  # (b,)
    return numerator / (denominator[:, None] + eps), state, normaliser
