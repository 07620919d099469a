"""What happened while grading one submission: flags and notes, per phase.

Each phase of the grading command -- ``stage`` (reading and repairing the
submitted files), ``execute`` (running the notebook, ``guard``), ``verdicts``
(judging the hidden tests, ``verdicts``), ``cluster`` (the Dask task:
worker, retries, ``grader.dispatch``) -- writes its own section of
``<state dir>/log/<assignment>/<student>.json``; re-running a phase replaces
its section, so regrading is idempotent. ``report`` reads them back.

Flags (one word each, see FLAGS) summarise; notes say what exactly happened,
in the words the log and the report print.
"""

import hashlib
import json
import re
from pathlib import Path

FLAGS = {
    # collect (grader.collect)
    "impersonation": "this account put a submission into the exchange under "
    "another student's name, or files into another student's submission; "
    "refused (the other student's submission is untouched)",
    # stage
    "missing": "no notebook submitted for this assignment",
    "malformed": "the notebook file is empty, not JSON or not a notebook",
    "wrong-assignment": "the notebook belongs to another assignment",
    "renamed": "the notebook had another file name; it was graded",
    "extra-files": "other files were submitted; they were not given to the kernel",
    "shadowing": "a submitted file has the name of a module (e.g. numpy.py); removed",
    "old-format": "an older notebook format; converted to nbformat 4.5",
    "kernelspec": "the notebook asked for another kernel; graded with python3",
    "edited-tests": "test or locked cells were deleted, edited, moved or "
    "duplicated; the originals were graded",
    "suspicious": "the code uses things tests never need (exits, ctypes, "
    "sockets, grader files, ...); for review, no effect on the score",
    "link": "a symbolic link, mount point, special file or second name (hard "
    "link) of another account's file was submitted; it was never opened or "
    "followed (as the notebook or folder: not graded)",
    "too-large": "the notebook, a file, or the submission folder (size, "
    "entries, depth) is larger than the grader reads; not graded",
    "library-call": "the solution calls the course library's implementation or a "
    "built-in attention layer the exercise asks you to write; for "
    "review, no effect on the score",
    "dynamic-code": "the solution reaches code dynamically (importlib, eval, "
    "getattr with a computed name, ...), which the check for "
    "library calls cannot follow; for review, no effect on the score",
    # execute
    "timeout": "a cell or the notebook ran out of time",
    "crashed": "the kernel died (exit, segfault, killed) and was restarted",
    "memory": "a cell ran out of memory (one process, or the sandbox's processes "
    "together)",
    "disk": "the kernel wrote files where only sockets belong, or flooded its "
    "folders with files; it was killed",
    "runaway": "too many processes at once, or processes or threads left "
    "running; they were killed",
    "output-limit": "a cell or the notebook printed too much (or had too many "
    "cells); the output was truncated",
    "syntax-error": "a cell has a syntax error",
    "unsandboxed": "graded WITHOUT the sandbox (--no-sandbox)",
    "grader-error": "the grader failed on this submission (see the log)",
    # verdicts
    "tampered": "the code changed what grading relies on; later tests score 0",
    # finish
    "leak": "the feedback showed grader-only text or numbers; it was withheld "
    "(not in feedback/, see the notes) for the instructor to review",
}

PHASES = ("stage", "execute", "verdicts", "cluster", "finish")
PHASES = ("collect", *PHASES)  # collect: grader.collect, before grading
_SAFE = re.compile(r"[^A-Za-z0-9._@+-]")


def _file_name(text: str) -> str:
    """``text`` as a file name: itself when safe, else its safe characters and
    a hash of the whole (``x y`` and ``x_y`` must not share a log). A name
    with undecodable bytes (os.fsdecode's lone surrogates) hashes too."""
    safe = _SAFE.sub("_", text)
    if safe == text and safe not in ("", ".", ".."):
        return safe
    raw = text.encode("utf-8", "surrogatepass")
    return f"{safe[:64]}-{hashlib.sha256(raw).hexdigest()[:12]}"


def path(state_dir, assignment: str, student: str) -> Path:
    """``<state>/log/<assignment>/<student>.json``, one file per submission."""
    folder = Path(state_dir) / "log" / _file_name(assignment)
    return folder / f"{_file_name(student)}.json"


class Events:
    """Collects one phase's flags and notes; ``save()`` writes them."""

    def __init__(self, state_dir, assignment: str, student: str, phase: str, log=None):
        self.file = path(state_dir, assignment, student) if state_dir else None
        self.assignment, self.student, self.phase = assignment, student, phase
        self.flags: dict[str, list[str]] = {}
        self.notes: list[str] = []
        self.timings: dict[str, float] = {}  # seconds per step (benchmarks)
        self.log = log

    def flag(self, name: str, note: str = "") -> None:
        assert name in FLAGS, name
        notes = self.flags.setdefault(name, [])
        if note and note not in notes:
            notes.append(note)
            self.note(f"[{name}] {note}")

    def note(self, text: str) -> None:
        self.notes.append(text)
        if self.log is not None:
            self.log.warning("%s/%s: %s", self.student, self.assignment, text)

    def time(self, step: str, seconds: float) -> None:
        """Add ``seconds`` to the time spent in ``step`` (kernel start, cells...)."""
        self.timings[step] = round(self.timings.get(step, 0.0) + seconds, 4)

    def save(self) -> None:
        if self.file is None:
            return
        self.file.parent.mkdir(parents=True, exist_ok=True)
        data = read_file(self.file)
        data[self.phase] = {"flags": self.flags, "notes": self.notes}
        if self.timings:
            data[self.phase]["timings"] = self.timings
        _write(self.file, data)


def merge(state_dir, assignment: str, student: str, sections: dict) -> None:
    """Put the phases of ``sections`` (a grading log written elsewhere: a
    worker's) into this submission's log, replacing the same phases."""
    file = path(state_dir, assignment, student)
    data = read_file(file)
    data.update({k: v for k, v in sections.items() if k in PHASES})
    file.parent.mkdir(parents=True, exist_ok=True)
    _write(file, data)


def _write(file: Path, data: dict) -> None:
    """Replace ``file`` with ``data`` at once (a reader never sees half)."""
    tmp = file.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
    tmp.replace(file)


def read_file(file) -> dict:
    try:
        return json.loads(Path(file).read_text())
    except (OSError, ValueError):
        return {}


def load(state_dir, assignment: str, student: str) -> dict:
    """{"flags": {flag: [notes]}, "notes": [...]} over every phase."""
    data = read_file(path(state_dir, assignment, student))
    flags, notes = {}, []
    for phase in PHASES:
        section = data.get(phase) or {}
        for name, items in (section.get("flags") or {}).items():
            merged = flags.setdefault(name, [])
            merged.extend(i for i in items if i not in merged)
        notes.extend(section.get("notes") or [])
    return {"flags": flags, "notes": notes}


def timings(state_dir, assignment: str, student: str, phase: str = "execute") -> dict:
    """Seconds per step that ``phase`` recorded for one submission ({} if none)."""
    data = read_file(path(state_dir, assignment, student))
    return dict((data.get(phase) or {}).get("timings") or {})


def clear(state_dir, assignment: str, student: str, phases) -> None:
    file = path(state_dir, assignment, student)
    data = read_file(file)
    if any(p in data for p in phases):
        for p in phases:
            data.pop(p, None)
        file.write_text(json.dumps(data, indent=1, sort_keys=True))
