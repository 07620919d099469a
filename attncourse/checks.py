"""Input validation shared by the NumPy, TensorFlow and PyTorch modules.

Every check works on plain shapes (tuples of ints) and dtype names, so the three
frameworks raise the *same* error with the *same* message for the same mistake.
Messages name the argument, the shapes involved and, where it helps, the fix.
"""

from collections.abc import Sequence

Shape = tuple[int, ...]


def shape_of(x) -> Shape:
    """The shape of a NumPy array, TF tensor or torch tensor as a tuple of ints."""
    return tuple(int(d) for d in x.shape)


def dtype_name(x) -> str:
    """'float32', 'bool', ... for a NumPy array, TF tensor or torch tensor."""
    name = getattr(x.dtype, "name", None) or str(x.dtype)
    return name.replace("torch.", "")


def check_rank(name: str, shape: Shape, rank: int, layout: str) -> None:
    """Raise ValueError unless ``shape`` has ``rank`` axes; ``layout`` names them."""
    if len(shape) != rank:
        raise ValueError(
            f"{name} must have {rank} axes {layout}, got shape {shape}"
        )


def check_float(name: str, x) -> None:
    """Raise TypeError unless ``x`` holds floating-point numbers."""
    dt = dtype_name(x)
    if not (dt.startswith("float") or dt.startswith("bfloat")):
        raise TypeError(f"{name} must be a floating-point tensor, got dtype {dt}")


def check_qkv(queries: Shape, keys: Shape, values: Shape | None = None,
              *, same_feature_size: bool = False) -> None:
    """Validate the batch-first shapes of queries, keys and values.

    queries: (batch, num_queries, d_q); keys: (batch, num_keys, d_k);
    values: (batch, num_keys, d_v). ``same_feature_size`` demands d_q == d_k,
    as dot-product scores do.
    """
    check_rank("queries", queries, 3, "(batch, num_queries, d_q)")
    check_rank("keys", keys, 3, "(batch, num_keys, d_k)")
    if queries[0] != keys[0]:
        raise ValueError(
            f"queries and keys must have the same batch size, got queries "
            f"{queries} and keys {keys}"
        )
    if same_feature_size and queries[-1] != keys[-1]:
        raise ValueError(
            f"dot-product scores need queries and keys of the same feature size, "
            f"got queries {queries} (d_q={queries[-1]}) and keys {keys} "
            f"(d_k={keys[-1]}); project them to a common size first or use an "
            f"additive or bilinear score"
        )
    if values is not None:
        check_rank("values", values, 3, "(batch, num_keys, d_v)")
        if values[:2] != keys[:2]:
            raise ValueError(
                f"values must pair with keys (same batch and num_keys), got keys "
                f"{keys} and values {values}"
            )


def check_weight(name: str, shape: Shape, expected: Sequence[int | None]) -> None:
    """Raise ValueError unless a weight's shape matches ``expected`` (None = any)."""
    ok = len(shape) == len(expected) and all(
        e is None or s == e for s, e in zip(shape, expected, strict=False)
    )
    if not ok:
        want = tuple("*" if e is None else e for e in expected)
        raise ValueError(f"weight {name} must have shape {want}, got {shape}")


def broadcast_shape(mask: Shape, target: Shape) -> bool:
    """True if ``mask`` broadcasts (NumPy rules, right-aligned) to ``target``."""
    if len(mask) > len(target):
        return False
    return all(m in (1, t) for m, t in zip(reversed(mask), reversed(target),
                                           strict=False))


def check_mask(mask_shape: Shape, mask_dtype: str, scores_shape: Shape) -> None:
    """Validate a boolean attention mask (True = attend) against the scores.

    The mask must be boolean and broadcast, right-aligned, to the scores' shape
    (batch, num_queries, num_keys) -- or (batch, num_heads, num_queries, num_keys)
    for multi-head attention. A padding mask over keys therefore has shape
    (batch, 1, num_keys); a causal mask (num_queries, num_keys).
    """
    if mask_dtype != "bool":
        raise TypeError(
            f"mask must be boolean with True = attend, got dtype {mask_dtype}; "
            f"convert it (e.g. mask > 0) -- float masks are ambiguous between "
            f"'1 = keep' and additive '-inf = drop'"
        )
    if not broadcast_shape(mask_shape, scores_shape):
        raise ValueError(
            f"mask of shape {mask_shape} does not broadcast to the attention "
            f"scores of shape {scores_shape} (batch, [num_heads,] num_queries, "
            f"num_keys); a padding mask over keys needs shape (batch, 1, "
            f"num_keys), a causal mask (num_queries, num_keys)"
        )


def check_valid_lens(shape: Shape, batch: int, num_queries: int) -> None:
    """valid_lens is (batch,) -- one length per sequence -- or (batch, num_queries)."""
    if shape not in ((batch,), (batch, num_queries)):
        raise ValueError(
            f"valid_lens must have shape (batch,) = ({batch},) or (batch, "
            f"num_queries) = ({batch}, {num_queries}), got {shape}"
        )


