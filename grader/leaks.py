"""Leak checks: nothing grader-only may reach students.

Students see ``exercises/`` (the release) and ``feedback/`` (released
feedback HTML). Neither may contain the hidden reference data (``hidden/``
folders), the text of hidden tests, solution code, or reference numbers.
``scan_release`` and ``scan_feedback`` return a list of problems (empty =
clean); ``feedback_leaks`` returns them per feedback folder, so that the
grading command can withhold (quarantine) the one page that leaks and release
the others.

What a student wrote is not a leak: a hidden-test line (say
``from grader.kernel import check``) or a number that occurs in the student's
own cells of the graded notebook was known to that student, and their
feedback goes to them alone. Such lines and numbers are left out of the scan
of that student's page (``student_text``); everything the grader added --
outputs, messages, restored test cells -- is still scanned.

Every scan is linear in the size of the page: feedback holds output the
student controls (HTML outputs, markdown), so no backtracking regular
expression runs over it. ``visible_text`` strips tags with ``str.find`` only
(each search starts where the last one ended, a search that found nothing is
never repeated; ``Work`` counts the characters examined), numbers are
matched against the sorted reference values by binary search.
"""

import html
import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from grader import reference
from grader.hooks import hidden_dirs

SOLUTION = ("### BEGIN SOLUTION\n", "### END SOLUTION")
HIDDEN = ("### BEGIN HIDDEN TESTS\n", "### END HIDDEN TESTS")
# digits, a point, 4+ decimals, an exponent: each attempt only starts where
# no word character or point precedes, and then only runs over this token
NUMBER = re.compile(r"(?<![\w.])-?\d+\.\d{4,}(?:[eE][-+]?\d+)?")
MAX_NUMBERS = 200_000  # numbers compared per page (then: the page is flagged)
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def _sources(nb_path: Path) -> list[str]:
    nb = json.loads(Path(nb_path).read_text())
    return [
        "".join(c["source"]) if isinstance(c["source"], list) else c["source"]
        for c in nb["cells"]
    ]


def blocks(text: str, markers: tuple[str, str]) -> tuple[list[str], str]:
    """The regions between ``markers`` (begin, end) and the text outside them,
    in one pass (an unclosed begin marker runs to the end)."""
    begin, end = markers
    inside, outside, pos = [], [], 0
    while True:
        start = text.find(begin, pos)
        if start < 0:
            outside.append(text[pos:])
            return inside, "".join(outside)
        outside.append(text[pos:start])
        body = start + len(begin)
        stop = text.find(end, body)
        if stop < 0:
            inside.append(text[body:])
            return inside, "".join(outside)
        inside.append(text[body:stop])
        pos = stop + len(end)


def secret_lines(source_nb: Path, min_len: int = 12) -> dict:
    """Distinctive lines of the solution regions and hidden tests of a source
    notebook: {"solution": [...], "hidden": [...]}. Lines that also occur
    outside those regions (e.g. a docstring repeated in the release) are left
    out, as are comments and very short lines."""
    text = "\n".join(_sources(source_nb))
    solution, rest = blocks(text, SOLUTION)
    hidden, rest = blocks(rest, HIDDEN)
    hidden += [h for s in solution for h in blocks(s, HIDDEN)[0]]
    # rendered markdown loses its backticks: compare without them
    public = rest.replace("`", "")
    found = {"solution": [], "hidden": []}
    for kind, regions in (("solution", solution), ("hidden", hidden)):
        for block in regions:
            for line in block.splitlines():
                s = line.strip()
                if (
                    len(s) >= min_len
                    and not s.startswith("#")
                    and s not in public
                    and s not in found[kind]
                ):
                    found[kind].append(s)
    return found


def reference_numbers(ref: reference.ReferenceData) -> np.ndarray:
    """Every expected float value of the reference data (flattened)."""
    values = [
        np.ravel(v)
        for k, v in ref.arrays.items()
        if "/out/" in k and v.dtype.kind == "f"
    ]
    values = np.concatenate(values) if values else np.zeros(0)
    return values[np.abs(values) > 1e-3]


