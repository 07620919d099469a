"""One seed for every random number generator the course uses."""

import os
import random
import sys

import numpy as np


def set_seed(seed: int) -> np.random.Generator:
    """Seed Python, NumPy, and -- if they are imported -- TensorFlow and PyTorch.

    Frameworks that have not been imported yet are left alone, so calling this
    never pays for an import the caller does not need. Returns a fresh NumPy
    ``Generator`` seeded with ``seed`` for code that prefers explicit generators.
    """
    if not isinstance(seed, int | np.integer) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    seed = int(seed)
    os.environ["PYTHONHASHSEED"] = str(seed)
    random.seed(seed)
    np.random.seed(seed)
    if "tensorflow" in sys.modules:
        import keras
        import tensorflow as tf

        tf.random.set_seed(seed)
        keras.utils.set_random_seed(seed)
    if "torch" in sys.modules:
        import torch

        torch.manual_seed(seed)
    return np.random.default_rng(seed)
