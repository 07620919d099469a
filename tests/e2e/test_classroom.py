"""The course on a real JupyterHub with the nbgrader exchange, end to end.

Starts JupyterHub (classroom/jupyterhub_config.py, PAM logins, the formgrader
as a hub service) on 127.0.0.1 with one instructor, two students and the
grader account as real Unix users, and runs one assignment (``addressing``)
through the whole cycle the way the people would:

* the instructor, in the formgrader service (through the hub, hub OAuth):
  generates and releases the assignment into an exchange under a temporary
  root (world-writable with the sticky bit);
* each student logs in with a password, starts a server, fetches the
  assignment from JupyterLab's Assignments API, saves a solution through the
  contents API (student A: the reference solution cells from solutions/;
  student B: a wrong PyTorch part) and submits;
* the instructor enrols a student from a terminal of the formgrader service
  (``nbgrader db student add/remove`` edits the hub group through the hub
  API), collects in the formgrader, runs the course's grading command
  (``python -m grader grade``) in that terminal -- as the
  grader account, in the course directory -- and releases the feedback in
  the formgrader; each student fetches it.

Then: grades (A full marks, B loses the PyTorch hidden tests), what a
student may not read (B: the exchange's inbound and feedback listings, A's
home, the course directory with the solutions), feedback without hidden
tests or reference numbers, and the hub's roles (a wrong password and the
grader account cannot log in; the instructor reaches the formgrader service
and its course list finds it, a student gets 403 and has no formgrader).

Needs root (useradd, PAM, setuid spawning): skipped otherwise, but failed when
CI=true. Needs configurable-http-proxy: ``npm ci --prefix classroom``.
Everything is removed at teardown: processes (by pid), users, files, and the
o+x bits it set on the folders above the Python environment (a developer's
interpreter may sit under /root, which the other users must traverse).
"""

import json
import os
import pwd
import re
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest
from support.ci import skip_or_fail, slowness

pytestmark = pytest.mark.classroom

requests = pytest.importorskip("requests")

ROOT = Path(__file__).resolve().parents[2]
CLASSROOM = ROOT / "classroom"
HUB_CONFIG = CLASSROOM / "jupyterhub_config.py"
PROXY = CLASSROOM / "node_modules" / ".bin" / "configurable-http-proxy"
BIN = Path(sys.executable).parent
COURSE = "attention-course"
ASSIGNMENT = "addressing"
# Seconds for the whole module (setup, cycle, teardown) on an idle CI-sized
# machine; scaled by how slow the machine is (support.ci.slowness) when it ends.
DEADLINE = 300


def _unavailable(reason: str):
    """Fail in CI (the test must run there), skip elsewhere."""
    skip_or_fail(f"classroom: {reason}")


def _preflight():
    if os.geteuid() != 0:
        _unavailable(
            "needs root: it creates Unix users, checks their passwords with "
            "PAM and starts their servers as them (run as root, e.g. in CI)"
        )
    for tool in ("useradd", "userdel", "chpasswd", "runuser"):
        if not shutil.which(tool):
            _unavailable(f"{tool} is not installed")
    if not shutil.which("node"):
        _unavailable("node is not installed (configurable-http-proxy needs it)")
    if not PROXY.exists():
        _unavailable(f"{PROXY} is missing: run `npm ci --prefix classroom`")
    if not (BIN / "jupyterhub").exists():
        _unavailable(f"jupyterhub is not installed in {BIN.parent}")


# ---------------------------------------------------------------- helpers


def open_path_for_all(paths) -> list[tuple[Path, int]]:
    """Let every user traverse (o+x, not list) the folders above ``paths``.

    The course's Python environment must be usable by the students and the
    grader, but a developer's or CI's interpreter may sit under /root (mode
    0700). Returns what was changed, for ``restore_modes``.
    """
    changed = []
    for path in paths:
        path = Path(path).resolve()
        chain = [path, *path.parents] if path.is_dir() else list(path.parents)
        for folder in reversed(chain):
            mode = folder.stat().st_mode
            if not mode & stat.S_IXOTH:
                folder.chmod(stat.S_IMODE(mode) | stat.S_IXOTH)
                changed.append((folder, stat.S_IMODE(mode)))
    return changed


def restore_modes(changed) -> None:
    for folder, mode in reversed(changed):
        try:
            folder.chmod(mode)
        except OSError:
            pass


def free_ports(n: int) -> list[int]:
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def run(cmd, **kw) -> subprocess.CompletedProcess:
    kw.setdefault("capture_output", True)
    kw.setdefault("text", True)
    kw.setdefault("timeout", 120)
    result = subprocess.run(cmd, **kw)
    if result.returncode:
        raise AssertionError(
            f"{cmd} exited {result.returncode}\n"
            f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
        )
    return result


