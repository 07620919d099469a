"""A fair share of the CPU per sandbox, a cap on its processes, no user
namespaces (issue 28, items 5 and 7b).

A notebook that forked ~100 CPU-bound children into sessions of their own
(``os.forkpty``) slowed everything graded beside it 5-15x and kept full
marks. Now every sandbox has a CPU quota its processes cannot leave (a cgroup
where the grader may create one, else the watchdog's ``Governor``), the
watchdog counts its processes all the time (not only in test cells) and
kills it above ``sandbox_processes`` (flag ``runaway``), the staging scan
knows ``forkpty`` and the other calls that start processes or sessions, and
a kernel cannot create a user namespace, as root or not.

* fast units: the seccomp program (run on a small BPF interpreter), the
  governor's bucket, the cgroup files written in a fake hierarchy, the shell
  that enters the cgroup, the CPU time of a process tree, the scan;
* light sandboxed kernels (NumPy only): the kernel is in its own cgroup and
  cannot leave it, a spinning process tree is held to its share (cgroup and
  watchdog), a forkpty flood in a plain cell is killed and flagged, and no
  kernel or sandboxed probe can create a user namespace in either mode;
* one grading run (``slow``): two honest students, a forkpty hog and a hog
  of setsid'd spinners under the process cap, graded two at a time: the
  honest students keep full marks and no flag, the forkpty hog is killed and
  flagged, the spinners are throttled (the log says for how long).

The benchmark figure (an honest submission's time alone and beside the hog)
is ``make bench-fairness`` (``bench/cpu_fairness.py``).
"""

import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
import pytest
from support.ci import skip_or_fail
from support.grading import (
    ROOT,
    copy_course,
    read_report,
    read_scores,
    student_solutions,
)
from support.run_grader import grade

from grader import events as ev
from grader import notebooks as nbs
from grader import sandbox, staging

A = "addressing"
CELL_TIMEOUT = 90  # seconds per cell in the grading run
TIMEOUT = 900  # seconds for the whole grading run


# -- the seccomp program -------------------------------------------------------
def run_bpf(program: bytes, nr: int, flags: int = 0, arch=None) -> int:
    """What the classic-BPF ``program`` returns for one system call."""
    arch = sandbox.SYSCALLS[os.uname().machine][0] if arch is None else arch
    data = struct.pack("=iIQ6Q", nr, arch, 0, flags, 0, 0, 0, 0, 0)
    ops = [
        struct.unpack("=HBBI", program[i : i + 8]) for i in range(0, len(program), 8)
    ]
    acc, pc = 0, 0
    while True:
        code, jt, jf, k = ops[pc]
        if code == 0x20:
            acc = struct.unpack_from("=I", data, k)[0]
        elif code == 0x06:
            return k
        else:
            taken = {0x15: acc == k, 0x35: acc >= k, 0x45: bool(acc & k)}[code]
            pc += jt if taken else jf
        pc += 1


@pytest.mark.skipif(os.uname().machine not in sandbox.SYSCALLS, reason="machine")
def test_the_seccomp_filter_refuses_new_user_namespaces_only():
    program = sandbox.userns_filter()
    _, unshare, clone, clone3 = sandbox.SYSCALLS[os.uname().machine]
    eperm, enosys = sandbox.SECCOMP_ERRNO | 1, sandbox.SECCOMP_ERRNO | 38
    allow = sandbox.SECCOMP_ALLOW
    newuser, newnet, sigchld = sandbox.CLONE_NEWUSER, 0x40000000, 17
    assert run_bpf(program, unshare, newuser) == eperm
    assert run_bpf(program, unshare, newuser | newnet) == eperm
    assert run_bpf(program, unshare, newnet) == allow
    assert run_bpf(program, clone, newuser | sigchld) == eperm
    assert run_bpf(program, clone, sigchld) == allow  # fork, threads
    assert run_bpf(program, clone3) == enosys  # the C library falls back to clone
    assert run_bpf(program, 0) == allow and run_bpf(program, 1) == allow
    assert run_bpf(program, 0x40000000 + unshare, newuser) == eperm  # x32
    assert run_bpf(program, unshare, newuser, arch=0x40000003) == eperm  # i386
    assert sandbox.userns_filter("sparc") is None


