"""Student kernels in a bubblewrap sandbox, with resource limits.

nbgrader starts one Jupyter kernel per submission through jupyter_client's
KernelManager. ``SandboxedKernelManager`` replaces the kernel command with

    bwrap <namespaces> <read-only mounts> -- python -P -c <bootstrap> <limits>
        -f <connection file>

so the student's code runs

* without network: a new, empty network namespace (``--unshare-net``). The
  kernel talks to the grader over ZMQ *IPC* sockets (``transport = "ipc"``):
  Unix sockets, which work across network namespaces (TCP on 127.0.0.1 would
  not: the sandbox has its own loopback). The kernel binds them in a small
  tmpfs of the sandbox (``/run/attn-<random>``, ``Limits.sockets`` bytes) and
  the grader connects through ``/proc/<sandbox init>/root/...``, so no folder
  of the host is writable from the sandbox (with bubblewrap as root or as a
  normal user alike);
* on a read-only file system that holds only the operating system, the Python
  installation and the ``attncourse`` package. The course folder -- the
  reference data, the hidden tests, ``gradebook.db``, ``submitted/``,
  ``autograded/``, other students' work -- is simply not there. Writable:
  only size-limited tmpfs'es, for ``$HOME``, ``/tmp``, ``/dev/shm`` and the
  sockets; the connection file is mounted read-only;
* in its own PID, IPC and UTS namespaces (``--die-with-parent``: killing the
  sandbox kills every process in it), in a new session (no controlling
  terminal), with a cleared environment (no tokens of the grader's);
* as an unprivileged user: run as root, the grader mounts the sandbox as root
  and the bootstrap drops to an unused uid (a fresh one per kernel, or
  ``sandbox_uid``) before any course code runs; run as a normal user,
  bubblewrap uses an unprivileged user namespace and the kernel keeps that
  user's uid;
* under rlimits set by the bootstrap: address space (memory), number of
  processes and threads, CPU seconds, file size, open files, no core dumps.
  (RLIMIT_NPROC does not apply to uid 0, which is one reason for the uid drop.)
* under a watchdog (``Watchdog``, a thread of the grader, every 0.25 s): the
  memory of all the sandbox's processes together (``Limits.total_memory``;
  rlimits bound each process only) and the files in its tmpfs'es (a socket
  folder that holds more than sockets, or a flood of empty files). Over a
  limit it kills the sandbox and says why (``SandboxedKernelManager.killed``:
  flag ``memory`` or ``disk``), and the number of its processes
  (``Limits.sandbox_processes``, counted continuously, not only in test
  cells: flag ``runaway``);
* with a fair share of the CPU that new sessions, process groups or
  double forks do not escape: where the grader may create cgroups (root on a
  VM, a delegated cgroup v2), each sandbox gets its own (``Cgroup``: cgroup v2
  ``cpu.max`` + ``pids.max``, else v1 ``cpu`` + ``pids``), entered by the
  bubblewrap process itself before it starts anything, so every process of
  the sandbox is in it; elsewhere (a normal user, a read-only
  /sys/fs/cgroup) the watchdog governs: it sums the CPU time of the
  sandbox's process tree (an orphan is re-parented to the sandbox's init,
  inside the tree) and stops the tree (SIGSTOP/SIGCONT) while it is over its
  share (``Governor``). One core per sandbox by default (``cpu_cores``);
* unable to create user namespaces: bubblewrap's ``--disable-userns`` as a
  normal user; as root (no user namespace of its own) a seccomp filter that
  refuses ``unshare``/``clone`` with CLONE_NEWUSER (``userns_filter``).

Without bubblewrap the grader refuses to grade unless told ``--no-sandbox``
(``SandboxedKernelManager.sandbox = False``): then the kernel runs as the
grader's user with the same rlimits and the same out-of-kernel verdicts, but
can read every file the grader can. Each such kernel logs a warning.

Process helpers at the end (``/proc`` based) let the grader find the kernel
process inside the sandbox, kill stray processes and count threads.
"""

import asyncio
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from jupyter_client.manager import AsyncKernelManager
from traitlets import Bool, Dict, Float, Integer, List, Unicode, observe

import attncourse

GiB, MiB = 1024**3, 1024**2
INPUTS_IN_SANDBOX = "/grading/inputs.npz"
HOME_IN_SANDBOX = "/home/student"

# Environment passed into the sandbox (everything else is cleared).
PASS_ENV = (
    "TF_CPP_MIN_LOG_LEVEL",
    "TF_CPP_MAX_VLOG_LEVEL",
    "TF_ENABLE_ONEDNN_OPTS",
    "TF_NUM_INTRAOP_THREADS",
    "TF_NUM_INTEROP_THREADS",
    "KERAS_BACKEND",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "PYTHONHASHSEED",
    "NBGRADER_EXECUTION",
    "LANG",
    "LC_ALL",
    "MPLBACKEND",
    "GRADER_PRELOAD",
)

# What the kernel sees of /etc (the rest of it is not mounted).
ETC = (
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "nsswitch.conf",
    "passwd",
    "group",
    "hosts",
    "host.conf",
    "alternatives",
    "os-release",
    "mime.types",
    "ssl/certs",
)
SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")

# The first code the kernel runs: drop root, set limits, then start the kernel.
BOOTSTRAP = """\
import json, os, resource, sys
cfg = json.loads(sys.argv.pop(1))
if cfg.get("uid") is not None and os.geteuid() == 0:
    os.setgroups([])
    os.setgid(cfg["gid"])
    os.setuid(cfg["uid"])
for name, value in cfg["rlimits"].items():
    resource.setrlimit(getattr(resource, name), (value, value))
from grader.kernel.probe import main
main()
"""


