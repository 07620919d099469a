"""Fixtures shared by the test suite; helpers live in ``tests/support``."""

import numpy as np
import pytest
from support.site import site  # noqa: E402,F401  (session fixture: the built book)

import attncourse  # noqa: F401  (quiet TF before it is imported)


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(0)
