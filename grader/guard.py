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
* caps each cell's output (``max_output`` characters; errors and stderr are
  never dropped entirely, so they still cost points);
* watches the kernel's only writable host folder (its socket folder) and
  kills a kernel that fills it.

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
from time import monotonic

import nbformat
import numpy as np
from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbgrader.preprocessors import Execute
from nbgrader.utils import is_grade
from traitlets import Integer, Unicode

from grader import assignments, fresh, reference, sandbox
from grader import events as _events
from grader.kernel.observations import OURS
from grader.sandbox import SandboxedKernelManager

MAX_OURS = 4 * 1024 * 1024  # characters of our own reports per cell
DISK_LIMIT = 32 * 1024 * 1024  # bytes in the kernel's socket folder
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
MEMORY_WORDS = re.compile(r"Unable to allocate|can't allocate memory|bad_alloc|"
                          r"Cannot allocate memory|out of memory|\bOOM\b")


def error_output(ename: str, message: str):
    lines = message.splitlines() or [""]
    return nbformat.v4.new_output(
        "error", ename=ename, evalue=lines[0],
        traceback=[f"\x1b[0;31m{ename}\x1b[0m: {lines[0]}", *lines[1:]])


def label(cell, index: int) -> str:
    gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
    return gid or f"cell {index + 1}"


def _size(content) -> int:
    if "text" in content:
        return len(content["text"])
    if "data" in content:
        return sum(len(str(v)) for v in content["data"].values())
    return sum(len(str(t)) for t in content.get("traceback", []))


