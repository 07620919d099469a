"""Read what students submitted, repair what can be repaired, stage the rest.

nbgrader autogrades whatever lies in ``submitted/<student>/<assignment>/``:
one unreadable file stops that student's grading with a traceback, extra files
are copied next to the notebook, deleted test cells are silently missing.
``stage`` builds a clean copy per student in ``<state dir>/staged/`` that
nbgrader grades instead (``--CourseDirectory.submitted_directory``);
``submitted/`` itself is never changed. Per submission:

* the notebook: ``<assignment>.ipynb``; if absent, the one other notebook (or
  the one most like the assignment) -- flag ``renamed``; none: ``missing``.
  Other notebooks and all other files stay out of the kernel's reach
  (``extra-files``); a file named like a module -- ``numpy.py``, an
  ``attncourse/`` folder -- is reported as ``shadowing``;
* empty, not JSON, not a notebook: ``malformed``; nbformat 3 or 4.0-4.4:
  converted (``old-format``); a notebook of another assignment:
  ``wrong-assignment``. These get no kernel: their grades are set to 0 with
  nbgrader's gradebook API after autograde (``zero``);
* the cells are rebuilt on the release: every nbgrader cell of the
  assignment in release order, with the student's code in the solution cells
  and the release's text in locked and test cells (nbgrader restores the
  hidden tests from the gradebook), and the student's own extra cells kept
  after the cell they followed. Deleted, edited, moved or duplicated test
  cells, or changed nbgrader ids, are therefore graded as released
  (``edited-tests``); a deleted solution cell is graded as not implemented.
  Cell ids are made valid and unique; the kernelspec is the release's
  (``kernelspec`` if it was changed);
* the student's code is scanned for things tests never need -- exits,
  ctypes, processes, sockets, grader files, patching of comparison functions --
  and flagged ``suspicious`` for review (no effect on the score).
"""

import copy
import importlib.util
import json
import re
import shutil
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from grader import events as _events

TIMESTAMP = "timestamp.txt"
# The exchange's key for returning feedback (nbgrader release_feedback reads it
# from feedback/<student>/<assignment>/); it travels with the submission.
SECRET = "submission_secret.txt"
IGNORED = {".ipynb_checkpoints", "__MACOSX", ".DS_Store", "__pycache__", TIMESTAMP,
           SECRET}
CELL_ID = re.compile(r"^[a-zA-Z0-9-_]{1,64}$")
SUSPICIOUS = {
    "exits the kernel": r"\bos\._exit\b|\bsys\.exit\b|(?<![\w.])(?:exit|quit)\(",
    "ctypes / low-level memory": r"\bctypes\b|\bcffi\b",
    "processes or threads": r"\bos\.fork\b|\bmultiprocessing\b|\bsubprocess\b|"
                            r"\bthreading\b|\bos\.system\b|\bos\.popen\b",
    "network": r"\bsocket\b|\burllib\b|\brequests\b|\bhttp\.client\b|\bhttpx\b|"
               r"\baiohttp\b",
    "grader files": r"reference\.npz|gradebook|autograded|submitted/|solutions/|"
                    r"hidden/|\bnbgrader\b",
    "grader internals": r"attncourse\.grading(?!\.visible\b)|\bget_ipython\b|"
                        r"\bsys\.modules\b|\bbuiltins\b|__builtins__|\bgc\.get_"
                        r"|\bsys\.settrace\b|\bsys\._getframe\b",
    "patches library functions":
        r"\b(?:np|numpy|torch|tf|tensorflow|math|keras)(?:\.\w+)*\."
        r"(?:allclose|isclose|array_equal|equal|testing|debugging|assert_\w+)\s*=(?!=)"
        r"|\bsetattr\(\s*(?:np|numpy|torch|tf|tensorflow|math|builtins)\b",
}


@dataclass
class Staged:
    student: str
    assignment: str
    notebook: Path | None = None
    events: object = None
    notes: list = field(default_factory=list)


def nbgrader_meta(cell) -> dict:
    return cell.get("metadata", {}).get("nbgrader") or {}


def gid(cell):
    return nbgrader_meta(cell).get("grade_id")