# -- the governor (no cgroup) --------------------------------------------------
@pytest.mark.parametrize("cores", [0.5, 1.0])
def test_the_governor_holds_a_greedy_tree_to_its_share(cores):
    """A tree that would use 2 cores, looked at every 0.25 s and stopped for
    as long as the governor says: over 60 s it gets its share plus the burst."""
    governor = sandbox.Governor(cores)
    now = used = 0.0
    governor.pause(now, used)
    while now < 60:
        now += 0.25
        used += 2 * 0.25  # running: two cores
        pause = governor.pause(now, used)
        now += pause  # stopped: no CPU
    assert used <= cores * now + governor.burst + 2 * 0.25, (used, now)
    assert used >= cores * now * 0.9, (used, now)  # and not much less
    assert governor.pause(now + 10, used) == 0  # idle: the bucket refills


def test_the_governor_leaves_a_tree_within_its_share_alone():
    governor = sandbox.Governor(1.0)
    pauses = [governor.pause(t * 0.25, t * 0.25 * 0.9) for t in range(400)]
    assert max(pauses) == 0


def test_a_reaped_childs_cpu_time_stays_in_the_tree():
    before = sandbox.cpu_time([os.getpid()])
    pid = os.fork()
    if pid == 0:
        end = time.process_time() + 0.5
        while time.process_time() < end:
            pass
        os._exit(0)
    os.waitpid(pid, 0)
    assert sandbox.cpu_time([os.getpid()]) - before >= 0.4


