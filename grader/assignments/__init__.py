"""The assignments, in course order: id -> module with the checks.

Each module defines NAME, SEED (the committed reference's seed),
make_cases(seed=SEED) (inputs per case, deterministic for a seed),
expected(case, inputs) (the float64 reference), CHECKS (name -> Check) and
crosscheck(case, inputs, expected) (agreement with the attncourse library).
"""

import importlib

ASSIGNMENTS = {
    "addressing": "addressing",
    "scoring-functions": "scoring_functions",
    "soft-hard-attention": "soft_hard_attention",
    "key-value-masking": "key_value_masking",
    "self-attention": "self_attention",
    "cross-attention-seq2seq": "cross_attention_seq2seq",
    "multi-head-attention": "multi_head_attention",
    "builtin-layers": "builtin_layers",
    "transformer-block": "transformer_block",
    "tiny-transformer": "tiny_transformer",
    "positions": "positions",
    "kv-cache": "kv_cache",
    "attention-cost": "attention_cost",
    "flash-attention": "flash_attention",
    "sparse-linear-attention": "sparse_linear_attention",
}


def get(assignment: str):
    """The module defining ``assignment``'s reference and checks."""
    if assignment not in ASSIGNMENTS:
        raise KeyError(f"unknown assignment {assignment!r}; known: {list(ASSIGNMENTS)}")
    return importlib.import_module(f"{__name__}.{ASSIGNMENTS[assignment]}")