def numbers_in(text: str, limit: int = MAX_NUMBERS) -> np.ndarray:
    """Decimal numbers with at least 4 decimals in ``text`` (the first
    ``limit``)."""
    found = []
    for m in NUMBER.finditer(text):
        found.append(float(m.group()))
        if len(found) >= limit:
            break
    return np.array(found, dtype=float)


def close_to(found: np.ndarray, ref_values: np.ndarray, rtol=1e-4) -> np.ndarray:
    """The values of ``found`` within ``rtol`` of some reference value:
    O((n + m) log m) with a binary search in the sorted reference values."""
    found = np.asarray(found, dtype=float)
    ref = np.sort(np.asarray(ref_values, dtype=float).ravel())
    if not found.size or not ref.size:
        return np.zeros(0)
    hit = np.zeros(found.shape, bool)
    at = np.searchsorted(ref, found)
    for k in (at - 1, at):  # the nearest reference values below and above
        near = ref[np.clip(k, 0, ref.size - 1)]
        hit |= np.abs(found - near) <= rtol * np.abs(near)
    return found[hit]


def is_round(found: np.ndarray) -> np.ndarray:
    """Which numbers have at most two decimals (``1.0000``, ``0.2500``).

    Such a number says nothing about the reference: an honest check prints
    row sums of 1.0000 or a uniform weight of 0.2500 whatever the data, and a
    reference value within ``rtol`` of it (a tanh state of 0.99995) is then
    "found" by chance. A leak needs the digits past the second decimal."""
    found = np.asarray(found, dtype=float)
    return np.isclose(found, np.round(found, 2), rtol=0, atol=1e-12)


def scan_text(
    text: str, secrets: dict, ref_values: np.ndarray, where: str, known: str = ""
) -> list:
    """Problems in ``text``: secret lines and reference numbers that do not
    also occur in ``known`` (what the reader wrote themselves)."""
    problems = []
    for kind, lines in secrets.items():
        for line in lines:
            if line in text and line not in known:
                problems.append(f"{where}: {kind} code: {line!r}")
    found = numbers_in(text, MAX_NUMBERS + 1)
    if len(found) > MAX_NUMBERS:
        problems.append(
            f"{where}: more than {MAX_NUMBERS} numbers; only the "
            f"first were compared with the reference data"
        )
    if known:
        found = found[~np.isin(found, numbers_in(known))]
    found = found[~is_round(found)]
    for value in sorted(set(close_to(found[:MAX_NUMBERS], ref_values).tolist())):
        problems.append(f"{where}: a reference number appears ({value!r})")
    return problems


def scan_release(
    root: Path, release_dir: str = "exercises", source_dir: str = "solutions"
) -> list[str]:
    """Problems in the student release (empty list = clean)."""
    root = Path(root)
    release = root / release_dir
    problems = [f"hidden data in the release: {p}" for p in hidden_dirs(release)]
    problems += [
        f"reference file in the release: {p}" for p in release.rglob(reference.FILENAME)
    ]
    for src_nb in sorted((root / source_dir).glob("*/*.ipynb")):
        assignment = src_nb.parent.name
        rel_nb = release / assignment / src_nb.name
        if not rel_nb.exists():
            problems.append(f"missing release notebook {rel_nb}")
            continue
        text = rel_nb.read_text()
        for marker in (
            "BEGIN SOLUTION",
            "END SOLUTION",
            "BEGIN HIDDEN TESTS",
            "END HIDDEN TESTS",
        ):
            if marker in text:
                problems.append(f"{rel_nb}: contains '{marker}'")
        ref_path = reference.source_path(root, assignment, source_dir)
        ref_values = (
            reference_numbers(reference.load_file(ref_path))
            if ref_path.exists()
            else np.zeros(0)
        )
        problems += scan_text(
            "\n".join(_sources(rel_nb)), secret_lines(src_nb), ref_values, str(rel_nb)
        )
    return problems


