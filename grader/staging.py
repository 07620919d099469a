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
  and flagged ``suspicious`` for review (no effect on the score), and for
  calls of ready-made attention where the exercise asks for the learner's own
  (``grader.provenance``: ``library-call``, ``dynamic-code``; for review too).

Files are read without ever following a link: every folder and file is opened
relative to its parent's descriptor with ``O_NOFOLLOW`` (no race with a link
put in later), and a symbolic link, a mount point or a special file (FIFO,
socket, device) anywhere in the submission is never opened, listed or copied
(``link``); a link *as* the student's folder, the assignment folder or the
notebook means the submission is not graded. Reads are bounded: the notebook
at most ``MAX_NOTEBOOK_BYTES`` (``too-large``) and ``MAX_JSON_DEPTH`` levels
of nesting, at most ``MAX_ENTRIES`` files and folders ``MAX_TREE_DEPTH``
levels deep are looked at, ``MAX_CANDIDATES`` notebooks opened to find a
renamed one. Names are shown escaped (``shown``): a file name cannot break the
report or the log. The staged notebook holds no outputs, execution counts or
attachments of the submitted one (every cell is rebuilt), so nothing
pre-filled reaches grading.

``stage`` also writes a manifest (``<state>/staged-manifest.json``): per staged
notebook an HMAC, with the course secret (``grader.fresh``), of this run's id,
the student, the assignment and the notebook's SHA-256. ``grader.entry``'s
``RequireStaged`` refuses to autograde any notebook the manifest does not
vouch for, so every way into autograde (``nbgrader autograde``, the
formgrader's button) goes through staging.
"""

import copy
import errno
import hashlib
import importlib.util
import json
import os
import re
import secrets
import shutil
import stat
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from grader import events as _events
from grader import fresh, provenance

TIMESTAMP = "timestamp.txt"
# The exchange's key for returning feedback (nbgrader release_feedback reads it
# from feedback/<student>/<assignment>/); it travels with the submission.
SECRET = "submission_secret.txt"
IGNORED = {
    ".ipynb_checkpoints",
    "__MACOSX",
    ".DS_Store",
    "__pycache__",
    TIMESTAMP,
    SECRET,
}
CELL_ID = re.compile(r"^[a-zA-Z0-9-_]{1,64}$")
MAX_NOTEBOOK_BYTES = 32 * 1024 * 1024  # the largest notebook read
MAX_SMALL_BYTES = 4096  # timestamp.txt, submission_secret.txt
MAX_JSON_DEPTH = 100  # nesting of the notebook's JSON
MAX_ENTRIES = 2000  # files and folders looked at
MAX_TREE_DEPTH = 12  # folder levels looked into
MAX_CANDIDATES = 16  # notebooks opened to find a renamed one
MANIFEST = "staged-manifest.json"
RUN_ENV = "GRADER_STAGING_RUN"  # the run id, for the nbgrader processes
PURPOSE = "staged-notebook"  # HMAC domain of the manifest entries
_NOFOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC
_DIR = os.O_RDONLY | os.O_DIRECTORY | _NOFOLLOW
SUSPICIOUS = {
    "exits the kernel": r"\bos\._exit\b|\bsys\.exit\b|(?<![\w.])(?:exit|quit)\(",
    "ctypes / low-level memory": r"\bctypes\b|\bcffi\b",
    "processes or threads": r"\bos\.fork\b|\bmultiprocessing\b|(?i:subprocess)|"
    r"\bthreading\b|\b_thread\b|\bos\.system\b|\bos\.popen\b|\bos\.spawn|"
    r"\bos\.posix_spawn|\bos\.exec|\bpty\b|\bconcurrent\.futures\b",
    # what the pattern above misses: os.forkpty, names imported from os, new
    # sessions or process groups (a CPU hog's children hiding from a kill)
    "new processes or sessions": r"\bforkpty\b|\bv?fork\s*\(|\bposix_spawnp?\b|"
    r"\bset(?:sid|pgrp|pgid)\b|\b_posixsubprocess\b|\bpexpect\b|\bregister_at_fork\b|"
    r"\bpidfd_open\b|\b(?:spawn|exec)(?:[lv]p?e?)\s*\(|\bunshare\b|\bos\.clone\b",
    "reads the grading inputs": r"/grading\b|inputs\.npz",
    "network": r"\bsocket\b|\burllib\b|\brequests\b|\bhttp\.client\b|\bhttpx\b|"
    r"\baiohttp\b",
    "grader files": r"reference\.npz|gradebook|autograded|submitted/|solutions/|"
    r"hidden/|\bnbgrader\b",
    "grader internals": r"attncourse\.grading\b|\bgrader\.kernel\b|\bget_ipython\b|"
    r"\bsys\.modules\b|\bbuiltins\b|__builtins__|\bgc\.get_"
    r"|\bsys\.settrace\b|\bsys\._getframe\b",
    "patches library functions": r"\b(?:np|numpy|torch|tf|tensorflow|math|keras)(?:\.\w+)*\."  # noqa: E501
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
    run: str = ""  # the staging run (the manifest's id)


def nbgrader_meta(cell) -> dict:
    return cell.get("metadata", {}).get("nbgrader") or {}


def gid(cell):
    return nbgrader_meta(cell).get("grade_id")


def text(source) -> str:
    return "".join(source) if isinstance(source, list) else (source or "")


def shown(name, limit: int = 80) -> str:
    """A file name as notes and logs show it: non-printable characters (and
    undecodable bytes) escaped, at most ``limit`` characters."""
    if isinstance(name, (tuple, list)):
        name = "/".join(name)
    out = "".join(
        c
        if c.isprintable() and c not in "`|"
        else f"\\x{ord(c):02x}"
        if c in "`|"
        else ascii(c)[1:-1]
        for c in str(name)[:limit]
    )
    return out + ("..." if len(str(name)) > limit else "")


def students_with(root: Path, submitted: str, assignment: str) -> list[str]:
    """Students with a ``<submitted>/<student>/<assignment>`` entry (a folder,
    or a link: staging refuses those). A student folder that is itself a link
    is never looked into: it is listed for every assignment someone else
    submitted (and refused)."""
    base = root / submitted
    if not base.is_dir():
        return []
    real, links = [], []
    for entry in sorted(os.scandir(base), key=lambda e: e.name):
        if entry.is_symlink():
            links.append(entry.name)
        elif entry.is_dir(follow_symlinks=False) and os.path.lexists(
            os.path.join(entry.path, assignment)
        ):
            real.append(entry.name)
    return sorted(real + links) if real else []


def shadows(name: str) -> bool:
    """True if a file/folder ``name`` next to a notebook could hide a module."""
    stem = name.split(".")[0]
    if not stem.isidentifier():
        return False
    if name != stem and not name.endswith((".py", ".pyc", ".so", ".pyd", ".pth")):
        return False
    if stem in sys.stdlib_module_names or stem in (
        "attncourse",
        "numpy",
        "torch",
        "tensorflow",
        "keras",
    ):
        return True
    try:
        return importlib.util.find_spec(stem) is not None
    except (ImportError, ValueError):
        return False


# ------------------------------------------------- reading without following
@dataclass
class Entry:
    """One thing in a submission folder, seen with lstat (never followed)."""

    parts: tuple  # path relative to the assignment folder
    kind: str  # "file", "dir", "link", "mount", "special"
    size: int = 0
    mtime: float = 0.0
    target: str = ""  # a link's text (read with readlink, not followed)

    @property
    def name(self) -> str:
        return self.parts[-1]

    def show(self) -> str:
        return shown(self.parts)


class TooLarge(OSError):
    pass


def _kind(st, device) -> str:
    if stat.S_ISLNK(st.st_mode):
        return "link"
    if st.st_dev != device:
        return "mount"
    if stat.S_ISDIR(st.st_mode):
        return "dir"
    return "file" if stat.S_ISREG(st.st_mode) else "special"


def _ignored(parts) -> bool:
    return any(p in IGNORED or p.startswith(".") for p in parts)


def _open_dirs(folder_fd: int, parts) -> list[int]:
    """Descriptors of the folders ``parts`` under ``folder_fd``, each opened
    with O_NOFOLLOW relative to its parent (the caller closes them)."""
    fds = []
    try:
        fd = folder_fd
        for part in parts:
            fd = os.open(part, _DIR, dir_fd=fd)
            fds.append(fd)
    except OSError:
        for fd in fds:
            os.close(fd)
        raise
    return fds


def tree(folder_fd: int) -> tuple[list[Entry], list[str]]:
    """Everything under the folder open as ``folder_fd``, links not followed,
    ignored folders (``.ipynb_checkpoints``, dot folders...) not entered;
    (entries, what was left out because of the bounds)."""
    device = os.fstat(folder_fd).st_dev
    entries, skipped, todo = [], [], [()]
    while todo:
        prefix = todo.pop()
        try:
            fds = _open_dirs(folder_fd, prefix)
        except OSError:  # replaced by a link since it was listed: not entered
            continue
        fd = fds[-1] if fds else folder_fd
        try:
            with os.scandir(fd) as it:
                found = []
                for e in it:
                    if len(entries) + len(found) >= MAX_ENTRIES:
                        skipped.append(f"more than {MAX_ENTRIES} files")
                        break
                    found.append(e)
                found.sort(key=lambda e: e.name)
                for e in found:
                    parts = (*prefix, e.name)
                    st = e.stat(follow_symlinks=False)
                    entry = Entry(parts, _kind(st, device), st.st_size, st.st_mtime)
                    if entry.kind == "link":
                        try:
                            entry.target = os.readlink(e.name, dir_fd=fd)
                        except OSError:
                            entry.target = "?"
                    entries.append(entry)
                    if entry.kind != "dir" or _ignored((e.name,)):
                        continue
                    if len(parts) >= MAX_TREE_DEPTH:
                        skipped.append(f"folders deeper than {MAX_TREE_DEPTH} levels")
                        continue
                    todo.append(parts)
        finally:
            for d in fds:
                os.close(d)
    return entries, sorted(set(skipped))


def read_at(folder_fd: int, parts, limit: int) -> bytes:
    """The bytes of the regular file ``parts`` under ``folder_fd``, opened
    component by component with O_NOFOLLOW (a link anywhere: OSError ELOOP or
    ENOTDIR), at most ``limit`` bytes (else ``TooLarge``)."""
    fds = _open_dirs(folder_fd, parts[:-1])
    try:
        fd = fds[-1] if fds else folder_fd
        fd = os.open(parts[-1], os.O_RDONLY | os.O_NONBLOCK | _NOFOLLOW, dir_fd=fd)
        fds.append(fd)
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        if st.st_size > limit:
            raise TooLarge(errno.EFBIG, f"{st.st_size} bytes")
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            raise TooLarge(errno.EFBIG, f"more than {limit} bytes")
        return b"".join(chunks)
    finally:
        for fd in fds:
            os.close(fd)


def read_file(base: Path, parts, limit: int = MAX_SMALL_BYTES) -> bytes:
    """``base/<parts...>`` read like ``read_at`` (no component followed)."""
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        return read_at(fd, tuple(parts), limit)
    finally:
        os.close(fd)


def _candidates(entries) -> tuple[list[Entry], list[Entry]]:
    notebooks, others = [], []
    for e in entries:
        if _ignored(e.parts) or e.kind in ("link", "mount", "special"):
            continue
        if e.kind == "dir":
            if len(e.parts) == 1 and shadows(e.name):
                others.append(e)
            continue
        (notebooks if e.name.endswith(".ipynb") else others).append(e)
    return notebooks, others


def _deeper_than(data, limit: int) -> bool:
    stack = [(data, 1)]
    while stack:
        x, depth = stack.pop()
        if depth > limit:
            return True
        if isinstance(x, dict):
            stack.extend((v, depth + 1) for v in x.values())
        elif isinstance(x, list):
            stack.extend((v, depth + 1) for v in x)
    return False


def _parse(raw: bytes, name: str, ev) -> dict | None:
    """The notebook as nbformat v4 (converted if older), or None (malformed)."""
    if not raw.strip():
        ev.flag("malformed", f"{name} is an empty file")
        return None
    try:
        data = json.loads(raw.decode("utf-8-sig"))
    except (UnicodeDecodeError, ValueError) as exc:
        ev.flag("malformed", f"{name} is not valid JSON ({str(exc)[:120]})")
        return None
    except RecursionError:
        ev.flag("malformed", f"{name} is nested too deeply to be a notebook")
        return None
    if _deeper_than(data, MAX_JSON_DEPTH):
        ev.flag(
            "malformed",
            f"{name} is nested more than {MAX_JSON_DEPTH} levels "
            f"deep; not a notebook this course reads",
        )
        return None
    if (
        not isinstance(data, dict)
        or data.get("nbformat") not in (3, 4)
        or not (
            isinstance(data.get("cells"), list)
            or isinstance(data.get("worksheets"), list)
        )
    ):
        ev.flag(
            "malformed",
            f"{name} is JSON but not a Jupyter notebook "
            f"(nbformat {data.get('nbformat') if isinstance(data, dict) else '?'})",
        )
        return None
    version = (data.get("nbformat"), data.get("nbformat_minor", 0))
    try:
        nb = nbformat.reads(json.dumps(data), as_version=4)
    except Exception as exc:  # noqa: BLE001  (nbformat raises many kinds)
        ev.flag("malformed", f"{name}: not a valid notebook ({str(exc)[:120]})")
        return None
    if version < (4, 5):
        ev.flag(
            "old-format",
            f"{name} was saved as nbformat {version[0]}.{version[1]}; converted to 4.5",
        )
    return nb


def _load(path: Path, ev) -> dict | None:
    """The notebook at ``path`` (its last component not followed), or None."""
    path = Path(path)
    try:
        fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        ev.flag("malformed", f"{shown(path.name)}: cannot be read ({exc.strerror})")
        return None
    try:
        return _read_notebook(fd, (path.name,), ev)
    finally:
        os.close(fd)


def _read_notebook(folder_fd: int, parts, ev) -> dict | None:
    name = shown(parts)
    try:
        raw = read_at(folder_fd, parts, MAX_NOTEBOOK_BYTES)
    except TooLarge as exc:
        ev.flag(
            "too-large",
            f"{name} is larger than {MAX_NOTEBOOK_BYTES >> 20} MiB "
            f"({exc.strerror}); clear its outputs and submit it again",
        )
        return None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            ev.flag("link", f"{name} became a link while it was read; not graded")
        else:
            ev.flag("malformed", f"{name}: cannot be read ({exc.strerror})")
        return None
    return _parse(raw, name, ev)


def _locked_sources(nb) -> set:
    return {
        text(c.get("source")).strip()
        for c in nb.get("cells", [])
        if nbgrader_meta(c).get("locked")
        and not nbgrader_meta(c).get("solution")
        and text(c.get("source")).strip()
    }


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

    code = "\n".join(
        text(c.get("source"))
        for c in nb.get("cells", [])
        if c.get("cell_type") == "code"
    )
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
    meta = (
        copy.deepcopy(dict(cell.get("metadata", {})))
        if metadata is None
        else copy.deepcopy(metadata)
    )
    if kind == "code":
        new = nbformat.v4.new_code_cell(source=src, metadata=meta)
    elif kind == "markdown":
        new = nbformat.v4.new_markdown_cell(source=src, metadata=meta)
    else:
        new = nbformat.v4.new_raw_cell(source=src, metadata=meta)
    if cell_id:
        new["id"] = cell_id
    return new


def _sort_student_cells(nb, kinds: dict, ev):
    """The student's cells: ``mine`` (first cell per nbgrader id), the extra
    cells keyed by the id they follow, the ids in the student's order, and the
    code of the extra cells."""
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
            if not kinds[g].get("solution"):
                ev.flag(
                    "edited-tests",
                    f"test/locked cell {g} is duplicated; the copy runs as an "
                    f"ordinary cell",
                )
        elif g:
            ev.flag(
                "edited-tests",
                f"a cell carries the unknown nbgrader id {g!r} "
                f"(ids changed?); it runs as an ordinary cell",
            )
        extra = _new_cell(cell)
        extra.metadata.pop("nbgrader", None)
        extras.setdefault(anchor, []).append(extra)
        if extra.cell_type == "code":
            extra_code.append(text(extra.source))
    return mine, extras, seen, extra_code


def _without_checksum(meta: dict) -> dict:
    return {k: v for k, v in meta.items() if k != "checksum"}


def _released_cell(t, mine: dict, ev):
    """A test or locked cell as released; the student's changes flagged."""
    g, meta = gid(t), nbgrader_meta(t)
    if g not in mine:
        if meta.get("grade"):
            ev.flag("edited-tests", f"test cell {g} was deleted; restored")
    elif text(mine[g].get("source")).strip() != text(t.source).strip() and (
        meta.get("grade") or t.cell_type == "code"
    ):
        ev.flag(
            "edited-tests",
            f"{'test' if meta.get('grade') else 'locked'} "
            f"cell {g} was edited; the original was graded",
        )
    elif _without_checksum(nbgrader_meta(mine[g])) != _without_checksum(meta):
        ev.flag(
            "edited-tests",
            f"the nbgrader metadata of {g} was changed; the release's was used",
        )
    return _new_cell(t, metadata=t.metadata, cell_id=t.get("id"))


def _solution_cell(t, mine: dict, ev):
    """The student's solution in the released cell (the release's stub if the
    student deleted it); returns (cell, source)."""
    g = gid(t)
    if g in mine:
        src = text(mine[g].get("source"))
    else:
        src = text(t.source)
        ev.note(f"solution cell {g} was deleted: graded as not implemented")
    return _new_cell(t, source=src, metadata=t.metadata, cell_id=t.get("id")), src


def _unique_ids(cells) -> None:
    """Unique, valid cell ids (the release's first)."""
    seen_ids = set()
    for cell in cells:
        cid = cell.get("id")
        if not cid or not CELL_ID.match(cid) or cid in seen_ids:
            cid = uuid.uuid4().hex[:8]
            while cid in seen_ids:
                cid = uuid.uuid4().hex[:8]
            cell["id"] = cid
        seen_ids.add(cid)


def rebuild(nb, template, ev) -> tuple[object, list[str]]:
    """The release's cells with the student's solutions and extra cells; the
    student-written code (for the scan)."""
    skeleton = [c for c in template.cells if gid(c)]
    kinds = {gid(c): nbgrader_meta(c) for c in skeleton}
    mine, extras, seen, extra_code = _sort_student_cells(nb, kinds, ev)
    if seen != [gid(c) for c in skeleton if gid(c) in seen]:
        ev.flag("edited-tests", "cells were moved; graded in the release's order")
    out, code = list(extras[None]), list(extra_code)
    for t in skeleton:
        if kinds[gid(t)].get("solution"):
            cell, src = _solution_cell(t, mine, ev)
            out.append(cell)
            code.append(src)
        else:
            out.append(_released_cell(t, mine, ev))
        out.extend(extras.get(gid(t), []))
    _unique_ids(out)
    result = nbformat.v4.new_notebook(
        cells=out, metadata=copy.deepcopy(template.metadata)
    )
    result.nbformat, result.nbformat_minor = 4, 5
    return result, code


def scan(code: list[str]) -> list[str]:
    joined = "\n".join(code)
    found = [what for what, pattern in SUSPICIOUS.items() if re.search(pattern, joined)]
    if "grader internals" not in found and any(map(uses_internals, code)):
        found.append("grader internals")
    return found


# what "grader internals" means as a dotted name (an import, an attribute
# chain, getattr with a constant name), aliases resolved
INTERNALS = re.compile(
    r"(?:grader\.kernel|attncourse\.grading|sys\.modules|sys\.settrace|sys\.setprofile"
    r"|sys\._getframe|builtins)(?:\.|$)|gc\.get_"
)
# plain names; ``get_ipython`` is left to the pattern on the source: IPython's
# own rewriting of a magic (``%matplotlib``) calls it
INTERNAL_NAMES = {"__builtins__", "__import__"}
MAX_MAGIC_DEPTH = 4


def _trees(source: str, depth: int = 0) -> list | None:
    """The ASTs of a cell and of the code in its magics (``%%time``,
    ``%timeit``); None if it does not parse."""
    import ast

    try:
        from IPython.core.inputtransformer2 import TransformerManager

        source = TransformerManager().transform_cell(source)
    except Exception:  # noqa: BLE001  (then ast.parse decides)
        pass
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    trees = [tree]
    for node in ast.walk(tree):
        if (
            depth < MAX_MAGIC_DEPTH
            and isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("run_line_magic", "run_cell_magic")
        ):
            for arg in node.args[1:]:
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    trees += _trees(arg.value, depth + 1) or []
    return trees


def _dotted(node, aliases: dict) -> str | None:
    """``a.b.c`` (or ``getattr(a.b, "c")``) as a dotted name, the head
    resolved through the cell's imports (``import grader.kernel as k``)."""
    import ast

    parts = []
    while True:
        if isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "getattr"
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
        ):
            parts.append(node.args[1].value)
            node = node.args[0]
        elif isinstance(node, ast.Name):
            parts.append(aliases.get(node.id, node.id))
            return ".".join(reversed(parts))
        else:
            return None