def user_env(user: str, home: Path, **extra) -> list[str]:
    env = {
        "HOME": str(home),
        "USER": user,
        "LOGNAME": user,
        "LANG": "C.UTF-8",
        "PATH": os.pathsep.join([str(BIN), "/usr/local/bin", "/usr/bin", "/bin"]),
        **extra,
    }
    return ["env", "-i", *(f"{k}={v}" for k, v in env.items())]


def as_user(user: str, home: Path, cmd: list[str], cwd=None, timeout=120, **extra):
    """Run ``cmd`` as ``user`` (runuser) with a clean environment."""
    return run(
        ["runuser", "-u", user, "--", *user_env(user, home, **extra), *cmd],
        cwd=cwd,
        timeout=timeout,
    )


PROBE = textwrap.dedent("""
    import glob, json, os, sys
    out = {}
    for kind, path in json.loads(sys.argv[1]):
        try:
            if kind == "list":
                os.listdir(path)
            elif kind == "read":
                open(path, "rb").read()
            elif kind == "glob":
                out[path] = sorted(glob.glob(path))
                continue
            out[path] = "ok"
        except OSError as e:
            out[path] = type(e).__name__
    print(json.dumps(out))
""")


def probe(user: str, home: Path, checks: list[tuple[str, str]]) -> dict:
    """What ``user`` gets when listing/reading each path: "ok" or the error name."""
    result = as_user(
        user, home, [sys.executable, "-c", PROBE, json.dumps(checks)], cwd="/"
    )
    return json.loads(result.stdout)


class Browser:
    """One person's browser session on the hub (cookies, XSRF tokens)."""

    def __init__(self, base: str, name: str, password: str):
        self.base, self.name, self.password = base, name, password
        self.s = requests.Session()
        self.page_config: dict = {}

    def url(self, path: str) -> str:
        return self.base + path

    def xsrf(self, path: str) -> str:
        """The _xsrf cookie a browser would send to ``path`` (most specific)."""
        matching = [
            c
            for c in self.s.cookies
            if c.name == "_xsrf" and path.startswith(c.path.rstrip("/") + "/")
        ]
        assert matching, f"no _xsrf cookie for {path}: {list(self.s.cookies)}"
        return max(matching, key=lambda c: len(c.path)).value

    def login(self, password=None) -> requests.Response:
        self.s.get(self.url("/hub/login"), timeout=30).raise_for_status()
        return self.s.post(
            self.url("/hub/login"),
            timeout=60,
            allow_redirects=False,
            data={
                "username": self.name,
                "password": password or self.password,
                "_xsrf": self.xsrf("/hub/login"),
            },
        )

    def get(self, path: str, **kw) -> requests.Response:
        return self.s.get(self.url(path), timeout=kw.pop("timeout", 60), **kw)

    def post(self, path: str, prefix: str, **kw) -> requests.Response:
        """POST with the XSRF token of the server at ``prefix``."""
        headers = {"X-XSRFToken": self.xsrf(prefix), **kw.pop("headers", {})}
        return self.s.post(
            self.url(path), headers=headers, timeout=kw.pop("timeout", 120), **kw
        )

    def put(self, path: str, prefix: str, **kw) -> requests.Response:
        headers = {"X-XSRFToken": self.xsrf(prefix), **kw.pop("headers", {})}
        return self.s.put(self.url(path), headers=headers, timeout=60, **kw)

    def terminal(self, prefix: str, commands: str, timeout: float = 240) -> str:
        """Type ``commands`` into a new JupyterLab terminal of the server at
        ``prefix``; return the output. Fails unless they exit 0."""
        import websocket  # websocket-client, a dependency of jupyter_server

        r = self.post(prefix + "api/terminals", prefix)
        assert r.status_code == 200, (r.status_code, r.text)
        name = r.json()["name"]
        cookies = "; ".join(
            f"{c.name}={c.value}"
            for c in self.s.cookies
            if prefix.startswith(c.path.rstrip("/") or "/")
        )
        ws = websocket.create_connection(
            self.base.replace("http", "ws", 1) + f"{prefix}terminals/websocket/{name}",
            header=[f"Cookie: {cookies}", f"X-XSRFToken: {self.xsrf(prefix)}"],
            origin=self.base,
            timeout=timeout,
        )
        marker = secrets.token_hex(4)
        out, end = [], time.monotonic() + timeout
        try:
            # the marker is split in the typed line, whole only in the output
            split = f'"{marker[:4]}""{marker[4:]}:$?"'
            ws.send(json.dumps(["stdin", f"{commands}; echo {split}\r"]))
            while time.monotonic() < end:
                msg = json.loads(ws.recv())
                if msg[0] == "stdout":
                    out.append(msg[1])
                    text = "".join(out)
                    if f"{marker}:" in text:
                        code = text.split(f"{marker}:", 1)[1].strip().split()[0]
                        assert code == "0", f"exit {code}:\n{text[-4000:]}"
                        return text
                elif msg[0] == "disconnect":
                    break
            raise AssertionError(f"no end of {commands!r}:\n{''.join(out)[-4000:]}")
        finally:
            ws.close()
            self.s.delete(
                self.url(prefix + f"api/terminals/{name}"),
                headers={"X-XSRFToken": self.xsrf(prefix)},
                timeout=30,
            )

    def start_server(self, timeout=150):
        """Start my single-user server from the hub and open JupyterLab."""
        r = self.post(f"/hub/api/users/{self.name}/server", "/hub/")
        assert r.status_code in (201, 202), (r.status_code, r.text)
        prefix = f"/user/{self.name}/"
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            model = self.get(f"/hub/api/users/{self.name}").json()
            server = model.get("servers", {}).get("")
            if server and server.get("ready"):
                break
            time.sleep(0.5)
        else:
            raise AssertionError(f"{self.name}'s server did not start: {model}")
        lab = self.get(prefix + "lab")  # hub OAuth, then JupyterLab (sets _xsrf)
        assert lab.status_code == 200, lab.status_code
        data = re.search(
            r'<script id="jupyter-config-data" type="application/json">'
            r"(.*?)</script>",
            lab.text,
            re.S,
        )
        assert data, lab.text[:1000]
        self.page_config = json.loads(data.group(1))
        return prefix

    def disabled_nbgrader_plugins(self) -> set[str]:
        """The nbgrader JupyterLab plugins my JupyterLab has turned off."""
        disabled = self.page_config.get("disabledExtensions", [])
        return {
            x.split(":", 1)[1] for x in disabled if x.startswith("@jupyter/nbgrader:")
        }


