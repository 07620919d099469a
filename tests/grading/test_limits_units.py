"""Fast tests of the sandbox's whole-sandbox limits (``grader.sandbox``).

How the watchdog counts memory (resident pages of a process tree, shared
pages once) and files (the sandbox's tmpfs'es, seen through its /proc root),
that it kills a tree over its total and spares one under it, and the same
through ``GuardedExecute`` with light kernels (flags ``memory`` and ``disk``).
The batch through the real grading command is ``test_grading_limits.py``.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import nbformat
import pytest
from support.ci import skip_or_fail

from grader import events as ev
from grader import sandbox

MiB = sandbox.MiB

# a parent that touches PARENT MiB, then forks CHILDREN children that each
# touch EACH MiB more (the parent's pages stay shared with them)
TREE = """\
import os, sys, time
parent, children, each = map(int, sys.argv[1:4])
shared = b"\\x01" * (parent * 2**20)
pids = []
for _ in range(children):
    pid = os.fork()
    if pid == 0:
        own = b"\\x02" * (each * 2**20)
        os.write(1, b"child\\n")
        time.sleep(60)
        os._exit(0)
    pids.append(pid)
os.write(1, b"parent\\n")
time.sleep(60)
"""


def start_tree(parent: int, children: int, each: int) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", TREE, str(parent), str(children), str(each)],
        stdout=subprocess.PIPE,
        text=True,
    )
    for _ in range(children + 1):
        assert proc.stdout.readline().strip() in ("child", "parent")
    return proc


def tree_pids(proc) -> list[int]:
    return [proc.pid, *sandbox.descendants(sandbox.process_tree(), proc.pid)]


def stop(proc) -> None:
    for pid in reversed(tree_pids(proc)):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait(10)


def test_memory_use_counts_each_process_and_shared_pages_once():
    proc = start_tree(parent=96, children=3, each=64)
    try:
        pids = tree_pids(proc)
        assert len(pids) == 4
        resident = sandbox.memory_use(pids, limit=10**15)  # under it: resident sum
        proportional = sandbox.memory_use(pids)  # no limit: PSS sum
        assert resident == pytest.approx(sum(sandbox.rss(p) for p in pids), rel=0.01)
        own = (96 + 3 * 64) * MiB
        # the forked children map the parent's 96 MiB too: counted 4 times there
        assert resident >= own + 3 * 96 * MiB
        # PSS counts it once: what the tree really holds, plus four interpreters
        assert own <= proportional <= own + 4 * 30 * MiB, proportional / MiB
        # above the limit the watchdog judges the PSS, not the resident sum
        assert sandbox.memory_use(pids, limit=own) == pytest.approx(
            proportional, rel=0.05
        )
    finally:
        stop(proc)
    assert sandbox.rss(proc.pid) == 0 and sandbox.pss(proc.pid) == 0  # gone


def fake_km(limit, sockets=None):
    return SimpleNamespace(
        total_memory_limit=limit, watch_interval=0.05, sockets=sockets
    )


def test_watchdog_kills_a_tree_of_small_processes_over_the_total():
    """Each process is far under any per-process limit; 5 x ~64 MiB together
    are over 200 MiB: every one of them is killed, and the reason says why."""
    proc = start_tree(parent=16, children=4, each=64)
    pids = tree_pids(proc)
    dog = sandbox.Watchdog(fake_km(200 * MiB), proc.pid, None)
    began = time.monotonic()
    dog.start()
    dog.join(10)
    try:
        assert not dog.is_alive() and dog.killed is not None
        assert time.monotonic() - began < 2
        flag, reason = dog.killed
        assert flag == "memory"
        assert "5 processes" in reason and "limit 0.195312 GiB" in reason, reason
        assert proc.wait(5) == -signal.SIGKILL
        time.sleep(0.2)
        assert not any(sandbox.running(p) for p in pids)  # the children too
        assert dog.peak_memory > 200 * MiB and dog.peak_processes == 5
    finally:
        stop(proc)


def test_watchdog_spares_a_tree_under_the_total_and_records_its_peak():
    proc = start_tree(parent=16, children=4, each=64)
    dog = sandbox.Watchdog(fake_km(1024 * MiB), proc.pid, None)
    dog.start()
    try:
        time.sleep(1)
        assert dog.is_alive() and dog.killed is None
        assert proc.poll() is None
        assert 4 * 64 * MiB < dog.peak_memory < 1024 * MiB
        assert "peak memory" in dog.summary() and "killed" not in dog.summary()
    finally:
        dog.stop()
        stop(proc)
    assert not dog.is_alive()


def test_watchdog_stops_by_itself_when_the_tree_is_gone():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    dog = sandbox.Watchdog(fake_km(1024 * MiB), proc.pid, None)
    dog.start()
    proc.wait(10)
    dog.join(5)
    assert not dog.is_alive() and dog.killed is None


# ---------------------------------------------------------------- files
FILES = """\
import os, sys
sockets = sys.argv[1]
print("ready", flush=True)
sys.stdin.readline()
written = 0
try:
    with open(f"{sockets}/data", "wb") as f:
        for _ in range(64):
            f.write(b"x" * 2**16)
            f.flush()
            written += 2**16
