"""Leak checks: nothing grader-only may reach students.

Students see ``exercises/`` (the release) and ``feedback/`` (released
feedback HTML). Neither may contain the hidden reference data (``hidden/``
folders), the text of hidden tests, solution code, or reference numbers.
``scan_release`` and ``scan_feedback`` return a list of problems (empty =
clean); the release and grading scripts and the tests call them.
"""

import html
import json
import re
from pathlib import Path

import numpy as np

from grader import reference
from grader.hooks import hidden_dirs

SOLUTION = re.compile(r"### BEGIN SOLUTION\n(.*?)### END SOLUTION", re.S)
HIDDEN = re.compile(r"### BEGIN HIDDEN TESTS\n(.*?)### END HIDDEN TESTS", re.S)
NUMBER = re.compile(r"(?<![\w.])-?\d+\.\d{4,}(?:[eE][-+]?\d+)?")


def _sources(nb_path: Path) -> list[str]:
    nb = json.loads(Path(nb_path).read_text())
    return ["".join(c["source"]) if isinstance(c["source"], list) else c["source"]
            for c in nb["cells"]]


def secret_lines(source_nb: Path, min_len: int = 12) -> dict:
    """Distinctive lines of the solution regions and hidden tests of a source
    notebook: {"solution": [...], "hidden": [...]}. Lines that also occur
    outside those regions (e.g. a docstring repeated in the release) are left
    out, as are comments and very short lines."""
    sources = _sources(source_nb)
    text = "\n".join(sources)
    # rendered markdown loses its backticks: compare without them
    public = HIDDEN.sub("", SOLUTION.sub("", text)).replace("`", "")
    found = {"solution": [], "hidden": []}
    for kind, pattern in (("solution", SOLUTION), ("hidden", HIDDEN)):
        for block in pattern.findall(text):
            for line in block.splitlines():
                s = line.strip()
                if len(s) >= min_len and not s.startswith("#") and s not in public:
                    found[kind].append(s)
    return found


def reference_numbers(ref: reference.ReferenceData) -> np.ndarray:
    """Every expected float value of the reference data (flattened)."""
    values = [np.ravel(v) for k, v in ref.arrays.items()
              if "/out/" in k and v.dtype.kind == "f"]
    values = np.concatenate(values) if values else np.zeros(0)
    return values[np.abs(values) > 1e-3]


def numbers_in(text: str) -> np.ndarray:
    """Decimal numbers with at least 4 decimals in ``text``."""
    return np.array([float(m) for m in NUMBER.findall(text)])


def _matches_reference(text, ref_values, rtol=1e-4) -> list[float]:
    found = numbers_in(text)
    if not found.size or not ref_values.size:
        return []
    close = np.isclose(found[:, None], ref_values[None, :], rtol=rtol, atol=0)
    return sorted(set(found[close.any(axis=1)].tolist()))


def scan_text(text: str, secrets: dict, ref_values: np.ndarray, where: str) -> list:
    problems = []
    for kind, lines in secrets.items():
        for line in lines:
            if line in text:
                problems.append(f"{where}: {kind} code: {line!r}")
    for value in _matches_reference(text, ref_values):
        problems.append(f"{where}: a reference number appears ({value!r})")
    return problems


def scan_release(root: Path, release_dir: str = "exercises",
                 source_dir: str = "solutions") -> list[str]:
    """Problems in the student release (empty list = clean)."""
    root = Path(root)
    release = root / release_dir
    problems = [f"hidden data in the release: {p}" for p in hidden_dirs(release)]
    problems += [f"reference file in the release: {p}"
                 for p in release.rglob(reference.FILENAME)]
    for src_nb in sorted((root / source_dir).glob("*/*.ipynb")):
        assignment = src_nb.parent.name
        rel_nb = release / assignment / src_nb.name
        if not rel_nb.exists():
            problems.append(f"missing release notebook {rel_nb}")
            continue
        text = rel_nb.read_text()
        for marker in ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS",
                       "END HIDDEN TESTS"):
            if marker in text:
                problems.append(f"{rel_nb}: contains '{marker}'")
        ref_path = reference.source_path(root, assignment, source_dir)
        ref_values = (reference_numbers(reference.load_file(ref_path))
                      if ref_path.exists() else np.zeros(0))
        problems += scan_text("\n".join(_sources(rel_nb)), secret_lines(src_nb),
                              ref_values, str(rel_nb))
    return problems


def html_text(path: Path) -> str:
    """The visible text of an HTML file (tags and <style>/<script> removed)."""
    raw = Path(path).read_text(errors="replace")
    raw = re.sub(r"<(style|script)\b.*?</\1>", " ", raw, flags=re.S | re.I)
    return html.unescape(re.sub(r"<[^>]+>", "", raw))


def scan_feedback(root: Path, feedback_dir: str = "feedback",
                  source_dir: str = "solutions", students=None,
                  check_solution_code: bool = False) -> list[str]:
    """Problems in generated feedback (empty list = clean).

    Feedback shows the student's own code, so solution lines are only looked for
    when ``check_solution_code`` (e.g. for an unmodified release).
    """
    root = Path(root)
    feedback = root / feedback_dir
    problems = [f"hidden data in feedback: {p}" for p in hidden_dirs(feedback)]
    problems += [f"reference file in feedback: {p}"
                 for p in feedback.rglob(reference.FILENAME)]
    for page in sorted(feedback.glob("*/*/*.html")):
        student, assignment = page.parent.parent.name, page.parent.name
        if students is not None and student not in students:
            continue
        src_nb = root / source_dir / assignment / f"{page.stem}.ipynb"
        if not src_nb.exists():
            continue
        secrets = secret_lines(src_nb)
        if not check_solution_code:
            secrets = {"hidden": secrets["hidden"]}
        ref_path = reference.source_path(root, assignment, source_dir)
        ref_values = (reference_numbers(reference.load_file(ref_path))
                      if ref_path.exists() else np.zeros(0))
        problems += scan_text(html_text(page), secrets, ref_values, str(page))
    return problems
