"""Kernel-side runners, one module per assignment (the same slug as everywhere).

Each module defines ``RUNS``: check name -> ``Run`` (how to call the student's
code on a case's inputs, which cases, whether to differentiate). The expected
outputs and the known mistakes are grader-side (``grader.assignments``).
"""

import importlib

MODULES = {
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
    """The runner module of ``assignment``."""
    if assignment not in MODULES:
        raise KeyError(f"unknown assignment {assignment!r}; known: {list(MODULES)}")
    return importlib.import_module(f"{__name__}.{MODULES[assignment]}")


def runs(assignment: str) -> dict:
    """check name -> Run for ``assignment``."""
    return get(assignment).RUNS