def text(source) -> str:
    return "".join(source) if isinstance(source, list) else (source or "")


def students_with(root: Path, submitted: str, assignment: str) -> list[str]:
    base = root / submitted
    if not base.is_dir():
        return []
    return sorted(p.name for p in base.iterdir()
                  if p.is_dir() and (p / assignment).is_dir())


def shadows(name: str) -> bool:
    """True if a file/folder ``name`` next to a notebook could hide a module."""
    stem = name.split(".")[0]
    if not stem.isidentifier():
        return False
    if name != stem and not name.endswith((".py", ".pyc", ".so", ".pyd", ".pth")):
        return False
    if stem in sys.stdlib_module_names or stem in ("attncourse", "numpy", "torch",
                                                   "tensorflow", "keras"):
        return True
    try:
        return importlib.util.find_spec(stem) is not None
    except (ImportError, ValueError):
        return False


def _candidates(folder: Path) -> tuple[list[Path], list[Path]]:
    notebooks, others = [], []
    for p in sorted(folder.rglob("*")):
        rel = p.relative_to(folder)
        if any(part in IGNORED or part.startswith(".") for part in rel.parts):
            continue
        if p.is_dir():
            if len(rel.parts) == 1 and shadows(p.name):
                others.append(p)
            continue
        (notebooks if p.suffix == ".ipynb" else others).append(p)
    return notebooks, others


def _load(path: Path, ev) -> dict | None:
    """The notebook as nbformat v4 (converted if older), or None (malformed)."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        ev.flag("malformed", f"{path.name}: cannot be read ({exc.strerror})")
        return None
    if not raw.strip():
        ev.flag("malformed", f"{path.name} is an empty file")
        return None
    try:
        data = json.loads(raw.decode("utf-8-sig"))
    except (UnicodeDecodeError, ValueError) as exc:
        ev.flag("malformed", f"{path.name} is not valid JSON ({str(exc)[:120]})")
        return None
    if not isinstance(data, dict) or data.get("nbformat") not in (3, 4) or not (
            isinstance(data.get("cells"), list) or
            isinstance(data.get("worksheets"), list)):
        ev.flag("malformed", f"{path.name} is JSON but not a Jupyter notebook "
                f"(nbformat {data.get('nbformat') if isinstance(data, dict) else '?'})")
        return None
    version = (data.get("nbformat"), data.get("nbformat_minor", 0))
    try:
        nb = nbformat.reads(json.dumps(data), as_version=4)
    except Exception as exc:  # noqa: BLE001  (nbformat raises many kinds)
        ev.flag("malformed", f"{path.name}: not a valid notebook ({str(exc)[:120]})")
        return None
    if version < (4, 5):
        ev.flag("old-format", f"{path.name} was saved as nbformat {version[0]}."
                f"{version[1]}; converted to 4.5")
    return nb


def _locked_sources(nb) -> set:
    return {text(c.get("source")).strip() for c in nb.get("cells", [])
            if nbgrader_meta(c).get("locked") and not nbgrader_meta(c).get("solution")
            and text(c.get("source")).strip()}


def affinity(nb, template) -> int:
    """How many locked cells of ``template`` appear verbatim in ``nb``."""
    mine = {text(c.get("source")).strip() for c in nb.get("cells", [])}
    return len(_locked_sources(template) & mine)


def foreign(nb, template) -> int:
    """How many locked (instructor) cells of ``nb`` are not ``template``'s."""
    return len(_locked_sources(nb) - _locked_sources(template))


def guess_assignment(nb) -> str | None:
    """The course assignment whose functions/classes the notebook defines."""
    from grader import assignments

    code = "\n".join(text(c.get("source")) for c in nb.get("cells", [])
                     if c.get("cell_type") == "code")
    defined = set(re.findall(r"^\s*(?:def|class)\s+(\w+)", code, re.M))
    best, hits = None, 0
    for assignment in assignments.ASSIGNMENTS:
        try:
            checks = assignments.get(assignment).CHECKS.values()
        except Exception:  # noqa: BLE001
            continue
        names = {n for c in checks for n in c.targets.values()}
        found = len(names & defined)
        if found > hits:
            best, hits = assignment, found
    return best