def check_heads(d_model: int, num_heads: int) -> None:
    """d_model must split evenly into num_heads heads."""
    if num_heads < 1:
        raise ValueError(f"num_heads must be >= 1, got {num_heads}")
    if d_model % num_heads:
        raise ValueError(
            f"d_model={d_model} is not divisible by num_heads={num_heads}; each "
            f"head gets d_model / num_heads features, so choose e.g. num_heads in "
            f"{[h for h in range(1, d_model + 1) if d_model % h == 0][:8]}"
        )


def check_same_length(name_a: str, a: Shape, name_b: str, b: Shape) -> None:
    """Two sequences that are concatenated feature-wise need the same length."""
    if a[:2] != b[:2]:
        raise ValueError(
            f"{name_a} {a} and {name_b} {b} must have the same batch size and "
            f"sequence length to be concatenated on the last axis"
        )


# --- added for masking, pooling and layers ----------------------------------


def check_count(name: str, value) -> None:
    """Raise unless ``value`` is a non-negative Python/NumPy int (a length)."""
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if int(value) < 0:
        raise ValueError(f"{name} must be >= 0, got {int(value)}")


def check_valid_lens_rank(shape: Shape) -> None:
    """valid_lens is (batch,) or (batch, num_queries): one or two axes."""
    if len(shape) not in (1, 2):
        raise ValueError(
            f"valid_lens must have shape (batch,) or (batch, num_queries), "
            f"got {shape}"
        )


def check_scores_values(scores: Shape, values: Shape) -> None:
    """scores (batch, num_queries, num_keys) must pair with values (batch,
    num_keys, d_v): same batch, and one value per key."""
    check_rank("scores", scores, 3, "(batch, num_queries, num_keys)")
    check_rank("values", values, 3, "(batch, num_keys, d_v)")
    if (scores[0], scores[2]) != values[:2]:
        raise ValueError(
            f"values must pair with the scores' keys (same batch, num_keys = "
            f"scores.shape[-1]), got scores {scores} and values {values}"
        )


def check_scores_shape(got: Shape, expected: Shape) -> None:
    """A score function must return (batch, num_queries, num_keys)."""
    if tuple(got) != tuple(expected):
        raise ValueError(
            f"score_fn must return scores of shape (batch, num_queries, "
            f"num_keys) = {tuple(expected)}, got {tuple(got)}"
        )


def check_features(name: str, shape: Shape, dim_name: str, dim: int) -> None:
    """The last axis of ``shape`` must be ``dim`` (the layer's ``dim_name``)."""
    if shape[-1] != dim:
        raise ValueError(
            f"{name} must have {dim_name}={dim} features on the last axis, "
            f"got shape {shape}"
        )


def check_weight_keys(expected: Sequence[str], got) -> None:
    """A weight dict must have exactly the keys ``expected``."""
    got = sorted(got)
    if got != sorted(expected):
        raise ValueError(
            f"weights must have exactly the keys {sorted(expected)}, got {got}"
        )


HARD_MODES = ("argmax", "sample")


def check_hard_mode(mode: str, has_generator: bool) -> None:
    """hard_attention's mode is 'argmax' or 'sample'; sampling needs a generator."""
    if mode not in HARD_MODES:
        raise ValueError(f"mode must be one of {HARD_MODES}, got {mode!r}")
    if mode == "sample" and not has_generator:
        raise ValueError(
            "mode='sample' needs an explicit random generator (generator=...), "
            "got generator=None"
        )


def check_generator(generator, expected: type, expected_name: str) -> None:
    """Raise TypeError unless ``generator`` is the framework's generator type."""
    if generator is not None and not isinstance(generator, expected):
        raise TypeError(
            f"generator must be a {expected_name}, got {type(generator).__name__}"
        )


def check_required_dim(name: str, value) -> None:
    """Layers that create weights at construction need their input sizes."""
    if value is None:
        raise ValueError(
            f"{name} is required here (weights are created at construction), "
            f"got {name}=None"
        )
    check_count(name, value)


def check_same_dtype(**tensors) -> None:
    """Raise TypeError unless all named tensors share one dtype."""
    names = {k: dtype_name(v) for k, v in tensors.items()}
    if len(set(names.values())) > 1:
        got = ", ".join(f"{k} {v}" for k, v in names.items())
        raise TypeError(f"{' and '.join(names)} must have the same dtype, got {got}")


def check_same_batch(name_a: str, a: Shape, name_b: str, b: Shape) -> None:
    """Two batch-first tensors attended to each other need the same batch size."""
    if a[0] != b[0]:
        raise ValueError(
            f"{name_a} {a} and {name_b} {b} must have the same batch size"
        )


def check_sequence(name: str, shape: Shape, dim_name: str, dim: int | None) -> None:
    """A layer input is (batch, seq_len, dim); ``dim`` None = not known yet."""
    check_rank(name, shape, 3, f"(batch, seq_len, {dim_name})")
    if dim is not None:
        check_features(name, shape, dim_name, dim)
