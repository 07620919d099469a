"""Autograde on Dask distributed: one task per submission, on any number of
machines, lost workers retried, nothing lost and nothing graded twice.

``python -m grader grade`` stages the submissions (``grader.staging``) on the
machine it runs on -- the *client* -- then sends one task per staged
submission (student x assignment) to a Dask cluster: with no address an
embedded ``LocalCluster`` of one single-threaded worker process per core; with
``--scheduler tls://HOST:8786`` (or ``GRADER_SCHEDULER``) the workers of an
existing cluster, started with ``python -m grader worker tls://HOST:8786`` (or
``dask worker ... --nthreads 1`` with the course on ``PYTHONPATH``), by
dask-jobqueue on Slurm/PBS or by dask-kubernetes.

A task carries what its worker needs and nothing grader-only: the staged
files, the seed of the student's fresh inputs (``grader.fresh``) and the
settings. The worker has its own copy of the course (the grader, the
assignments and their hidden reference data: the expected outputs are computed
there, outside the sandbox) and

1. checks itself (``worker_problem``): its course version (``course_version``,
   a hash of those files) is the client's, a bubblewrap sandbox starts, the
   gradebook is reachable -- else it refuses the task (``WorkerRefused``,
   naming the worker and the reason) and the client sends it to the others;
2. stages the files in a private folder, signs them into a manifest of its own
   (``grader.entry`` grades only signed copies) and runs nbgrader's
   ``Autograde`` app in its own process (nbgrader stays imported: no 2.6 s
   start per call), which runs the kernel in the sandbox, judges the hidden
   tests and writes the gradebook rows of this submission -- nbgrader's
   updates are keyed by (assignment, student), so a rerun replaces them;
3. runs nbgrader's ``GenerateFeedback`` there too, and returns the autograded
   folder, the feedback page and the events of the run; the client writes
   ``autograded/``, ``feedback/`` and the grading log (and scans the feedback
   for leaks before anything is released), so workers need no shared file system
   (the gradebook is the shared one: PostgreSQL, ``NBGRADER_DB_URL``; SQLite
   only where every worker sees the same file, as on one machine).

A worker that dies mid-task (killed, out of memory, machine lost) makes Dask
run the task again on another worker, up to Dask's
``distributed.scheduler.allowed-failures`` (3); after that, or when no worker
accepts it, the submission is flagged ``grader-error`` and scored 0 with a
note saying so (to be regraded), never a silent 0. Every worker that started a
task says so (a Dask event, topic ``EVENTS``): the report notes a retry and the
worker that was lost.
"""

import ast
import contextlib
import hashlib
import logging
import os
import resource
import secrets
import socket
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from grader import events as _events
from grader import locks, staging

EVENTS = "attncourse-grading"  # Dask event topic: a worker started a task
SCHEDULER_ENV = "GRADER_SCHEDULER"
ROOT_ENV = "GRADER_COURSE_ROOT"  # a worker's course folder (default: its own)
VERSIONED = ("grader", "attncourse", "solutions", "nbgrader_config.py")
MAX_TASK_FILES = 64 * 2**20  # bytes of files one task sends or returns


class WorkerRefused(RuntimeError):
    """A worker cannot grade for this client (course version, sandbox...)."""

    def __init__(self, worker: str, key: str, reason: str):
        super().__init__(worker, key, reason)
        self.worker, self.key, self.reason = worker, key, reason

    def __str__(self) -> str:
        return f"worker {self.worker} refused {self.key}: {self.reason}"


@dataclass
class Task:
    """One submission to grade, as the client sends it to a worker."""

    student: str
    assignment: str
    notebook: str  # the notebook's name, without .ipynb
    files: dict  # path in the staged folder -> bytes
    seed: int  # of the student's fresh inputs (grader.fresh)
    version: str  # the client's course_version
    db_url: str
    course_id: str
    config: dict = field(default_factory=dict)  # {"Section": {"trait": value}}
    sandboxed: bool = True

    @property
    def key(self) -> str:
        return f"{self.student}/{self.assignment}"