class GuardedExecute(Execute):
    """nbgrader's Execute, hardened: see the module docstring."""

    notebook_timeout = Integer(900, help="wall-clock seconds for a whole notebook, "
                               "kernel restarts included").tag(config=True)
    max_restarts = Integer(3, help="kernel restarts per notebook").tag(config=True)
    max_output = Integer(100_000, help="characters of output kept per cell"
                         ).tag(config=True)
    thread_slack = Integer(0, help="threads a cell may leave running above the "
                           "kernel's count after start (0: 32 + 4 per CPU)"
                           ).tag(config=True)
    state_dir = Unicode("", help="grader-only folder: secret, event logs"
                        ).tag(config=True)

    # -- per notebook ------------------------------------------------------
    def preprocess(self, nb, resources=None, km=None):
        from nbclient import NotebookClient

        NotebookClient.__init__(self, nb, km)
        self.reset_execution_trackers()
        self._check_assign_resources(resources)
        info = (resources or {}).get("nbgrader", {})
        self.student = info.get("student", "unknown")
        self.assignment = info.get("assignment", "unknown")
        self.events = _events.Events(self.state_dir, self.assignment, self.student,
                                     "execute", self.log)
        ctx = self.resources.setdefault("attncourse", {})
        ctx["status"] = self.status = {}
        self.tmp = Path(tempfile.mkdtemp(prefix="attn-grade-"))
        os.chmod(self.tmp, 0o711)
        self._kill_reason = None
        self._replaying = False
        self._out_chars = self._ours_chars = 0
        self._truncated = set()
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

    def _prepare_inputs(self):
        if self.assignment not in assignments.ASSIGNMENTS:
            self.inputs = None
            return None
        arrays = fresh.for_student(self.state_dir or self.tmp, self.assignment,
                                   self.student)
        folder = self.tmp / "inputs"
        folder.mkdir(mode=0o755)
        self.inputs = folder / "inputs.npz"
        with open(self.inputs, "wb") as f:
            np.savez(f, **fresh.inputs_only(arrays))
        os.chmod(self.inputs, 0o644)
        return reference.ReferenceData(arrays)

    def _run_notebook(self):
        self._start()
        history = []  # setup / solution cells to replay after a restart
        broken = False  # restart before the next cell (not at the end)
        for index, cell in enumerate(self.nb.cells):
            if cell.cell_type != "code" or not cell.source.strip():
                continue
            if broken and self._remaining() > 0:
                self._restart(history)
                broken = False
            if self._remaining() <= 0:
                self.events.flag("timeout", f"the notebook reached its time limit "
                                 f"({self.notebook_timeout} s) before "
                                 f"{label(cell, index)}")
                self._not_run(cell, index, f"not run: the notebook reached its time "
                              f"limit ({self.notebook_timeout} s)")
                continue
            if self.kc is None:
                self._not_run(cell, index, "not run: the kernel could not be "
                              "(re)started after the earlier failures")
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

    # -- kernel ------------------------------------------------------------
    def _start(self):
        rundir = Path(tempfile.mkdtemp(prefix="run-", dir=self.tmp))
        self.km = SandboxedKernelManager(config=self.config, rundir=rundir,
                                         inputs=self.inputs, kernel_name="python3")
        if not self.km.sandbox:
            self.events.flag("unsandboxed", "the kernel ran without the sandbox")
        self._kill_reason = None
        began = monotonic()
        try:
            self.start_new_kernel(cwd=str(rundir))
            self.start_new_kernel_client()
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
            self.events.note(f"no more kernel restarts (limit {self.max_restarts}); "
                             f"the remaining cells are not run")
            return
        if self._remaining() <= 0:
            return
        self.restarts += 1
        self.events.note(f"restarting the kernel ({self.restarts}) and replaying "
                         f"{len(history)} setup/solution cells")
        if not self._start():
            return
        for index in history:
            original = self.nb.cells[index]
            replay = copy.deepcopy(original)
            self._out_chars = self._ours_chars = 0
            self._truncated, self._replaying = set(), True
            try:
                self.execute_cell(replay, index, store_history=True)
                failed = None
            except (DeadKernelError, CellTimeoutError) as exc:
                failed = type(exc).__name__
            finally:
                self.nb.cells[index] = original
                self._replaying = False
            if failed or self._timed_out(replay):
                self.events.note(f"replaying {label(original, index)} failed "
                                 f"({failed or 'timeout'}); the remaining cells are "
                                 f"not run")
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
    def _run_cell(self, cell, index) -> str:
        self._out_chars = self._ours_chars = 0
        self._truncated = set()
        by_deadline = self._remaining() < (self.timeout or 10**9)
        began = monotonic()
        try:
            self.execute_cell(cell, index, store_history=True)
        except DeadKernelError:
            reason = self._death_reason() or "the kernel stopped"
            cell.outputs.append(error_output(
                "KernelDied", f"{reason} while running this cell; the grader "
                f"restarted the kernel and went on with the next cell"))
            self.events.flag("crashed", f"{label(cell, index)}: {reason}")
            if "SIGKILL" in reason or "memory" in reason:
                self.events.note("(SIGKILL may mean the memory limit)")
            self.status[index] = "crashed"
            return "crashed"
        except CellTimeoutError:
            limit = self._get_timeout(cell)
            others = self.km.process_count() if self.km is not None else 0
            if others:
                self.events.flag("runaway", f"{label(cell, index)}: {others} more "
                                 f"processes were running in the sandbox (a fork "
                                 f"bomb?); killed with the kernel")
            cell.outputs.append(error_output(
                "CellTimeoutError", f"this cell did not finish within {limit} s and "
                f"ignored the interrupt; the grader killed the kernel"))
            self.events.flag("timeout", f"{label(cell, index)}: no end after {limit} "
                             f"s and no reaction to the interrupt; kernel killed"
                             + (" (notebook time limit)" if by_deadline else ""))
            self.status[index] = "timeout"
            return "timeout"
        finally:
            self.events.time("cells", monotonic() - began)
        self.status[index] = "ran"
        if self._timed_out(cell):
            self.events.flag("timeout", f"{label(cell, index)}: interrupted after "
                             f"{self._get_timeout(cell)} s"
                             + (" (notebook time limit)" if by_deadline else ""))
        self._note_errors(cell, index)
        return "ran"

    @staticmethod
    def _timed_out(cell) -> bool:
        return any(o.get("output_type") == "error" and o.get("ename") ==
                   "CellTimeoutError" for o in cell.get("outputs", []))

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
        killed = self.km.kill_strays()
        if killed:
            self.events.flag("runaway", f"{label(cell, index)} left {killed} "
                             f"processes running; the grader killed them")
        slack = self.thread_slack or 32 + 4 * (os.cpu_count() or 1)
        count = self.km.thread_count()
        if count > self._threads0 + slack:
            self.events.flag("runaway", f"{label(cell, index)} left {count} threads "
                             f"running (limit {self._threads0 + slack}); the kernel "
                             f"was restarted without this cell")
            cell.outputs.append(error_output(
                "RunawayThreads", f"this cell left {count} threads running; the "
                f"grader restarted the kernel without it"))
            return "runaway"
        return "ran"

    def _not_run(self, cell, index, reason):
        cell.outputs = [error_output("NotExecuted", reason)]
        cell.execution_count = None
        self.status[index] = "not-run"

    # -- watchdog (called every second while a cell runs) ------------------
    async def _async_check_alive(self):
        km = self.km
        if km is not None and km.sandbox and self._kill_reason is None:
            used = 0
            try:
                for entry in os.scandir(km.rundir):
                    if entry.is_file(follow_symlinks=False):
                        used += entry.stat(follow_symlinks=False).st_size
            except OSError:
                pass
            if used > DISK_LIMIT:
                self._kill_reason = (f"the kernel wrote more than {DISK_LIMIT >> 20} "
                                     f"MiB to disk and was killed")
                pid = km.top_pid()
                if pid:
                    os.kill(pid, signal.SIGKILL)
        await super()._async_check_alive()

    # -- output limits -----------------------------------------------------
    def output(self, outs, msg, display_id, cell_index):
        content = msg.get("content", {})
        kind = msg.get("msg_type")
        size = _size(content)
        data = content.get("data") or {}
        if any(m in data for m in OURS):
            self._ours_chars += size
            return (super().output(outs, msg, display_id, cell_index)
                    if self._ours_chars <= MAX_OURS else None)
        budget = self.max_output - self._out_chars
        if size <= budget:
            self._out_chars += size
            return super().output(outs, msg, display_id, cell_index)
        if not self._truncated and not self._replaying:
            cell = self.nb.cells[cell_index]
            self.events.flag("output-limit", f"{label(cell, cell_index)}: more than "
                             f"{self.max_output} characters of output; truncated")
        if kind == "error":  # errors always count: keep a short traceback
            content["traceback"] = content.get("traceback", [])[-20:]
            return super().output(outs, msg, display_id, cell_index)
        key = content.get("name") if kind == "stream" else kind
        if key in self._truncated:
            return None
        self._truncated.add(key)
        if kind == "stream":  # keep a head (stderr must still be seen)
            keep = max(budget, 1000)
            content["text"] = (content["text"][:keep] + f"\n[... output truncated by "
                               f"the grader: more than {self.max_output} characters]\n")
            self._out_chars += keep
            return super().output(outs, msg, display_id, cell_index)
        return None