@dataclass
class Limits:
    """Resource limits of one student kernel: rlimits (per process), tmpfs sizes,
    and what the watchdog allows the whole sandbox."""

    memory: int = 4 * GiB  # RLIMIT_AS: address space (TF + torch need ~2 GiB)
    total_memory: int = 4 * GiB  # all the sandbox's processes together (watchdog)
    processes: int = 256  # RLIMIT_NPROC: processes *and threads* of the user
    cpu_seconds: int = 3600  # RLIMIT_CPU: a backstop behind the wall-clock limits
    file_size: int = 64 * MiB  # RLIMIT_FSIZE: largest file the kernel may write
    open_files: int = 1024  # RLIMIT_NOFILE
    tmpfs: int = 64 * MiB  # size of each tmpfs ($HOME, /tmp, /dev/shm)
    sockets: int = 1 * MiB  # size of the socket folder's tmpfs
    message: int = 32 * MiB  # largest message frame the grader accepts (ZeroMQ)
    cpu_cores: float = 1.0  # CPU share of the whole sandbox, in cores (0: none)
    sandbox_processes: int = 16  # processes (not threads) at once (watchdog)

    def rlimits(self) -> dict:
        return {
            "RLIMIT_AS": self.memory,
            "RLIMIT_NPROC": self.processes,
            "RLIMIT_CPU": self.cpu_seconds,
            "RLIMIT_FSIZE": self.file_size,
            "RLIMIT_NOFILE": self.open_files,
            "RLIMIT_CORE": 0,
        }


def bwrap() -> str | None:
    """The bubblewrap executable ($GRADER_BWRAP, else bwrap on PATH)."""
    configured = os.environ.get("GRADER_BWRAP")
    if configured is not None:
        return configured if os.access(configured, os.X_OK) else None
    return shutil.which("bwrap")


def is_root() -> bool:
    return os.geteuid() == 0


def namespace_args() -> list[str]:
    """Namespaces: everything but the user namespace when root (bwrap then
    runs privileged and the bootstrap drops to an unprivileged uid)."""
    common = [
        "--unshare-ipc",
        "--unshare-pid",
        "--unshare-net",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--hostname",
        "sandbox",
    ]
    if is_root():
        return [*common, "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    return ["--unshare-user", "--disable-userns", *common]


# -- no user namespaces in a root-mode sandbox ---------------------------------
# bubblewrap's --disable-userns needs a user namespace of the sandbox's own,
# which as root would map the kernel's uid to the host's root (and the
# bootstrap could not drop to a fresh uid): a seccomp filter instead, given to
# bubblewrap (``--seccomp FD``) and inherited by every process of the sandbox.
CLONE_NEWUSER = 0x10000000
# (audit arch, unshare, clone, clone3) per machine
SYSCALLS = {
    "x86_64": (0xC000003E, 272, 56, 435),
    "aarch64": (0xC00000B7, 97, 220, 435),
}
SECCOMP_ALLOW, SECCOMP_ERRNO = 0x7FFF0000, 0x00050000
USERNS_FILTER_FD = 3  # the file descriptor the filter reaches bubblewrap on


def userns_filter(machine: str | None = None) -> bytes | None:
    """A seccomp program (classic BPF, as ``bwrap --seccomp`` reads it) that
    makes ``unshare`` and ``clone`` with CLONE_NEWUSER fail with EPERM and
    ``clone3`` (whose flags a filter cannot read) with ENOSYS, so that the C
    library falls back to ``clone``; system calls of another ABI (32-bit,
    x32) fail with EPERM. None on a machine it does not know."""
    import struct

    known = SYSCALLS.get(machine or os.uname().machine)
    if known is None:
        return None
    arch, unshare, clone, clone3 = known
    ld, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06

    def op(code, k, jt=0, jf=0):
        return struct.pack("=HBBI", code, jt, jf, k)

    program = [
        op(ld, 4),  # 0: arch
        op(jeq, arch, 0, 8),  # 1: another ABI -> deny
        op(ld, 0),  # 2: system call number
        op(jge, 0x40000000, 6, 0),  # 3: x32 -> deny
        op(jeq, clone3, 6, 0),  # 4: -> ENOSYS
        op(jeq, unshare, 1, 0),  # 5: -> flags
        op(jeq, clone, 0, 2),  # 6: -> flags, else allow
        op(ld, 16),  # 7: low half of the first argument (the flags)
        op(jset, CLONE_NEWUSER, 1, 0),  # 8: a new user namespace -> deny
        op(ret, SECCOMP_ALLOW),  # 9
        op(ret, SECCOMP_ERRNO | 1),  # 10: deny (EPERM)
        op(ret, SECCOMP_ERRNO | 38),  # 11: ENOSYS
    ]
    return b"".join(program)


def _realdirs(path) -> list[Path]:
    """``path`` and, if it is a symlink chain, every directory it resolves through."""
    found = []
    p = Path(path)
    for _ in range(16):
        found.append(p.parent if p.is_file() or p.is_symlink() else p)
        if not p.is_symlink():
            break
        p = p.parent / os.readlink(p)
    found.append(
        Path(path).resolve().parent if Path(path).is_file() else Path(path).resolve()
    )
    return found


def library_paths() -> list[Path]:
    """What of the course the kernel may import: ``attncourse`` (the learners'
    library) and the kernel side of the grader (``grader/__init__.py``, which
    imports nothing, and ``grader/kernel/``). Not the grader's references,
    known mistakes or judging code, not the course folder."""
    grader_dir = Path(__file__).resolve().parent
    return [
        Path(attncourse.__file__).resolve().parent,
        grader_dir / "__init__.py",
        grader_dir / "kernel",
    ]


def read_only_paths(extra=()) -> list[Path]:
    """Host paths mounted read-only (at the same place) in the sandbox."""
    paths = [Path(p) for p in SYSTEM if Path(p).exists()]
    paths += [Path("/etc") / e for e in ETC if (Path("/etc") / e).exists()]
    if Path("/sys").exists():
        paths.append(Path("/sys"))  # CPU topology for TensorFlow / PyTorch
    prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix}
    for prefix in prefixes:
        paths.append(Path(prefix))
        paths.append(Path(prefix).resolve())
    paths += _realdirs(sys.executable)
    paths += library_paths()
    paths += [Path(p) for p in extra]
    unique = []
    for p in paths:
        p = Path(os.path.abspath(p))
        if p.exists() and p not in unique:
            unique.append(p)
    # mount parents before children (a child bind inside a parent bind is fine)
    return sorted(unique, key=lambda p: len(p.parts))