def _new_cell(cell, source=None, metadata=None, cell_id=None):
    kind = cell.get("cell_type", "code")
    src = text(cell.get("source")) if source is None else source
    meta = copy.deepcopy(dict(cell.get("metadata", {}))) if metadata is None else \
        copy.deepcopy(metadata)
    if kind == "code":
        new = nbformat.v4.new_code_cell(source=src, metadata=meta)
    elif kind == "markdown":
        new = nbformat.v4.new_markdown_cell(source=src, metadata=meta)
    else:
        new = nbformat.v4.new_raw_cell(source=src, metadata=meta)
    if cell_id:
        new["id"] = cell_id
    return new


def rebuild(nb, template, ev) -> tuple[object, list[str]]:
    """The release's cells with the student's solutions and extra cells; the
    student-written code (for the scan)."""
    skeleton = [c for c in template.cells if gid(c)]
    order = [gid(c) for c in skeleton]
    kinds = {gid(c): nbgrader_meta(c) for c in skeleton}
    mine, extras, seen, extra_code = {}, {None: []}, [], []
    anchor = None
    for cell in nb.cells:
        g = gid(cell)
        if g in kinds and g not in mine:
            mine[g] = cell
            anchor = g
            seen.append(g)
            continue
        if g in kinds:
            what = "solution" if kinds[g].get("solution") else "test/locked"
            if what != "solution":
                ev.flag("edited-tests", f"{what} cell {g} is duplicated; the copy "
                        f"runs as an ordinary cell")
        elif g:
            ev.flag("edited-tests", f"a cell carries the unknown nbgrader id {g!r} "
                    f"(ids changed?); it runs as an ordinary cell")
        extra = _new_cell(cell)
        extra.metadata.pop("nbgrader", None)
        extras.setdefault(anchor, []).append(extra)
        if extra.cell_type == "code":
            extra_code.append(text(extra.source))
    if seen != [g for g in order if g in seen]:
        ev.flag("edited-tests", "cells were moved; graded in the release's order")
    out, code = list(extras[None]), list(extra_code)
    for t in skeleton:
        g = gid(t)
        meta = kinds[g]
        if meta.get("solution"):
            if g in mine:
                src = text(mine[g].get("source"))
            else:
                src = text(t.source)
                ev.note(f"solution cell {g} was deleted: graded as not implemented")
            out.append(_new_cell(t, source=src, metadata=t.metadata,
                                 cell_id=t.get("id")))
            code.append(src)
        else:
            if g not in mine:
                if meta.get("grade"):
                    ev.flag("edited-tests", f"test cell {g} was deleted; restored")
            elif text(mine[g].get("source")).strip() != text(t.source).strip() \
                    and (meta.get("grade") or t.cell_type == "code"):
                ev.flag("edited-tests", f"{'test' if meta.get('grade') else 'locked'} "
                        f"cell {g} was edited; the original was graded")
            elif g in mine and {k: v for k, v in nbgrader_meta(mine[g]).items()
                                if k != "checksum"} != {k: v for k, v in meta.items()
                                                        if k != "checksum"}:
                ev.flag("edited-tests", f"the nbgrader metadata of {g} was changed; "
                        f"the release's was used")
            out.append(_new_cell(t, metadata=t.metadata, cell_id=t.get("id")))
        out.extend(extras.get(g, []))
    # unique, valid ids (template ids first)
    seen_ids = set()
    for cell in out:
        cid = cell.get("id")
        if not cid or not CELL_ID.match(cid) or cid in seen_ids:
            cid = uuid.uuid4().hex[:8]
            while cid in seen_ids:
                cid = uuid.uuid4().hex[:8]
            cell["id"] = cid
        seen_ids.add(cid)
    result = nbformat.v4.new_notebook(cells=out,
                                      metadata=copy.deepcopy(template.metadata))
    result.nbformat, result.nbformat_minor = 4, 5
    return result, code


def scan(code: list[str]) -> list[str]:
    joined = "\n".join(code)
    return [what for what, pattern in SUSPICIOUS.items() if re.search(pattern, joined)]


