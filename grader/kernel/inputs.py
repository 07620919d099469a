"""The grading inputs file as the kernel reads it (inputs only, no answers).

For every (assignment, student) the grader draws fresh inputs
(``grader.fresh``) and writes them, and nothing else, to an ``.npz`` that is
mounted read-only into the sandbox at ``$GRADER_INPUTS``. Keys are
``<case>/in/<name>``; ``__meta__`` holds JSON (assignment, seed, format).
The grader's own reference files add ``<case>/out/<name>`` (expected
results); those never reach a kernel.
"""

import json

import numpy as np


class CaseData:
    """The arrays of one assignment's inputs (or reference) file, by case."""

    def __init__(self, arrays: dict):
        self.arrays = {k: np.asarray(v) for k, v in arrays.items()}
        self.meta = json.loads(str(self.arrays.get("__meta__", "{}")))
        self.assignment = self.meta.get("assignment")

    def _group(self, case, kind):
        prefix = f"{case}/{kind}/"
        found = {
            k[len(prefix) :]: v for k, v in self.arrays.items() if k.startswith(prefix)
        }
        if not found:
            raise KeyError(f"no {kind} data for case {case!r}")
        return found

    def cases(self) -> list[str]:
        return sorted({k.split("/")[0] for k in self.arrays if "/" in k})

    def inputs(self, case) -> dict:
        return self._group(case, "in")

    def expected(self, case) -> dict:
        return self._group(case, "out")


def load_file(path) -> CaseData:
    """The arrays of an ``.npz`` (plain arrays only: no pickles)."""
    with np.load(path, allow_pickle=False) as data:
        return CaseData({k: data[k] for k in data.files})
