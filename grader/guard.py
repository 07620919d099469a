"""Run a student notebook so that nothing it does stops the batch.

``GuardedExecute`` replaces nbgrader's ``Execute`` preprocessor in autograde
(``nbgrader_config.py``). Per notebook it

* draws the grading inputs (``grader.fresh``) and starts the
  kernel in the sandbox (``grader.sandbox``) with only those inputs;
* limits every cell (``Execute.timeout``, wall clock) and the whole notebook
  (``GuardedExecute.notebook_timeout``): a cell that runs too long is
  interrupted; one that ignores the interrupt gets its kernel killed;
* survives the kernel dying (``os._exit``, a segfault, the memory limit, a
  signal): the cell gets an error output saying what happened, a new kernel
  is started and the cells that ran before (setup and solution cells, not the
  tests, not the culprit) are replayed, then grading continues -- so only the
  part that broke loses points. After ``max_restarts`` restarts the remaining
  cells are marked as not run;
* after each cell kills processes the cell left behind (fork bombs,
  background jobs) and restarts the kernel without that cell if it left too
  many threads running;
* bounds what a notebook's outputs keep, in every form (``output()``,
  display updates, the stream log): each cell keeps at most ``max_output``
  characters, the whole notebook at most ``max_notebook_output``; past
  either, a cell keeps one short head of stdout and of stderr and one short
  error (so errors and stderr still cost points), nothing else, and a note;
  only the first ``max_cells`` code cells run (the release's cells always);
  our own reports are bounded per cell (``MAX_OURS``) and per notebook
  (``MAX_OURS_NOTEBOOK``);
* takes over the verdicts of the sandbox's watchdog (``grader.sandbox``):
  a kernel whose processes together use too much memory, that runs too many
  processes at once, or that fills its socket folder or floods its tmpfs'es
  with files, is killed and flagged (``memory``, ``runaway``, ``disk``).

It also keeps its own log of the message stream per executed cell
(``resources["attncourse"]["stream"]``): the order of the kernel's messages,
our reports (observations, integrity reports) as they arrived, every
``clear_output``, display update and comm message, messages that came for a
cell after it had finished, and whether the grader interrupted the cell.
nbclient applies ``clear_output`` and display updates without passing
``output()``; ``process_message`` and ``_update_display_id`` are hooked, so
updates are logged and capped too, an update carrying our reports is never
applied, and comm messages (widgets, which could redirect a cell's outputs)
are dropped. ``grader.verdicts`` judges from this log, not from what the
kernel left in the notebook.

Everything it sees is written to the submission's event log
(``grader.events``, phase ``execute``) and to nbgrader's log. The
per-cell status (``ran``, ``crashed``, ``timeout``, ``not-run``) goes to
``resources["attncourse"]`` for ``grader.verdicts``.
"""

import copy
import os
import re
import shutil
import signal
import tempfile
from pathlib import Path
from queue import Empty
from time import monotonic

import nbformat
import numpy as np
from nbclient.exceptions import (
    CellExecutionComplete,
    CellTimeoutError,
    DeadKernelError,
)
from nbclient.util import ensure_async, run_sync
from nbgrader.preprocessors import Execute
from nbgrader.utils import is_grade
from traitlets import Integer, Unicode

from grader import assignments, fresh, reference, sandbox
from grader import events as _events
from grader.kernel.observations import INTEGRITY, OBSERVATION, OURS
from grader.sandbox import SandboxedKernelManager

MAX_OURS = 4 * 1024 * 1024  # characters of our own reports per cell
# ... and per notebook: an honest notebook publishes at most 8 hidden-test
# results of at most 1 MiB each (recorder.MAX_RESULTS), base64 or not
MAX_OURS_NOTEBOOK = 32 * 1024 * 1024
MAX_LOGGED = 1000  # message tags kept per cell in the stream log
# past a cell's or the notebook's output budget: what one short error keeps
ERROR_CHARS = 300  # of its ename, its evalue, each traceback line
ERROR_LINES = 10  # traceback lines (the last ones)
STREAM_HEAD = 1000  # characters of a stream's head kept past the budget
CONTENT = ("display_data", "execute_result", "update_display_data", "clear_output")
SIGNALS = {
    signal.SIGSEGV: "a segmentation fault (SIGSEGV)",
    signal.SIGKILL: "SIGKILL (the memory or CPU-time limit, or the grader)",
    signal.SIGABRT: "an abort (SIGABRT)",
    signal.SIGBUS: "a bus error (SIGBUS)",
    signal.SIGXCPU: "the CPU-time limit (SIGXCPU)",
    signal.SIGFPE: "a floating-point exception (SIGFPE)",
    signal.SIGILL: "an illegal instruction (SIGILL)",
    signal.SIGTERM: "SIGTERM",
}
MEMORY_WORDS = re.compile(
    r"Unable to allocate|can't allocate memory|bad_alloc|"
    r"Cannot allocate memory|out of memory|\bOOM\b"
)