# ------------------------------------------------------------------ HTML
@dataclass
class Work:
    """Characters examined by ``visible_text`` (for the linear-time test)."""

    chars: int = 0


class _Finder:
    """``text.find(needle, pos)`` for one needle and increasing positions:
    remembers the last hit (reused while it lies ahead) and a miss (never
    searched again), so all calls together examine each character once."""

    def __init__(self, text: str, needle: str, work: Work):
        self.text, self.needle, self.work = text, needle, work
        self.hit, self.searched_from, self.missing = -1, 0, False

    def find(self, pos: int) -> int:
        if self.missing:
            return -1
        if self.hit >= pos:
            return self.hit
        start = max(pos, self.searched_from)
        self.hit = self.text.find(self.needle, start)
        if self.hit < 0:
            self.missing = True
            self.work.chars += len(self.text) - start
        else:
            self.work.chars += self.hit + len(self.needle) - start
            self.searched_from = self.hit + 1
        return self.hit


def _is_boundary(text: str, at: int) -> bool:
    """True if a tag name ends at ``at`` (like the regular expression ``\\b``)."""
    return at >= len(text) or not (text[at].isalnum() or text[at] == "_")


def _drop_elements(raw: str, work: Work) -> str:
    """``raw`` with every ``<style ...>...</style>`` and ``<script ...>...
    </script>`` element replaced by a space (like the regular expression
    ``<(style|script)\b.*?</\1>``, case-insensitive), in one pass."""
    low = raw.translate(_ASCII_LOWER)  # same length as raw
    names = ("style", "script")
    openers = {n: _Finder(low, f"<{n}", work) for n in names}
    closers = {n: _Finder(low, f"</{n}>", work) for n in names}
    out, pos, scan = [], 0, 0
    while True:
        hits = [(f.find(scan), n) for n, f in openers.items()]
        hits = [(h, n) for h, n in hits if h >= 0]
        if not hits:
            break
        at, name = min(hits)
        body = at + 1 + len(name)
        if not _is_boundary(low, body):
            scan = at + 1
            continue
        close = closers[name].find(body)
        if close < 0:  # no end tag after this one: none after any later one
            openers[name].missing = True
            scan = at + 1
            continue
        out += [raw[pos:at], " "]
        pos = scan = close + len(name) + 3
    out.append(raw[pos:])
    return "".join(out)


def _drop_tags(text: str, work: Work) -> str:
    """``text`` without tags (like ``re.sub("<[^>]+>", "", text)``)."""
    lt, gt = _Finder(text, "<", work), _Finder(text, ">", work)
    out, pos, scan = [], 0, 0
    while True:
        start = lt.find(scan)
        if start < 0:
            break
        work.chars += 1
        if text.startswith(">", start + 1):  # "<>" is text
            scan = start + 1
            continue
        end = gt.find(start + 1)
        if end < 0:  # no ">" after this "<": no tag after it either
            break
        out.append(text[pos:start])
        pos = scan = end + 1
    out.append(text[pos:])
    return "".join(out)


def visible_text(raw: str, work: Work | None = None) -> str:
    """The visible text of HTML: ``<style>``/``<script>`` elements and tags
    removed, entities decoded. Linear in ``len(raw)`` (see the module
    docstring); ``work`` receives the characters examined."""
    work = Work() if work is None else work
    return html.unescape(_drop_tags(_drop_elements(raw, work), work))


def html_text(path: Path) -> str:
    """The visible text of an HTML file (tags and <style>/<script> removed)."""
    return visible_text(Path(path).read_text(errors="replace"))


def page_texts(path: Path) -> tuple[str, str]:
    """(visible text, all text with entities decoded) of an HTML file: a
    student can read the page's source too."""
    raw = Path(path).read_text(errors="replace")
    return visible_text(raw), html.unescape(raw)


