"""Fixtures shared by the test suite; helpers live in ``tests/support``."""

import numpy as np
import pytest

import attncourse  # noqa: F401  (quiet TF before it is imported)

pytest.register_assert_rewrite("support")

# the browser fixtures (browser, new_web, web, site_url) for tests/e2e, and the
# built book (session fixture ``site``)
pytest_plugins = ["support.browser"]

from support.site import site  # noqa: E402,F401


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(0)
