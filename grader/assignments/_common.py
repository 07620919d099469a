"""Helpers shared by the assignments' reference definitions (grader side)."""

import numpy as np


def rng(seed: int) -> np.random.Generator:
    """The generator an assignment draws its cases from."""
    return np.random.default_rng(seed)