def sandbox_env(home: str = HOME_IN_SANDBOX, base=None) -> dict:
    """The kernel's whole environment: a fixed core plus a few pass-through
    variables of the grader's (framework log levels, hash seed)."""
    base = os.environ if base is None else base
    env = {k: v for k, v in base.items() if k in PASS_ENV}
    bin_dir = str(Path(sys.executable).parent)
    env.update(
        {
            "PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin",
            "HOME": home,
            "TMPDIR": "/tmp",
            "USER": "student",
            "LOGNAME": "student",
            "IPYTHONDIR": f"{home}/.ipython",
            "MPLCONFIGDIR": f"{home}/.matplotlib",
            "JUPYTER_PLATFORM_DIRS": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONPATH": os.pathsep.join(
                dict.fromkeys(
                    [
                        str(Path(attncourse.__file__).resolve().parent.parent),
                        str(Path(__file__).resolve().parent.parent),
                    ]
                )
            ),
            "GRADER_MODE": "observe",
            "GRADER_INPUTS": INPUTS_IN_SANDBOX,
        }
    )
    env.setdefault("LANG", "C.UTF-8")
    env.setdefault("MPLBACKEND", "Agg")
    return env


def socket_folder() -> str:
    """A fresh path for a sandbox's socket tmpfs (random: a kernel's sockets are
    reached through its sandbox's /proc root, and a reused pid must not lead
    to another sandbox's sockets or to a host path that exists)."""
    return f"/run/attn-{secrets.token_hex(8)}"


def command(
    inner: list[str],
    *,
    rundir: Path,
    inputs: Path | None,
    limits: Limits,
    extra_ro=(),
    sockets: str | None = None,
    seccomp_fd: int | None = None,
) -> list[str]:
    """The bwrap command line that runs ``inner`` in the sandbox.

    ``rundir`` (the connection file) is mounted read-only; ``sockets`` (a path
    in the sandbox, see ``socket_folder``) becomes a tmpfs of
    ``limits.sockets`` bytes where the kernel binds its sockets."""
    sockets = sockets or socket_folder()
    exe = bwrap()
    if exe is None:
        raise RuntimeError(MISSING)
    cmd = [exe, *namespace_args(), "--die-with-parent", "--new-session", "--clearenv"]
    if seccomp_fd is not None:  # a filter on this descriptor (``userns_filter``)
        cmd += ["--seccomp", str(seccomp_fd)]
    for key, value in sorted(sandbox_env().items()):
        cmd += ["--setenv", key, value]
    cmd += ["--proc", "/proc", "--dev", "/dev"]
    size = str(limits.tmpfs)
    cmd += [
        "--size",
        size,
        "--perms",
        "1777",
        "--tmpfs",
        "/dev/shm",
        "--size",
        size,
        "--perms",
        "1777",
        "--tmpfs",
        "/tmp",
        "--size",
        size,
        "--tmpfs",
        "/home",
    ]
    paths = read_only_paths(extra_ro)
    made = {Path("/"), Path("/tmp"), Path("/home"), Path("/dev"), Path("/proc")}
    for path in [*paths, rundir, Path(sockets)]:
        # bubblewrap would create missing parents with the host's modes (e.g.
        # /root 0700, unreadable after the uid drop): create them 0755 first
        for parent in reversed(Path(path).parents):
            if parent not in made and not any(parent == p for p in paths):
                cmd += ["--perms", "0755", "--dir", str(parent)]
                made.add(parent)
    for path in paths:
        cmd += ["--ro-bind", str(path), str(path)]
    cmd += ["--perms", "0777", "--dir", HOME_IN_SANDBOX]
    if inputs is not None:
        cmd += [
            "--perms",
            "0755",
            "--dir",
            str(Path(INPUTS_IN_SANDBOX).parent),
            "--ro-bind",
            str(inputs),
            INPUTS_IN_SANDBOX,
        ]
    cmd += [
        "--ro-bind",
        str(rundir),
        str(rundir),
        "--size",
        str(limits.sockets),
        "--perms",
        "0777",
        "--tmpfs",
        sockets,
        "--chdir",
        HOME_IN_SANDBOX,
    ]
    return [*cmd, "--", *inner]


MISSING = (
    "bubblewrap (bwrap) is not installed: student code would run "
    "unsandboxed. Install it (Debian/Ubuntu: apt-get install bubblewrap) or, "
    "for trusted submissions only, grade with --no-sandbox."
)