def error_output(ename: str, message: str):
    lines = message.splitlines() or [""]
    return nbformat.v4.new_output(
        "error",
        ename=ename,
        evalue=lines[0],
        traceback=[f"\x1b[0;31m{ename}\x1b[0m: {lines[0]}", *lines[1:]],
    )


def label(cell, index: int) -> str:
    gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
    return gid or f"cell {index + 1}"


MIN_OUTPUT = 100  # characters charged for any output (so <= 1 000 per cell)


def _number_size(value) -> int:
    """Characters of a number's JSON text, at least 8 (a bool or None: 8).
    An int is measured by its bits, never converted: ``str`` of an int over
    ``sys.get_int_max_str_digits()`` digits raises, and is slow below it."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 8
    if isinstance(value, float):
        return max(len(repr(value)), 8)
    digits = int(value.bit_length() * 0.30103) + 2  # one more, and a sign
    return max(digits, 8)


def _size(content) -> int:
    """Characters of a message's content (or an output), whatever its form:
    every string and key in it, nested or not (metadata, ``ename``,
    ``evalue``, a display id, ``execution_count`` too), a number by the
    length of its JSON text (at least 8), 8 for any other value.
    Iterative: a deeply nested payload cannot exhaust the stack."""
    total, todo = 0, [content]
    while todo:
        item = todo.pop()
        if isinstance(item, str):
            total += len(item)
        elif isinstance(item, dict):
            total += sum(len(k) if isinstance(k, str) else 8 for k in item)
            todo.extend(item.values())
        elif isinstance(item, (list, tuple)):
            total += 8
            todo.extend(item)
        else:
            total += _number_size(item)
    return total


def _clip(value, limit: int) -> str:
    """``value`` as at most ``limit`` characters (never ``str()`` of a huge
    object: a non-string is named by its type)."""
    if not isinstance(value, str):
        return "" if value is None else f"<{type(value).__name__}>"
    if len(value) <= limit:
        return value
    return value[:limit] + f"[... {len(value) - limit} characters cut by the grader]"


def short_error(content) -> dict:
    """An error message's content cut to a few kilobytes: ``ename`` and
    ``evalue`` clipped, the last ``ERROR_LINES`` traceback lines, each
    clipped."""
    traceback = content.get("traceback") if isinstance(content, dict) else None
    lines = traceback[-ERROR_LINES:] if isinstance(traceback, list) else []
    return {
        "ename": _clip(content.get("ename"), ERROR_CHARS) or "Error",
        "evalue": _clip(content.get("evalue"), ERROR_CHARS),
        "traceback": [_clip(t, ERROR_CHARS) for t in lines],
    }


# the message kinds the stream log names; any other is logged as "other"
# (a hostile kernel's message type can be megabytes long)
KINDS = {
    k: k
    for k in (
        "display_data",
        "execute_result",
        "update_display_data",
        "clear_output",
        "error",
        "stream",
        "status",
        "execute_input",
    )
}


def _kind(kind) -> str:
    if isinstance(kind, str) and kind.startswith("comm"):
        return "comm"
    return KINDS.get(kind, "other") if isinstance(kind, str) else "other"


def _malformed(content) -> bool:
    """Content nbclient would choke on (a hostile kernel's message), or keep
    unbounded: an ``execution_count`` that is not a number (nbclient sets
    it on the cell from any message)."""
    if not isinstance(content, dict):
        return True
    for key in ("data", "metadata", "transient"):
        if content.get(key) is not None and not isinstance(content[key], dict):
            return True
    count = content.get("execution_count")
    return count is not None and not isinstance(count, int)


# the message kinds that carry our reports (an update of one is never
# applied); a stream or an error with our mime type in a "data" dict is the
# student's, charged like any other
OURS_KINDS = ("display_data", "execute_result")


def _ours_in(content, kind=None) -> str | None:
    """Our report's mime type in a message's content, if it has one; with
    ``kind``, only for a message of a kind that can carry one
    (``OURS_KINDS`` and display updates)."""
    if kind is not None and kind not in (*OURS_KINDS, "update_display_data"):
        return None
    data = content.get("data") if isinstance(content, dict) else None
    if not isinstance(data, dict):
        return None
    return next((m for m in OURS if m in data), None)


class GuardedExecute(Execute):
    """nbgrader's Execute, hardened: see the module docstring."""

    notebook_timeout = Integer(
        900, help="wall-clock seconds for a whole notebook, kernel restarts included"
    ).tag(config=True)
    max_restarts = Integer(3, help="kernel restarts per notebook").tag(config=True)
    max_output = Integer(100_000, help="characters of output kept per cell").tag(
        config=True
    )
    # the reference solutions print under 200 characters per notebook (every
    # output is charged at least MIN_OUTPUT: under 1 000); 4 cells at the cap
    max_notebook_output = Integer(
        400_000, help="characters of output kept per notebook (all cells)"
    ).tag(config=True)
    # the releases have 8-14 code cells; a student's own cells past the bound
    # are not run (the release's cells always are)
    max_cells = Integer(
        500, help="code cells run per notebook (the release's cells always run)"
    ).tag(config=True)
    thread_slack = Integer(
        0,
        help="threads a cell may leave running above the "
        "kernel's count after start (0: 32 + 4 per CPU)",
    ).tag(config=True)
    state_dir = Unicode("", help="grader-only folder: secret, event logs").tag(
        config=True
    )

    # -- per notebook ------------------------------------------------------
    def preprocess(self, nb, resources=None, km=None):
        from nbclient import NotebookClient

        NotebookClient.__init__(self, nb, km)
        self.reset_execution_trackers()
        self._check_assign_resources(resources)
        info = (resources or {}).get("nbgrader", {})
        self.student = info.get("student", "unknown")
        self.assignment = info.get("assignment", "unknown")
        self.events = _events.Events(
            self.state_dir, self.assignment, self.student, "execute", self.log
        )
        ctx = self.resources.setdefault("attncourse", {})
        ctx["status"] = self.status = {}
        ctx["stream"] = self.stream = {}  # cell index -> what the grader saw
        ctx["touched"] = self._touched = {}  # cell index -> display updates
        ctx["spawned"] = self._spawned = {}  # test cell -> processes it started
        self._current, self._by_msg = None, {}
        self._runs, self._kernel_interrupted = 0, False
        self.tmp = Path(tempfile.mkdtemp(prefix="attn-grade-"))
        os.chmod(self.tmp, 0o711)
        self._kill_reason = None
        self._iopub_watch = None  # sandbox.watch_disconnects of the kernel's iopub
        self._replaying = False
        self._new_notebook_budget()
        self.restarts = 0
        began = monotonic()
        try:
            ctx["reference"] = self._prepare_inputs()
            self._deadline = monotonic() + self.notebook_timeout
            self._run_notebook()
        except Exception as exc:  # noqa: BLE001  (never lose the whole batch)
            self.log.exception("grading %s/%s failed", self.student, self.assignment)
            self.events.flag("grader-error", f"{type(exc).__name__}: {exc}")
            for index, cell in enumerate(self.nb.cells):
                if cell.cell_type == "code" and index not in self.status:
                    self._not_run(cell, index, "the grader failed before this cell")
        finally:
            self._stop()
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.events.time("notebook", monotonic() - began)
            self.events.save()
        return self.nb, self.resources

    def _new_notebook_budget(self):
        """Output counters of a new notebook (``output()``, ``_log``)."""
        self._nb_chars = self._nb_ours = 0  # kept in this notebook so far
        self._nb_over = False  # the notebook's budget was exceeded
        self._new_cell_budget()

    def _new_cell_budget(self):
        """Output counters of one execution of a cell."""
        self._out_chars = self._ours_chars = 0
        self._ours_over = False
        self._truncated = set()  # what this cell already kept past the budget

    def _prepare_inputs(self):
        if self.assignment not in assignments.ASSIGNMENTS:
            self.inputs = None
            return None
        arrays = fresh.for_student(
            self.state_dir or self.tmp, self.assignment, self.student
        )
        folder = self.tmp / "inputs"
        folder.mkdir(mode=0o755)
        self.inputs = folder / "inputs.npz"
        with open(self.inputs, "wb") as f:
            np.savez(f, **fresh.inputs_only(arrays))
        os.chmod(self.inputs, 0o644)
        return reference.ReferenceData(arrays)

    def _skipped_cells(self) -> list[int]:
        """The student's own code cells past ``max_cells`` (the release's
        cells, which carry nbgrader ids, are always run and counted first)."""
        code = [
            i
            for i, c in enumerate(self.nb.cells)
            if c.cell_type == "code" and str(c.source).strip()
        ]
        own = [
            i
            for i in code
            if not self.nb.cells[i]
            .get("metadata", {})
            .get("nbgrader", {})
            .get("grade_id")
        ]
        allowed = max(self.max_cells - (len(code) - len(own)), 0)
        return own[allowed:]

    def _run_notebook(self):
        self._start()
        history = []  # setup / solution cells to replay after a restart
        broken = False  # restart before the next cell (not at the end)
        skipped = set(self._skipped_cells())
        if skipped:
            first = min(skipped)
            self.events.flag(
                "output-limit",
                f"the notebook has {len(skipped)} code cells of its own past the "
                f"limit of {self.max_cells} code cells; from "
                f"{label(self.nb.cells[first], first)} on they were not run",
            )
        for index, cell in enumerate(self.nb.cells):
            if cell.cell_type != "code" or not cell.source.strip():
                continue
            if index in skipped:  # one note, not one output per cell
                cell.outputs, cell.execution_count = [], None
                if index == first:
                    cell.outputs.append(
                        error_output(
                            "OutputLimit",
                            f"not run: the notebook has more than "
                            f"{self.max_cells} code cells; the grader ran the "
                            f"first ones and every test, not the {len(skipped)} "
                            f"extra cells from here on",
                        )
                    )
                self.status[index] = "not-run"
                continue
            if broken and self._remaining() > 0:
                self._restart(history)
                broken = False
            if self._remaining() <= 0:
                self.events.flag(
                    "timeout",
                    f"the notebook reached its time limit "
                    f"({self.notebook_timeout} s) before "
                    f"{label(cell, index)}",
                )
                self._not_run(
                    cell,
                    index,
                    f"not run: the notebook reached its time "
                    f"limit ({self.notebook_timeout} s)",
                )
                continue
            if self.kc is None:
                self._not_run(
                    cell,
                    index,
                    "not run: the kernel could not be "
                    "(re)started after the earlier failures",
                )
                continue
            outcome = self._run_cell(cell, index)
            if outcome == "ran":
                outcome = self._after_cell(cell, index)
            if outcome == "ran":
                if not is_grade(cell):
                    history.append(index)
                continue
            self._stop()
            broken = True
        if self.kc is not None:
            self._barrier()

    # -- kernel ------------------------------------------------------------
    def _start(self):
        rundir = Path(tempfile.mkdtemp(prefix="run-", dir=self.tmp))
        self.km = SandboxedKernelManager(
            config=self.config, rundir=rundir, inputs=self.inputs, kernel_name="python3"
        )
        if not self.km.sandbox:
            self.events.flag("unsandboxed", "the kernel ran without the sandbox")
        self._kill_reason = None
        self._runs, self._kernel_interrupted, self._by_msg = 0, False, {}
        began = monotonic()
        try:
            self.start_new_kernel(cwd=str(rundir))
            self.start_new_kernel_client()
            self._iopub_watch = sandbox.watch_disconnects(self.kc.iopub_channel.socket)
            self.wait_for_reply(self.kc.kernel_info())
            self.events.time("kernel_start", monotonic() - began)
        except Exception as exc:  # noqa: BLE001
            reason = self._death_reason() or f"{type(exc).__name__}: {exc}"
            self.events.flag("crashed", f"the kernel could not start: {reason}")
            self._stop()
            return False
        self._threads0 = self.km.thread_count()
        return True

    def _stop(self):
        watch = getattr(self, "_iopub_watch", None)
        if watch is not None:
            watch.close()
            self._iopub_watch = None
        km = getattr(self, "km", None)
        began = monotonic()
        if km is not None:
            pids = km.all_pids()
            try:
                self._cleanup_kernel()
            except Exception:  # noqa: BLE001
                self.log.debug("kernel cleanup failed", exc_info=True)
            shutil.rmtree(km.rundir, ignore_errors=True)
            end = monotonic() + 5  # let a killed sandbox's processes go away
            while monotonic() < end and any(sandbox.running(p) for p in pids):
                import time

                time.sleep(0.05)
            self.events.time("kernel_stop", monotonic() - began)
        self.km = self.kc = None

    def _restart(self, history):
        if self.restarts >= self.max_restarts:
            self.events.note(
                f"no more kernel restarts (limit {self.max_restarts}); "
                f"the remaining cells are not run"
            )
            return
        if self._remaining() <= 0:
            return
        self.restarts += 1
        self.events.note(
            f"restarting the kernel ({self.restarts}) and replaying "
            f"{len(history)} setup/solution cells"
        )
        if not self._start():
            return
        for index in history:
            original = self.nb.cells[index]
            replay = copy.deepcopy(original)
            self._new_cell_budget()
            self._replaying = True
            self._begin(index, replay=True)
            try:
                self.execute_cell(replay, index, store_history=True)
                failed = None
            except (DeadKernelError, CellTimeoutError) as exc:
                failed = type(exc).__name__
            finally:
                self.nb.cells[index] = original
                self._replaying, self._current = False, None
            if failed or self._timed_out(replay):
                self.events.note(
                    f"replaying {label(original, index)} failed "
                    f"({failed or 'timeout'}); the remaining cells are "
                    f"not run"
                )
                self._stop()
                return
            self.km.kill_strays()

    def _remaining(self) -> float:
        return self._deadline - monotonic()

    def _get_timeout(self, cell):
        limit = self.timeout if self.timeout and self.timeout > 0 else 10**9
        return max(1, int(min(limit, self._remaining() + 1)))

    def _death_reason(self) -> str | None:
        if self._kill_reason:
            return self._kill_reason
        km = getattr(self, "km", None)
        if km is None:
            return None
        rc = None
        for _ in range(20):
            rc = km.exit_status()
            if rc is not None:
                break
            import time

            time.sleep(0.05)
        if rc is None:
            return None
        sig = rc - 128 if km.sandbox and rc > 128 else -rc if rc < 0 else None
        if sig:
            try:
                name = SIGNALS.get(signal.Signals(sig), signal.Signals(sig).name)
            except ValueError:
                name = f"signal {sig}"
            return f"the kernel was killed by {name}"
        return f"the kernel exited with code {rc} (os._exit, or a fatal error)"

    # -- cells -------------------------------------------------------------
    def _connection_dropped(self) -> bool:
        """Whether the kernel's iopub connection was dropped since last asked
        while the kernel lived: a kernel that died, or that the watchdog
        killed, drops it too, and that is its death, not a refused message."""
        watch = self._iopub_watch
        if watch is None or not watch():
            return False
        km = self.km
        return (
            km is not None
            and km.killed is None
            and km.exit_status() is None
            and km.kernel_pid() is not None
        )

    def _message_refused(self, cell, index) -> str:
        """The kernel sent a message frame over the sockets' size limit:
        ZeroMQ refused it unread and dropped the connection, so what the cell
        sent after it is lost too. Flagged, the kernel restarted."""
        size = f"{self.km.max_message_size / sandbox.MiB:g} MiB"
        cell.outputs.append(
            error_output(
                "OutputLimit",
                f"this cell sent one message larger than {size}; the grader "
                f"refused it unread, restarted the kernel and went on",
            )
        )
        self.events.flag(
            "output-limit",
            f"{label(cell, index)}: a message over {size} was refused unread "
            f"(the connection to the kernel was dropped); kernel restarted",
        )
        self.status[index] = "timeout"
        return "timeout"

    def _run_cell(self, cell, index) -> str:
        self._new_cell_budget()
        by_deadline = self._remaining() < (self.timeout or 10**9)
        began = monotonic()
        self._begin(index, replay=False)
        watch = self.km.watchdog if is_grade(cell) else None
        before = watch.mark() if watch is not None else 0
        try:
            self.execute_cell(cell, index, store_history=True)
        except DeadKernelError:
            reason = self._death_reason() or "the kernel stopped"
            cell.outputs.append(
                error_output(
                    "KernelDied",
                    f"{reason} while running this cell; the grader "
                    f"restarted the kernel and went on with the next cell",
                )
            )
            self.events.flag("crashed", f"{label(cell, index)}: {reason}")
            if "SIGKILL" in reason or "memory" in reason:
                self.events.note("(SIGKILL may mean the memory limit)")
            self.status[index] = "crashed"
            return "crashed"
        except CellTimeoutError:
            if self._connection_dropped():
                return self._message_refused(cell, index)
            limit = self._get_timeout(cell)
            others = self.km.process_count() if self.km is not None else 0
            if others:
                self.events.flag(
                    "runaway",
                    f"{label(cell, index)}: {others} more "
                    f"processes were running in the sandbox (a fork "
                    f"bomb?); killed with the kernel",
                )
            cell.outputs.append(
                error_output(
                    "CellTimeoutError",
                    f"this cell did not finish within {limit} s and "
                    f"ignored the interrupt; the grader killed the kernel",
                )
            )
            self.events.flag(
                "timeout",
                f"{label(cell, index)}: no end after {limit} "
                f"s and no reaction to the interrupt; kernel killed"
                + (" (notebook time limit)" if by_deadline else ""),
            )
            self.status[index] = "timeout"
            return "timeout"
        finally:
            self._current = None
            self.events.time("cells", monotonic() - began)
            if watch is not None and watch.most_processes > before:
                self._spawned[index] = watch.most_processes - before
        self.status[index] = "ran"
        if self._connection_dropped():
            self._message_refused(cell, index)  # the cell ended all the same
            self.status[index] = "ran"
        if self._timed_out(cell):
            self.events.flag(
                "timeout",
                f"{label(cell, index)}: interrupted after "
                f"{self._get_timeout(cell)} s"
                + (" (notebook time limit)" if by_deadline else ""),
            )
        self._note_errors(cell, index)
        return "ran"

    @staticmethod
    def _timed_out(cell) -> bool:
        return any(
            o.get("output_type") == "error" and o.get("ename") == "CellTimeoutError"
            for o in cell.get("outputs", [])
        )

    def _note_errors(self, cell, index):
        for o in cell.outputs:
            if o.get("output_type") != "error":
                continue
            text = f"{o.get('ename')}: {o.get('evalue')}"
            if o.get("ename") in ("SyntaxError", "IndentationError", "TabError"):
                self.events.flag("syntax-error", f"{label(cell, index)}: {text[:200]}")
            if o.get("ename") == "MemoryError" or MEMORY_WORDS.search(text):
                self.events.flag("memory", f"{label(cell, index)}: {text[:200]}")

    def _after_cell(self, cell, index) -> str:
        """Kill what the cell left running; restart if it left too many threads."""
        began = monotonic()
        try:
            return self._check_leftovers(cell, index)
        finally:
            self.events.time("checks", monotonic() - began)

    def _check_leftovers(self, cell, index) -> str:
        self.km.owner = f"{self.student}/{self.assignment}"
        if self._watchdog_killed():  # at the end of the cell: restart without it
            cell.outputs.append(
                error_output(
                    "KernelDied",
                    f"{self._kill_reason} at the end of this cell; the "
                    f"grader restarted the kernel without it",
                )
            )
            self.events.flag("crashed", f"{label(cell, index)}: {self._kill_reason}")
            return "crashed"
        killed = self.km.kill_strays()
        if killed:
            self.events.flag(
                "runaway",
                f"{label(cell, index)} left {killed} "
                f"processes running; the grader killed them",
            )
        slack = self.thread_slack or 32 + 4 * (os.cpu_count() or 1)
        count = self.km.thread_count()
        if count > self._threads0 + slack:
            self.events.flag(
                "runaway",
                f"{label(cell, index)} left {count} threads "
                f"running (limit {self._threads0 + slack}); the kernel "
                f"was restarted without this cell",
            )
            cell.outputs.append(
                error_output(
                    "RunawayThreads",
                    f"this cell left {count} threads running; the "
                    f"grader restarted the kernel without it",
                )
            )
            return "runaway"
        return "ran"

    def _not_run(self, cell, index, reason):
        cell.outputs = [error_output("NotExecuted", reason)]
        cell.execution_count = None
        self.status[index] = "not-run"

    # -- watchdog (called every second while a cell runs) ------------------
    async def _async_check_alive(self):
        self._watchdog_killed()
        await super()._async_check_alive()

    def _watchdog_killed(self) -> bool:
        """True if the sandbox's watchdog (``grader.sandbox.Watchdog``: memory of
        all the kernel's processes, their number, files in its tmpfs'es) killed
        the kernel; the first time, its reason becomes the kernel's death reason
        and its flag (``memory``, ``runaway``, ``disk``) is raised."""
        found = self.km.killed if self.km is not None else None
        if found and self._kill_reason is None:
            flag, reason = found
            self._kill_reason = reason
            self.events.flag(flag, reason)
        return found is not None

    # -- the message stream, as the grader saw it ----------------------------
    def _begin(self, index, replay):
        """Open the stream log of one execution of cell ``index``."""
        self._runs += 1
        entry = {
            "cell": index,
            "run": self._runs,
            "kernel": self.restarts,
            "lag": self._kernel_interrupted,
            "msg_id": None,
            "closed": False,
            "interrupted": False,
            "order": [],
            "content": 0,
            "streams": 0,
            "observations": [],
            "reports": [],
            "cleared": 0,
            "cleared_after_result": 0,
            "updates": 0,
            "comms": 0,
            "ours_updates": 0,
            "dropped": 0,
            "malformed": 0,
            "late": [],
        }
        if not replay:
            self.stream[index] = entry
        self._current = entry
        return entry

    async def _async_poll_output_msg(self, parent_msg_id, cell, cell_index):
        # nbclient's loop, plus: the cell's log learns its request id, and
        # messages for other requests (a cell that already finished) are logged
        entry = self._current
        if entry is not None:
            entry["msg_id"] = parent_msg_id
            self._by_msg[parent_msg_id] = entry
        while True:
            msg = await self._iopub_msg(None)
            if msg is None:
                continue
            if msg.get("parent_header", {}).get("msg_id") == parent_msg_id:
                try:
                    self.process_message(msg, cell, cell_index)
                except CellExecutionComplete:
                    return
            else:
                self._late(msg)

    async def _iopub_msg(self, timeout):
        """The next iopub message, or None for one that cannot be read: a
        frame that is not JSON, or that Python cannot parse (an int of more
        than ``sys.get_int_max_str_digits()`` digits, which a kernel that
        lifted its own limit can send) -- counted as malformed, never
        raised into the cell's execution."""
        try:
            return await ensure_async(self.kc.iopub_channel.get_msg(timeout=timeout))
        except ValueError:
            if self._current is not None:
                self._current["malformed"] += 1
            self.log.debug("unreadable iopub message", exc_info=True)
            return None

    def _late(self, msg):
        """A message for a request that is not running now: for a cell that
        has finished, a status or one of our reports means the cell's stream
        was cut short (a forged ``idle``) -- the real report came after it."""
        parent = (msg.get("parent_header") or {}).get("msg_id")
        entry = self._by_msg.get(parent)
        if entry is None or entry is self._current:
            return
        kind = _kind(msg.get("msg_type"))
        ours = _ours_in(msg.get("content"), kind)
        if (kind == "status" or ours) and len(entry["late"]) < 100:
            entry["late"].append(f"{kind} ({ours})" if ours else kind)

    async def _async_barrier(self, wait=10.0) -> bool:
        """After the last cell: read what the kernel still sends for earlier
        cells, up to the idle of a kernel_info request sent behind it."""
        msg_id = self.kc.kernel_info()
        end = monotonic() + wait
        while (left := end - monotonic()) > 0:
            try:
                msg = await self._iopub_msg(left)
            except Empty:
                break
            if msg is None:
                continue
            if (msg.get("parent_header") or {}).get("msg_id") != msg_id:
                self._late(msg)
            elif (
                msg.get("msg_type") == "status"
                and msg.get("content", {}).get("execution_state") == "idle"
            ):
                return True
        self.events.note("the kernel did not answer after the last cell")
        return False

    def _barrier(self):
        try:
            run_sync(self._async_barrier)()
        except Exception:  # noqa: BLE001  (a dead kernel: nothing more to read)
            self.log.debug("end-of-notebook barrier failed", exc_info=True)

    def process_message(self, msg, cell, cell_index):
        entry = self._current
        content = msg.get("content")
        if _malformed(content):
            if entry is not None:
                entry["malformed"] += 1
            return None  # never reaches nbclient
        if entry is not None:
            self._log(entry, msg.get("msg_type"), content)
        return super().process_message(msg, cell, cell_index)

    def _log(self, entry, kind, content):
        """Log one message of the running cell. What it keeps is bounded
        whatever the kernel sends: counters, at most ``MAX_LOGGED`` tags per
        cell (known message kinds only, any other is "other"), and our
        reports up to ``MAX_OURS`` per cell and ``MAX_OURS_NOTEBOOK`` per
        notebook (past either they are counted as ``dropped``: tampering)."""
        kind = _kind(kind)
        if kind == "stream":
            entry["streams"] += 1
            return
        if kind == "status":
            if content.get("execution_state") == "idle":
                entry["closed"] = True
            return
        if kind == "execute_input":
            return
        if kind == "comm":
            entry["comms"] += 1
            return
        mime = _ours_in(content, kind)
        tag = {OBSERVATION: "observation", INTEGRITY: "report"}.get(mime, kind)
        if kind == "update_display_data":
            entry["updates"] += 1
            if mime:
                entry["ours_updates"] += 1
                tag = (
                    "update (observation)" if mime == OBSERVATION else "update (report)"
                )
        elif kind == "clear_output":
            entry["cleared"] += 1
            if entry["observations"]:  # a clear before the result cannot replace it
                entry["cleared_after_result"] += 1
        if len(entry["order"]) < MAX_LOGGED:
            entry["order"].append(tag)
        if kind not in CONTENT:
            return
        position = entry["content"]
        entry["content"] += 1
        if mime and kind in OURS_KINDS:
            size = _size(content)
            self._ours_chars += size
            if not self._replaying:  # a replay's outputs are not kept
                self._nb_ours += size
            if self._ours_chars > MAX_OURS or self._nb_ours > MAX_OURS_NOTEBOOK:
                self._ours_over = True
            if self._ours_over:
                entry["dropped"] += 1
                return
            key = "observations" if mime == OBSERVATION else "reports"
            entry[key].append((position, content["data"][mime]))

    async def _async_handle_timeout(self, timeout, cell=None):
        if self._current is not None:  # the grader interrupts this cell
            self._current["interrupted"] = True
        self._kernel_interrupted = True
        return await super()._async_handle_timeout(timeout, cell)

    def handle_comm_msg(self, outs, msg, cell_index):
        """Grading needs no widgets: comm messages are logged, never applied
        (no widget state in memory, no Output widget taking over the outputs
        of a cell)."""
        return None

    def _update_display_id(self, display_id, msg):
        """A display update rewrites earlier outputs (in any cell) in place:
        log which cells it touches, never apply one that carries our reports,
        and count what it adds against the output budgets (the running
        cell's and the notebook's). Shrinking earns nothing back, so a loop
        of updates that grow and shrink pays for every growth."""
        targets = {
            c: list(i)
            for c, i in (self._display_id_map.get(display_id) or {}).items()
            if i
        }
        if not targets:
            return
        for index in targets:
            self._touched[index] = self._touched.get(index, 0) + 1
        content = msg.get("content") or {}
        if _ours_in(content, msg.get("msg_type")):
            return
        new, growth = _size(content), 0
        for index, positions in targets.items():
            outs = (
                self.nb.cells[index].get("outputs", [])
                if index < len(self.nb.cells)
                else []
            )
            growth += sum(
                new - (_size(outs[i]) if i < len(outs) else 0) for i in positions
            )
        if growth > self._budget():
            cell = self.nb.cells[self._current["cell"]] if self._current else {}
            where = label(cell, self._current["cell"]) if self._current else "?"
            self._over_budget(
                where,
                f"a display update of {new} characters was not applied",
                f"a display update of {new} characters was not applied (more "
                f"than {self.max_output} characters of output)",
            )
            return
        self._charge(max(growth, 0))
        try:
            super()._update_display_id(display_id, msg)
        except (IndexError, KeyError, TypeError, ValueError):
            self.log.debug("display update not applied", exc_info=True)

    def on_cell_executed(self, **kwargs):
        """nbgrader adds the reply's error to the cell when no error output
        with its name was kept: the reply is cut like any error past the
        budget (a kernel can send megabytes in it), and an execution count
        that is not a number is dropped."""
        cell, reply = kwargs.get("cell"), kwargs.get("execute_reply")
        if cell is not None and not isinstance(cell.get("execution_count"), int):
            cell["execution_count"] = None
        content = reply.get("content") if isinstance(reply, dict) else None
        if isinstance(content, dict) and content.get("status") == "error":
            content = {**content, **short_error(content)}
            kwargs["execute_reply"] = {**reply, "content": content}
        return super().on_cell_executed(**kwargs)

    # -- output limits -----------------------------------------------------
    def _budget(self) -> int:
        """Characters the running cell may still keep: what is left of its
        own budget and of the notebook's (a replay's outputs are thrown
        away: only its own)."""
        left = self.max_output - self._out_chars
        if not self._replaying:
            left = min(left, self.max_notebook_output - self._nb_chars)
        return left

    def _charge(self, size: int) -> None:
        self._out_chars += size
        if not self._replaying:
            self._nb_chars += size

    def _limit_text(self) -> str:
        """The limit the running cell has reached: its own or the notebook's."""
        if self._replaying or (
            self.max_output - self._out_chars
            <= self.max_notebook_output - self._nb_chars
        ):
            return f"{self.max_output} characters per cell"
        return f"{self.max_notebook_output} characters per notebook"

    def _over_budget(self, where: str, what: str, in_cell: str) -> None:
        """Flag output past a budget at ``where``: ``in_cell`` says what the
        cell's budget stopped (once per cell, see ``output()``); the
        notebook's budget is flagged once per notebook (``what`` stopped)."""
        if self._replaying:
            return
        if "per notebook" not in self._limit_text():
            self.events.flag("output-limit", f"{where}: {in_cell}")
        elif not self._nb_over:
            self._nb_over = True
            self.events.flag(
                "output-limit",
                f"{where}: {what}: the notebook's outputs passed "
                f"{self.max_notebook_output} characters; from here on each "
                f"cell keeps a short head of stdout and stderr and one "
                f"short error, and no display update is applied",
            )

    def _note_dropped(self, outs) -> None:
        """One note per cell where outputs were dropped (on stdout: it must
        not cost points)."""
        if "note" in self._truncated:
            return
        self._truncated.add("note")
        outs.append(
            nbformat.v4.new_output(
                "stream",
                name="stdout",
                text=f"[... outputs not kept by the grader: more than "
                f"{self._limit_text()}]\n",
            )
        )

    def output(self, outs, msg, display_id, cell_index):
        """Keep an output if it fits the cell's and the notebook's budgets
        (every output costs at least ``MIN_OUTPUT``). Past them a cell keeps
        one short error, one head of stdout and one of stderr (both cost
        points when they fail a test), nothing else, and a note."""
        content = msg.get("content", {})
        kind = msg.get("msg_type")
        # only a display or a result carries our reports (counted in _log:
        # MAX_OURS, MAX_OURS_NOTEBOOK); anything else is charged here
        if kind in OURS_KINDS and _ours_in(content):
            if self._ours_over:
                return None
            return super().output(outs, msg, display_id, cell_index)
        # an empty output still costs: many tiny outputs must hit the cap too
        size = max(_size(content), MIN_OUTPUT)
        budget = self._budget()
        if size <= budget:
            self._charge(size)
            return super().output(outs, msg, display_id, cell_index)
        if not self._truncated:  # the first output past the budget
            self._over_budget(
                label(self.nb.cells[cell_index], cell_index),
                "output truncated",
                f"more than {self.max_output} characters of output; truncated",
            )
        if kind == "error":  # errors always count: one short error per cell
            if "error" in self._truncated:
                self._note_dropped(outs)
                return None
            self._truncated.add("error")
            short = short_error(content)
            content.clear()
            content.update(short)
            self._charge(_size(short))
            return super().output(outs, msg, None, cell_index)
        if kind == "stream":  # a head of each (stderr must still be seen)
            name = "stderr" if content.get("name") == "stderr" else "stdout"
            if name in self._truncated:
                return None
            self._truncated.add(name)
            text = content.get("text")
            head = text[: max(budget, STREAM_HEAD)] if isinstance(text, str) else ""
            content.clear()
            content.update(
                name=name,
                text=f"{head}\n[... output truncated by the grader: more than "
                f"{self._limit_text()}]\n",
            )
            self._charge(len(head))
            return super().output(outs, msg, None, cell_index)
        self._note_dropped(outs)
        return None