def uses_internals(source: str) -> bool:
    """True if ``source`` imports or reaches the grader's internals, however
    spaced or aliased (``import grader . kernel . runners as R``, ``from
    grader import kernel``, ``import sys as s; s.modules``). Code that does
    not parse is left to the ``SUSPICIOUS`` patterns."""
    import ast

    trees = _trees(source)
    if trees is None:
        return False
    aliases: dict[str, str] = {}
    names: list[str] = []
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name == "grader" or a.name.startswith("grader."):
                        return True  # no exercise needs the grader
                    names.append(a.name)
                    head = a.name if a.asname else a.name.split(".")[0]
                    aliases[a.asname or head] = head
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                if node.module == "grader" or node.module.startswith("grader."):
                    return True
                for a in node.names:
                    full = f"{node.module}.{a.name}"
                    names.append(full)
                    aliases[a.asname or a.name] = full
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and node.id in INTERNAL_NAMES:
                return True
            if isinstance(node, ast.Attribute | ast.Call):
                dotted = _dotted(node, aliases)
                if dotted is not None:
                    names.append(dotted)
    return any(INTERNALS.match(n) for n in names)


def stage_one(
    folder: Path,
    dest: Path,
    assignment: str,
    templates: dict,
    ev,
    folder_fd: int | None = None,
) -> Path | None:
    """Stage one submission folder; returns the staged notebook or None.

    ``folder_fd``: the folder, opened by the caller (``stage`` opens every
    component with O_NOFOLLOW); else ``folder`` is opened here, refused if it
    is a link."""
    if folder_fd is not None:
        return _stage_fd(folder_fd, Path(folder), Path(dest), assignment, templates, ev)
    try:
        fd = os.open(folder, _DIR)
    except OSError as exc:
        if os.path.islink(folder):
            ev.flag(
                "link",
                f"{shown(Path(folder).name)}/ is a symbolic link (to "
                f"{shown(os.readlink(folder))}); it was not followed",
            )
        else:
            ev.flag(
                "missing",
                f"{shown(Path(folder).name)}/ cannot be read ({exc.strerror})",
            )
        return None
    try:
        return _stage_fd(fd, Path(folder), Path(dest), assignment, templates, ev)
    finally:
        os.close(fd)


