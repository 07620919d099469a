"""Student kernels in a bubblewrap sandbox, with resource limits.

nbgrader starts one Jupyter kernel per submission through jupyter_client's
KernelManager. ``SandboxedKernelManager`` replaces the kernel command with

    bwrap <namespaces> <read-only mounts> -- python -P -c <bootstrap> <limits>
        -f <connection file>

so the student's code runs

* without network: a new, empty network namespace (``--unshare-net``). The
  kernel talks to the grader over ZMQ *IPC* sockets (``transport = "ipc"``):
  Unix sockets in a per-kernel folder that is bind-mounted into the sandbox,
  which work across network namespaces (TCP on 127.0.0.1 would not: the
  sandbox has its own loopback);
* on a read-only file system that holds only the operating system, the Python
  installation and the ``attncourse`` package. The course folder -- the
  reference data, the hidden tests, ``gradebook.db``, ``submitted/``,
  ``autograded/``, other students' work -- is simply not there. Writable: a
  small tmpfs for ``$HOME``, ``/tmp`` and ``/dev/shm``, and the socket folder
  (watched by the grader, see ``grader.guard``);
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

Without bubblewrap the grader refuses to grade unless told ``--no-sandbox``
(``SandboxedKernelManager.sandbox = False``): then the kernel runs as the
grader's user with the same rlimits and the same out-of-kernel verdicts, but
can read every file the grader can. Each such kernel logs a warning.

Process helpers at the end (``/proc`` based) let the grader find the kernel
process inside the sandbox, kill stray processes and count threads.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from jupyter_client.manager import AsyncKernelManager
from traitlets import Bool, Dict, Integer, List, Unicode

import attncourse

GiB, MiB = 1024**3, 1024**2
INPUTS_IN_SANDBOX = "/grading/inputs.npz"
HOME_IN_SANDBOX = "/home/student"

# Environment passed into the sandbox (everything else is cleared).
PASS_ENV = ("TF_CPP_MIN_LOG_LEVEL", "TF_CPP_MAX_VLOG_LEVEL", "TF_ENABLE_ONEDNN_OPTS",
            "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS", "KERAS_BACKEND",
            "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
            "PYTHONHASHSEED", "NBGRADER_EXECUTION", "LANG", "LC_ALL", "MPLBACKEND",
            "GRADER_PRELOAD")

# What the kernel sees of /etc (the rest of it is not mounted).
ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "nsswitch.conf",
       "passwd", "group", "hosts", "host.conf", "alternatives", "os-release",
       "mime.types", "ssl/certs")
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
    """Resource limits of one student kernel (per process, set as rlimits)."""

    memory: int = 4 * GiB       # RLIMIT_AS: address space (TF + torch need ~2 GiB)
    processes: int = 256        # RLIMIT_NPROC: processes *and threads* of the user
    cpu_seconds: int = 3600     # RLIMIT_CPU: a backstop behind the wall-clock limits
    file_size: int = 64 * MiB   # RLIMIT_FSIZE: largest file the kernel may write
    open_files: int = 1024      # RLIMIT_NOFILE
    tmpfs: int = 64 * MiB       # size of each tmpfs ($HOME, /tmp, /dev/shm)

    def rlimits(self) -> dict:
        return {"RLIMIT_AS": self.memory, "RLIMIT_NPROC": self.processes,
                "RLIMIT_CPU": self.cpu_seconds, "RLIMIT_FSIZE": self.file_size,
                "RLIMIT_NOFILE": self.open_files, "RLIMIT_CORE": 0}


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
    common = ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts",
              "--unshare-cgroup-try", "--hostname", "sandbox"]
    if is_root():
        return [*common, "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    return ["--unshare-user", "--disable-userns", *common]


def _realdirs(path) -> list[Path]:
    """``path`` and, if it is a symlink chain, every directory it resolves through."""
    found = []
    p = Path(path)
    for _ in range(16):
        found.append(p.parent if p.is_file() or p.is_symlink() else p)
        if not p.is_symlink():
            break
        p = (p.parent / os.readlink(p))
    found.append(Path(path).resolve().parent if Path(path).is_file() else
                 Path(path).resolve())
    return found


def library_paths() -> list[Path]:
    """What of the course the kernel may import: ``attncourse`` (the learners'
    library) and the kernel side of the grader (``grader/__init__.py``, which
    imports nothing, and ``grader/kernel/``). Not the grader's references,
    known mistakes or judging code, not the course folder."""
    grader_dir = Path(__file__).resolve().parent
    return [Path(attncourse.__file__).resolve().parent,
            grader_dir / "__init__.py", grader_dir / "kernel"]


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
    env.update({
        "PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin",
        "HOME": home, "TMPDIR": "/tmp", "USER": "student", "LOGNAME": "student",
        "IPYTHONDIR": f"{home}/.ipython", "MPLCONFIGDIR": f"{home}/.matplotlib",
        "JUPYTER_PLATFORM_DIRS": "1", "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONPATH": os.pathsep.join(dict.fromkeys([
            str(Path(attncourse.__file__).resolve().parent.parent),
            str(Path(__file__).resolve().parent.parent)])),
        "GRADER_MODE": "observe",
        "GRADER_INPUTS": INPUTS_IN_SANDBOX,
    })
    env.setdefault("LANG", "C.UTF-8")
    env.setdefault("MPLBACKEND", "Agg")
    return env


def command(inner: list[str], *, rundir: Path, inputs: Path | None, limits: Limits,
            extra_ro=()) -> list[str]:
    """The bwrap command line that runs ``inner`` in the sandbox."""
    exe = bwrap()
    if exe is None:
        raise RuntimeError(MISSING)
    cmd = [exe, *namespace_args(), "--die-with-parent", "--new-session",
           "--clearenv"]
    for key, value in sorted(sandbox_env().items()):
        cmd += ["--setenv", key, value]
    cmd += ["--proc", "/proc", "--dev", "/dev"]
    size = str(limits.tmpfs)
    cmd += ["--size", size, "--perms", "1777", "--tmpfs", "/dev/shm",
            "--size", size, "--perms", "1777", "--tmpfs", "/tmp",
            "--size", size, "--tmpfs", "/home"]
    paths = read_only_paths(extra_ro)
    made = {Path("/"), Path("/tmp"), Path("/home"), Path("/dev"), Path("/proc")}
    for path in [*paths, rundir]:
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
        cmd += ["--perms", "0755", "--dir", str(Path(INPUTS_IN_SANDBOX).parent),
                "--ro-bind", str(inputs), INPUTS_IN_SANDBOX]
    cmd += ["--bind", str(rundir), str(rundir), "--chdir", HOME_IN_SANDBOX]
    return [*cmd, "--", *inner]


MISSING = ("bubblewrap (bwrap) is not installed: student code would run "
           "unsandboxed. Install it (Debian/Ubuntu: apt-get install bubblewrap) or, "
           "for trusted submissions only, grade with --no-sandbox.")


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
        probe = [sys.executable, "-P", "-c", BOOTSTRAP.replace(
            "from grader.kernel.probe import main\nmain()\n",
            "import socket\ntry:\n    socket.create_connection(('1.1.1.1', 53), 2)\n"
            "    print('NETWORK')\nexcept OSError:\n    print('ok', os.getuid())\n"),
            json.dumps(_bootstrap_config(limits, uid=uid))]
        try:
            out = subprocess.run(command(probe, rundir=rundir, inputs=None,
                                         limits=limits),
                                 capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"bubblewrap failed to start: {exc}"
    if out.returncode != 0 or not out.stdout.startswith("ok"):
        detail = (out.stderr or out.stdout).strip().splitlines()
        return ("bubblewrap could not start a sandbox: "
                + (detail[-1] if detail else f"exit {out.returncode}")
                + " (unprivileged user namespaces may be disabled: see "
                  "solutions/GRADING_SECURITY.md)")
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


class SandboxedKernelManager(AsyncKernelManager):
    """A KernelManager that runs the kernel in bubblewrap (see the module doc).

    ``rundir`` (a private, empty folder) holds the connection file and the IPC
    sockets; ``inputs`` (an .npz of inputs only) appears read-only in the
    sandbox at ``/grading/inputs.npz``.
    """

    sandbox = Bool(True, help="Run the kernel in bubblewrap (False: UNSAFE, "
                   "rlimits only)").tag(config=True)
    memory_limit = Integer(Limits.memory, help="address space per process, bytes"
                           ).tag(config=True)
    process_limit = Integer(Limits.processes, help="processes + threads"
                            ).tag(config=True)
    cpu_limit = Integer(Limits.cpu_seconds, help="CPU seconds per process"
                        ).tag(config=True)
    file_size_limit = Integer(Limits.file_size).tag(config=True)
    tmpfs_size = Integer(Limits.tmpfs).tag(config=True)
    extra_read_only = List(Unicode(), help="more host paths to mount read-only"
                           ).tag(config=True)
    extra_env = Dict(help="more environment variables for the kernel"
                     ).tag(config=True)
    sandbox_uid = Integer(-1, help="uid of the kernel when the grader runs as root "
                          "(-1: a fresh unused uid per kernel)").tag(config=True)

    def __init__(self, rundir=None, inputs=None, **kwargs):
        super().__init__(**kwargs)
        import tempfile

        self._own_rundir = rundir is None
        self.rundir = Path(rundir or tempfile.mkdtemp(prefix="attn-k-"))
        self.inputs = Path(inputs) if inputs else None
        self.uid = self.sandbox_uid if self.sandbox_uid >= 0 else fresh_uid()
        self.transport = "ipc"
        self.ip = str(self.rundir / "k")
        self.connection_file = str(self.rundir / "kernel.json")

    @property
    def limits(self) -> Limits:
        return Limits(memory=self.memory_limit, processes=self.process_limit,
                      cpu_seconds=self.cpu_limit, file_size=self.file_size_limit,
                      tmpfs=self.tmpfs_size)

    def format_kernel_cmd(self, extra_arguments=None) -> list[str]:
        inner = [sys.executable, "-P", "-c", BOOTSTRAP,
                 json.dumps(_bootstrap_config(self.limits, self.sandbox, self.uid)),
                 "-f", self.connection_file, *(extra_arguments or [])]
        if not self.sandbox:
            return inner
        return command(inner, rundir=self.rundir, inputs=self.inputs,
                       limits=self.limits, extra_ro=self.extra_read_only)

    async def _async_launch_kernel(self, kernel_cmd, **kw):
        kw["stdin"] = kw["stdout"] = kw["stderr"] = subprocess.DEVNULL
        kw["cwd"] = str(self.rundir)
        env = sandbox_env()
        if self.sandbox:
            env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        else:
            self.log.warning("UNSANDBOXED student kernel (--no-sandbox): it can "
                             "read the reference data and write the course files")
            env["GRADER_INPUTS"] = str(self.inputs) if self.inputs else ""
            env["HOME"] = str(self.rundir)
            env["IPYTHONDIR"] = str(self.rundir / ".ipython")
            env["MPLCONFIGDIR"] = str(self.rundir / ".matplotlib")
        env.update(self.extra_env)
        kw["env"] = env
        if self.sandbox and is_root():
            for path in [self.rundir, *self.rundir.iterdir()]:
                os.chown(path, self.uid, self.uid)
        await super()._async_launch_kernel(kernel_cmd, **kw)

    async def _async_cleanup_resources(self, restart: bool = False) -> None:
        await super()._async_cleanup_resources(restart=restart)
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
            strays = [p for root in inner for p in descendants(tree, root)
                      if p not in keep]
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
        return len([p for root in inner for p in descendants(tree, root)
                    if p not in (kernel, top, *inner)])

    def thread_count(self) -> int:
        pid = self.kernel_pid()
        return threads(pid) if pid else 0


# -- /proc helpers -----------------------------------------------------------
def _stat(pid) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw[raw.rindex(")") + 2:].split()  # fields after "(comm)"


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
