"""Input validation shared by the NumPy, TensorFlow and PyTorch modules.

Every check works on plain shapes (tuples of ints) and dtype names, so the three
frameworks raise the *same* error with the *same* message for the same mistake.
Messages name the argument, the shapes involved and, where it helps, the fix.

The ``check_*`` functions test one thing each. The functions at the end
(``attention_inputs``, ``multi_head_inputs``, ...) bundle them: every library
function converts its arguments to its framework's tensors and then makes ONE
such call, so its source starts with the maths.
"""

from collections.abc import Sequence

import numpy as np

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
        raise ValueError(f"{name} must have {rank} axes {layout}, got shape {shape}")


def check_float(name: str, x) -> None:
    """Raise TypeError unless ``x`` holds floating-point numbers."""
    dt = dtype_name(x)
    if not dt.startswith(("float", "bfloat")):
        raise TypeError(f"{name} must be a floating-point tensor, got dtype {dt}")


def check_qkv(
    queries: Shape,
    keys: Shape,
    values: Shape | None = None,
    *,
    same_feature_size: bool = False,
) -> None:
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
    return all(
        m in (1, t) for m, t in zip(reversed(mask), reversed(target), strict=False)
    )


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
            f"valid_lens must have shape (batch,) or (batch, num_queries), got {shape}"
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
    """A parameter dict must have exactly the keys ``expected``."""
    got = sorted(got)
    if got != sorted(expected):
        raise ValueError(
            f"params must have exactly the keys {sorted(expected)}, got {got}"
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
        raise ValueError(f"{name_a} {a} and {name_b} {b} must have the same batch size")


def check_sequence(name: str, shape: Shape, dim_name: str, dim: int | None) -> None:
    """A layer input is (batch, seq_len, dim); ``dim`` None = not known yet."""
    check_rank(name, shape, 3, f"(batch, seq_len, {dim_name})")
    if dim is not None:
        check_features(name, shape, dim_name, dim)


# --- added for multi-head attention, positional encoding and seq2seq --------

MHA_WEIGHTS = ("W_q", "W_k", "W_v", "W_o")
MHA_BIASES = ("b_q", "b_k", "b_v", "b_o")


def check_positive(name: str, value) -> None:
    """Raise unless ``value`` is an int >= 1 (a size such as d_model)."""
    check_count(name, value)
    if int(value) < 1:
        raise ValueError(f"{name} must be >= 1, got {int(value)}")


def check_shape(name: str, shape: Shape, expected: Shape, layout: str) -> None:
    """Raise ValueError unless ``shape == expected``; ``layout`` names the axes."""
    if tuple(shape) != tuple(expected):
        raise ValueError(
            f"{name} must have shape {layout} = {tuple(expected)}, got {tuple(shape)}"
        )


def check_input_features(
    name: str, shape: Shape, weight: str, weight_shape: Shape
) -> None:
    """x @ W needs x.shape[-1] == W.shape[0]; say which input and weight differ."""
    if shape[-1] != weight_shape[0]:
        raise ValueError(
            f"{name} of shape {shape} have {shape[-1]} features, but {weight} of "
            f"shape {weight_shape} expects {weight_shape[0]} (x @ W needs "
            f"x.shape[-1] == W.shape[0])"
        )


def check_mha_keys(shapes: dict) -> None:
    """The attention parameter names: W_q, W_k, W_v, W_o and optional biases."""
    missing = [k for k in MHA_WEIGHTS if k not in shapes]
    unknown = sorted(set(shapes) - set(MHA_WEIGHTS) - set(MHA_BIASES))
    if missing or unknown:
        raise ValueError(
            f"params must hold W_q, W_k, W_v, W_o and optionally b_q, b_k, b_v, "
            f"b_o; missing {missing}, unknown {unknown}"
        )


def check_mha_params(
    shapes: dict, queries: Shape, keys: Shape, values: Shape, num_heads: int
) -> tuple[int, int]:
    """Validate multi-head attention weights (given by shape) against the inputs.

    ``shapes`` maps W_q (d_q_in, d_model), W_k (d_k_in, d_model), W_v (d_v_in,
    d_model), W_o (d_model, d_out) and the optional biases b_q, b_k, b_v
    (d_model,) and b_o (d_out,) to their shapes. Returns (d_model, d_out).
    """
    check_mha_keys(shapes)
    for name, x in (("queries", queries), ("keys", keys), ("values", values)):
        w = f"W_{name[0]}"
        check_rank(w, shapes[w], 2, f"(d_{name[0]}_in, d_model)")
        check_input_features(name, x, w, shapes[w])
    d_model = shapes["W_q"][1]
    check_weight("W_k", shapes["W_k"], (None, d_model))
    check_weight("W_v", shapes["W_v"], (None, d_model))
    check_weight("W_o", shapes["W_o"], (d_model, None))
    check_heads(d_model, num_heads)
    d_out = shapes["W_o"][1]
    for b, size in zip(MHA_BIASES, (d_model, d_model, d_model, d_out), strict=True):
        if b in shapes:
            check_weight(b, shapes[b], (size,))
    return d_model, d_out


def check_input_dims(input_dims) -> tuple[int, int, int]:
    """input_dims = (d_q_in, d_k_in, d_v_in): the feature sizes of the inputs."""
    if input_dims is None:
        raise ValueError(
            "input_dims=(d_q_in, d_k_in, d_v_in) is required here: the weights "
            "are created at construction (only the Keras layer can infer the "
            "sizes from its first call); got input_dims=None"
        )
    if len(input_dims) != 3:
        raise ValueError(
            f"input_dims must be (d_q_in, d_k_in, d_v_in), got {input_dims}"
        )
    for name, d in zip(("d_q_in", "d_k_in", "d_v_in"), input_dims, strict=True):
        check_positive(name, d)
    return tuple(int(d) for d in input_dims)


def check_positions(num_positions: int, max_len: int) -> None:
    """A positional-encoding table of max_len rows covers sequences <= max_len."""
    if num_positions > max_len:
        raise ValueError(
            f"sequence length {num_positions} exceeds max_len={max_len} of the "
            f"positional encoding table; build it with max_len >= {num_positions}"
        )


ATTENTIONS = ("scaled_dot", "bahdanau", "luong_dot", "luong_general", "location")
SEED_NOTES_NAMES = {"style1": "scaled_dot", "style2": "location"}


def encoder_dims(vocab_size, embed_dim, hidden_dim, bidirectional) -> None:
    """Positive sizes; a bidirectional encoder splits an even hidden_dim."""
    for name, d in (
        ("vocab_size", vocab_size),
        ("embed_dim", embed_dim),
        ("hidden_dim", hidden_dim),
    ):
        check_positive(name, d)
    if not isinstance(bidirectional, bool):
        raise TypeError(f"bidirectional must be True or False, got {bidirectional!r}")
    if bidirectional and hidden_dim % 2:
        raise ValueError(
            f"a bidirectional encoder gives each direction hidden_dim // 2 "
            f"units, so hidden_dim must be even, got {hidden_dim}"
        )


def check_attention(attention: str, max_src_len) -> None:
    """A known decoder attention type; "location" needs max_src_len."""
    if attention not in ATTENTIONS:
        hint = ""
        if attention in SEED_NOTES_NAMES:
            hint = f" (the seed notes' {attention} is {SEED_NOTES_NAMES[attention]!r})"
        raise ValueError(
            f"unknown attention {attention!r}; choose one of {list(ATTENTIONS)}{hint}"
        )
    if attention == "location" and max_src_len is None:
        raise ValueError(
            "attention='location' has one weight per source position up to a "
            "fixed maximum, so it needs max_src_len (the longest source it will "
            "see); got max_src_len=None"
        )
    if max_src_len is not None:
        check_positive("max_src_len", max_src_len)


def check_src_len(src_len: int, max_src_len) -> None:
    """Location attention cannot reach past the max_src_len positions it has."""
    if max_src_len is not None and src_len > max_src_len:
        raise ValueError(
            f"enc_outputs have {src_len} source positions, more than the "
            f"decoder's max_src_len={max_src_len}"
        )


def check_tokens(name: str, x, layout: str, rank: int) -> None:
    """Token ids: an integer tensor with ``rank`` axes ``layout``."""
    dt = dtype_name(x)
    if not dt.startswith(("int", "uint")):
        raise TypeError(f"{name} must hold integer token ids, got dtype {dt}")
    check_rank(name, shape_of(x), rank, layout)


def check_src_mask(mask, enc_shape: Shape) -> None:
    """src_mask: bool (batch, src_len), True = real token, pairs with enc_outputs."""
    if dtype_name(mask) != "bool":
        raise TypeError(
            f"src_mask must be boolean with True = real token, got dtype "
            f"{dtype_name(mask)}"
        )
    check_shape("src_mask", shape_of(mask), enc_shape[:2], "(batch, src_len)")


def check_torch_mha_dims(d_q_in: int, d_model: int, d_out: int) -> None:
    """torch.nn.MultiheadAttention ties the query, inner and output sizes."""
    if not d_q_in == d_model == d_out:
        raise ValueError(
            f"torch.nn.MultiheadAttention needs d_q_in == d_model == d_out (its "
            f"queries, projections and outputs all have embed_dim features; only "
            f"keys and values may differ, via kdim and vdim), got d_q_in={d_q_in}, "
            f"d_model={d_model}, d_out={d_out}"
        )


def check_mask_rank(shape: Shape, dtype: str) -> None:
    """A bool attention mask with 1 to 4 axes ((batch, heads,) n_q, n_k)."""
    if dtype != "bool":
        raise TypeError(f"mask must be boolean with True = attend, got dtype {dtype}")
    if not 1 <= len(shape) <= 4:
        raise ValueError(
            f"mask must have 1 to 4 axes, broadcastable to (batch, num_heads, "
            f"n_q, n_k), got shape {shape}"
        )


def check_mask_heads(mask_heads: int, num_heads: int) -> None:
    """A mask's head axis is 1 (shared) or num_heads."""
    if mask_heads not in (1, num_heads):
        raise ValueError(
            f"mask has {mask_heads} entries on the head axis, but there are "
            f"num_heads={num_heads} heads (use 1 to share the mask)"
        )


# --- one validation call per library function --------------------------------
# Each takes the arguments already converted to the framework's tensors (NumPy
# arrays, TF tensors, torch tensors: anything with .shape and .dtype).


def _shape(x) -> Shape:
    return shape_of(x) if hasattr(x, "shape") else tuple(np.shape(x))


def param(name: str, x, expected: Sequence[int | None]) -> None:
    """A floating-point parameter of shape ``expected`` (None = any size)."""
    check_float(name, x)
    check_weight(name, shape_of(x), expected)


def score_inputs(queries, keys, *, same_feature_size: bool = False) -> None:
    """queries (batch, num_queries, d_q) and keys (batch, num_keys, d_k): floats
    of one dtype and one batch size (and d_q == d_k if ``same_feature_size``)."""
    check_float("queries", queries)
    check_float("keys", keys)
    check_same_dtype(queries=queries, keys=keys)
    check_qkv(shape_of(queries), shape_of(keys), same_feature_size=same_feature_size)


def additive_score_inputs(queries, keys, W_q, W_k, w_v) -> None:
    """score_inputs, then W_q (d_q, h), W_k (d_k, h), w_v (h,)."""
    score_inputs(queries, keys)
    param("W_q", W_q, (shape_of(queries)[-1], None))
    h = shape_of(W_q)[-1]
    param("W_k", W_k, (shape_of(keys)[-1], h))
    param("w_v", w_v, (h,))


def concat_score_inputs(queries, keys, w, b) -> None:
    """score_inputs, then w (d_q + d_k,) and b a scalar (or None)."""
    score_inputs(queries, keys)
    param("w", w, (shape_of(queries)[-1] + shape_of(keys)[-1],))
    if b is not None:
        param("b", b, ())


def bilinear_score_inputs(queries, keys, W) -> None:
    """score_inputs, then W (d_q, d_k)."""
    score_inputs(queries, keys)
    param("W", W, (shape_of(queries)[-1], shape_of(keys)[-1]))


def softmax_inputs(scores, mask) -> None:
    """Float scores and an optional bool mask that broadcasts to them."""
    check_float("scores", scores)
    if mask is not None:
        check_mask(shape_of(mask), dtype_name(mask), shape_of(scores))


def sequence_mask_inputs(valid_lens, num_keys) -> None:
    """valid_lens (batch,) or (batch, num_queries); num_keys an int >= 0."""
    check_valid_lens_rank(shape_of(valid_lens))
    check_count("num_keys", num_keys)


CAUSAL_ALIGNS = ("top_left", "bottom_right")


def check_causal_align(align) -> None:
    """align names where the causal triangle sits: top_left or bottom_right."""
    if not isinstance(align, str) or align not in CAUSAL_ALIGNS:
        raise ValueError(
            f"align must be 'top_left' (query i sees keys 0..i) or 'bottom_right' "
            f"(query i sees keys 0..i + num_keys - num_queries), got {align!r}"
        )


def causal_mask_inputs(num_queries, num_keys, align="top_left") -> None:
    """Both sizes are ints >= 0; align is one of CAUSAL_ALIGNS."""
    check_count("num_queries", num_queries)
    check_count("num_keys", num_keys)
    check_causal_align(align)


def soft_attention_inputs(scores, values) -> None:
    """Float scores (batch, num_queries, num_keys) and values (batch, num_keys,
    d_v) of one dtype."""
    check_float("scores", scores)
    check_float("values", values)
    check_same_dtype(scores=scores, values=values)
    check_scores_values(shape_of(scores), shape_of(values))


def attention_inputs(
    queries,
    keys,
    values,
    mask=None,
    valid_lens=None,
    *,
    same_feature_size: bool = False,
) -> None:
    """Float queries, keys, values of one dtype with pairing shapes; a bool mask
    that broadcasts to the scores (batch, num_queries, num_keys); valid_lens
    (batch,) or (batch, num_queries)."""
    for name, x in (("queries", queries), ("keys", keys), ("values", values)):
        check_float(name, x)
    check_same_dtype(queries=queries, keys=keys, values=values)
    q, k = shape_of(queries), shape_of(keys)
    check_qkv(q, k, shape_of(values), same_feature_size=same_feature_size)
    if mask is not None:
        check_mask(shape_of(mask), dtype_name(mask), (q[0], q[1], k[1]))
    if valid_lens is not None:
        check_valid_lens(shape_of(valid_lens), q[0], q[1])


def hard_attention_inputs(
    weights, values, mode, generator, generator_type, generator_name
) -> None:
    """A known mode, a generator of the framework's type when sampling, and
    weights (batch, num_queries, num_keys) that pair with the values."""
    check_hard_mode(mode, generator is not None)
    check_generator(generator, generator_type, generator_name)
    check_float("weights", weights)
    check_float("values", values)
    check_same_dtype(weights=weights, values=values)
    check_scores_values(shape_of(weights), shape_of(values))


def multi_head_inputs(queries, keys, values, params, num_heads) -> None:
    """Float queries, keys, values with pairing shapes, and MHA params that fit
    them (see check_mha_params)."""
    for name, x in (("queries", queries), ("keys", keys), ("values", values)):
        check_float(name, x)
    shapes = (shape_of(queries), shape_of(keys), shape_of(values))
    check_qkv(*shapes)
    check_mha_params({k: _shape(v) for k, v in params.items()}, *shapes, num_heads)


def split_heads_input(x, num_heads) -> None:
    """x (batch, n, d_model) with d_model divisible by num_heads."""
    check_rank("x", shape_of(x), 3, "(batch, n, d_model)")
    check_heads(shape_of(x)[-1], num_heads)


def sequence_input(name: str, x, dim_name: str, dim) -> None:
    """A float layer input (batch, seq_len, dim); dim None = not known yet."""
    check_float(name, x)
    check_sequence(name, shape_of(x), dim_name, dim)


def cross_attention_inputs(inputs, context, input_dim, context_dim) -> None:
    """inputs (batch, len_a, input_dim) and context (batch, len_b, context_dim)
    of one dtype and batch size."""
    sequence_input("inputs", inputs, "input_dim", input_dim)
    sequence_input("context", context, "context_dim", context_dim)
    check_same_dtype(inputs=inputs, context=context)
    check_same_batch("inputs", shape_of(inputs), "context", shape_of(context))


def statistical_attention_inputs(a, b, input_dim, context_dim) -> None:
    """a (batch, seq, input_dim) and b (batch, seq, context_dim) of one dtype,
    batch size and length (their features are concatenated)."""
    sequence_input("a", a, "input_dim", input_dim)
    sequence_input("b", b, "context_dim", context_dim)
    check_same_dtype(a=a, b=b)
    check_same_length("a", shape_of(a), "b", shape_of(b))


def attention_layer_sizes(
    d_k, d_v, input_dim, context_dim=None, *, input_dim_required: bool
) -> None:
    """Sizes of a single-head layer: ints >= 0; input_dim may be None (= taken
    from the first call) only where the layer builds lazily (Keras)."""
    check_count("d_k", d_k)
    check_count("d_v", d_v)
    if input_dim_required:
        check_required_dim("input_dim", input_dim)
    elif input_dim is not None:
        check_count("input_dim", input_dim)
    if context_dim is not None:
        check_count("context_dim", context_dim)


def multi_head_sizes(num_heads, d_model, input_dims, *, input_dims_required: bool):
    """d_model >= 1 split evenly into num_heads heads; input_dims = (d_q_in,
    d_k_in, d_v_in), or None where the layer builds lazily. Returns the
    input_dims as a tuple of ints (or None)."""
    check_positive("d_model", d_model)
    check_heads(d_model, num_heads)
    if input_dims is None and not input_dims_required:
        return None
    return check_input_dims(input_dims)


COURSE_LAYERS = (
    "SelfAttention, SelfAttentionDense, CrossAttention, "
    "StatisticalAttention, MultiHeadAttention, GRU, Encoder and Decoder"
)


def course_params(layer) -> dict:
    """``layer.params`` (name -> storage, (in, out) layout) of one of the
    course's layers; TypeError for anything else."""
    params = getattr(layer, "params", None)
    if not hasattr(params, "items"):
        raise TypeError(
            f"get_params and set_params work on the course's layers "
            f"({COURSE_LAYERS}), got {type(layer).__name__}"
        )
    return dict(params.items())


def param_dict(expected: dict, params: dict) -> None:
    """``params`` has exactly the names of ``expected`` (name -> shape), each
    a floating-point array of that shape."""
    check_weight_keys(list(expected), params)
    for name, shape in expected.items():
        param(name, params[name], shape)


def positional_input(x, d_model, max_len) -> None:
    """x (batch, n, d_model) with n <= max_len."""
    shape = shape_of(x)
    check_sequence("inputs", shape, "d_model", d_model)
    check_positions(shape[1], max_len)


def decoder_step_inputs(
    tokens, state, enc_outputs, src_mask, *, hidden_dim, attention, max_src_len
) -> None:
    """One decoder step's inputs: tokens (batch,) int, state (batch, hidden),
    enc_outputs (batch, src_len, hidden), src_mask bool (batch, src_len)."""
    check_tokens("tokens", tokens, "(batch,)", 1)
    enc_shape = shape_of(enc_outputs)
    check_sequence("enc_outputs", enc_shape, "hidden_dim", hidden_dim)
    batch, src_len = enc_shape[:2]
    check_shape("state", shape_of(state), (batch, hidden_dim), "(batch, hidden_dim)")
    check_shape("tokens", shape_of(tokens), (batch,), "(batch,)")
    if attention == "location":
        check_src_len(src_len, max_src_len)
    if src_mask is not None:
        check_src_mask(src_mask, enc_shape)


# --------------------------------------------------------------------------
# Part 3 (the Transformer). One section per topic; add checks to your own.

# --- transformer blocks (norms, feed-forward, encoder/decoder blocks) ---

BLOCK_NORMS = ("pre", "post")
ACTIVATIONS = ("relu", "gelu")
FFN_WEIGHTS = ("W_1", "b_1", "W_2", "b_2")


def block_shapes(d_model: int, d_ff: int, cross: bool = False) -> dict:
    """name -> shape of a Transformer block's flat parameter dict: attn.* (MHA,
    W (d_model, d_model), b (d_model,)), norm1.gamma/beta, ffn.W_1 (d_model,
    d_ff), ffn.b_1, ffn.W_2 (d_ff, d_model), ffn.b_2, norm2.*; with ``cross``
    also cross.* and norm3.* (a decoder block)."""
    d, f = d_model, d_ff
    shapes = {}
    for sub in ("attn", "cross") if cross else ("attn",):
        for c in "qkvo":
            shapes[f"{sub}.W_{c}"], shapes[f"{sub}.b_{c}"] = (d, d), (d,)
    norms = ("norm1", "norm2", "norm3") if cross else ("norm1", "norm2")
    for norm in norms:
        shapes[f"{norm}.gamma"], shapes[f"{norm}.beta"] = (d,), (d,)
    shapes.update({"ffn.W_1": (d, f), "ffn.b_1": (f,)})
    shapes.update({"ffn.W_2": (f, d), "ffn.b_2": (d,)})
    return shapes


def block_options(norm, activation) -> None:
    """norm is 'pre' or 'post'; activation 'relu' or 'gelu'."""
    if not isinstance(norm, str) or norm not in BLOCK_NORMS:
        raise ValueError(
            f"norm must be 'pre' (x + sublayer(LN(x)), Xiong et al. 2020) or "
            f"'post' (LN(x + sublayer(x)), Vaswani et al. 2017), got {norm!r}"
        )
    if not isinstance(activation, str) or activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")


def block_sizes(d_model, num_heads, d_ff, norm, activation, dropout) -> None:
    """A block's sizes: d_model split evenly into num_heads heads, d_ff >= 1,
    a known norm and activation, 0 <= dropout < 1."""
    check_positive("d_model", d_model)
    check_positive("num_heads", num_heads)
    check_heads(d_model, num_heads)
    check_positive("d_ff", d_ff)
    block_options(norm, activation)
    check_dropout(dropout)


def check_dropout(dropout) -> None:
    """An attention-dropout rate: a number with 0 <= dropout < 1."""
    if isinstance(dropout, bool) or not 0.0 <= float(dropout) < 1.0:
        raise ValueError(f"dropout must be in [0, 1), got {dropout!r}")


def norm_inputs(x, gamma, beta=None) -> None:
    """Float x (..., d) with gamma (and beta) of shape (d,)."""
    check_float("x", x)
    shape = shape_of(x)
    if not shape:
        raise ValueError("x must have at least one axis (..., d), got a scalar")
    param("gamma", gamma, (shape[-1],))
    if beta is not None:
        param("beta", beta, (shape[-1],))


def ffn_params(params: dict, d_model: int) -> None:
    """params holds exactly W_1 (d_model, d_ff), b_1 (d_ff,), W_2 (d_ff,
    d_model), b_2 (d_model,)."""
    check_weight_keys(FFN_WEIGHTS, params)
    param("W_1", params["W_1"], (d_model, None))
    d_ff = shape_of(params["W_1"])[1]
    param("b_1", params["b_1"], (d_ff,))
    param("W_2", params["W_2"], (d_ff, d_model))
    param("b_2", params["b_2"], (d_model,))


def ffn_inputs(x, params: dict, activation) -> None:
    """Float x (..., d_model) and the four FFN parameters that fit it."""
    check_float("x", x)
    shape = shape_of(x)
    if not shape:
        raise ValueError("x must have at least one axis (..., d_model)")
    ffn_params(params, shape[-1])
    if not isinstance(activation, str) or activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")


def block_params(params: dict, d_model: int, num_heads, cross: bool) -> int:
    """The flat parameter dict of an encoder (cross False) or decoder block
    for d_model features: exactly the names of block_shapes, each a float
    array of its shape. Returns d_ff (from ffn.W_1)."""
    check_positive("num_heads", num_heads)
    check_heads(d_model, num_heads)
    if "ffn.W_1" in params:
        shape = _shape(params["ffn.W_1"])
        d_ff = shape[1] if len(shape) == 2 else 1
    else:
        d_ff = 1
    expected = block_shapes(d_model, d_ff, cross)
    missing = sorted(set(expected) - set(params))
    unknown = sorted(set(params) - set(expected))
    if missing or unknown:
        kind = "decoder block (with cross.* and norm3.*)" if cross else "block"
        raise ValueError(
            f"params of a {kind} must have exactly the keys {sorted(expected)}; "
            f"missing {missing}, unknown {unknown}"
        )
    for name, shape in expected.items():
        param(name, params[name], shape)
    return d_ff


def block_inputs(x, params, num_heads, norm, activation, mask, memory=None) -> None:
    """x float (batch, n, d_model); params that fit it (block_params; with a
    memory (batch, m, d_model) those of a decoder block); a bool mask of 1 to 4
    axes; a known norm and activation."""
    check_float("x", x)
    shape = shape_of(x)
    check_rank("x", shape, 3, "(batch, n, d_model)")
    block_options(norm, activation)
    block_params(params, shape[-1], num_heads, cross=memory is not None)
    if memory is not None:
        check_float("memory", memory)
        check_sequence("memory", shape_of(memory), "d_model", shape[-1])
        check_same_batch("x", shape, "memory", shape_of(memory))
    if mask is not None:
        check_mask_rank(shape_of(mask), dtype_name(mask))


# --- the tiny model (tokens, training data) ---

TINY_POSITIONS = ("learned", "sinusoidal", "rope", "alibi", "none")


def tiny_sizes(vocab_size, d_model, num_heads, num_layers, max_len, positions):
    """Positive sizes, d_model split evenly into heads, a known position
    scheme; RoPE rotates pairs, so it needs an even d_model // num_heads."""
    for name, value in (
        ("vocab_size", vocab_size),
        ("d_model", d_model),
        ("num_layers", num_layers),
        ("max_len", max_len),
    ):
        check_positive(name, value)
    check_count("num_heads", num_heads)
    check_heads(d_model, num_heads)
    if positions not in TINY_POSITIONS:
        raise ValueError(
            f"positions must be one of {TINY_POSITIONS}, got {positions!r}"
        )
    if positions == "rope" and (d_model // num_heads) % 2:
        raise ValueError(
            f"positions='rope' rotates pairs of features, so the head size "
            f"d_model // num_heads = {d_model} // {num_heads} must be even"
        )


def _concrete(x):
    """x's values as a NumPy array when they are known: eager tensors on any
    device (a PyTorch GPU tensor is copied to the host first); None for a
    symbolic tensor or one without data (PyTorch's "meta" device)."""
    if getattr(x, "is_meta", False):
        return None
    if hasattr(x, "detach"):  # torch: np.asarray refuses GPU tensors
        x = x.detach().cpu()
    try:
        return np.asarray(x)
    except Exception:
        return None


def tiny_tokens(tokens, vocab_size, max_len, positions) -> None:
    """tokens: integer ids (batch, n), n >= 1; with learned positions n <=
    max_len (the table has max_len rows). Values in [0, vocab_size) are
    checked when they are concrete (eager), never inside a traced graph."""
    check_tokens("tokens", tokens, "(batch, n)", 2)
    n = shape_of(tokens)[1]
    if n < 1:
        raise ValueError(
            f"tokens must hold at least one position, got shape {shape_of(tokens)}"
        )
    if positions == "learned" and n > max_len:
        raise ValueError(
            f"tokens have n={n} positions, more than max_len={max_len}: learned "
            f"positions have one table row per position up to max_len; build "
            f"the model with max_len >= {n}, or use positions 'sinusoidal', "
            f"'rope', 'alibi' or 'none', which accept any length"
        )
    values = _concrete(tokens)
    if values is None:  # a symbolic tensor: nothing concrete to check
        return
    if values.size and (values.min() < 0 or values.max() >= vocab_size):
        raise ValueError(
            f"tokens must be ids in [0, vocab_size) = [0, {vocab_size}), got "
            f"values from {int(values.min())} to {int(values.max())}"
        )


def head_mask_input(head_mask, num_layers: int, num_heads: int) -> None:
    """head_mask: floats (num_layers, num_heads), one factor per head output."""
    check_float("head_mask", head_mask)
    check_shape(
        "head_mask",
        shape_of(head_mask),
        (num_layers, num_heads),
        "(num_layers, num_heads)",
    )


def head_weights_input(weights) -> None:
    """Attention weights (batch, heads, n, n) of a causal self-attention, n >= 2
    (a previous token exists only from position 1 on)."""
    check_float("weights", weights)
    shape = shape_of(weights)
    check_rank("weights", shape, 4, "(batch, heads, n, n)")
    if shape[2] != shape[3]:
        raise ValueError(
            f"weights must be self-attention maps (batch, heads, n, n) with as "
            f"many queries as keys, got shape {shape}"
        )
    if shape[2] < 2:
        raise ValueError(
            f"head scores need n >= 2 positions (query i >= 1 has a previous "
            f"token), got weights of shape {shape}"
        )


def induction_score_inputs(weights, tokens) -> None:
    """head_weights_input, then tokens int (batch, n) of the weights' batch and
    length (the repeated-token test needs the ids)."""
    head_weights_input(weights)
    check_tokens("tokens", tokens, "(batch, n)", 2)
    batch, _, n, _ = shape_of(weights)
    check_shape("tokens", shape_of(tokens), (batch, n), "(batch, n)")


def check_repeated_tokens(count: int, shape: Shape) -> None:
    """The induction score averages over queries whose token occurred before."""
    if count == 0:
        raise ValueError(
            f"no repeated token in tokens of shape {shape}: the induction score "
            f"averages over queries whose token occurred earlier in the row, "
            f"and there are none (use a repeated sequence, e.g. induction_task)"
        )


def induction_task_sizes(batch, half_len, vocab_size, seed, distinct, min_repeat):
    """Positive sizes, 1 <= min_repeat <= half_len; distinct rows draw
    2 * half_len - min_repeat different tokens, at most vocab_size."""
    for name, value in (
        ("batch", batch),
        ("half_len", half_len),
        ("vocab_size", vocab_size),
        ("min_repeat", min_repeat),
    ):
        check_positive(name, value)
    check_count("seed", seed)
    if min_repeat > half_len:
        raise ValueError(
            f"min_repeat={min_repeat} must be <= half_len={half_len} (the "
            f"repeated sequence fits twice into 2 * half_len tokens)"
        )
    need = 2 * half_len - min_repeat
    if distinct and need > vocab_size:
        raise ValueError(
            f"distinct=True draws up to 2 * half_len - min_repeat = {need} "
            f"different tokens per row from vocab_size={vocab_size}; use a "
            f"larger vocab_size, a smaller half_len or distinct=False"
        )


# --- positions (learned, RoPE, ALiBi) ---


def _known_shape(x) -> tuple:
    """x's shape with None for a size unknown while tracing a graph."""
    return tuple(None if d is None else int(d) for d in x.shape)


def _matches(shape: tuple, expected: tuple) -> bool:
    """shape == expected, where None (unknown) on either side matches."""
    return len(shape) == len(expected) and all(
        a is None or b is None or a == b for a, b in zip(shape, expected, strict=True)
    )


def check_position_ids(positions, n, batch, has_batch: bool = True) -> None:
    """positions: integers of shape (n,) or (batch, n); without a batch axis
    in the input (``has_batch`` False) only (n,) fits. None = unknown size."""
    shape, dt = _known_shape(positions), dtype_name(positions)
    if not dt.startswith(("int", "uint")):
        raise TypeError(f"positions must be integers, got dtype {dt}")
    if not (_matches(shape, (n,)) or (has_batch and _matches(shape, (batch, n)))):
        layouts = f"(n,) = ({n},)"
        if has_batch:
            layouts += f" or (batch, n) = ({batch}, {n})"
        raise ValueError(f"positions must have shape {layouts}, got {shape}")


def rope_inputs(x, positions) -> None:
    """x (..., n, head_dim) with an even head_dim; positions (n,) or (batch, n)
    where batch = x.shape[0] (x then needs >= 3 axes)."""
    shape = _known_shape(x)
    check_float("x", x)
    if len(shape) < 2:
        raise ValueError(f"x must have shape (..., n, head_dim), got {shape}")
    if shape[-1] is None or shape[-1] % 2:
        raise ValueError(
            f"RoPE rotates pairs of features, so head_dim must be even; "
            f"x has shape {shape} (head_dim={shape[-1]})"
        )
    if positions is not None:
        check_position_ids(positions, shape[-2], shape[0], len(shape) >= 3)


def alibi_inputs(num_heads, num_queries, num_keys) -> None:
    """Positive head count; queries are the last num_queries of num_keys."""
    check_positive("num_heads", num_heads)
    check_count("num_queries", num_queries)
    check_count("num_keys", num_keys)
    if num_queries > num_keys:
        raise ValueError(
            f"ALiBi aligns the queries bottom-right (query i sits at position "
            f"num_keys - num_queries + i), so num_queries={num_queries} must be "
            f"<= num_keys={num_keys}"
        )


def check_position_range(low: int, high: int, max_len: int) -> None:
    """Every position must index a row of a table of max_len rows."""
    if low < 0 or high >= max_len:
        fix = (
            "positions count from 0"
            if low < 0
            else f"build it with max_len >= {high + 1}"
        )
        raise ValueError(
            f"positions must lie in [0, max_len) = [0, {max_len}) of the learned "
            f"position table, got positions from {low} to {high}; {fix}"
        )


def learned_positions_inputs(x, positions, d_model, max_len) -> None:
    """x (batch, n, d_model) and positions (n,) / (batch, n) in [0, max_len);
    without positions, n <= max_len. ``positions`` values are checked only
    when they are concrete (eager), never inside a traced graph."""
    shape = _known_shape(x)
    check_sequence("inputs", shape, "d_model", d_model)
    if positions is None:
        if shape[1] is not None:
            check_positions(shape[1], max_len)
        return
    check_position_ids(positions, shape[1], shape[0])
    values = _concrete(positions)
    if values is None:  # a symbolic tensor: nothing concrete to check
        return
    if values.size:
        check_position_range(int(values.min()), int(values.max()), max_len)


# --- decoding (KV cache, MQA/GQA) ---

KV_LAYOUT = "(batch, num_kv_heads, t, head_dim)"


def check_kv_heads(num_heads, num_kv_heads) -> None:
    """num_kv_heads >= 1 key/value heads, each shared by a whole group of
    num_heads // num_kv_heads query heads."""
    check_positive("num_heads", num_heads)
    check_positive("num_kv_heads", num_kv_heads)
    if num_heads % num_kv_heads:
        divisors = [g for g in range(1, num_heads + 1) if num_heads % g == 0]
        raise ValueError(
            f"num_heads={num_heads} is not divisible by num_kv_heads="
            f"{num_kv_heads}: each key/value head serves a group of num_heads "
            f"// num_kv_heads query heads, so choose num_kv_heads in {divisors}"
        )


def repeat_kv_inputs(x, num_heads) -> None:
    """x (batch, num_kv_heads, n, head_dim) whose kv heads divide num_heads."""
    shape = shape_of(x)
    check_rank("x", shape, 4, "(batch, num_kv_heads, n, head_dim)")
    check_kv_heads(num_heads, shape[1])


def gqa_sizes(num_heads, num_kv_heads, d_model) -> None:
    """A GQA layer: d_model split evenly into num_heads query heads, whose
    number num_kv_heads divides."""
    check_positive("d_model", d_model)
    check_heads(d_model, num_heads)
    check_kv_heads(num_heads, num_kv_heads)


def check_gqa_params(
    shapes: dict, queries: Shape, keys: Shape, values: Shape, num_heads, num_kv_heads
) -> int:
    """W_q (d_q_in, num_heads * head_dim), W_k and W_v (d_in, num_kv_heads *
    head_dim), W_o (num_heads * head_dim, d_out), optional biases of the
    matching sizes. Returns head_dim."""
    check_kv_heads(num_heads, num_kv_heads)
    check_mha_keys(shapes)
    for name, x in (("queries", queries), ("keys", keys), ("values", values)):
        w = f"W_{name[0]}"
        check_rank(w, shapes[w], 2, f"(d_{name[0]}_in, heads * head_dim)")
        check_input_features(name, x, w, shapes[w])
    width = shapes["W_q"][1]
    if width % num_heads:
        raise ValueError(
            f"W_q of shape {shapes['W_q']} has {width} columns, not a multiple "
            f"of num_heads={num_heads} (it holds num_heads * head_dim columns)"
        )
    head_dim = width // num_heads
    kv = num_kv_heads * head_dim
    for w in ("W_k", "W_v"):
        if shapes[w][1] != kv:
            raise ValueError(
                f"{w} must have num_kv_heads * head_dim = {num_kv_heads} * "
                f"{head_dim} = {kv} columns (head_dim = W_q's {width} columns / "
                f"num_heads={num_heads}), got shape {shapes[w]}"
            )
    check_weight("W_o", shapes["W_o"], (width, None))
    sizes = (width, kv, kv, shapes["W_o"][1])
    for b, size in zip(MHA_BIASES, sizes, strict=True):
        if b in shapes:
            check_weight(b, shapes[b], (size,))
    return head_dim


def gqa_inputs(queries, keys, values, params, num_heads, num_kv_heads) -> None:
    """Float queries, keys, values with pairing shapes and GQA params."""
    for name, x in (("queries", queries), ("keys", keys), ("values", values)):
        check_float(name, x)
    shapes = (shape_of(queries), shape_of(keys), shape_of(values))
    check_qkv(*shapes)
    params = {k: _shape(v) for k, v in params.items()}
    check_gqa_params(params, *shapes, num_heads, num_kv_heads)


def kv_cache_inputs(keys, values) -> None:
    """A cache's keys and values: float, one dtype, (batch, num_kv_heads, t,
    head_dim) each, of the same shape."""
    check_float("keys", keys)
    check_float("values", values)
    check_same_dtype(keys=keys, values=values)
    k, v = shape_of(keys), shape_of(values)
    check_rank("keys", k, 4, KV_LAYOUT)
    check_rank("values", v, 4, KV_LAYOUT)
    if k != v:
        raise ValueError(
            f"a KV cache holds one value per key: keys {k} and values {v} must "
            f"have the same shape {KV_LAYOUT}"
        )


def kv_cache_append(cached: Shape, keys, values) -> None:
    """New keys/values (batch, num_kv_heads, n_new, head_dim) that continue a
    cache of shape ``cached``: all axes but t must agree."""
    kv_cache_inputs(keys, values)
    new = shape_of(keys)
    if (new[0], new[1], new[3]) != (cached[0], cached[1], cached[3]):
        raise ValueError(
            f"new keys/values {new} do not continue the cache {cached}: batch, "
            f"num_kv_heads and head_dim must agree (only t may differ, "
            f"{KV_LAYOUT})"
        )


def decode_step_inputs(
    x, params, num_heads, num_kv_heads, cache, mask, *, cache_type
) -> None:
    """x (batch, n_new, d_in), n_new >= 1; GQA params; a cache (None or a
    ``cache_type``, the framework's KVCache) of shape (batch, num_kv_heads,
    t_past, head_dim) and x's dtype; a mask (optional) broadcastable to (batch,
    num_heads, n_new, t_past + n_new)."""
    if cache is not None and not isinstance(cache, cache_type):
        package = cache_type.__module__.rsplit(".", 1)[0]
        raise TypeError(
            f"cache must be an {package} KVCache (as decode_step returns) or "
            f"None, got {type(cache).__module__}.{type(cache).__name__}"
        )
    check_float("x", x)
    xs = shape_of(x)
    check_rank("x", xs, 3, "(batch, n_new, d_model)")
    if xs[1] < 1:
        raise ValueError(f"x must hold at least one new token, got shape {xs}")
    shapes = {k: _shape(v) for k, v in params.items()}
    head_dim = check_gqa_params(shapes, xs, xs, xs, num_heads, num_kv_heads)
    t_past = 0
    if cache is not None:
        cs = shape_of(cache.keys)
        want = (xs[0], num_kv_heads, cs[2], head_dim)
        if cs != want:
            raise ValueError(
                f"the cache's keys {cs} do not fit this step: expected {KV_LAYOUT}"
                f" = {want} (x {xs} has batch {xs[0]}; the layer has "
                f"num_kv_heads={num_kv_heads}, head_dim={head_dim})"
            )
        check_same_dtype(x=x, cache=cache.keys)
        t_past = cs[2]
    if mask is not None:
        scores = (xs[0], num_heads, xs[1], t_past + xs[1])
        ms = shape_of(mask)
        check_mask_rank(ms, dtype_name(mask))
        if len(ms) >= 1 and ms[-1] != scores[-1]:
            raise ValueError(
                f"mask of shape {ms} covers {ms[-1]} keys, but the cache holds "
                f"t_past={t_past} and x adds n_new={xs[1]}: the mask's last axis "
                f"must be t_past + n_new = {scores[-1]}"
            )
        if len(ms) == 3:  # (batch, n_q, n_k) gets a head axis
            ms = (ms[0], 1, *ms[1:])
        check_mask(ms, dtype_name(mask), scores)


def kv_cache_bytes_inputs(**sizes) -> None:
    """Every size is an int >= 1 (dtype_bytes too)."""
    for name, value in sizes.items():
        check_positive(name, value)


# --- Efficient attention: tiled (flash) attention (attncourse.*.efficient) ---


FLASH_SCORES = "(batch, num_queries, num_keys)"


def check_scale(scale) -> None:
    """scale: None (1/sqrt(d)) or a real number."""
    if scale is not None and (
        isinstance(scale, bool) or not isinstance(scale, int | float | np.floating)
    ):
        raise TypeError(
            f"scale must be None (1/sqrt(d)) or a real number, got "
            f"{type(scale).__name__}"
        )


def check_block_size(name: str, value) -> None:
    """block_q / block_k: a tile size, an int >= 1 (it need not divide n)."""
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError(
            f"{name} must be a positive int (a tile size), got "
            f"{type(value).__name__} {value!r}"
        )
    if int(value) < 1:
        raise ValueError(
            f"{name} must be a positive int (a tile size, >= 1), got {int(value)}"
        )


def check_flash_mask(mask, scores: Shape, block_q, block_k) -> None:
    """A bool mask (True = attend) of at most 3 axes that broadcasts to the
    scores (batch, num_queries, num_keys): each tile reads its block_q x
    block_k slice of it (a size-1 axis is shared by every tile)."""
    shape, dtype = shape_of(mask), dtype_name(mask)
    if dtype != "bool":
        raise TypeError(f"mask must be boolean with True = attend, got dtype {dtype}")
    if len(shape) > 3 or not broadcast_shape(shape, scores):
        raise ValueError(
            f"mask of shape {shape} does not broadcast to the scores "
            f"{FLASH_SCORES} = {scores} that flash attention cuts into "
            f"{block_q} x {block_k} tiles; a padding mask over keys needs shape "
            f"(batch, 1, num_keys), a full mask (num_queries, num_keys) or "
            f"{FLASH_SCORES}"
        )


def flash_attention_inputs(
    queries, keys, values, mask, causal, block_q, block_k, scale, align="top_left"
) -> None:
    """attention_inputs with d_q == d_k; block sizes ints >= 1; a bool mask
    broadcastable to (batch, num_queries, num_keys); causal a bool; scale None
    or a number; align one of CAUSAL_ALIGNS."""
    attention_inputs(queries, keys, values, same_feature_size=True)
    check_block_size("block_q", block_q)
    check_block_size("block_k", block_k)
    check_causal_flag(causal)
    check_causal_align(align)
    check_scale(scale)
    q, k = shape_of(queries), shape_of(keys)
    if mask is not None:
        check_flash_mask(mask, (q[0], q[1], k[1]), block_q, block_k)


def flash_backward_inputs(
    queries,
    keys,
    values,
    outputs,
    logsumexp,
    grad_outputs,
    mask,
    causal,
    block_q,
    block_k,
    scale,
    align="top_left",
) -> None:
    """flash_attention_inputs, plus what the forward pass returned -- outputs
    (batch, num_queries, d_v), logsumexp (batch, num_queries) -- and
    grad_outputs shaped like outputs, all of the queries' dtype."""
    flash_attention_inputs(
        queries, keys, values, mask, causal, block_q, block_k, scale, align
    )
    q, v = shape_of(queries), shape_of(values)
    expected = {
        "outputs": ((q[0], q[1], v[2]), "(batch, num_queries, d_v)"),
        "logsumexp": ((q[0], q[1]), "(batch, num_queries)"),
        "grad_outputs": ((q[0], q[1], v[2]), "(batch, num_queries, d_v)"),
    }
    given = {"outputs": outputs, "logsumexp": logsumexp, "grad_outputs": grad_outputs}
    for name, x in given.items():
        check_float(name, x)
        check_shape(name, shape_of(x), *expected[name])
    check_same_dtype(queries=queries, **given)


def attention_logsumexp_inputs(
    queries, keys, mask, causal, scale, align="top_left"
) -> None:
    """Float queries (batch, num_queries, d) and keys (batch, num_keys, d) of
    one dtype; a bool mask broadcastable to the scores; causal a bool; align
    one of CAUSAL_ALIGNS."""
    for name, x in (("queries", queries), ("keys", keys)):
        check_float(name, x)
    check_same_dtype(queries=queries, keys=keys)
    q, k = shape_of(queries), shape_of(keys)
    check_qkv(q, k, same_feature_size=True)
    check_causal_flag(causal)
    check_causal_align(align)
    check_scale(scale)
    if mask is not None:
        check_mask(shape_of(mask), dtype_name(mask), (q[0], q[1], k[1]))


# --- Efficient attention: sliding-window and linear attention (attncourse.*.sparse) ---


def check_window(window, num_keys) -> None:
    """window: an int from 1 (only the query's own key) to num_keys."""
    check_positive("window", window)
    if int(window) > int(num_keys):
        raise ValueError(
            f"window larger than the sequence: window={int(window)} keys, but "
            f"the sequence has num_keys={int(num_keys)}; choose window in "
            f"1..{int(num_keys)} (window = num_keys is full causal attention)"
        )


def check_causal_flag(causal) -> None:
    """causal must be True or False (not a mask, not a string)."""
    if not isinstance(causal, bool | np.bool_):
        raise TypeError(f"causal must be True or False, got {causal!r}")


def check_eps(eps) -> None:
    """eps: a real number > 0 (it keeps the normaliser away from 0)."""
    if isinstance(eps, bool) or not isinstance(eps, int | float | np.floating):
        raise TypeError(f"eps must be a positive float, got {type(eps).__name__}")
    if not eps > 0:
        raise ValueError(f"eps must be > 0, got eps={eps}")


def check_feature_map(feature_map) -> None:
    """feature_map: None (elu + 1) or a callable x (..., d) -> (..., r)."""
    if feature_map is not None and not callable(feature_map):
        raise TypeError(
            f"feature_map must be None (elu(x) + 1) or a function of a tensor, "
            f"got {type(feature_map).__name__}"
        )


def sliding_window_mask_inputs(num_queries, window, num_keys, causal) -> None:
    """Sizes are ints >= 0, window in 1..num_keys, causal a bool."""
    check_count("num_queries", num_queries)
    check_count("num_keys", num_keys)
    check_causal_flag(causal)
    check_window(window, num_keys)


def sliding_window_inputs(queries, keys, values, window, causal) -> None:
    """attention_inputs with d_q == d_k, self-attention lengths (num_queries
    == num_keys: the band is laid out around each query's own position),
    window in 1..n and causal a bool."""
    attention_inputs(queries, keys, values, same_feature_size=True)
    q, k = shape_of(queries), shape_of(keys)
    if q[1] != k[1]:
        raise ValueError(
            f"sliding-window attention is self-attention: queries {q} and keys "
            f"{k} need the same length (num_queries == num_keys), got "
            f"{q[1]} != {k[1]}; for other lengths use "
            f"scaled_dot_product_attention with a mask"
        )
    check_causal_flag(causal)
    check_window(window, k[1])


def linear_attention_inputs(queries, keys, values, causal, feature_map, eps) -> None:
    """attention_inputs with d_q == d_k; causal needs num_queries == num_keys
    (query i reads keys 0..i); a callable (or None) feature map; eps > 0."""
    attention_inputs(queries, keys, values, same_feature_size=True)
    q, k = shape_of(queries), shape_of(keys)
    check_causal_flag(causal)
    if causal and q[1] != k[1]:
        raise ValueError(
            f"causal linear attention runs one state along one sequence: "
            f"queries {q} and keys {k} need the same length (num_queries == "
            f"num_keys), got {q[1]} != {k[1]}"
        )
    check_feature_map(feature_map)
    check_eps(eps)


def feature_map_outputs(inputs, features) -> None:
    """phi(x) keeps every axis of x but the last: (..., d) -> (..., r)."""
    for name, x in inputs.items():
        got, want = shape_of(features[name]), shape_of(x)
        if got[:-1] != want[:-1]:
            raise ValueError(
                f"feature_map must keep all axes but the last: {name} of shape "
                f"{want} gave features of shape {got}"
            )
    sizes = {name: shape_of(f)[-1] for name, f in features.items()}
    if len(set(sizes.values())) > 1:
        raise ValueError(
            f"feature_map must give queries and keys the same number of "
            f"features, got {sizes}"
        )


def linear_step_inputs(state, normaliser, query, key, value, feature_map, eps):
    """One step of causal linear attention: query and key (batch, d), value
    (batch, d_v) floats of one dtype; state (batch, r, d_v) and normaliser
    (batch, r), r the number of features (r = d for elu + 1), both None at
    the start of a sequence; a callable (or None) feature map; eps > 0."""
    for name, x in (("query", query), ("key", key), ("value", value)):
        check_float(name, x)
        layout = "(batch, d_v)" if name == "value" else "(batch, d)"
        check_rank(name, shape_of(x), 2, layout)
    check_same_dtype(query=query, key=key, value=value)
    q, k, v = shape_of(query), shape_of(key), shape_of(value)
    if q != k or v[0] != q[0]:
        raise ValueError(
            f"query and key must have one shape (batch, d) and value the same "
            f"batch (batch, d_v), got query {q}, key {k}, value {v}"
        )
    if (state is None) != (normaliser is None):
        raise ValueError(
            "state and normaliser go together: pass both (from the previous "
            "step) or neither (the start of a sequence: zeros)"
        )
    if state is not None:
        check_float("state", state)
        check_same_dtype(query=query, state=state, normaliser=normaliser)
        s, z = shape_of(state), shape_of(normaliser)
        check_rank("state", s, 3, "(batch, r, d_v)")
        if s[0] != q[0] or s[2] != v[1] or z != s[:2]:
            raise ValueError(
                f"state must be (batch, r, d_v) and normaliser (batch, r) for "
                f"query {q} and value {v} (r = the feature size, d for elu + "
                f"1), got state {s} and normaliser {z}"
            )
    check_feature_map(feature_map)
    check_eps(eps)


def check_state_features(features, state) -> None:
    """The state has one row per feature: phi(query) (batch, r) fits the
    state (batch, r, d_v)."""
    r, s = shape_of(features)[-1], shape_of(state)
    if s[1] != r:
        raise ValueError(
            f"the feature map gives r={r} features, but state {s} holds "
            f"{s[1]} rows: pass the state of this feature map"
        )


TINY_ATTENTION = ("softmax", "linear", "window")


def tiny_attention(attention, window, positions) -> None:
    """attention: "softmax" (the default), "linear" (elu + 1, causal) or
    "window" with window=w >= 1 (each query sees its last w tokens, itself
    included); window only with "window". Linear and window attention never
    form the (n, n) scores, so ALiBi (a bias added to them) is refused."""
    if attention not in TINY_ATTENTION:
        raise ValueError(
            f"attention must be one of {TINY_ATTENTION}, got {attention!r}"
        )
    if attention == "window":
        if window is None:
            raise ValueError(
                "attention='window' needs window=w, the number of tokens each "
                "query sees (itself included), e.g. window=4"
            )
        check_positive("window", window)
    elif window is not None:
        raise ValueError(
            f"window={window!r} goes with attention='window', not {attention!r}"
        )
    if attention != "softmax" and positions == "alibi":
        raise ValueError(
            f"positions='alibi' adds a bias to the (n, n) scores, which "
            f"attention={attention!r} does not form; use 'rope', 'learned', "
            f"'sinusoidal' or 'none'"
        )