def _inventory(fd: int, assignment: str) -> tuple[list, list]:
    """Every entry of the submission folder (bounded), plus the names that
    matter looked up directly, whatever the bounds cut."""
    entries, skipped = tree(fd)
    device = os.fstat(fd).st_dev
    for name in (f"{assignment}.ipynb", TIMESTAMP, SECRET):
        if not any(e.parts == (name,) for e in entries):
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except OSError:
                continue
            entries.append(Entry((name,), _kind(st, device), st.st_size, st.st_mtime))
            if entries[-1].kind == "link":
                entries[-1].target = os.readlink(name, dir_fd=fd)
    return entries, skipped


REFUSED = {
    "link": "a symbolic link",
    "mount": "a mount point",
    "special": "not a regular file",
}


def _flag_refused(entries, ev) -> None:
    """Links, mount points and special files: named, never opened."""
    refused = [e for e in entries if e.kind in REFUSED]
    if not refused:
        return
    listed = "; ".join(
        f"{e.show()} ({REFUSED[e.kind]}"
        + (f" to {shown(e.target)}" if e.target else "")
        + ")"
        for e in refused[:10]
    )
    more = f"; and {len(refused) - 10} more" if len(refused) > 10 else ""
    ev.flag("link", f"never opened or copied: {listed}{more}")


