"""Every way into autograde is the hardened way: ``RequireStaged``.

``python -m grader grade`` stages each submission (``grader.staging``: links
refused, foreign and renamed notebooks handled, test cells rebuilt from the
release, ready-made attention flagged) before nbgrader autogrades the staged
copies. ``nbgrader autograde`` run by hand, or the formgrader's *autograde*
button (``NbGraderAPI.autograde``, which runs the same ``Autograde`` app with
the same configuration), would grade ``submitted/`` directly and skip all of
that. ``RequireStaged`` runs first in the autograde pipeline
(``nbgrader_config.py``) and refuses -- raises, so nbgrader records a failure,
writes no score and shows the message -- unless the notebook comes from this
grading run's staging:

* nbgrader read it from ``<state>/staged`` inside the state folder it was
  given (a grading worker's private one, ``grader.cluster``);
* the run id in ``GRADER_STAGING_RUN`` (set by the worker for the Autograde
  it runs) is the one of ``<state>/staged-manifest.json``;
* the manifest holds, for this student, assignment and notebook, the HMAC of
  (run, student, assignment, notebook, SHA-256 of the file's bytes) with the
  course secret (``grader.fresh.sign``), and it matches the file nbgrader read.

A student controls the notebook's bytes and metadata, not the state folder
and not the secret: a marker written into the notebook is never looked at, and
a changed byte changes the digest.
"""

import hashlib
import hmac
import json
import os
from pathlib import Path

from nbgrader.preprocessors import NbGraderPreprocessor
from traitlets import Unicode

from grader import staging

RUN_ENV = staging.RUN_ENV
SAFE_COMMAND = "python -m grader grade"
MESSAGE = (
    "refused to autograde {who}: {why}. Submissions of this course are graded "
    "only after the grader has staged and checked them (links, renamed or "
    "foreign notebooks, rebuilt test cells). Grade with `{command}` (or "
    "`make grade`) from the course folder; it runs nbgrader autograde itself, "
    "on the staged copies."
)


class RefusedSubmission(RuntimeError):
    """Autograde was asked to grade a notebook that grading did not stage."""


def _inside(path: Path, folder: Path) -> bool:
    try:
        path.resolve().relative_to(folder.resolve())
        return True
    except ValueError:
        return False


def check(
    state_dir, folder, student: str, assignment: str, notebook: str, run: str | None
) -> str | None:
    """Why ``<folder>/<notebook>.ipynb``, the submission of ``student`` for
    ``assignment`` that nbgrader read, may not be autograded (None: it is this
    run's staged copy)."""
    if not state_dir:
        return "no grader state folder is configured"
    state = Path(state_dir)
    folder = Path(folder)
    if not _inside(folder, state / "staged"):
        return (
            f"it was read from {folder}, not from the grader's staged copies "
            f"in {state / 'staged'}"
        )
    if not run:
        return f"{RUN_ENV} is not set (this is not a grading run)"
    try:
        manifest = json.loads((state / staging.MANIFEST).read_text())
        entries = manifest["notebooks"]
    except (OSError, ValueError, KeyError, TypeError):
        return "there is no staging manifest"
    if not isinstance(entries, dict) or manifest.get("run") != run:
        return "the staging manifest belongs to another grading run"
    expected = entries.get(staging.manifest_key(student, assignment, notebook))
    if not isinstance(expected, str):
        return "grading did not stage this notebook"
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            raw = staging.read_at(
                fd, (f"{notebook}.ipynb",), staging.MAX_NOTEBOOK_BYTES
            )
        finally:
            os.close(fd)
    except OSError as exc:
        return f"the staged notebook cannot be read ({exc.strerror})"
    actual = staging.vouch(
        state, run, student, assignment, notebook, hashlib.sha256(raw).hexdigest()
    )
    if not hmac.compare_digest(actual, expected):
        return "the notebook is not the one grading staged (changed or forged)"
    return None


class RequireStaged(NbGraderPreprocessor):
    """See the module docstring. First in ``Autograde.autograde_preprocessors``."""

    state_dir = Unicode(
        "", help="grader-only folder (default: the GuardedExecute.state_dir setting)"
    ).tag(config=True)

    def preprocess(self, nb, resources):
        info = resources.get("nbgrader", {})
        student, assignment = info.get("student"), info.get("assignment")
        notebook = info.get("notebook")
        who = f"{student}/{assignment}/{notebook}.ipynb"
        converter = getattr(getattr(self, "parent", None), "parent", None)
        coursedir = getattr(converter, "coursedir", None)
        state = self.state_dir or self.config.GuardedExecute.get("state_dir", "")
        if coursedir is None or not (student and assignment and notebook):
            why = "the grader cannot tell where this notebook was read from"
        else:
            why = check(
                state,
                coursedir.format_path(
                    coursedir.submitted_directory, student, assignment
                ),
                student,
                assignment,
                notebook,
                os.environ.get(RUN_ENV),
            )
        if why:
            message = MESSAGE.format(who=who, why=why, command=SAFE_COMMAND)
            self.log.error(message)
            raise RefusedSubmission(message)
        return nb, resources
