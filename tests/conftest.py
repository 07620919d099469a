"""Fixtures shared by the test suite; helpers live in ``tests/support``.

Markers (pyproject.toml): a test that drives a tool is marked with it
(``sandbox``, ``browser``, ``postgres``, ``classroom``) and skips here, naming
the tool, where it is missing (fails under CI=true: ``support.ci``); the
tool markers but ``sandbox`` and ``book`` imply ``slow``, so
``make test-fast`` (``-m "not slow"``) never starts one of them.
"""

import shutil

# Before anything imports TensorFlow: Triton and TensorFlow both bundle LLVM,
# and importing Triton after TensorFlow aborts the process. Without CUDA the
# module sets TRITON_INTERPRET=1, which must precede Triton's own import.
try:
    import attncourse.triton_flash  # noqa: F401
except ImportError:  # Triton is not installed (it is pinned for Linux x86_64)
    pass

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import attncourse  # noqa: F401  (quiet TF before it is imported)

pytest.register_assert_rewrite("support")

# the browser fixtures (browser, new_web, web, site_url) for tests/e2e; the
# processes each module leaves running (a report); the whole-course grading run
# (session fixture ``course_batch``); the built book (session fixture ``site``)
pytest_plugins = ["support.browser", "support.leftovers", "support.course_batch"]

from support.ci import skip_or_fail  # noqa: E402
from support.site import site  # noqa: E402,F401

# markers that make a test slow whatever else it does
SLOW_TOOLS = ("book", "browser", "postgres", "classroom")
# fixtures that start light sandboxed kernels (NumPy only, about a second each):
# their tests are marked `sandbox` (fast, but they need bubblewrap)
SANDBOX_FIXTURES = {"light_kernels", "bwrap_sandbox"}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    for item in items:
        if any(item.get_closest_marker(m) for m in SLOW_TOOLS):
            item.add_marker(pytest.mark.slow)
        if SANDBOX_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.sandbox)


def pytest_runtest_setup(item):
    if item.get_closest_marker("sandbox") and shutil.which("bwrap") is None:
        skip_or_fail("bubblewrap is not installed (sudo make system-deps)")


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(0)