def _choose_notebook(fd, entries, notebooks, template, expected, ev):
    """The notebook to grade: ``expected`` if it is there, else the one most
    like the assignment (flag ``renamed``); None, and False if ``expected``
    is a link or not a file (not graded)."""
    given = next((e for e in entries if e.parts == (expected,)), None)
    if given is not None and given.kind != "file":
        ev.flag(
            "link",
            f"the notebook {expected} is "
            f"{'a symbolic link' if given.kind == 'link' else 'not a file'}"
            f"{' (to ' + shown(given.target) + ')' if given.target else ''}; "
            f"not graded",
        )
        return False
    if given is not None:
        return given
    if not notebooks:
        return None

    def score(e):
        nb = _read_notebook(fd, e.parts, _Quiet())
        return (affinity(nb, template) if nb else -1, e.mtime)

    chosen = max(notebooks[:MAX_CANDIDATES], key=score)
    ev.flag("renamed", f"no {expected}; graded {chosen.show()}")
    return chosen


def _flag_extras(rest, others, skipped, ev) -> None:
    """Files that are not the graded notebook: never given to the kernel."""
    if not (rest or skipped):
        return
    names = ", ".join(e.show() for e in rest[:10])
    if len(rest) > 10:
        names += f" and {len(rest) - 10} more"
    parts = [f"not given to the kernel: {names}" if rest else ""]
    parts += [f"not looked at: {s}" for s in skipped]
    ev.flag("extra-files", "; ".join(x for x in parts if x))
    shadow = [e.show() for e in others if len(e.parts) == 1 and shadows(e.name)]
    if shadow:
        ev.flag("shadowing", f"named like importable modules: {', '.join(shadow)}")


