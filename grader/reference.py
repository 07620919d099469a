"""Hidden reference data: where it lives, how it is stored and loaded.

Each assignment's data -- inputs, weights and expected outputs for fixed
seeds -- is one file ``solutions/<assignment>/hidden/reference.npz`` (see
``grader.build_references`` for how it is made). nbgrader copies the
source folder into ``autograded/<student>/<assignment>/`` at autograde time, so
hidden tests find it at ``hidden/reference.npz`` beside the notebook; the
post-convert hooks (``grader.hooks``) delete the ``hidden/`` folder
from the student release and from feedback. ``GRADER_REFERENCE`` (a path
to the .npz) overrides the location, e.g. for a grader running outside the
student's kernel.

Keys are ``<case>/in/<name>`` (inputs, including weights and flags) and
``<case>/out/<name>`` (expected results); ``__meta__`` holds JSON.
"""

import json
import os
from pathlib import Path

import numpy as np

from grader.kernel.errors import GradingError
from grader.kernel.inputs import CaseData, load_file

HIDDEN_DIR = "hidden"
FILENAME = "reference.npz"
ENV_VAR = "GRADER_REFERENCE"


ReferenceData = CaseData  # grader-side name: inputs and expected outputs


def pack(assignment: str, seed: int, cases: dict, expected: dict) -> dict:
    """Flatten {case: inputs} and {case: expected} into one dict of arrays."""
    arrays = {
        "__meta__": np.array(
            json.dumps(
                {"assignment": assignment, "seed": seed, "format": 1}, sort_keys=True
            )
        )
    }
    for case, inputs in cases.items():
        for name, x in inputs.items():
            arrays[f"{case}/in/{name}"] = np.asarray(x)
        for name, x in expected[case].items():
            arrays[f"{case}/out/{name}"] = np.asarray(x)
    return arrays


def source_path(root: Path, assignment: str, source_dir: str = "solutions") -> Path:
    """Where an assignment's reference file lives in the course (grader-only)."""
    return Path(root) / source_dir / assignment / HIDDEN_DIR / FILENAME


def save(path: Path, arrays: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        np.savez(f, **arrays)


def load(assignment: str, path=None) -> ReferenceData:
    """The reference data of ``assignment`` (explicit path, $GRADER_REFERENCE,
    or ./hidden/reference.npz beside the notebook being graded)."""
    candidates = (
        [path]
        if path is not None
        else [os.environ.get(ENV_VAR), Path.cwd() / HIDDEN_DIR / FILENAME]
    )
    for candidate in candidates:
        if candidate and Path(candidate).is_file():
            data = load_file(candidate)
            if data.assignment != assignment:
                raise GradingError(
                    f"reference data {candidate} belongs to assignment "
                    f"{data.assignment!r}, not {assignment!r}"
                )
            return data
    raise GradingError(
        "hidden reference data not found: hidden tests run only when the notebook "
        "is graded (instructors: run `python -m grader references` and "
        "grade from the course root)"
    )