# -- cgroups ---------------------------------------------------------------
def fake_hierarchy(root: Path, version: int) -> None:
    if version == 2:
        root.mkdir(parents=True)
        (root / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
        (root / "cgroup.subtree_control").write_text("")
        (root / "cgroup.procs").write_text("")
    else:
        (root / "unified").mkdir(parents=True)
        (root / "unified" / "cgroup.controllers").write_text("")
        for name, file in (("cpu", "cpu.cfs_quota_us"), ("pids", "cgroup.procs")):
            (root / name).mkdir()
            (root / name / file).write_text("-1\n")
            (root / name / "cgroup.procs").write_text("")


@pytest.fixture
def own_root_cgroups(monkeypatch):
    monkeypatch.setattr(sandbox, "_own_cgroups", lambda: {"": "/", "cpu": "/"})


def test_a_cgroup_v2_gets_a_cpu_quota_and_a_task_cap(tmp_path, own_root_cgroups):
    root = tmp_path / "cg"
    fake_hierarchy(root, 2)
    group = sandbox.Cgroup.create(1.5, 300, root=root)
    assert group is not None and group.version == 2
    (folder,) = group.folders
    assert folder.parent == root and folder.name.startswith(sandbox.CGROUP_PREFIX)
    assert (folder / "cpu.max").read_text() == "150000 100000"
    assert (folder / "pids.max").read_text() == "300"
    assert "+cpu" in (root / "cgroup.subtree_control").read_text()
    assert group.procs_files() == [str(folder / "cgroup.procs")]


def test_cgroup_v1_needs_a_cpu_and_a_pids_group(tmp_path, own_root_cgroups):
    root = tmp_path / "cg"
    fake_hierarchy(root, 1)
    group = sandbox.Cgroup.create(1.0, 272, root=root)
    assert group is not None and group.version == 1
    cpu, pids = group.folders
    assert (cpu / "cpu.cfs_quota_us").read_text() == "100000"
    assert (cpu / "cpu.cfs_period_us").read_text() == "100000"
    assert (pids / "pids.max").read_text() == "272"
    assert cpu.parent == root / "cpu" and pids.parent == root / "pids"


def test_no_cgroup_where_the_hierarchy_is_read_only(tmp_path, own_root_cgroups):
    root = tmp_path / "cg"
    fake_hierarchy(root, 1)
    for name in ("cpu", "pids", "unified"):
        (root / name).chmod(0o555)
    try:
        if os.access(root / "cpu", os.W_OK):  # root ignores the modes
            pytest.skip("root can write a read-only folder")
        assert sandbox.Cgroup.create(1.0, 272, root=root) is None
    finally:
        for name in ("cpu", "pids", "unified"):
            (root / name).chmod(0o755)
    assert sandbox.Cgroup.create(1.0, 272, root=tmp_path / "none") is None


def test_no_cgroup_where_a_process_cannot_enter_it(
    tmp_path, own_root_cgroups, monkeypatch
):
    """A container may let root make groups but not enter them: then the
    watchdog governs, rather than every kernel failing to start."""
    root = tmp_path / "cg"
    fake_hierarchy(root, 1)
    monkeypatch.setattr(sandbox.Cgroup, "_enters", {})
    monkeypatch.setattr(sandbox, "ENTER", "exit 125")
    removed = []  # (a fake folder with files in it cannot be removed)
    monkeypatch.setattr(sandbox.Cgroup, "remove", lambda g: removed.append(g))
    assert sandbox.Cgroup.create(1.0, 272, root=root) is None
    assert len(removed) == 1 and removed[0].folders[0].parent == root / "cpu"


def test_the_enter_shell_joins_the_groups_and_becomes_the_command(tmp_path):
    """The process jupyter_client starts writes its own pid to each
    cgroup.procs, opens the filter on descriptor 3 and execs: the command
    has the same pid (bubblewrap starts inside the group)."""
    procs = [tmp_path / "a.procs", tmp_path / "b.procs"]
    for p in procs:
        p.write_text("")
    seccomp = tmp_path / "filter"
    seccomp.write_bytes(b"FILTER")
    inner = ["sh", "-c", "echo $$; cat <&3"]
    cmd = ["/bin/sh", "-c", sandbox.ENTER, "x", "2", *map(str, procs), str(seccomp)]
    out = subprocess.run([*cmd, *inner], capture_output=True, text=True, check=True)
    pid, content = out.stdout.split()
    assert [p.read_text().strip() for p in procs] == [pid, pid]
    assert content == "FILTER"
    plain = ["/bin/sh", "-c", sandbox.ENTER, "x", "0", "-", "echo", "ran"]
    assert subprocess.run(plain, capture_output=True, text=True).stdout == "ran\n"
    missing = ["/bin/sh", "-c", sandbox.ENTER, "x", "1", str(tmp_path / "no/procs")]
    assert subprocess.run([*missing, "-", "true"], capture_output=True).returncode


# -- the staging scan ----------------------------------------------------------
@pytest.mark.parametrize(
    "code",
    [
        "import os\npid, fd = os.forkpty()",
        "from os import forkpty as f\nf()",
        "from os import fork\nfork()",
        "import os\nos.setsid()",
        "os.setpgrp()",
        "os.posix_spawnp('python', ['python'], {})",
        "from os import execv\nexecv('/bin/sh', ['sh'])",
        "import pty\npty.fork()",
        "import ctypes\nctypes.CDLL(None).unshare(0x10000000)",
    ],
)
def test_the_scan_flags_calls_that_start_processes_or_sessions(code):
    assert {"processes or threads", "new processes or sessions"} & set(
        staging.scan([code])
    ), code


def test_the_scan_leaves_the_reference_solutions_alone():
    for path in sorted((ROOT / "solutions").glob("*/*.ipynb")):
        cells = nbs.read(path)["cells"]
        code = [nbs.source(c) for c in cells if c["cell_type"] == "code"]
        assert "new processes or sessions" not in staging.scan(code), path


# -- light sandboxed kernels ---------------------------------------------------
@pytest.fixture
def light_kernels(monkeypatch):
    """Sandboxed kernels that preload NumPy only (start in about a second)."""
    if sandbox.check_available() is not None:
        skip_or_fail(f"bubblewrap sandbox unavailable: {sandbox.check_available()}")
    monkeypatch.setenv("GRADER_PRELOAD", "attncourse,numpy")


def cgroups_writable() -> bool:
    """True where the grader can make a sandbox's cgroup (root on a VM)."""
    group = sandbox.Cgroup.create(0, 64)
    if group is None:
        return False
    group.remove()
    return True


def run_kernel(sources, probe=None, **km_args) -> tuple[list[str], dict]:
    """Run ``sources`` in a light sandboxed kernel; ``probe(km)`` is called
    while the kernel still runs (after the cells). The cells' text and what
    the probe returned."""
    from jupyter_core.utils import run_sync
    from nbclient import NotebookClient

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])
    km = sandbox.SandboxedKernelManager(kernel_name="python3", **km_args)
    client = NotebookClient(nb, km=km, timeout=60, allow_errors=True)
    seen = {}
    try:
        with client.setup_kernel():
            for i, cell in enumerate(nb.cells):
                client.execute_cell(cell, i)
            seen = probe(km) if probe else {}
    finally:
        if km.has_kernel:
            run_sync(km.shutdown_kernel)(now=True)
    seen["cgroup_after"] = km.cgroup
    out = [
        "".join(o.get("text", "") + o.get("evalue", "") for o in c.outputs)
        for c in nb.cells
    ]
    return out, seen