def _is_this_assignment(nb, chosen, templates, assignment, ev) -> bool:
    """False (flag ``wrong-assignment``) for another assignment's notebook."""
    template = templates[assignment]
    best = max(templates, key=lambda a: (affinity(nb, templates[a]), a == assignment))
    if best != assignment and affinity(nb, templates[best]) > affinity(nb, template):
        ev.flag(
            "wrong-assignment",
            f"{chosen.show()} is the notebook of {best!r}, not {assignment!r}",
        )
        return False
    if foreign(nb, template) > affinity(nb, template):
        guess = guess_assignment(nb)
        ev.flag(
            "wrong-assignment",
            f"{chosen.show()} is another assignment's "
            "notebook"
            + (f" (it defines the functions of {guess!r})" if guess else "")
            + f": {foreign(nb, template)} of its instructor cells are not "
            f"{assignment!r}'s, {affinity(nb, template)} are",
        )
        return False
    return True


def _write_staged(fd, entries, staged, dest: Path, assignment: str, ev) -> Path:
    """The staged notebook, plus nbgrader's timestamp and exchange secret
    (regular files only: a link was flagged and is not copied)."""
    nbformat.validate(staged)
    dest.mkdir(parents=True, exist_ok=True)
    path = dest / f"{assignment}.ipynb"
    nbformat.write(staged, str(path))
    for name in (TIMESTAMP, SECRET):
        entry = next((e for e in entries if e.parts == (name,)), None)
        if entry is None or entry.kind != "file":
            continue
        try:
            (dest / name).write_bytes(read_at(fd, (name,), MAX_SMALL_BYTES))
        except OSError as exc:
            ev.note(f"{name} was not copied ({exc.strerror})")
    return path