def check_available(limits: Limits | None = None) -> str | None:
    """None if a sandbox can be started here, else why not (one line)."""
    if sys.platform != "linux":
        return "the sandbox needs Linux (bubblewrap)"
    if bwrap() is None:
        return MISSING
    import tempfile

    limits = limits or Limits()
    uid = fresh_uid()
    with tempfile.TemporaryDirectory(prefix="attn-check-") as tmp:
        rundir = Path(tmp)
        if is_root():
            os.chown(rundir, uid, uid)
        probe = [
            sys.executable,
            "-P",
            "-c",
            BOOTSTRAP.replace(
                "from grader.kernel.probe import main\nmain()\n",
                "import socket\ntry:\n    socket.create_connection(('1.1.1.1', 53), 2)\n"  # noqa: E501
                "    print('NETWORK')\nexcept OSError:\n    print('ok', os.getuid())\n",
            ),
            json.dumps(_bootstrap_config(limits, uid=uid)),
        ]
        try:
            out = subprocess.run(
                command(probe, rundir=rundir, inputs=None, limits=limits),
                capture_output=True,
                text=True,
                timeout=60,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"bubblewrap failed to start: {exc}"
    if out.returncode != 0 or not out.stdout.startswith("ok"):
        detail = (out.stderr or out.stdout).strip().splitlines()
        return (
            "bubblewrap could not start a sandbox: "
            + (detail[-1] if detail else f"exit {out.returncode}")
            + " (unprivileged user namespaces may be disabled: see "
            "solutions/GRADING_SECURITY.md)"
        )
    if is_root() and out.stdout.split()[1] == "0":
        return "the sandbox could not drop root privileges"
    return None


UID_BASE, UID_SPAN = 2_000_000_000, 100_000_000
_uids = iter(range(10**9))


def fresh_uid() -> int:
    """An unused uid for one sandbox (root only). RLIMIT_NPROC counts the
    processes of a uid machine-wide, so a kernel that was just killed -- a fork
    bomb's processes still dying -- must not count against the next one."""
    return UID_BASE + (os.getpid() * 4099 + next(_uids)) % UID_SPAN


def _bootstrap_config(limits: Limits, sandboxed: bool = True, uid=None) -> dict:
    cfg = {"rlimits": limits.rlimits()}
    if sandboxed and is_root():
        uid = fresh_uid() if uid is None else uid
        cfg.update(uid=uid, gid=uid)
    return cfg


def limit_messages(context, size: int) -> None:
    """Every socket ``context`` makes from now on refuses frames over ``size``
    bytes (ZeroMQ's MAXMSGSIZE, checked before the frame is read; 0: none)."""
    if size > 0:
        import zmq

        context.setsockopt(zmq.MAXMSGSIZE, size)


def watch_disconnects(socket):
    """A function that says whether ``socket`` lost a peer since it was last
    asked (ZeroMQ drops a peer that sends a frame over MAXMSGSIZE). It never
    blocks; None where the socket cannot be monitored."""
    import zmq
    from zmq.utils.monitor import parse_monitor_message

    try:
        monitor = socket.get_monitor_socket(zmq.EVENT_DISCONNECTED)
        events = zmq.Socket.shadow(monitor.underlying)  # polled synchronously
    except zmq.ZMQError:
        return None

    def dropped() -> bool:
        seen = False
        while events.poll(0):
            message = parse_monitor_message(events.recv_multipart())
            seen = seen or message["event"] == zmq.EVENT_DISCONNECTED
        return seen

    def close() -> None:
        try:
            socket.disable_monitor()
        except zmq.ZMQError:
            pass
        monitor.close(linger=0)

    dropped.close = close
    return dropped


class SandboxedKernelManager(AsyncKernelManager):
    """A KernelManager that runs the kernel in bubblewrap (see the module doc).

    ``rundir`` (a private, empty folder) holds the connection file (read-only
    in the sandbox); the IPC sockets are in the sandbox's socket tmpfs (the
    kernel's ``ip`` is a path there; the grader's, after the launch, the same
    path under ``/proc/<sandbox init>/root``). ``inputs`` (an .npz of inputs
    only) appears read-only in the sandbox at ``/grading/inputs.npz``. A
    ``Watchdog`` thread watches the sandbox while it runs; ``killed`` is
    ``(flag, reason)`` once it killed it.
    """

    sandbox = Bool(
        True, help="Run the kernel in bubblewrap (False: UNSAFE, rlimits only)"
    ).tag(config=True)
    memory_limit = Integer(Limits.memory, help="address space per process, bytes").tag(
        config=True
    )
    process_limit = Integer(Limits.processes, help="processes + threads").tag(
        config=True
    )
    cpu_limit = Integer(Limits.cpu_seconds, help="CPU seconds per process").tag(
        config=True
    )
    file_size_limit = Integer(Limits.file_size).tag(config=True)
    tmpfs_size = Integer(Limits.tmpfs).tag(config=True)
    total_memory_limit = Integer(
        Limits.total_memory,
        help="memory of all the kernel's processes together "
        "(resident, shared pages split between their sharers), bytes; above it the "
        "grader kills the kernel (0: no such limit)",
    ).tag(config=True)
    socket_tmpfs_size = Integer(
        Limits.sockets, help="size of the tmpfs that holds the kernel's sockets, bytes"
    ).tag(config=True)
    watch_interval = Float(
        0.25,
        help="seconds between two looks of the watchdog "
        "at the sandbox's memory and files",
    ).tag(config=True)
    extra_read_only = List(Unicode(), help="more host paths to mount read-only").tag(
        config=True
    )
    extra_env = Dict(help="more environment variables for the kernel").tag(config=True)
    max_message_size = Integer(
        Limits.message,
        help="largest message frame (bytes) the grader's sockets accept from the "
        "kernel; ZeroMQ drops the connection of a peer that sends more, before "
        "reading it (0: no limit)",
    ).tag(config=True)
    cpu_cores = Float(
        Limits.cpu_cores,
        help="CPU share of the whole sandbox, in cores (0: no limit). One core: "
        "`grader grade` runs one worker per core, so one core each is every "
        "submission's fair share, and a notebook whose processes want more "
        "waits instead of slowing the submissions graded beside it",
    ).tag(config=True)
    sandbox_processes = Integer(
        Limits.sandbox_processes,
        help="processes (not threads) the sandbox may hold at once, the kernel "
        "included; above it the watchdog kills the sandbox (flag runaway); an "
        "exercise needs one (0: no such limit)",
    ).tag(config=True)
    use_cgroups = Bool(
        True,
        help="put each sandbox in a cgroup of its own (CPU quota, pids.max) "
        "where the grader may create one; else, or if False, the watchdog "
        "holds the sandbox to its CPU share with SIGSTOP/SIGCONT",
    ).tag(config=True)
    sandbox_uid = Integer(
        -1,
        help="uid of the kernel when the grader runs as root "
        "(-1: a fresh unused uid per kernel)",
    ).tag(config=True)

    def __init__(self, rundir=None, inputs=None, **kwargs):
        super().__init__(**kwargs)
        import tempfile

        self._own_rundir = rundir is None
        self.rundir = Path(rundir or tempfile.mkdtemp(prefix="attn-k-"))
        self.inputs = Path(inputs) if inputs else None
        self.uid = self.sandbox_uid if self.sandbox_uid >= 0 else fresh_uid()
        self.transport = "ipc"
        self.sockets = socket_folder()
        self.ip = f"{self.sockets}/k" if self.sandbox else str(self.rundir / "k")
        self.connection_file = str(self.rundir / "kernel.json")
        self.watchdog: Watchdog | None = None
        self.cgroup: Cgroup | None = None
        self.owner = self.rundir.name  # who is graded (for the log)
        limit_messages(self.context, self.max_message_size)  # the control socket

    def client(self, **kwargs):
        """A kernel client whose sockets refuse frames over ``max_message_size``.

        Without the limit one message of the kernel's (a 200 MB print) is read
        whole into the grader before any output cap looks at it. ZeroMQ checks
        the declared size first and drops the connection instead: the cell
        then runs into its time limit, the grader keeps its memory."""
        kc = super().client(**kwargs)
        limit_messages(kc.context, self.max_message_size)
        return kc

    @observe("sandbox")
    def _sandbox_changed(self, change):
        self.ip = f"{self.sockets}/k" if change["new"] else str(self.rundir / "k")

    @property
    def limits(self) -> Limits:
        return Limits(
            memory=self.memory_limit,
            processes=self.process_limit,
            cpu_seconds=self.cpu_limit,
            file_size=self.file_size_limit,
            tmpfs=self.tmpfs_size,
            total_memory=self.total_memory_limit,
            sockets=self.socket_tmpfs_size,
            message=self.max_message_size,
            cpu_cores=self.cpu_cores,
            sandbox_processes=self.sandbox_processes,
        )

    @property
    def killed(self) -> tuple[str, str] | None:
        """``(flag, reason)`` if the watchdog killed the sandbox, else None."""
        return self.watchdog.killed if self.watchdog is not None else None

    def format_kernel_cmd(self, extra_arguments=None) -> list[str]:
        inner = [
            sys.executable,
            "-P",
            "-c",
            BOOTSTRAP,
            json.dumps(_bootstrap_config(self.limits, self.sandbox, self.uid)),
            "-f",
            self.connection_file,
            *(extra_arguments or []),
        ]
        if not self.sandbox:
            return inner
        return command(
            inner,
            rundir=self.rundir,
            inputs=self.inputs,
            limits=self.limits,
            extra_ro=self.extra_read_only,
            sockets=self.sockets,
            seccomp_fd=USERNS_FILTER_FD if self._userns_filter() else None,
        )

    def _userns_filter(self) -> bytes | None:
        """The seccomp filter a root-mode sandbox gets (``userns_filter``)."""
        return userns_filter() if self.sandbox and is_root() else None

    def _entering(self, kernel_cmd: list[str]) -> list[str]:
        """``kernel_cmd`` behind ``ENTER``: a shell that moves itself into the
        sandbox's cgroup (if any), opens the seccomp filter (root mode), then
        becomes ``kernel_cmd`` (same pid): bubblewrap starts inside."""
        procs = self.cgroup.procs_files() if self.cgroup is not None else []
        program = self._userns_filter()
        if not procs and program is None:
            return kernel_cmd
        seccomp = "-"
        if program is not None:
            path = self.rundir / "userns.bpf"
            path.unlink(missing_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            with os.fdopen(fd, "wb") as f:
                f.write(program)
            seccomp = str(path)
        return ["/bin/sh", "-c", ENTER, "attn-enter", str(len(procs)), *procs] + [
            seccomp,
            *kernel_cmd,
        ]

    async def _async_launch_kernel(self, kernel_cmd, **kw):
        kw["stdin"] = kw["stdout"] = kw["stderr"] = subprocess.DEVNULL
        kw["cwd"] = str(self.rundir)
        env = sandbox_env()
        if self.sandbox:
            env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        else:
            self.log.warning(
                "UNSANDBOXED student kernel (--no-sandbox): it can "
                "read the reference data and write the course files"
            )
            env["GRADER_INPUTS"] = str(self.inputs) if self.inputs else ""
            env["HOME"] = str(self.rundir)
            env["IPYTHONDIR"] = str(self.rundir / ".ipython")
            env["MPLCONFIGDIR"] = str(self.rundir / ".matplotlib")
        env.update(self.extra_env)
        kw["env"] = env
        if self.sandbox and is_root():
            for path in [self.rundir, *self.rundir.iterdir()]:
                os.chown(path, self.uid, self.uid)
        if self.cgroup is not None:  # a restart: the last kernel's group
            self.cgroup.remove()
        self.cgroup = None
        if self.use_cgroups:
            self.cgroup = Cgroup.create(self.cpu_cores, self.process_limit + 16)
        try:
            await super()._async_launch_kernel(self._entering(kernel_cmd), **kw)
        except BaseException:
            self._remove_cgroup()
            raise
        init = None
        if self.sandbox:
            init = await self._sandbox_ready()
            if init is not None:  # the grader's way to the sandbox's sockets
                self.ip = f"/proc/{init}/root{self.sockets}/k"
        top = self.top_pid()
        if top is not None:
            self.watchdog = Watchdog(self, top, init, self.cgroup)
            self.watchdog.start()

    def _remove_cgroup(self) -> None:
        if self.cgroup is not None:
            self.cgroup.remove()
            self.cgroup = None

    async def _sandbox_ready(self, timeout: float = 30) -> int | None:
        """The pid of bubblewrap's init in the sandbox once the sandbox is set up
        (its mounts are in place when init has started the kernel), or None."""
        end = time.monotonic() + timeout
        while time.monotonic() < end and self.top_pid() is not None:
            tree = process_tree()
            for init in tree.get(self.top_pid(), ())[:1]:
                if tree.get(init):
                    return init
            await asyncio.sleep(0.01)
        return None

    def cleanup_ipc_files(self) -> None:
        if not self.sandbox:  # sandboxed: they vanish with the sandbox's tmpfs
            super().cleanup_ipc_files()

    def stop_watchdog(self) -> None:
        dog = self.watchdog
        if dog is not None and not dog.reported:
            dog.stop()
            dog.reported = True
            self.log.info("sandbox %s: %s", self.owner, dog.summary())

    async def _async_cleanup_resources(self, restart: bool = False) -> None:
        self.stop_watchdog()
        await super()._async_cleanup_resources(restart=restart)
        self._remove_cgroup()
        if self._own_rundir and not restart:
            shutil.rmtree(self.rundir, ignore_errors=True)

    cleanup_resources = _async_cleanup_resources

    # -- processes ---------------------------------------------------------
    def top_pid(self) -> int | None:
        p = getattr(self.provisioner, "process", None)
        return p.pid if p is not None and p.poll() is None else None

    def kernel_pid(self) -> int | None:
        """Host pid of the Python kernel (bwrap -> bwrap init -> kernel)."""
        top = self.top_pid()
        if top is None or not self.sandbox:
            return top
        tree = process_tree()
        for child in sorted(tree.get(top, ()), key=start_time):
            for grandchild in sorted(tree.get(child, ()), key=start_time):
                return grandchild
        return None

    def exit_status(self) -> int | None:
        p = getattr(self.provisioner, "process", None)
        return None if p is None else p.poll()

    async def interrupt_kernel(self):
        """SIGINT to the kernel itself (it is in another session than bwrap)."""
        pid = self.kernel_pid()
        if pid is not None:
            try:
                os.kill(pid, signal.SIGINT)
            except ProcessLookupError:
                pass

    def kill_strays(self) -> int:
        """SIGKILL every process in the sandbox but the kernel; how many."""
        kernel = self.kernel_pid()
        top = self.top_pid()
        if kernel is None or top is None:
            return 0
        killed = 0
        for _ in range(50):  # a fork bomb may still be forking: repeat
            tree = process_tree()
            inner = tree.get(top, ())[:1] if self.sandbox else [kernel]
            keep = {top, kernel, *inner}
            strays = [
                p for root in inner for p in descendants(tree, root) if p not in keep
            ]
            if not strays:
                break
            for pid in strays:
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed += 1
                except ProcessLookupError:
                    pass
        return killed

    def all_pids(self) -> list[int]:
        top = self.top_pid()
        return [] if top is None else [top, *descendants(process_tree(), top)]

    def process_count(self) -> int:
        """Processes in the sandbox besides the kernel (and bwrap's init)."""
        kernel, top = self.kernel_pid(), self.top_pid()
        if kernel is None or top is None:
            return 0
        tree = process_tree()
        inner = tree.get(top, ())[:1] if self.sandbox else [kernel]
        return len(
            [
                p
                for root in inner
                for p in descendants(tree, root)
                if p not in (kernel, top, *inner)
            ]
        )

    def thread_count(self) -> int:
        pid = self.kernel_pid()
        return threads(pid) if pid else 0


# -- /proc helpers -----------------------------------------------------------
def _stat(pid) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw[raw.rindex(")") + 2 :].split()  # fields after "(comm)"


def running(pid) -> bool:
    """True while ``pid`` exists and is not a zombie (a zombie holds no memory
    or CPU; in a container its reaper may take a second or two)."""
    fields = _stat(pid)
    return fields is not None and fields[0] != "Z"


def process_tree() -> dict:
    """{ppid: [pids]} of every process on the machine."""
    tree = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        fields = _stat(entry.name)
        if fields:
            tree.setdefault(int(fields[1]), []).append(int(entry.name))
    return tree


def descendants(tree: dict, pid: int) -> list[int]:
    found, todo = [], list(tree.get(pid, ()))
    while todo:
        p = todo.pop()
        found.append(p)
        todo.extend(tree.get(p, ()))
    return found


def start_time(pid) -> int:
    fields = _stat(pid)
    return int(fields[19]) if fields else 0


def threads(pid) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("Threads:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def describe(limits: Limits) -> dict:
    return asdict(limits)


# -- the watchdog ------------------------------------------------------------
PAGE = os.sysconf("SC_PAGE_SIZE")
SOCKET_BYTES = 64 * 1024  # in the socket tmpfs: sockets take no space
SOCKET_FILES = 64  # ... and a kernel binds five
TMPFS_FILES = 20_000  # files in one tmpfs: empty files cost memory too
TMPFS_IN_SANDBOX = ("/tmp", "/dev/shm", "/home")


def rss(pid) -> int:
    """Resident bytes of one process (0 if it is gone)."""
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE
    except (OSError, ValueError, IndexError):
        return 0


def pss(pid) -> int:
    """Proportional set size: resident bytes, each shared page divided between
    the processes that share it (its resident size where that is unreadable)."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return rss(pid)


def memory_use(pids, limit: int = 0) -> int:
    """Bytes of memory the processes ``pids`` hold together.

    The sum of their resident sizes, which counts a page that forked processes
    share once per process; where that sum is above ``limit`` (always with
    ``limit`` 0), the sum of their proportional set sizes, which counts every
    page once (slower: the kernel walks the page tables). Memory that no
    process maps (the tmpfs'es, bounded by their sizes) is not counted."""
    total = sum(rss(p) for p in pids)
    if limit and total <= limit:
        return total
    return sum(pss(p) for p in pids)


def folder_use(path) -> tuple[int, int] | None:
    """(bytes, files) used in the file system of ``path`` (a tmpfs), or None."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return (st.f_blocks - st.f_bfree) * st.f_frsize, st.f_files - st.f_ffree


def over_disk_limits(root: str, sockets: str) -> str | None:
    """Why the sandbox whose root is ``root`` (``/proc/<init>/root``) is over
    its file limits, or None. The socket tmpfs should hold only sockets; every
    tmpfs is size-limited, but not in its number of (empty) files."""
    use = folder_use(root + sockets)
    if use is not None and (use[0] > SOCKET_BYTES or use[1] > SOCKET_FILES):
        return (
            f"the kernel wrote {use[0] >> 10} KiB in {use[1]} files to its "
            f"socket folder (only sockets belong there) and was killed"
        )
    for path in TMPFS_IN_SANDBOX:
        use = folder_use(root + path)
        if use is not None and use[1] > TMPFS_FILES:
            return (
                f"the kernel created {use[1]} files in {path} (limit "
                f"{TMPFS_FILES}) and was killed"
            )
    return None


class Watchdog(threading.Thread):
    """Looks at a running sandbox every ``km.watch_interval`` seconds: the
    memory of all its processes (``memory_use``, above
    ``km.total_memory_limit``: flag ``memory``), their number (above
    ``km.sandbox_processes``: flag ``runaway``) and its tmpfs'es
    (``over_disk_limits``: flag ``disk``). Over a limit it kills the sandbox
    (SIGKILL to bubblewrap's init: the kernel dies with its PID namespace;
    to every process of its cgroup) and keeps ``killed = (flag, reason)``.
    Without a cgroup it also holds the sandbox to ``km.cpu_cores``
    (``Governor``). Records the peaks it saw."""

    def __init__(self, km, top: int, init: int | None, cgroup=None):
        super().__init__(daemon=True, name=f"watchdog-{top}")
        self.top, self.init, self.cgroup = top, init, cgroup
        self.limit = km.total_memory_limit
        self.max_processes = getattr(km, "sandbox_processes", 0)
        cores = getattr(km, "cpu_cores", 0)
        self.governor = Governor(cores) if cgroup is None and cores > 0 else None
        self.cores = cores
        self.interval = max(0.01, km.watch_interval)
        self.sockets = km.sockets if init is not None else None
        self.killed: tuple[str, str] | None = None
        self.reported = False  # its summary was logged
        self.peak_memory = self.peak_processes = 0
        self.peak_sockets = (0, 0)
        self.most_processes = 0  # the most it saw since the last mark()
        self._paused_now = 0.0  # seconds the governor stopped the sandbox, last look
        self._stop_event = threading.Event()

    def stop(self) -> None:
        self._stop_event.set()
        if self.is_alive() and threading.current_thread() is not self:
            self.join(5)

    def run(self) -> None:
        while not self._stop_event.is_set():
            began = time.monotonic()
            try:
                found = self.look()
            except Exception:  # noqa: BLE001  (a watchdog must not die)
                found = None
            if found:
                self.killed = found
                self.kill()
                return
            # never more than a third of a core (the governor's pause is no work)
            spent = time.monotonic() - began - self._paused_now
            self._stop_event.wait(max(self.interval, 2 * spent))

    def govern(self, pids: list[int]) -> None:
        """Stop the sandbox's processes for as long as the governor says (its
        share of the CPU is used up), then let them go on."""
        self._paused_now = 0.0
        if self.governor is None:
            return
        pause = self.governor.pause(time.monotonic(), cpu_time(pids))
        if pause <= 0:
            return
        stopped: set[int] = set()
        try:
            for _ in range(10):  # a process may fork while the others stop
                inner = self._governed()
                new = [p for p in inner if p not in stopped]
                if not new:
                    break
                signal_all(new, signal.SIGSTOP)
                stopped.update(new)
            began = time.monotonic()
            self._stop_event.wait(pause)
            self._paused_now = time.monotonic() - began
            self.governor.paused += self._paused_now
        finally:
            signal_all(self._governed(), signal.SIGCONT)

    def _governed(self) -> list[int]:
        """The processes the governor stops: all but bubblewrap's own."""
        if self.init is None:  # unsandboxed: the top process is the kernel
            return self.pids()
        return [p for p in self.pids() if p != self.top]

    def pids(self) -> list[int]:
        if not running(self.top):
            return []
        return [self.top, *descendants(process_tree(), self.top)]

    def mark(self) -> int:
        """Start counting afresh: how many processes the sandbox holds now."""
        self.most_processes = count = len(self.pids())
        return count

    def look(self) -> tuple[str, str] | None:
        pids = self.pids()
        if not pids:
            self._stop_event.set()
            return None
        self.most_processes = max(self.most_processes, len(pids))
        inside = len(pids) - (2 if self.init is not None else 1)  # not bwrap's
        if self.max_processes and inside > self.max_processes:
            return "runaway", (
                f"the kernel ran {inside} processes at once (limit "
                f"{self.max_processes}; a fork bomb or CPU hog?) and was killed"
            )
        self.govern(pids)
        used = memory_use(pids, self.limit)
        if used > self.peak_memory:
            self.peak_memory, self.peak_processes = used, len(pids)
        if self.limit and used > self.limit:
            return "memory", (
                f"the kernel's {len(pids)} processes used {used / GiB:.2f} GiB of "
                f"memory together (limit {self.limit / GiB:g} GiB) and were killed"
            )
        if self.sockets is None:
            return None
        root = f"/proc/{self.init}/root"
        use = folder_use(root + self.sockets)
        if use is not None:
            self.peak_sockets = max(self.peak_sockets, use)
        reason = over_disk_limits(root, self.sockets)
        return ("disk", reason) if reason else None

    def kill(self) -> None:
        """SIGKILL to bubblewrap's init (its PID namespace dies with it), to
        every process left under the top process (all of them, unsandboxed:
        children first, before they are orphaned), then to the top one."""

        def kill(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

        if self.init is not None:
            kill(self.init)
        if self.cgroup is not None:
            self.cgroup.kill()
        for _ in range(50):  # forks may still be under way: repeat
            alive = [p for p in descendants(process_tree(), self.top) if running(p)]
            if not alive:
                break
            for pid in alive:
                kill(pid)
            time.sleep(0.01)
        kill(self.top)

    def summary(self) -> str:
        text = (
            f"peak memory {self.peak_memory / MiB:.0f} MiB in "
            f"{self.peak_processes} processes (limit {self.limit / MiB:.0f} MiB)"
        )
        if self.sockets is not None:
            text += (
                f", socket folder {self.peak_sockets[0] >> 10} KiB in "
                f"{self.peak_sockets[1]} files"
            )
        if self.cgroup is not None:
            text += (
                f", CPU quota {self.cores:g} cores (cgroup v{self.cgroup.version}):"
                f" throttled {self.cgroup.throttled():.1f} s"
            )
        elif self.governor is not None:
            text += (
                f", CPU share {self.cores:g} cores (watchdog): stopped "
                f"{self.governor.paused:.1f} s"
            )
        return text + (f"; killed: {self.killed[1]}" if self.killed else "")


# -- CPU share and process cap: a cgroup per sandbox, else the watchdog -------
CGROUP_ROOT = Path("/sys/fs/cgroup")
CGROUP_PERIOD = 100_000  # microseconds: the CFS period of the CPU quota
# A sandbox's group is made directly in the grader's own cgroup (v1) or at the
# hierarchy's root (v2), beside the processes there: the CPU scheduler weighs
# each sandbox like one process (cpu.shares / cpu.weight), however many
# processes it runs; under a common parent all the sandboxes together would
# weigh as one process.
CGROUP_PREFIX = "attn-sandbox-"
# A shell that moves itself into the cgroup(s) named by its arguments, opens
# the seccomp filter (or "-") on USERNS_FILTER_FD and becomes the command: a
# process started by jupyter_client, which has no hook to run after fork.
ENTER = (
    'n=$1; shift; while [ "$n" -gt 0 ]; do echo $$ > "$1" || exit 125; '
    'shift; n=$((n - 1)); done; if [ "$1" != - ]; then exec 3< "$1" || exit 125; '
    'fi; shift; exec "$@"'
)


def _own_cgroups() -> dict:
    """{controller or "" (v2): path} of this process's cgroups."""
    found = {}
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        _, controllers, path = line.split(":", 2)
        for name in controllers.split(",") if controllers else [""]:
            found[name] = path
    return found


def _writable(folder: Path) -> bool:
    return folder.is_dir() and os.access(folder, os.W_OK | os.X_OK)


class Cgroup:
    """One sandbox's control group(s): its CPU quota (``cores`` cores per
    ``CGROUP_PERIOD``) and its cap on tasks (``pids.max``: processes and
    threads), in cgroup v2 (one folder, ``cpu.max``) where its hierarchy has
    the ``cpu`` controller, else in cgroup v1 (a folder in the ``cpu`` and one
    in the ``pids`` hierarchy). A process of the sandbox cannot leave it: the
    sandbox sees /sys read-only (and its own cgroup namespace) and runs as
    another user than the group's owner; a new session or process group
    changes nothing."""

    def __init__(self, version: int, folders: list[Path]):
        self.version, self.folders = version, folders

    @classmethod
    def create(cls, cores: float, tasks: int, root: Path = CGROUP_ROOT):
        """A new group with these limits, or None where none can be made
        (no root, /sys/fs/cgroup read-only, no cpu controller)."""
        name = f"{CGROUP_PREFIX}{os.getpid()}-{secrets.token_hex(6)}"
        own = _own_cgroups()
        for version, places in cls._hierarchies(root, own):
            made = []
            try:
                for base, files in places:
                    folder = base / name
                    if version == 2:  # the controllers, for the new group
                        control = base / "cgroup.subtree_control"
                        if "cpu" not in control.read_text().split():
                            control.write_text("+cpu +pids")
                    folder.mkdir(parents=True)
                    made.append(folder)
                    for file, value in files(cores, tasks):
                        (folder / file).write_text(value)
                group = cls(version, made)
                if group.can_enter():
                    return group
                group.remove()
            except OSError:
                cls(version, made).remove()
        return None

    _enters: dict = {}  # hierarchy -> whether a process could enter a new group

    def can_enter(self) -> bool:
        """Whether a process can move itself into this group, as the sandbox's
        first process will (tried once per process and hierarchy: a
        container may let root make groups but not enter them). A failure
        here means no cgroup, not a kernel that cannot start."""
        where = str(self.folders[0].parent)
        if where not in Cgroup._enters:
            try:
                probe = subprocess.run(
                    ["/bin/sh", "-c", ENTER, "probe", str(len(self.folders))]
                    + [*self.procs_files(), "-", "true"],
                    capture_output=True,
                    timeout=10,
                )
                Cgroup._enters[where] = probe.returncode == 0
            except (OSError, subprocess.TimeoutExpired):
                Cgroup._enters[where] = False
        return Cgroup._enters[where]

    @staticmethod
    def _hierarchies(root: Path, own: dict):
        """(version, [(folder to create in, limits -> [(file, value)])]) for
        the hierarchies that could hold the sandbox's group, best first."""

        def quota(cores):
            return str(int(cores * CGROUP_PERIOD)) if cores > 0 else "max"

        def v2(cores, tasks):
            return [
                ("cpu.max", f"{quota(cores)} {CGROUP_PERIOD}"),
                ("pids.max", str(tasks)),
            ]

        for unified in (root, root / "unified"):
            controllers = unified / "cgroup.controllers"
            try:
                available = controllers.read_text().split()
            except OSError:
                continue
            if {"cpu", "pids"} <= set(available) and _writable(unified):
                yield 2, [(unified, v2)]
            break
        cpu = root / "cpu" if (root / "cpu").is_dir() else root / "cpu,cpuacct"
        pids = root / "pids"
        if (cpu / "cpu.cfs_quota_us").exists() and (pids / "cgroup.procs").exists():
            cpu_base = cpu / own.get("cpu", "/").lstrip("/")
            pids_base = pids / own.get("pids", "/").lstrip("/")
            if _writable(cpu_base) and _writable(pids_base):

                def v1_cpu(cores, tasks):
                    return [
                        ("cpu.cfs_period_us", str(CGROUP_PERIOD)),
                        ("cpu.cfs_quota_us", "-1" if cores <= 0 else quota(cores)),
                    ]

                def v1_pids(cores, tasks):
                    return [("pids.max", str(tasks))]

                yield 1, [(cpu_base, v1_cpu), (pids_base, v1_pids)]

    def procs_files(self) -> list[str]:
        return [str(f / "cgroup.procs") for f in self.folders]

    def pids(self) -> list[int]:
        """Every process in the group (all its folders)."""
        found = set()
        for file in self.procs_files():
            try:
                found.update(int(p) for p in Path(file).read_text().split())
            except (OSError, ValueError):
                pass
        return sorted(found)

    def throttled(self) -> float:
        """Seconds the group's processes were held back by the CPU quota."""
        try:
            stat = (self.folders[0] / "cpu.stat").read_text().split()
        except (OSError, IndexError):
            return 0.0
        fields = dict(zip(stat[::2], stat[1::2], strict=False))
        if "throttled_usec" in fields:
            return int(fields["throttled_usec"]) / 1e6
        return int(fields.get("throttled_time", 0)) / 1e9

    def kill(self) -> None:
        for pid in self.pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def remove(self, wait: float = 5.0) -> bool:
        """Kill what is left in the group and remove its folders; True if all
        are gone (a folder goes once its last process has exited)."""
        end = time.monotonic() + wait
        left = [f for f in self.folders if f.exists()]
        while left:
            self.kill()
            for folder in list(left):
                try:
                    folder.rmdir()
                    left.remove(folder)
                except FileNotFoundError:
                    left.remove(folder)
                except OSError:
                    pass
            if not left or time.monotonic() > end:
                break
            time.sleep(0.02)
        return not left


def cpu_time(pids) -> float:
    """CPU seconds the processes ``pids`` used, with their reaped children
    (an orphan's time goes to the init that reaps it, inside the tree)."""
    total = 0
    for pid in pids:
        fields = _stat(pid)
        if fields:
            total += sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
    return total / CLOCK_TICKS


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


class Governor:
    """Holds a process tree to ``cores`` cores without a cgroup: a token
    bucket of CPU seconds, filled at ``cores`` per second of wall time up to
    ``burst`` seconds of CPU; when the tree has used more than the bucket
    held, ``pause`` says for how long to stop it (SIGSTOP to every process,
    SIGCONT after) so that its average comes back to its share."""

    def __init__(self, cores: float, burst: float = 2.0, longest: float = 2.0):
        self.cores, self.burst, self.longest = cores, burst * cores, longest
        self.bucket = self.burst
        self.last: tuple[float, float] | None = None  # (wall, cpu)
        self.paused = 0.0  # seconds the tree was stopped, in all

    def pause(self, now: float, used: float) -> float:
        """Seconds to stop the tree, given the wall time ``now`` and the CPU
        seconds ``used`` so far (0: it is within its share)."""
        if self.last is None:
            self.last = (now, used)
            return 0.0
        wall, cpu = self.last
        self.last = (now, used)
        spent = max(0.0, used - cpu)  # a reaped process may take its time away
        self.bucket = min(self.burst, self.bucket + self.cores * (now - wall)) - spent
        if self.bucket >= 0:
            return 0.0
        return min(self.longest, -self.bucket / self.cores)


def signal_all(pids, sig) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