SPIN = """\
import os, time
def spin(seconds):
    end = time.time() + seconds
    while time.time() < end:
        pass
children = []
for _ in range(3):
    pid = os.fork()
    if pid == 0:
        os.setsid()  # its own session: no escape from the share
        spin(8)
        os._exit(0)
    children.append(pid)
began, before = time.time(), os.times()
for pid in children:
    os.waitpid(pid, 0)
after = os.times()
cpu = after.children_user + after.children_system
cpu -= before.children_user + before.children_system
print("SPUN", round(time.time() - began, 2), round(cpu, 2))
"""


@pytest.mark.sandbox
@pytest.mark.parametrize("how", ["cgroup", "watchdog"])
def test_a_spinning_tree_gets_its_share_and_no_more(light_kernels, how):
    if how == "cgroup" and not cgroups_writable():
        pytest.skip("cgroups are not writable here (the watchdog governs)")
    out, seen = run_kernel(
        [SPIN],
        probe=lambda km: {"summary": km.watchdog.summary(), "group": km.cgroup},
        use_cgroups=how == "cgroup",
        cpu_cores=0.5,
    )
    wall, cpu = map(float, out[0].split("SPUN")[1].split())
    # three spinners for 8 s would take 2 cores (16 s of CPU) on this machine
    assert cpu <= 0.5 * wall + 1.0 + 0.5, (wall, cpu, seen["summary"])
    if how == "cgroup":
        assert seen["group"] is not None and "throttled" in seen["summary"]
        assert not any(f.exists() for f in seen["group"].folders)  # removed
    else:
        assert seen["group"] is None and "stopped" in seen["summary"], seen


@pytest.mark.sandbox
def test_the_kernel_is_in_its_own_cgroup_and_cannot_leave_it(light_kernels):
    if not cgroups_writable():
        pytest.skip("cgroups are not writable here (the watchdog governs)")
    leave = """\
import os
for path in ("/sys/fs/cgroup/cpu/cgroup.procs", "/sys/fs/cgroup/cgroup.procs"):
    try:
        open(path, "w").write(str(os.getpid()))
        print("LEFT", path)
    except OSError as e:
        print("STAYED", type(e).__name__)
"""

    def probe(km):
        kernel = km.kernel_pid()
        return {"kernel": Path(f"/proc/{kernel}/cgroup").read_text(), "km": km}

    out, seen = run_kernel([leave], probe=probe)
    assert "LEFT" not in out[0] and "STAYED" in out[0], out
    assert f"/{sandbox.CGROUP_PREFIX}" in seen["kernel"], seen["kernel"]


HOG_IN_PLAIN_CELL = """\
import os, time
for _ in range(40):
    pid, fd = os.forkpty()
    if pid == 0:
        time.sleep(60)
        os._exit(0)
time.sleep(30)
"""