def _stage_fd(
    fd: int, folder: Path, dest: Path, assignment: str, templates: dict, ev
) -> Path | None:
    expected = f"{assignment}.ipynb"
    template = templates[assignment]
    entries, skipped = _inventory(fd, assignment)
    _flag_refused(entries, ev)
    notebooks, others = _candidates(entries)
    chosen = _choose_notebook(fd, entries, notebooks, template, expected, ev)
    if chosen is False:
        return None
    _flag_extras(
        [e for e in notebooks if e is not chosen] + others, others, skipped, ev
    )
    if chosen is None:
        ev.flag(
            "missing", f"no notebook in {shown(folder.name)}/ (expected {expected})"
        )
        return None
    nb = _read_notebook(fd, chosen.parts, ev)
    if nb is None or not _is_this_assignment(nb, chosen, templates, assignment, ev):
        return None
    kernel = (nb.metadata.get("kernelspec") or {}).get("name")
    expected_kernel = (template.metadata.get("kernelspec") or {}).get("name")
    if kernel != expected_kernel:
        ev.flag(
            "kernelspec",
            f"kernel {shown(str(kernel))!r} replaced by {expected_kernel!r}",
        )
    staged, code = rebuild(nb, template, ev)
    found = scan(code)
    if found:
        ev.flag("suspicious", "; ".join(found))
    check_provenance(staged, template, assignment, ev)
    return _write_staged(fd, entries, staged, dest, assignment, ev)