# ---------------------------------------------------------------- the classroom


class Classroom:
    """Users, directories and a running hub; everything undone by close()."""

    def __init__(self):
        self.start = time.monotonic()
        self.slowness = slowness()  # at the start; measured again at the end
        self.tag = "ac" + secrets.token_hex(3)
        self.root = Path(
            tempfile.mkdtemp(prefix=f"attn-classroom-{self.tag}-", dir="/tmp")
        )
        self.root.chmod(0o755)
        self.users: dict[str, dict] = {}
        self.opened: list[tuple[Path, int]] = []
        self.hub = None
        self.hub_log = self.root / "hub" / "jupyterhub.log"
        self.instructor = f"{self.tag}-inst"
        self.students = [f"{self.tag}-stu1", f"{self.tag}-stu2"]
        # a third account that writes into the exchange by hand (no hub login)
        self.intruder = f"{self.tag}-stu3"
        self.grader = f"{self.tag}-grader"
        self.exchange = self.root / "exchange"
        self.course_root = self.root / "home" / self.grader / COURSE

    # -- setup
    def add_user(self, name: str) -> None:
        home = self.root / "home" / name
        password = secrets.token_urlsafe(12)
        home.parent.mkdir(exist_ok=True, mode=0o755)
        run(
            [
                "useradd",
                "--create-home",
                "--home-dir",
                str(home),
                "--shell",
                "/bin/bash",
                "--comment",
                "attention-course classroom test",
                name,
            ]
        )
        self.users[name] = {"home": home, "password": password}
        run(["chpasswd"], input=f"{name}:{password}\n")
        home.chmod(0o700)

    def setup(self) -> None:
        for name in [self.instructor, *self.students, self.intruder, self.grader]:
            self.add_user(name)
        # the course environment (interpreter, .venv, repo, proxy) for everyone
        self.opened = open_path_for_all(
            [Path(os.path.realpath(sys.executable)), BIN.parent, ROOT, PROXY.resolve()]
        )
        check = subprocess.run(
            [
                "runuser",
                "-u",
                self.grader,
                "--",
                *user_env(self.grader, self.home(self.grader)),
                sys.executable,
                "-c",
                "import jupyterhub, nbgrader, jupyterlab, attncourse",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            cwd="/",
        )
        assert check.returncode == 0, (
            "the course environment is not usable by other users: "
            f"{check.stderr[-2000:]}"
        )
        # the course directory: the grader's clone of the course (solutions!)
        self.course_root.mkdir(mode=0o700)
        shutil.copy(ROOT / "nbgrader_config.py", self.course_root)
        shutil.copytree(
            ROOT / "attncourse",
            self.course_root / "attncourse",
            ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"),
        )
        shutil.copytree(
            ROOT / "grader",
            self.course_root / "grader",
            ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"),
        )
        shutil.copytree(
            ROOT / "solutions" / ASSIGNMENT,
            self.course_root / "solutions" / ASSIGNMENT,
            ignore=shutil.ignore_patterns("grader-errors.log", "__pycache__"),
        )
        run(["chown", "-R", f"{self.grader}:{self.grader}", str(self.course_root)])
        # the exchange: like /tmp, world-writable with the sticky bit
        self.exchange.mkdir()
        self.exchange.chmod(0o1777)
        # the hub's state: root only
        hub_dir = self.root / "hub"
        hub_dir.mkdir(mode=0o700)
        roster = [
            f"instructor {self.instructor}",
            *(f"student {s}" for s in self.students),
        ]
        (hub_dir / "roster.txt").write_text("\n".join(roster) + "\n")
        self.admin_token = secrets.token_hex(32)
        # the course configuration plus an admin token for the test's checks
        (hub_dir / "jupyterhub_config.py").write_text(
            textwrap.dedent(f"""
            load_subconfig({str(HUB_CONFIG)!r})
            c.JupyterHub.services.append(
                {{"name": "classroom-test", "api_token": {self.admin_token!r}}})
            c.JupyterHub.load_roles.append(
                {{"name": "classroom-test", "services": ["classroom-test"],
                  "scopes": ["list:users", "read:users", "list:groups", "read:groups",
                             "list:services", "read:services"]}})
            c.JupyterHub.log_level = "INFO"
        """)
        )

    def start_hub(self) -> None:
        port, api_port, proxy_port, fg_port = free_ports(4)
        self.base = f"http://127.0.0.1:{port}"
        env = {
            "PATH": os.pathsep.join([str(BIN), "/usr/local/bin", "/usr/bin", "/bin"]),
            "HOME": "/root",
            "LANG": "C.UTF-8",
            "ATTNCOURSE_PYTHON_PREFIX": str(BIN.parent),
            "ATTNCOURSE_EXCHANGE": str(self.exchange),
            "ATTNCOURSE_GRADER": self.grader,
            "ATTNCOURSE_COURSE_ROOT": str(self.course_root),
            "ATTNCOURSE_ROSTER": str(self.root / "hub" / "roster.txt"),
            "ATTNCOURSE_HUB_IP": "127.0.0.1",
            "ATTNCOURSE_HUB_PORT": str(port),
            "ATTNCOURSE_HUB_API_PORT": str(api_port),
            "ATTNCOURSE_PROXY_API_PORT": str(proxy_port),
            "ATTNCOURSE_FORMGRADER_PORT": str(fg_port),
        }
        log = open(self.hub_log, "w")
        self.hub = subprocess.Popen(
            [str(BIN / "jupyterhub"), "-f", "jupyterhub_config.py"],
            cwd=self.root / "hub",
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        end = time.monotonic() + 60
        while time.monotonic() < end:
            if self.hub.poll() is not None:
                raise AssertionError(f"the hub exited:\n{self.log_tail()}")
            try:
                if requests.get(self.base + "/hub/health", timeout=2).ok:
                    break
            except requests.ConnectionError:
                pass
            time.sleep(0.5)
        else:
            raise AssertionError(f"the hub did not answer:\n{self.log_tail()}")
        # and the formgrader service (the hub starts it)
        end = time.monotonic() + 90
        while time.monotonic() < end:
            try:
                if requests.get(
                    f"http://127.0.0.1:{fg_port}/services/{COURSE}/api/status",
                    timeout=2,
                ).status_code in (200, 401, 403):
                    return
            except requests.ConnectionError:
                pass
            time.sleep(0.5)
        raise AssertionError(
            f"the formgrader service did not start:\n{self.log_tail()}"
        )

    def api(self, path: str) -> dict:
        r = requests.get(
            f"{self.base}/hub/api{path}",
            timeout=30,
            headers={"Authorization": f"token {self.admin_token}"},
        )
        r.raise_for_status()
        return r.json()

    def browser(self, name: str) -> Browser:
        return Browser(self.base, name, self.users[name]["password"])

    def home(self, name: str) -> Path:
        return self.users[name]["home"]

    def log_tail(self, n: int = 6000) -> str:
        try:
            return self.hub_log.read_text(errors="replace")[-n:]
        except OSError:
            return "(no hub log)"

    # -- teardown
    def _pids_of(self, name: str) -> list[int]:
        try:
            uid = pwd.getpwnam(name).pw_uid
        except KeyError:
            return []
        out = subprocess.run(
            ["ps", "-o", "pid=", "-u", str(uid)], capture_output=True, text=True
        ).stdout
        return [int(p) for p in out.split()]

    def close(self, keep_log=None) -> None:
        if self.hub is not None and self.hub.poll() is None:
            self.hub.send_signal(signal.SIGTERM)  # stops the servers and the proxy
            try:
                self.hub.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
        if self.hub is not None:
            try:  # anything left in the hub's own process group
                os.killpg(self.hub.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        # the proxy runs in a session of its own; a hub that crashed leaves it
        pid_file = self.root / "hub" / "jupyterhub-proxy.pid"
        try:
            pid = int(pid_file.read_text().strip())
            if "configurable-http-proxy" in Path(f"/proc/{pid}/cmdline").read_text():
                os.kill(pid, signal.SIGKILL)
        except (OSError, ValueError):
            pass
        for name in self.users:  # servers and kernels run as the test's users
            for sig in (signal.SIGTERM, signal.SIGKILL):
                for pid in self._pids_of(name):
                    try:
                        os.kill(pid, sig)
                    except ProcessLookupError:
                        pass
                if sig == signal.SIGTERM:
                    time.sleep(1)
        if keep_log is not None and self.hub_log.exists():
            shutil.copy(self.hub_log, keep_log)
        for name in self.users:
            subprocess.run(["userdel", "--remove", name], capture_output=True)
        shutil.rmtree(self.root, ignore_errors=True)
        restore_modes(self.opened)


@pytest.fixture(scope="module")
def classroom(tmp_path_factory):
    _preflight()
    room = Classroom()
    try:
        room.setup()
        room.start_hub()
        yield room
    finally:
        kept = tmp_path_factory.mktemp("classroom-log") / "jupyterhub.log"
        room.close(keep_log=kept)
        print(f"\nthe hub's log (with the servers' and the formgrader's): {kept}")
    assert not any(room._pids_of(n) for n in room.users)
    assert not room.root.exists()


# ---------------------------------------------------------------- the course


def solution_notebooks():
    """(release-style submissions) correct and wrong, as notebook dicts."""
    from grader import notebooks as nbs

    solutions = nbs.solution_cells(
        nbs.read(ROOT / "solutions" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb")
    )
    wrong = dict(solutions)
    # a typical mistake: scores from dot products instead of squared distances
    wrong["torch-solution"] = textwrap.dedent("""\
        def soft_lookup_torch(queries, keys, values, beta):
            scores = beta * queries @ keys.transpose(-1, -2)
            weights = torch.softmax(scores, dim=-1)
            return weights @ values, weights
        """)
    return solutions, wrong


def points() -> dict:
    from grader import notebooks as nbs

    nb = nbs.read(ROOT / "solutions" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb")
    meta = [c.get("metadata", {}).get("nbgrader", {}) for c in nb["cells"]]
    return {m["grade_id"]: m["points"] for m in meta if m.get("grade")}


def read_scores(course_root: Path) -> dict:
    from nbgrader.api import Gradebook

    os.environ["PATH"] = os.pathsep.join([str(BIN), os.environ.get("PATH", "")])
    scores = {}
    with Gradebook(f"sqlite:///{course_root / 'gradebook.db'}", COURSE) as gb:
        for sub in gb.assignment_submissions(ASSIGNMENT):
            for nb in sub.notebooks:
                scores[sub.student.id] = {g.name: g.score for g in nb.grades}
    return scores


PLANT = textwrap.dedent("""
    import json, os, secrets, sys
    from datetime import datetime, timedelta, timezone
    inbound, me, assignment, solution, peer_nb, secret, victims = sys.argv[1:8]
    forged = sys.stdin.read()
    later = datetime.now(timezone.utc) + timedelta(days=1)
    stamp = later.strftime("%Y-%m-%d %H:%M:%S.%f UTC")
    out = {}

    def folder(student):
        path = os.path.join(
            inbound, f"{student}+{assignment}+{stamp}+{secrets.token_urlsafe(9)}"
        )
        os.mkdir(path)
        with open(os.path.join(path, "timestamp.txt"), "w") as fh:
            fh.write(stamp)
        return path

    mine = folder(me)
    os.symlink(solution, os.path.join(mine, assignment + ".ipynb"))
    os.symlink(peer_nb, os.path.join(mine, "peer.ipynb"))
    os.symlink(secret, os.path.join(mine, "secret.txt"))
    os.mkfifo(os.path.join(mine, "pipe"))
    try:
        os.link(secret, os.path.join(mine, "secret-hard.txt"))
        out["hard link"] = "made"
    except OSError as e:
        out["hard link"] = type(e).__name__
    for victim in json.loads(victims):  # in a classmate's name, a day later
        with open(os.path.join(folder(victim), assignment + ".ipynb"), "w") as fh:
            fh.write(forged)
    print(json.dumps(out))
""")


def plant_attacks(room, forged_nb: str) -> dict:
    """The intruder, by hand in the exchange: a submission whose notebook links
    to the solution (others to a classmate's notebook and to the grader's
    secret, a FIFO, a hard link attempt), and one a day later in each
    student's name."""
    good = room.students[0]
    course_ex = room.exchange / COURSE
    cmd = [
        sys.executable,
        "-c",
        PLANT,
        str(course_ex / "inbound"),
        room.intruder,
        ASSIGNMENT,
        str(room.course_root / "solutions" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"),
        str(room.home(good) / COURSE / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"),
        str(room.course_root / ".grading" / "secret"),
        json.dumps(room.students),
    ]
    result = run(
        ["runuser", "-u", room.intruder, "--"]
        + user_env(room.intruder, room.home(room.intruder))
        + cmd,
        cwd="/",
        input=forged_nb,
    )
    return json.loads(result.stdout)


def test_hub_logins_groups_and_formgrader_access(classroom):
    room = classroom
    # PAM: a wrong password is refused, the right one logs in
    b = room.browser(room.students[0])
    assert b.login(password="not-the-password").status_code == 403
    assert b.get("/hub/api/user").status_code == 403
    r = b.login()
    assert r.status_code == 302, (r.status_code, r.text[:500])
    me = b.get("/hub/api/user").json()
    assert me["name"] == room.students[0]

    groups = {g["name"]: set(g["users"]) for g in room.api("/groups")}
    assert groups[f"nbgrader-{COURSE}"] >= set(room.students)
    assert groups[f"formgrade-{COURSE}"] == {room.instructor, room.grader}
    services = room.api("/services")
    assert COURSE in services and services[COURSE]["prefix"] == f"/services/{COURSE}/"

    # the formgrader service: instructors in, students 403
    inst = room.browser(room.instructor)
    assert inst.login().status_code == 302
    fg = inst.get(f"/services/{COURSE}/formgrader")
    assert fg.status_code == 200, (fg.status_code, fg.text[:500])
    assert "nbgrader formgrade" in fg.text
    listed = inst.get(f"/services/{COURSE}/formgrader/api/assignments").json()
    assert ASSIGNMENT in [a["name"] for a in listed], listed
    # JupyterHub >= 4.1 forbids framing: open the formgrader in its own tab
    assert "frame-ancestors 'none'" in fg.headers.get("Content-Security-Policy", "")
    denied = b.get(f"/services/{COURSE}/formgrader")
    assert denied.status_code == 403, (denied.status_code, denied.url)
    # the grader account runs the formgrader but cannot log in to the hub
    grader = room.browser(room.grader)
    assert grader.login().status_code == 403


def test_assignment_cycle_through_the_exchange(classroom):
    room = classroom
    inst = room.browser(room.instructor)
    assert inst.login().status_code == 302
    fg = f"/services/{COURSE}/"
    assert inst.get(fg + "formgrader").status_code == 200  # hub OAuth, sets _xsrf

    # the instructor's own server lists the course's formgrader (course list)
    inst_prefix = inst.start_server()
    assert inst.disabled_nbgrader_plugins() == {"formgrader", "create-assignment"}
    assert inst.get(inst_prefix + "formgrader").status_code == 404  # it is the service
    courses = inst.get(inst_prefix + "formgraders").json()
    assert courses["success"], courses
    assert [(c["course_id"], c["kind"]) for c in courses["value"]] == [
        (COURSE, "jupyterhub")
    ]
    assert courses["value"][0]["url"].endswith(
        f"/services/{COURSE}/lab?formgrader=true"
    )

    # generate and release in the formgrader
    for action in ("assign", "release"):
        r = inst.post(f"{fg}formgrader/api/assignment/{ASSIGNMENT}/{action}", fg)
        assert r.status_code == 200 and r.json()["success"], (action, r.text[-3000:])
    course_ex = room.exchange / COURSE
    assert stat.S_IMODE(room.exchange.stat().st_mode) == 0o1777
    assert stat.S_IMODE((course_ex / "inbound").stat().st_mode) == 0o2733
    released = course_ex / "outbound" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    assert released.exists() and "BEGIN SOLUTION" not in released.read_text()
    assert not (course_ex / "outbound" / ASSIGNMENT / "hidden").exists()

    # enrolment from the formgrader's terminal: nbgrader's JupyterHubAuthPlugin
    # edits the hub group nbgrader-attention-course with the service's token
    def members():
        return set(room.api(f"/groups/nbgrader-{COURSE}")["users"])

    late = room.students[1]
    inst.terminal(
        fg,
        f"nbgrader db student add {late} --last-name=Two && "
        f"nbgrader db student remove {late}",
        timeout=120,
    )
    assert late not in members()
    inst.terminal(fg, f"nbgrader db student add {late} --last-name=Two", timeout=120)
    assert late in members()

    # students: log in, start a server, fetch, solve, submit
    correct, wrong = solution_notebooks()
    from grader import notebooks as nbs

    students = {}
    for name, cells in zip(room.students, (correct, wrong), strict=True):
        b = room.browser(name)
        assert b.login().status_code == 302
        prefix = b.start_server()
        # a student's JupyterLab has the Assignments tab, no formgrader
        assert b.disabled_nbgrader_plugins() == {
            "formgrader",
            "create-assignment",
            "course-list",
        }
        assert b.get(prefix + "formgrader").status_code == 404
        assert b.get(prefix + "formgraders").status_code == 404
        listing = b.get(prefix + "assignments", params={"course_id": COURSE}).json()
        assert listing["success"], listing
        assert [(a["assignment_id"], a["status"]) for a in listing["value"]] == [
            (ASSIGNMENT, "released")
        ]
        data = {"course_id": COURSE, "assignment_id": ASSIGNMENT}
        r = b.post(prefix + "assignments/fetch", prefix, data=data)
        assert r.status_code == 200 and r.json()["success"], r.text[-2000:]
        path = f"{COURSE}/{ASSIGNMENT}/{ASSIGNMENT}.ipynb"
        model = b.get(prefix + f"api/contents/{path}", params={"content": 1}).json()
        assert model["type"] == "notebook"
        nb = nbs.submission(model["content"], cells)
        r = b.put(
            prefix + f"api/contents/{path}",
            prefix,
            json={"type": "notebook", "format": "json", "content": nb},
        )
        assert r.status_code == 200, r.text[-2000:]
        r = b.post(prefix + "assignments/submit", prefix, data=data)
        assert r.status_code == 200 and r.json()["success"], r.text[-2000:]
        students[name] = (b, prefix)

    # the intruder plants links and submissions in the others' names
    own = {
        name: (room.home(name) / COURSE / ASSIGNMENT / f"{ASSIGNMENT}.ipynb")
        for name in room.students
    }
    forged = nbs.submission(json.loads(own[room.students[0]].read_text()), wrong)
    planted = plant_attacks(room, json.dumps(forged))
    assert planted["hard link"] in ("PermissionError", "FileNotFoundError"), planted

    # collect with the course's command in the formgrader's terminal (the
    # grader account), then again with the formgrader's Collect button and
    # plain `nbgrader collect`, which run the same code and name the command
    output = inst.terminal(fg, f"python -m grader collect {ASSIGNMENT}")
    for name in room.students:
        assert f"not by {name}" in output, output[-3000:]
    r = inst.post(f"{fg}formgrader/api/assignment/{ASSIGNMENT}/collect", fg)
    assert r.status_code == 200 and r.json()["success"], r.text[-3000:]
    assert "not by" in r.json().get("log", ""), r.json()
    output = inst.terminal(fg, f"nbgrader collect {ASSIGNMENT} 2>&1")
    assert "python -m grader collect" in output and "refused" in output, output
    submitted = room.course_root / "submitted"
    for name in room.students:  # the honest notebooks, not the forged ones
        got = submitted / name / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
        assert got.read_bytes() == own[name].read_bytes(), name
    # nothing linked reached submitted/: not the solution, the peer, the secret
    intruder = submitted / room.intruder / ASSIGNMENT
    assert sorted(p.name for p in intruder.iterdir()) == ["timestamp.txt"]
    assert not any(p.is_symlink() for p in submitted.rglob("*"))
    from grader import events

    log = events.load(room.course_root / ".grading", ASSIGNMENT, room.intruder)
    notes = " ".join(log["flags"]["link"])
    for name in (f"{ASSIGNMENT}.ipynb", "peer.ipynb", "secret.txt", "pipe"):
        assert name in notes, (name, notes)
    assert len(log["flags"]["impersonation"]) == len(room.students), log
    for name in room.students:  # honest students are not flagged
        assert (
            events.load(room.course_root / ".grading", ASSIGNMENT, name)["flags"] == {}
        )
    collected = room.course_root / ".grading" / "collected" / ASSIGNMENT
    statuses = sorted(
        r["status"] for r in json.loads((collected / "collect.json").read_text())
    )
    assert statuses == ["refused", "refused", "submitted", "submitted", "submitted"]
    # ... in a terminal of the formgrader service: the grader account, in the
    # course directory, with the service's environment
    output = inst.terminal(fg, f"python -m grader grade {ASSIGNMENT}")
    assert "grades written" in output, output[-3000:]
    r = inst.post(f"{fg}formgrader/api/assignment/{ASSIGNMENT}/release_feedback", fg)
    assert r.status_code == 200 and r.json()["success"], r.text[-3000:]

    # grades: the reference solution scores full marks, the wrong one less
    full = points()
    scores = read_scores(room.course_root)
    good, bad = room.students
    print(f"\ngrades (of {full}): {scores}")
    assert scores[good] == pytest.approx(full)
    assert scores[bad]["torch-hidden"] == 0
    assert scores[bad]["tf-visible"] == full["tf-visible"]
    assert scores[bad]["tf-hidden"] == full["tf-hidden"]
    assert sum(scores[bad].values()) < sum(full.values())

    # students fetch their feedback: no hidden tests, no reference numbers
    from grader import leaks, reference

    src_nb = room.course_root / "solutions" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    hidden_lines = leaks.secret_lines(src_nb)["hidden"]
    assert hidden_lines  # the scan below looks for something real
    ref_values = leaks.reference_numbers(
        reference.load_file(
            reference.source_path(room.course_root, ASSIGNMENT, "solutions")
        )
    )
    for name, (b, prefix) in students.items():
        data = {"course_id": COURSE, "assignment_id": ASSIGNMENT}
        r = b.post(prefix + "assignments/fetch_feedback", prefix, data=data)
        assert r.status_code == 200 and r.json()["success"], r.text[-2000:]
        feedback_dir = room.home(name) / COURSE / ASSIGNMENT / "feedback"
        pages = list(feedback_dir.glob("*/*.html"))
        assert len(pages) == 1, pages
        raw = pages[0].read_text()
        assert "BEGIN HIDDEN TESTS" not in raw
        assert "grader import" not in raw
        text = leaks.html_text(pages[0])
        assert leaks.scan_text(text, {"hidden": hidden_lines}, ref_values, name) == []
        if name == bad:
            assert "soft_lookup_torch" in text and "GradingError" in text
    assert leaks.scan_feedback(room.course_root) == []

    # what student B may not read: A's submission and home, the solutions
    a_home, b_home = room.home(good), room.home(bad)
    inbound = course_ex / "inbound"
    a_subs = [
        p
        for p in inbound.glob(f"{good}+{ASSIGNMENT}+*")
        if p.stat().st_uid == pwd.getpwnam(good).pw_uid
    ]
    assert len(a_subs) == 1  # root sees it; B must not find it
    seen = probe(
        bad,
        b_home,
        [
            ("list", str(inbound)),
            ("glob", str(inbound / f"{good}+*")),
            ("list", str(course_ex / "feedback")),
            ("read", str(a_home / COURSE / ASSIGNMENT / f"{ASSIGNMENT}.ipynb")),
            ("list", str(a_home)),
            ("list", str(room.course_root)),
            ("read", str(src_nb)),
            (
                "read",
                str(
                    room.course_root
                    / "submitted"
                    / good
                    / ASSIGNMENT
                    / f"{ASSIGNMENT}.ipynb"
                ),
            ),
            ("read", str(room.course_root / "gradebook.db")),
            (
                "read",
                str(
                    room.course_root
                    / "solutions"
                    / ASSIGNMENT
                    / "hidden"
                    / "reference.npz"
                ),
            ),
        ],
    )
    for path, outcome in seen.items():
        if "*" in path:
            assert outcome == [], (path, outcome)
        else:
            assert outcome == "PermissionError", (path, outcome)
    # ... while B's own files are there
    own = str(b_home / COURSE / ASSIGNMENT / f"{ASSIGNMENT}.ipynb")
    assert probe(bad, b_home, [("read", own)]) == {own: "ok"}
    elapsed, slow = time.monotonic() - room.start, max(room.slowness, slowness())
    assert elapsed < DEADLINE * slow, (
        f"{elapsed:.0f} s > {DEADLINE} s x {slow:.1f} (this machine's slowness)"
    )