def stage_one(folder: Path, dest: Path, assignment: str, templates: dict,
              ev) -> Path | None:
    """Stage one submission folder; returns the staged notebook or None."""
    notebooks, others = _candidates(folder)
    expected = folder / f"{assignment}.ipynb"
    template = templates[assignment]
    if expected in notebooks:
        chosen = expected
    elif notebooks:
        def score(p):
            nb = _load_quiet(p)
            return (affinity(nb, template) if nb else -1, p.stat().st_mtime)
        chosen = max(notebooks, key=score)
        ev.flag("renamed", f"no {expected.name}; graded {chosen.relative_to(folder)}")
    else:
        chosen = None
    rest = [p for p in notebooks if p != chosen] + others
    if rest:
        names = ", ".join(str(p.relative_to(folder)) for p in rest[:10])
        ev.flag("extra-files", f"not given to the kernel: {names}")
        shadow = [p.name for p in others if p.parent == folder and shadows(p.name)]
        if shadow:
            ev.flag("shadowing", f"named like importable modules: {', '.join(shadow)}")
    if chosen is None:
        ev.flag("missing", f"no notebook in {folder.name}/ (expected {expected.name})")
        return None
    nb = _load(chosen, ev)
    if nb is None:
        return None
    best = max(templates, key=lambda a: (affinity(nb, templates[a]), a == assignment))
    if best != assignment and affinity(nb, templates[best]) > affinity(nb, template):
        ev.flag("wrong-assignment", f"{chosen.name} is the notebook of {best!r}, not "
                f"{assignment!r}")
        return None
    if foreign(nb, template) > affinity(nb, template):
        guess = guess_assignment(nb)
        ev.flag("wrong-assignment", f"{chosen.name} is another assignment's notebook"
                + (f" (it defines the functions of {guess!r})" if guess else "")
                + f": {foreign(nb, template)} of its instructor cells are not "
                f"{assignment!r}'s, {affinity(nb, template)} are")
        return None
    kernel = (nb.metadata.get("kernelspec") or {}).get("name")
    expected_kernel = (template.metadata.get("kernelspec") or {}).get("name")
    if kernel != expected_kernel:
        ev.flag("kernelspec", f"kernel {kernel!r} replaced by {expected_kernel!r}")
    staged, code = rebuild(nb, template, ev)
    found = scan(code)
    if found:
        ev.flag("suspicious", "; ".join(found))
    nbformat.validate(staged)
    dest.mkdir(parents=True, exist_ok=True)
    path = dest / f"{assignment}.ipynb"
    nbformat.write(staged, str(path))
    for name in (TIMESTAMP, SECRET):
        if (folder / name).is_file():
            shutil.copy(folder / name, dest / name)
    return path


def _load_quiet(path):
    class _Quiet:
        def flag(self, *a, **k):
            pass

        def note(self, *a, **k):
            pass
    return _load(path, _Quiet())


def templates_in(root: Path, release: str = "exercises") -> dict:
    found = {}
    for p in sorted((root / release).glob("*/*.ipynb")):
        if p.stem == p.parent.name:
            found[p.stem] = nbformat.read(str(p), as_version=4)
    return found


def stage(root: Path, state_dir: Path, assignments, students=None,
          submitted="submitted", release="exercises", log=None) -> list[Staged]:
    """Stage every submission of ``assignments`` into ``<state_dir>/staged``."""
    root, state_dir = Path(root), Path(state_dir)
    out_dir = state_dir / "staged"
    shutil.rmtree(out_dir, ignore_errors=True)
    out_dir.mkdir(parents=True)
    templates = templates_in(root, release)
    results = []
    for assignment in assignments:
        for student in students_with(root, submitted, assignment):
            if students is not None and student not in students:
                continue
            ev = _events.Events(state_dir, assignment, student, "stage", log)
            item = Staged(student, assignment, events=ev)
            try:
                item.notebook = stage_one(root / submitted / student / assignment,
                                          out_dir / student / assignment, assignment,
                                          templates, ev)
            except Exception as exc:  # noqa: BLE001  (one bad file, not the batch)
                ev.flag("malformed", f"could not be staged: {type(exc).__name__}: "
                        f"{str(exc)[:200]}")
                item.notebook = None
            ev.save()
            results.append(item)
    return results
