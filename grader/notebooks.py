"""Notebook helpers: compare releases, build submissions for tests.

* ``comparable(nb)`` -- the parts of a notebook that a regenerated release
  must reproduce (cell types, sources, nbgrader metadata, kernelspec), without
  volatile fields (execution counts, outputs, language_info details);
* ``solution_cells(source_nb)`` -- grade_id -> solution code (markers removed);
* ``submission(release_nb, solutions)`` -- the release with its solution cells
  filled in, i.e. what a student submits.
"""

import copy
import json
import re
from pathlib import Path

MARKERS = re.compile(r"^[ \t]*### (BEGIN|END) SOLUTION[ \t]*(\n|\Z)", re.M)


def read(path) -> dict:
    return json.loads(Path(path).read_text())


def write(nb: dict, path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")


def source(cell) -> str:
    s = cell["source"]
    return "".join(s) if isinstance(s, list) else s


def comparable(nb: dict) -> dict:
    """What must not change between two generations of the same release."""
    return {
        "kernelspec": nb["metadata"].get("kernelspec"),
        "nbformat": (nb["nbformat"], nb["nbformat_minor"]),
        "cells": [
            {
                "cell_type": c["cell_type"],
                "source": source(c),
                "nbgrader": c.get("metadata", {}).get("nbgrader"),
            }
            for c in nb["cells"]
        ],
    }


def grade_id(cell):
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")


def solution_cells(source_nb: dict) -> dict:
    """grade_id -> the solution cell's code with the SOLUTION markers removed."""
    return {
        grade_id(c): MARKERS.sub("", source(c))
        for c in source_nb["cells"]
        if c.get("metadata", {}).get("nbgrader", {}).get("solution")
    }


def submission(release_nb: dict, solutions: dict) -> dict:
    """The release notebook with solution cells replaced by ``solutions``."""
    nb = copy.deepcopy(release_nb)
    for cell in nb["cells"]:
        gid = grade_id(cell)
        if gid in solutions:
            cell["source"] = solutions[gid]
    return nb