# --------------------------------------------------------------- feedback
def student_text(graded_nb: Path) -> str:
    """What the student wrote, in a graded (autograded) notebook: the sources
    of the solution cells and of the cells without nbgrader metadata (their own
    cells). Locked and test cells are the instructor's and are left out."""
    try:
        nb = json.loads(Path(graded_nb).read_text())
        cells = nb["cells"]
    except (OSError, ValueError, KeyError, TypeError):
        return ""
    parts = []
    for cell in cells if isinstance(cells, list) else []:
        if not isinstance(cell, dict):
            continue
        meta = (cell.get("metadata") or {}).get("nbgrader") or {}
        if meta and not meta.get("solution"):
            continue
        src = cell.get("source", "")
        parts.append("".join(src) if isinstance(src, list) else str(src))
    return "\n".join(parts)


def _folder_of(feedback: Path, path: Path) -> tuple[str, str] | None:
    parts = path.relative_to(feedback).parts
    return (parts[0], parts[1]) if len(parts) >= 2 else None


def feedback_leaks(
    root: Path,
    feedback_dir: str = "feedback",
    source_dir: str = "solutions",
    students=None,
    check_solution_code: bool = False,
    autograded_dir: str = "autograded",
) -> dict:
    """Problems in generated feedback, per feedback folder:
    {(student, assignment): [problem, ...]}; problems outside any student's
    folder are under the key None. Empty dict = clean.

    Feedback shows the student's own code, so solution lines are only looked
    for when ``check_solution_code`` (e.g. for an unmodified release); lines
    and numbers the student wrote themselves are not leaks (module docstring).
    """
    root = Path(root)
    feedback = root / feedback_dir
    found: dict = {}

    def add(key, problem):
        found.setdefault(key, []).append(problem)

    for p in hidden_dirs(feedback):
        add(_folder_of(feedback, p), f"hidden data in feedback: {p}")
    if feedback.is_dir():
        for p in feedback.rglob(reference.FILENAME):
            add(_folder_of(feedback, p), f"reference file in feedback: {p}")
    cache: dict = {}
    for page in sorted(feedback.glob("*/*/*.html")):
        student, assignment = page.parent.parent.name, page.parent.name
        if students is not None and student not in students:
            continue
        src_nb = root / source_dir / assignment / f"{page.stem}.ipynb"
        if not src_nb.exists():
            continue
        if assignment not in cache:
            ref_path = reference.source_path(root, assignment, source_dir)
            cache[assignment] = (
                secret_lines(src_nb),
                (
                    reference_numbers(reference.load_file(ref_path))
                    if ref_path.exists()
                    else np.zeros(0)
                ),
            )
        secrets, ref_values = cache[assignment]
        if not check_solution_code:
            secrets = {"hidden": secrets["hidden"]}
        known = student_text(
            root / autograded_dir / student / assignment / f"{page.stem}.ipynb"
        )
        problems = []
        for text in page_texts(page):
            problems += [
                p
                for p in scan_text(text, secrets, ref_values, str(page), known)
                if p not in problems
            ]
        for p in problems:
            add((student, assignment), p)
    return found


def scan_feedback(
    root: Path,
    feedback_dir: str = "feedback",
    source_dir: str = "solutions",
    students=None,
    check_solution_code: bool = False,
) -> list[str]:
    """Problems in generated feedback (empty list = clean); see
    ``feedback_leaks``."""
    found = feedback_leaks(
        root, feedback_dir, source_dir, students, check_solution_code
    )
    return [p for key in sorted(found, key=str) for p in found[key]]


def quarantine(
    root: Path,
    where: Path,
    student: str,
    assignment: str,
    feedback_dir: str = "feedback",
) -> Path | None:
    """Move ``feedback/<student>/<assignment>/`` to ``where/<student>/
    <assignment>/`` (replacing an older copy), so ``nbgrader release_feedback``
    cannot return it; the path it now has (None if there was none)."""
    folder = Path(root) / feedback_dir / student / assignment
    dest = Path(where) / student / assignment
    if dest.exists():
        shutil.rmtree(dest)
    if not folder.is_dir():
        return None
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(str(folder), str(dest))
    return dest