@pytest.mark.sandbox
def test_a_forkpty_flood_in_a_plain_cell_is_killed_and_flagged(light_kernels, tmp_path):
    """Not a test cell: the old check counted processes in test cells only."""
    from traitlets.config import Config

    from grader.guard import GuardedExecute

    cfg = Config()
    cfg.Execute.timeout = 40
    cfg.GuardedExecute.state_dir = str(tmp_path / "state")
    cfg.SandboxedKernelManager.sandbox_processes = 16
    cells = ["x = 41", HOG_IN_PLAIN_CELL, "print('after', x)"]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in cells])
    resources = {"nbgrader": {"student": "s", "assignment": "not-a-task"}}
    began = time.monotonic()
    nb, resources = GuardedExecute(config=cfg).preprocess(nb, resources)
    log = ev.load(tmp_path / "state", "not-a-task", "s")
    assert {"runaway", "crashed"} <= set(log["flags"]), log
    assert "(limit 16" in "\n".join(log["flags"]["runaway"]), log
    assert "after 41" in "".join(o.get("text", "") for o in nb.cells[2].outputs)
    assert time.monotonic() - began < 30  # not the cell's time limit


USERNS_PROBE = """\
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
if libc.unshare(0x10000000) == 0:
    print("USERNS", os.getuid())
else:
    print("REFUSED", os.strerror(ctypes.get_errno()), os.getuid())
"""


@pytest.mark.sandbox
@pytest.mark.parametrize("mode", ["root", "user"])
def test_a_sandboxed_process_cannot_create_a_user_namespace(mode, monkeypatch):
    """Root mode: the seccomp filter; user mode (bubblewrap in a user
    namespace of its own): --disable-userns. The user mode is tried as root
    too, under an unprivileged uid (setpriv)."""
    if sandbox.check_available() is not None:
        skip_or_fail(f"bubblewrap sandbox unavailable: {sandbox.check_available()}")
    root = sandbox.is_root()
    if mode == "root" and not root:
        pytest.skip("root mode needs root")
    python = sys.executable
    nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    if mode == "user" and root:
        if shutil.which("setpriv") is None:
            pytest.skip("setpriv is not installed")
        paths = sandbox.read_only_paths()
        hidden = {p for p in paths for f in p.parents if not f.stat().st_mode & 0o001}
        if hidden:  # this Python is in /root: the system's, without those mounts
            if not Path("/usr/bin/python3").exists():
                pytest.skip(f"an unprivileged user cannot reach {min(hidden)}")
            python = "/usr/bin/python3"
            shown = [p for p in paths if p not in hidden]
            monkeypatch.setattr(sandbox, "read_only_paths", lambda extra=(): shown)
    limits = sandbox.Limits()
    uid = sandbox.fresh_uid()
    monkeypatch.setattr(sandbox, "is_root", lambda: mode == "root")
    with tempfile.TemporaryDirectory(prefix="attn-userns-") as tmp:
        os.chmod(tmp, 0o755)
        config = sandbox._bootstrap_config(limits, uid=uid if mode == "root" else None)
        inner = [
            python,
            "-P",
            "-c",
            sandbox.BOOTSTRAP.replace(
                "from grader.kernel.probe import main\nmain()\n", USERNS_PROBE
            ),
            json.dumps(config),
        ]
        seccomp = sandbox.USERNS_FILTER_FD if mode == "root" else None
        cmd = sandbox.command(
            inner, rundir=Path(tmp), inputs=None, limits=limits, seccomp_fd=seccomp
        )
        if mode == "root":
            (Path(tmp) / "f.bpf").write_bytes(sandbox.userns_filter())
            cmd = ["/bin/sh", "-c", sandbox.ENTER, "x", "0", f"{tmp}/f.bpf", *cmd]
        elif root:
            cmd = [*nobody, *cmd]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert out.stdout.startswith("REFUSED"), (out.stdout, out.stderr[-2000:])
    assert out.stdout.split()[-1] != "0"  # and not as root


@pytest.mark.sandbox
def test_a_kernel_cannot_create_a_user_namespace(light_kernels):
    out, _ = run_kernel([USERNS_PROBE])
    assert out[0].startswith("REFUSED"), out


# -- one grading run: honest students beside two hogs --------------------------
RELEASE = nbs.read(ROOT / "exercises" / A / f"{A}.ipynb")
REF = student_solutions(A, "reference")
TF_OK, TORCH_OK = REF["tf-solution"], REF["torch-solution"]