except OSError as e:
    print("full", written, e.errno, flush=True)
sys.stdin.readline()
os.makedirs("/tmp/flood")
for i in range(sandbox_files + 10):
    open(f"/tmp/flood/{i}", "w").close()
print("flooded", flush=True)
sys.stdin.readline()
"""


@pytest.fixture
def bwrap_sandbox(tmp_path):
    if sandbox.check_available() is not None:
        skip_or_fail(f"bubblewrap sandbox unavailable: {sandbox.check_available()}")
    limits = sandbox.Limits(sockets=256 * 1024)
    sockets = sandbox.socket_folder()
    code = FILES.replace("sandbox_files", str(sandbox.TMPFS_FILES))
    cmd = sandbox.command(
        [sys.executable, "-c", code, sockets],
        rundir=tmp_path,
        inputs=None,
        limits=limits,
        sockets=sockets,
    )
    proc = subprocess.Popen(
        cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout.readline().strip() == "ready"
        init = sandbox.process_tree()[proc.pid][0]
        yield SimpleNamespace(
            proc=proc,
            init=init,
            sockets=sockets,
            limits=limits,
            root=f"/proc/{init}/root",
        )
    finally:
        proc.kill()
        proc.wait(10)


def step(box) -> str:
    box.proc.stdin.write("\n")
    box.proc.stdin.flush()
    return box.proc.stdout.readline().strip()


def test_socket_folder_is_a_small_tmpfs_and_files_are_counted(bwrap_sandbox):
    box = bwrap_sandbox
    assert sandbox.over_disk_limits(box.root, box.sockets) is None  # at the start
    used, files = sandbox.folder_use(box.root + box.sockets)
    assert used == 0 and files <= 2
    # the socket folder fills up at its size: the host's disk is not involved
    full = step(box).split()
    assert full[0] == "full" and int(full[2]) == 28  # ENOSPC
    assert int(full[1]) <= box.limits.sockets
    reason = sandbox.over_disk_limits(box.root, box.sockets)
    assert reason and "to its socket folder" in reason, reason
    assert sandbox.folder_use(box.root + box.sockets)[0] <= box.limits.sockets


def test_a_flood_of_empty_files_in_tmp_is_over_the_limit(bwrap_sandbox, tmp_path):
    box = bwrap_sandbox
    step(box)
    os.remove(f"{box.root}{box.sockets}/data")  # the grader's view of the sandbox
    assert sandbox.over_disk_limits(box.root, box.sockets) is None
    assert step(box) == "flooded"
    reason = sandbox.over_disk_limits(box.root, box.sockets)
    assert reason and "files in /tmp" in reason, reason
    assert not list(tmp_path.iterdir())  # the host folder stayed empty


def test_watchdog_kills_a_sandbox_that_fills_its_socket_folder(bwrap_sandbox):
    box = bwrap_sandbox
    dog = sandbox.Watchdog(
        fake_km(4 * sandbox.GiB, box.sockets), box.proc.pid, box.init
    )
    dog.start()
    time.sleep(0.3)
    assert dog.killed is None
    box.proc.stdin.write("\n")
    box.proc.stdin.flush()
    dog.join(5)
    assert dog.killed and dog.killed[0] == "disk", dog.killed
    assert box.proc.wait(5) != 0 and not sandbox.running(box.init)


def test_the_command_line_mounts_no_host_folder_writable(tmp_path):
    limits = sandbox.Limits(sockets=123 * 1024)
    cmd = sandbox.command(
        ["python", "-c", "pass"],
        rundir=tmp_path,
        inputs=None,
        limits=limits,
        sockets="/run/attn-test",
    )
    assert "--bind" not in cmd and "--bind-try" not in cmd
    at = cmd.index("--ro-bind", cmd.index(str(tmp_path)) - 1)
    assert cmd[at : at + 3] == ["--ro-bind", str(tmp_path), str(tmp_path)]
    tmpfs = cmd.index("/run/attn-test")
    assert cmd[tmpfs - 5 : tmpfs] == [
        "--size",
        str(123 * 1024),
        "--perms",
        "0777",
        "--tmpfs",
    ]
    for i, x in enumerate(cmd):  # every tmpfs is size-limited
        if x == "--tmpfs":
            assert "--size" in cmd[i - 4 : i], cmd[i - 4 : i + 1]
    assert sandbox.socket_folder() != sandbox.socket_folder()


# ------------------------------------------- through GuardedExecute (light)
@pytest.fixture
def light_kernels(monkeypatch):
    """Sandboxed kernels that preload NumPy only (start in about a second)."""
    if sandbox.check_available() is not None:
        skip_or_fail(f"bubblewrap sandbox unavailable: {sandbox.check_available()}")
    monkeypatch.setenv("GRADER_PRELOAD", "attncourse,numpy")


def guarded(tmp_path, sources, grade=(), **km_config):
    from traitlets.config import Config

    from grader.guard import GuardedExecute

    cfg = Config()
    cfg.Execute.timeout = 20
    cfg.GuardedExecute.state_dir = str(tmp_path / "state")
    for key, value in km_config.items():
        setattr(cfg.SandboxedKernelManager, key, value)
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])
    for i in grade:  # an nbgrader test cell (autograded, with points)
        nb.cells[i].metadata["nbgrader"] = {
            "grade": True,
            "grade_id": f"test-{i}",
            "points": 1,
            "solution": False,
            "locked": True,
            "schema_version": 3,
        }
    resources = {"nbgrader": {"student": "s", "assignment": "not-a-task"}}
    nb, resources = GuardedExecute(config=cfg).preprocess(nb, resources)
    outs = [
        "".join(o.get("text", "") + o.get("evalue", "") for o in c.outputs)
        for c in nb.cells
    ]
    return outs, ev.load(tmp_path / "state", "not-a-task", "s"), resources


FORKS = """\
import os, time
for _ in range(4):
    if os.fork() == 0:
        block = b"\\x01" * (100 * 2**20)
        time.sleep(15)
        os._exit(0)