def _student_cells(nb) -> list[tuple[str, str]]:
    """(label, source) of the code cells the student wrote in a staged
    notebook: solution cells and their own cells."""
    cells = []
    for i, c in enumerate(nb.cells):
        meta = nbgrader_meta(c)
        if c.cell_type == "code" and (not meta or meta.get("solution")):
            cells.append((meta.get("grade_id") or f"cell {i + 1}", text(c.source)))
    return cells


def check_provenance(staged, template, assignment: str, ev) -> None:
    """Flag ready-made attention in the student's code (``grader.provenance``;
    the list per assignment: ``FORBIDDEN`` in ``grader/assignments/<slug>.py``)."""
    from grader import assignments

    try:
        forbidden = tuple(getattr(assignments.get(assignment), "FORBIDDEN", ()))
    except KeyError:
        forbidden = ()
    context = [
        (gid(c) or "cell", text(c.source))
        for c in template.cells
        if c.cell_type == "code"
        and nbgrader_meta(c).get("locked")
        and not nbgrader_meta(c).get("solution")
    ]
    found = provenance.scan(_student_cells(staged), forbidden, context)
    for note in found.calls:
        ev.flag("library-call", note)
    for note in found.dynamic:
        ev.flag("dynamic-code", note)


class _Quiet:
    def flag(self, *a, **k):
        pass

    def note(self, *a, **k):
        pass


