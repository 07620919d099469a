"""Grading inputs drawn per grading run: a cached answer cannot pass.

The committed reference file (``solutions/<id>/hidden/reference.npz``) has
fixed inputs; anyone who ever saw it -- or the trial run that leaked it -- could
return its outputs without computing anything. Sandboxed grading therefore
draws *new* inputs for every (assignment, student) from the task's own
``make_cases(seed)`` with another seed, computes the expected outputs with the
task's float64 reference (``expected``), and checks that every known mistake is
still distinguishable on them (``references.check_variants``; if not, the next
seed is tried). Only the inputs go to the kernel; the expected outputs stay in
the grader.

The seed is an HMAC of the assignment and student id with a course secret
(``<state dir>/secret``, created on first use, mode 0600, never mounted in the
sandbox), so regrading gives the same inputs -- and the same verdicts and
messages -- while students cannot predict them. ``sign`` uses the same secret
for the staging manifest (``grader.staging``, ``grader.entry``).
"""

import hashlib
import hmac
import json
import os
import secrets
from pathlib import Path

from grader import assignments, reference
from grader import build_references as references

ATTEMPTS = 20


def secret(state_dir) -> bytes:
    """The course's grading secret (created on first use)."""
    path = Path(state_dir) / "secret"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32))
    return path.read_text().strip().encode()


def sign(state_dir, purpose: str, *fields: str) -> str:
    """An HMAC (hex) of ``fields`` with the course secret, for ``purpose`` (a
    domain of its own, so no signature stands in for another or for a seed)."""
    message = json.dumps([purpose, *fields]).encode()
    return hmac.new(secret(state_dir), message, hashlib.sha256).hexdigest()


def seed_for(key: bytes, assignment: str, student: str) -> int:
    digest = hmac.new(key, f"{assignment}\0{student}".encode(), hashlib.sha256)
    return int.from_bytes(digest.digest()[:6], "big")


def draw(assignment: str, seed: int) -> dict:
    """Reference arrays (inputs and expected outputs) of ``assignment`` for a seed
    at or after ``seed`` on which every known mistake stays distinguishable."""
    module = assignments.get(assignment)
    for attempt in range(ATTEMPTS):
        cases = module.make_cases(seed + attempt)
        expected = {c: module.expected(c, inputs) for c, inputs in cases.items()}
        try:
            references.check_variants(module, cases, expected)
        except AssertionError:
            continue
        return reference.pack(module.NAME, seed + attempt, cases, expected)
    raise RuntimeError(
        f"{assignment}: no seed from {seed} on keeps every known "
        f"mistake distinguishable"
    )


def inputs_only(arrays: dict) -> dict:
    """What the kernel may see: the inputs and the assignment id, no outputs,
    no seed."""
    meta = reference.ReferenceData(arrays).meta
    import numpy as np

    kept = {k: v for k, v in arrays.items() if "/in/" in k}
    kept["__meta__"] = np.array(
        json.dumps({"assignment": meta["assignment"], "format": meta.get("format", 1)})
    )
    return kept


SEEDS = "seeds.json"  # seeds a client pinned for a worker (grader.cluster)


def pin_seed(state_dir, assignment: str, student: str, seed: int) -> None:
    """Make ``for_student`` draw from ``seed`` in ``state_dir``: a grading
    worker's private state draws the inputs of the client's secret."""
    path = Path(state_dir) / SEEDS
    pinned = json.loads(path.read_text()) if path.exists() else {}
    pinned[json.dumps([assignment, student])] = int(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(pinned))


def student_seed(state_dir, assignment: str, student: str) -> int:
    path = Path(state_dir) / SEEDS
    if path.exists():
        pinned = json.loads(path.read_text()).get(json.dumps([assignment, student]))
        if isinstance(pinned, int):
            return pinned
    return seed_for(secret(state_dir), assignment, student)


def for_student(state_dir, assignment: str, student: str) -> dict:
    return draw(assignment, student_seed(state_dir, assignment, student))