# -- the course version ---------------------------------------------------------
def _versioned_files(root: Path):
    for name in VERSIONED:
        top = root / name
        if top.is_file():
            yield top
            continue
        for path in sorted(top.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                yield path


def course_version(root) -> str:
    """A hash of what decides a grade: the grader, the course library the
    kernels import, the assignments with their hidden data, the nbgrader
    configuration (paths relative to ``root``, contents byte for byte)."""
    root = Path(root).resolve()
    digest = hashlib.sha256()
    for path in _versioned_files(root):
        digest.update(str(path.relative_to(root)).encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()[:16]


def worker_root() -> Path:
    from grader.nbgrader_cli import ROOT

    return Path(os.environ.get(ROOT_ENV) or ROOT).resolve()


def worker_name() -> str:
    try:
        from distributed import get_worker

        return get_worker().address
    except (ImportError, ValueError):
        return f"{socket.gethostname()} (pid {os.getpid()})"


@lru_cache(maxsize=8)
def worker_problem(version: str, sandboxed: bool, db_url: str) -> str | None:
    """Why this worker process cannot grade for a client of ``version`` (None:
    it can): checked once per process and settings, before every task and when
    the client asks every worker before sending any (``Client.run``)."""
    root = worker_root()
    mine = course_version(root)
    if mine != version:
        return (
            f"its course ({root}) is version {mine}, the client's is {version}: "
            f"update its copy of {', '.join(VERSIONED)}"
        )
    if sandboxed:
        from grader import sandbox

        problem = sandbox.check_available()
        if problem:
            return f"it cannot start the sandbox: {problem}"
    path = locks.sqlite_path(db_url)
    if path is not None and not path.exists():
        return (
            f"it cannot reach the gradebook {db_url} (use PostgreSQL across machines)"
        )
    return None


# -- one submission, on a worker --------------------------------------------------
_ONE_AT_A_TIME = threading.Lock()  # env, cwd and nbgrader state are per process


def grade_task(task: Task) -> dict:
    """Grade one submission on this worker (see the module docstring).

    Raises ``WorkerRefused`` when this worker cannot grade it; a failure of
    grading itself comes back as ``{"success": False, "error": ...}``."""
    worker = worker_name()
    problem = worker_problem(task.version, task.sandboxed, task.db_url)
    if problem:
        raise WorkerRefused(worker, task.key, problem)
    with _ONE_AT_A_TIME:
        _started(task, worker)
        began = time.monotonic()
        try:
            with tempfile.TemporaryDirectory(prefix="attn-task-") as tmp:
                result = _grade_in(Path(tmp), task)
        except Exception as exc:  # noqa: BLE001  (reported: grader-error)
            import traceback

            result = {
                "success": False,
                "error": f"{type(exc).__name__}: {exc}",
                "log": traceback.format_exc(),
                "files": {},
                "events": {},
            }
        result.update(
            worker=worker,
            seconds=round(time.monotonic() - began, 2),
            peak_rss_mib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10,
        )
        return result


def _started(task: Task, worker: str) -> None:
    try:
        from distributed import get_worker

        get_worker().log_event(EVENTS, {"key": task.key, "worker": worker})
    except (ImportError, ValueError):  # not on a Dask worker (tests, one process)
        pass


def _grade_in(tmp: Path, task: Task) -> dict:
    state, out, feedback = tmp / "state", tmp / "autograded", tmp / "feedback"
    folder = state / "staged" / task.student / task.assignment
    write_tree(folder, task.files)
    from grader import fresh

    fresh.pin_seed(state, task.assignment, task.student, task.seed)
    run = secrets.token_hex(16)
    notebook = folder / f"{task.notebook}.ipynb"
    staging.write_manifest(
        state, run, [staging.Staged(task.student, task.assignment, notebook)]
    )
    config = nbgrader_config(task, state, out, feedback)
    os.environ.update(locks.kernel_env())
    os.environ["GRADER_GRADE_ALL"] = "1"
    os.environ[staging.RUN_ENV] = run
    from nbgrader.apps.autogradeapp import Autograde
    from nbgrader.apps.generatefeedbackapp import GenerateFeedback

    outcome = run_app(Autograde, config, task, create_student=True)
    graded = out / task.student / task.assignment
    outcome["files"] = read_tree(graded) if graded.is_dir() else {}
    outcome["events"] = _events.read_file(
        _events.path(state, task.assignment, task.student)
    )
    outcome["feedback"] = {}
    if outcome["success"] and outcome["files"]:
        made = run_app(GenerateFeedback, config, task)
        page = feedback / task.student / task.assignment
        if made["success"] and page.is_dir():
            outcome["feedback"] = read_tree(page)
        outcome["log"] += made["log"]
        outcome["feedback_error"] = made["error"]
    return outcome


def nbgrader_config(task: Task, state: Path, out: Path, feedback: Path):
    """The course's nbgrader configuration with this task's settings and
    private folders (the staged copy, autograded/, feedback/, grading state)."""
    from traitlets.config import Config
    from traitlets.config.loader import PyFileConfigLoader

    from grader.hooks import strip_hidden

    root = worker_root()
    config = PyFileConfigLoader("nbgrader_config.py", path=str(root)).load_config()
    config.merge(Config(task.config))
    config.merge(
        Config(
            {
                "CourseDirectory": {
                    "root": str(root),
                    "submitted_directory": str(state / "staged"),
                    "autograded_directory": str(out),
                    "feedback_directory": str(feedback),
                    "db_url": task.db_url,
                    "course_id": task.course_id,
                },
                "GuardedExecute": {"state_dir": str(state)},
                "JudgeHiddenTests": {"state_dir": str(state)},
                "RequireStaged": {"state_dir": str(state)},
                "GenerateFeedback": {"post_convert_hook": strip_hidden(feedback)},
            }
        )
    )
    return config


def run_app(app_class, config, task: Task, **flags) -> dict:
    """One of nbgrader's converter apps, in this process, on this submission
    (forced: the task's folders are new)."""
    from nbgrader.coursedir import CourseDirectory
    from nbgrader.utils import capture_log

    coursedir = CourseDirectory(config=config)
    coursedir.assignment_id, coursedir.student_id = task.assignment, task.student
    app = app_class(coursedir=coursedir, config=config)
    app.force = True
    for name, value in flags.items():
        setattr(app, name, value)
    level = app.log.level
    app.log.setLevel(logging.INFO)  # what the nbgrader command logged: the
    try:  # steps, the sandbox's peaks (grader.sandbox), refusals
        with contextlib.chdir(worker_root()):
            result = capture_log(app)
    finally:
        app.log.setLevel(level)
    return {
        "success": bool(result.get("success")),
        "error": result.get("error", ""),
        "log": result.get("log", ""),
    }


def read_tree(folder: Path) -> dict:
    """{relative path: bytes} of the regular files under ``folder``."""
    files, total = {}, 0
    for path in sorted(folder.rglob("*")):
        if path.is_file() and not path.is_symlink():
            data = path.read_bytes()
            total += len(data)
            if total > MAX_TASK_FILES:
                raise ValueError(f"{folder} holds more than {MAX_TASK_FILES} bytes")
            files[str(path.relative_to(folder))] = data
    return files


def write_tree(folder: Path, files: dict) -> None:
    """Replace ``folder`` with ``files`` (paths must stay inside it: staged
    files on a worker, returned ones on the client)."""
    import shutil

    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    base = folder.resolve()
    for name, data in files.items():
        path = (base / name).resolve()
        if not path.is_relative_to(base):
            raise ValueError(f"a file outside its folder: {name!r}")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def parse_overrides(options) -> dict:
    """``["--Section.trait=value", ...]`` (nbgrader's command-line form) as a
    config dict; values are Python literals where they parse as one."""
    config: dict = {}
    for option in options:
        if not option.startswith("--") or "=" not in option or "." not in option:
            continue
        name, value = option[2:].split("=", 1)
        section, trait = name.rsplit(".", 1)
        try:
            parsed = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            parsed = value
        config.setdefault(section, {})[trait] = parsed
    return config


def log_lines(text: str, prefix: str):
    for line in (text or "").splitlines():
        if line.strip():
            yield f"{prefix}{line}"


def worker_main(argv=None) -> int:
    """``python -m grader worker tls://HOST:8786 [dask worker options]``: a Dask
    worker for this course -- one thread, no Dask memory limit (the sandbox
    limits each kernel), the course folder (``GRADER_COURSE_ROOT``, default
    this checkout) importable."""
    from distributed.cli.dask_worker import main

    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(worker_main.__doc__)
        return 0 if argv else 2
    root = worker_root()
    os.environ[ROOT_ENV] = str(root)
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    os.environ["PYTHONPATH"] = os.pathsep.join([str(root), *paths])
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    options = ["--nthreads", "1", "--memory-limit", "0"]
    given = {a.split("=", 1)[0] for a in argv}
    options = [o for i, o in enumerate(options) if options[i - (i % 2)] not in given]
    return main(args=[*argv, *options], prog_name="grader worker")