# the observed attack: ~100 CPU-bound children, each in a session of its own
PTY_HOG = (
    """\
import os, time
for _ in range(100):
    pid, fd = os.forkpty()
    if pid == 0:
        end = time.time() + 120
        while time.time() < end:
            pass
        os._exit(0)
time.sleep(120)
"""
    + TORCH_OK
)
# under the process cap: six setsid'd spinners for 20 s, waited for
SPINNERS = (
    """\
import os, time
children = []
for _ in range(6):
    pid = os.fork()
    if pid == 0:
        os.setsid()
        end = time.time() + 20
        while time.time() < end:
            pass
        os._exit(0)
    children.append(pid)
began, before = time.time(), os.times()
for pid in children:
    os.waitpid(pid, 0)
after = os.times()
cpu = after.children_user + after.children_system
cpu -= before.children_user + before.children_system
print("SPUN", round(time.time() - began, 2), round(cpu, 2))
"""
    + TF_OK
)
STUDENTS = {
    "honest-1": {},
    "pty-hog": {"torch-solution": PTY_HOG},
    "spinners": {"tf-solution": SPINNERS},
    "honest-2": {},
}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    if shutil.which("bwrap") is None:
        skip_or_fail("bubblewrap is not installed (sudo make system-deps)")
    root = tmp_path_factory.mktemp("cpu-fair") / "course"
    copy_course(root, [A])
    for student, solutions in STUDENTS.items():
        nb = nbs.submission(RELEASE, dict(REF, **solutions))
        nbs.write(nb, root / "submitted" / student / A / f"{A}.ipynb")
    run = grade(
        root, "--workers", "2", "--cell-timeout", str(CELL_TIMEOUT), timeout=TIMEOUT
    )
    assert run.code == 0, run.tail(6000)
    print(f"\ngrading run beside the hogs: {run.seconds:.0f} s")
    text = run.log
    yield {
        "report": read_report(root),
        "scores": read_scores(root),
        "log": text,
        "root": root,
    }


@pytest.mark.slow
@pytest.mark.sandbox
@pytest.mark.parametrize("student", ["honest-1", "honest-2"])
def test_honest_students_beside_the_hogs_keep_full_marks(graded, student):
    row = graded["report"][student]
    assert row["flags"] == [], row["notes"]
    assert (row["parts"]["tf"]["score"], row["parts"]["torch"]["score"]) == (4, 4)
    scores = graded["scores"][A, student]
    assert all(s > 0 for s in scores.values()), scores


@pytest.mark.slow
@pytest.mark.sandbox
def test_the_forkpty_hog_is_killed_and_flagged(graded):
    row = graded["report"]["pty-hog"]
    assert {"runaway", "crashed", "suspicious"} <= set(row["flags"]), row["notes"]
    notes = "\n".join(row["notes"])
    assert "processes at once (limit 16" in notes, notes
    assert "new processes or sessions" in notes, notes
    assert row["parts"]["torch"]["score"] == 0 and row["parts"]["tf"]["score"] == 4


@pytest.mark.slow
@pytest.mark.sandbox
def test_the_spinners_under_the_cap_are_held_to_one_core(graded):
    row = graded["report"]["spinners"]
    assert set(row["flags"]) == {"suspicious"}, row["notes"]
    assert (row["parts"]["tf"]["score"], row["parts"]["torch"]["score"]) == (4, 4)
    nb = nbs.read(graded["root"] / "autograded" / "spinners" / A / f"{A}.ipynb")
    text = "".join(
        nbs.source({"source": o.get("text", "")})
        for c in nb["cells"]
        for o in c.get("outputs", [])
    )
    wall, cpu = map(float, text.split("SPUN")[1].split()[:2])
    # six spinners for 20 s want 2 cores here (40 s of CPU): one core at most,
    # plus the kernel's own time in the burst
    assert cpu <= 1.0 * wall + 2.0, (wall, cpu)
    held = re.findall(
        rf"sandbox spinners/{A}: .*?(?:throttled|stopped) ([\d.]+) s", graded["log"]
    )
    assert held, graded["log"][-3000:]  # the limit was on (how much it held
    print(f"spinners: {cpu} s of CPU in {wall} s, held {held} s")  # varies)