time.sleep(15)
"""
FILL_SOCKETS = """\
import json, os, sys, time
connection = sys.argv[sys.argv.index("-f") + 1]
folder = os.path.dirname(json.load(open(connection))["ip"])
os.makedirs(f"{folder}/d/e")
try:
    open(f"{folder}/d/e/big", "wb").write(b"x" * 2**30)
except OSError as e:
    print("stopped", e)
time.sleep(10)
"""


def test_guarded_execute_kills_and_flags_forked_memory(light_kernels, tmp_path):
    outs, log, resources = guarded(
        tmp_path, ["x = 41", FORKS, "print('after', x)"], total_memory_limit=300 * MiB
    )
    assert "processes used" in outs[1] and "limit 0.292969 GiB" in outs[1], outs
    assert "after 41" in outs[2]  # restarted, the earlier cell replayed
    assert set(log["flags"]) == {"memory", "crashed"}, log
    assert resources["attncourse"]["status"] == {0: "ran", 1: "crashed", 2: "ran"}


def test_guarded_execute_kills_and_flags_a_socket_folder_filler(
    light_kernels, tmp_path
):
    outs, log, _ = guarded(tmp_path, ["x = 41", FILL_SOCKETS, "print('after', x)"])
    assert "socket folder" in outs[1], outs
    assert "after 41" in outs[2]
    assert set(log["flags"]) == {"disk", "crashed"}, log
    note = "\n".join(log["flags"]["disk"])
    assert "KiB" in note and int(note.split("wrote ")[1].split()[0]) <= 1024


def test_guarded_execute_leaves_an_honest_light_kernel_alone(light_kernels, tmp_path):
    outs, log, _ = guarded(
        tmp_path,
        [
            "import numpy as np\nx = np.ones((2000, 2000)) @ np.ones((2000, 2000))",
            "open('/tmp/notes.txt', 'w').write('ok')\nprint('sum', int(x[0, 0]))",
        ],
    )
    assert "sum 2000" in outs[1] and log["flags"] == {}, (outs, log)


def test_the_light_kernel_reaches_the_sandbox_through_its_proc_root(light_kernels):
    from jupyter_core.utils import run_sync

    km = sandbox.SandboxedKernelManager(kernel_name="python3")
    run_sync(km.start_kernel)()
    kc = km.client()
    kc.start_channels()
    try:
        run_sync(kc.wait_for_ready)(timeout=60)  # over the /proc root path
        assert km.ip.startswith("/proc/") and km.ip.endswith(f"root{km.sockets}/k")
        assert km.watchdog is not None and km.watchdog.is_alive()
        assert Path(f"{km.ip}-{km.shell_port}").is_socket()
        assert not any(p.is_socket() for p in km.rundir.iterdir())
    finally:
        kc.stop_channels()
        run_sync(km.shutdown_kernel)(now=True)
    assert not km.watchdog.is_alive()


BIG_PRINT = "print('x' * (64 * 2**20))  # one 64 MiB stream message"


def test_a_message_over_the_size_limit_is_refused_unread(light_kernels, tmp_path):
    """One huge message used to be read whole into the grader (a worker peaked
    at 1.9 GB on 20 of 200 MB). The grader's sockets refuse a frame over
    ``max_message_size`` (32 MiB) before reading it; the cell is flagged, the
    kernel restarted and the earlier cells replayed."""
    outs, log, resources = guarded(tmp_path, ["x = 41", BIG_PRINT, "print('after', x)"])
    assert "larger than 32 MiB" in outs[1] and "xxxx" not in outs[1], outs[1][:200]
    assert "after 41" in outs[2]
    assert set(log["flags"]) == {"output-limit"}, log
    assert "refused unread" in log["flags"]["output-limit"][0]
    assert resources["attncourse"]["status"] == {0: "ran", 1: "timeout", 2: "ran"}


def test_without_the_size_limit_the_huge_message_is_read(light_kernels, tmp_path):
    """The control: with the limit off, the same message reaches the grader
    (and only the output cap trims it), so the test above sees the limit."""
    outs, log, _ = guarded(
        tmp_path, ["x = 41", BIG_PRINT, "print('after', x)"], max_message_size=0
    )
    assert outs[1].startswith("xxxx") and "after 41" in outs[2], outs[1][:200]
    assert "refused unread" not in " ".join(log["flags"].get("output-limit", []))


CHILD = (
    "import subprocess, sys\n"
    "subprocess.run([sys.executable, '-c', 'import time; time.sleep(1.5)'])\n"
    "print('done')"
)


def test_processes_started_during_a_test_cell_are_counted(light_kernels, tmp_path):
    """A memory case's cap holds for the kernel's own process: a child started
    during a hidden test would escape it. The watchdog counts the processes
    of the sandbox while a test cell runs (not in other cells)."""
    outs, _, resources = guarded(
        tmp_path, ["x = 1", CHILD, CHILD, "y = 2"], grade=(2, 3)
    )
    assert outs[1].strip() == outs[2].strip() == "done", outs
    assert resources["attncourse"]["spawned"] == {2: 1}, resources["attncourse"]
