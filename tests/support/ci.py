"""One answer to "are we in CI?" for every skip-or-fail decision.

Locally a test whose tool is missing (Chromium, bubblewrap, PostgreSQL, the
classroom's proxy) skips with a reason; in CI the same test fails, because CI
installs everything and a skip there would hide a broken install step.
``CI`` counts as set when it is ``true``, ``1`` or ``yes`` (any case), as CI
services set it; anything else, or unset, is a developer's machine.

Also the machine's speed, for wall-clock limits that must hold on a busy
two-core CI machine: ``slowness()`` times a fixed CPU-bound loop and tells
how many times slower this machine is right now than a reference run.
"""

import os
import time
from typing import NoReturn

import pytest

TRUE = {"true", "1", "yes"}


def on_ci() -> bool:
    """True when ``CI`` is set to true/1/yes (read each call: tests may set it)."""
    return os.environ.get("CI", "").strip().lower() in TRUE


def skip_or_fail(reason: str) -> NoReturn:
    """Skip the test here; fail it in CI, where it must run."""
    if on_ci():
        pytest.fail(
            f"CI={os.environ.get('CI')} and this test cannot run: {reason}",
            pytrace=False,
        )
    pytest.skip(reason)


# A pure-Python loop that takes REFERENCE_S on an idle core of the reference
# machine (2 cores, the CI kind); slower now means a busy or slower machine.
_LOOPS = 2_000_000
REFERENCE_S = 0.12


def _spin() -> float:
    began = time.perf_counter()
    total = 0
    for i in range(_LOOPS):
        total += i & 7
    return time.perf_counter() - began


def slowness() -> float:
    """How many times slower this machine is now than the reference (>= 1; the
    best of three short timings, so one preemption does not count). Measured
    afresh at each call (about 3 x 0.1 s idle): load changes during a test."""
    return max(1.0, min(_spin() for _ in range(3)) / REFERENCE_S)