def _load_quiet(path):
    return _load(path, _Quiet())


def templates_in(root: Path, release: str = "exercises") -> dict:
    found = {}
    for p in sorted((root / release).glob("*/*.ipynb")):
        if p.stem == p.parent.name:
            found[p.stem] = nbformat.read(str(p), as_version=4)
    return found


def digest(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def vouch(
    state_dir, run: str, student: str, assignment: str, notebook: str, sha256: str
) -> str:
    """The manifest's HMAC for one staged notebook (see the module docstring)."""
    return fresh.sign(state_dir, PURPOSE, run, student, assignment, notebook, sha256)


def manifest_key(student: str, assignment: str, notebook: str) -> str:
    return json.dumps([student, assignment, notebook])


def write_manifest(state_dir: Path, run: str, staged) -> Path:
    """Write ``<state>/staged-manifest.json`` for the staged notebooks."""
    entries = {}
    for item in staged:
        if item.notebook is None:
            continue
        nb = item.notebook.stem
        entries[manifest_key(item.student, item.assignment, nb)] = vouch(
            state_dir, run, item.student, item.assignment, nb, digest(item.notebook)
        )
    path = Path(state_dir) / MANIFEST
    tmp = path.with_suffix(".tmp")
    tmp.write_text(
        json.dumps({"run": run, "notebooks": entries}, indent=1, sort_keys=True)
    )
    os.chmod(tmp, 0o600)
    tmp.replace(path)
    return path


def _open_submission(base_fd: int, student: str, assignment: str, ev):
    """(descriptor of ``<student>/<assignment>``, None) or (None, refusal)."""
    fds = []
    try:
        for name in (student, assignment):
            parent = fds[-1] if fds else base_fd
            st = os.stat(name, dir_fd=parent, follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode):
                where = name if name == student else f"{student}/{assignment}"
                target = os.readlink(name, dir_fd=parent)
                ev.flag(
                    "link",
                    f"{shown(where)}/ is a symbolic link (to "
                    f"{shown(target)}); it was not followed: not graded",
                )
                return None
            if not stat.S_ISDIR(st.st_mode):
                ev.flag("missing", f"{shown(name)} is not a folder")
                return None
            fds.append(os.open(name, _DIR, dir_fd=parent))
        return os.dup(fds[-1])
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            ev.flag(
                "link",
                f"{shown(student)}/{shown(assignment)} became a link; not graded",
            )
        else:
            ev.flag(
                "missing",
                f"{shown(student)}/{shown(assignment)}/ cannot be "
                f"read ({exc.strerror})",
            )
        return None
    finally:
        for fd in fds:
            os.close(fd)


def stage(
    root: Path,
    state_dir: Path,
    assignments,
    students=None,
    submitted="submitted",
    release="exercises",
    log=None,
    run: str | None = None,
) -> list[Staged]:
    """Stage every submission of ``assignments`` into ``<state_dir>/staged``
    and write the manifest for run ``run`` (a new id if None: ``Staged.run``)."""
    root, state_dir = Path(root), Path(state_dir)
    out_dir = state_dir / "staged"
    shutil.rmtree(out_dir, ignore_errors=True)
    out_dir.mkdir(parents=True)
    run = run or secrets.token_hex(16)
    templates = templates_in(root, release)
    results = []
    base_fd = os.open(root / submitted, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for assignment in assignments:
            for student in students_with(root, submitted, assignment):
                if students is not None and student not in students:
                    continue
                ev = _events.Events(state_dir, assignment, student, "stage", log)
                item = Staged(student, assignment, events=ev, run=run)
                fd = None
                try:
                    fd = _open_submission(base_fd, student, assignment, ev)
                    if fd is not None:
                        item.notebook = stage_one(
                            root / submitted / student / assignment,
                            out_dir / student / assignment,
                            assignment,
                            templates,
                            ev,
                            folder_fd=fd,
                        )
                except Exception as exc:  # noqa: BLE001  (one bad file, not the batch)
                    ev.flag(
                        "malformed",
                        f"could not be staged: {type(exc).__name__}: "
                        f"{shown(str(exc), 200)}",
                    )
                    item.notebook = None
                finally:
                    if fd is not None:
                        os.close(fd)
                ev.save()
                results.append(item)
    finally:
        os.close(base_fd)
    write_manifest(state_dir, run, results)
    return results
