"""A throwaway PostgreSQL server for tests (pytest fixtures).

``postgres_server`` (session scope) runs initdb in a fresh temporary folder
(trust authentication, superuser ``postgres``) and starts the server on
127.0.0.1, on a free port, with its Unix socket inside that folder; at the end
it stops the server (``pg_ctl stop -m fast``) and removes the folder, also
when a test failed. PostgreSQL refuses to run as root: as root, every server
command runs as the ``postgres`` system user (``runuser -u postgres --``),
which then owns the temporary folder.

``postgres_url`` (per test) creates an empty database on that server and gives
its SQLAlchemy URL, ``postgresql+psycopg2://postgres@127.0.0.1:PORT/NAME``.

Needs the PostgreSQL server binaries (Debian: ``apt-get install postgresql``;
initdb and pg_ctl are found in /usr/lib/postgresql/*/bin, with ``pg_config
--bindir`` or on PATH) and psycopg2 in the Python environment. Without them
the tests using these fixtures are skipped -- and fail when CI=true.
"""

import os
import pwd
import re
import shutil
import socket
import stat
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from support.ci import skip_or_fail

SUPERUSER = "postgres"  # the database superuser (initdb -U) and, as root,
SYSTEM_USER = "postgres"  # the system user that runs the server
START_TIMEOUT = 60  # seconds for the server to accept connections
INSTALL = "apt-get install postgresql"


def _unavailable(reason: str):
    """Fail in CI (the test must run there), skip elsewhere."""
    skip_or_fail(f"PostgreSQL: {reason}")


def _version_key(path: Path):
    return [int(x) if x.isdigit() else x for x in re.split(r"(\d+)", str(path))]


def find_bindir() -> Path | None:
    """The folder with initdb, pg_ctl and postgres (the newest version first)."""
    candidates = []
    if shutil.which("pg_config"):
        try:
            out = subprocess.run(
                ["pg_config", "--bindir"], capture_output=True, text=True, timeout=30
            )
            if out.returncode == 0 and out.stdout.strip():
                candidates.append(Path(out.stdout.strip()))
        except (OSError, subprocess.SubprocessError):
            pass
    candidates += sorted(
        Path("/usr/lib/postgresql").glob("*/bin"), key=_version_key, reverse=True
    )
    if shutil.which("initdb"):
        candidates.append(Path(shutil.which("initdb")).resolve().parent)
    for folder in candidates:
        if all(
            os.access(folder / tool, os.X_OK)
            for tool in ("initdb", "pg_ctl", "postgres")
        ):
            return folder
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _traversable(folder: Path) -> bool:
    """Can any user reach ``folder`` (o+x on it and every folder above)?"""
    folder = folder.resolve()
    return all(p.stat().st_mode & stat.S_IXOTH for p in [folder, *folder.parents])


class PostgresServer:
    """One PostgreSQL cluster in a temporary folder, started and stopped here."""

    def __init__(self, bindir: Path):
        self.bindir = bindir
        self.as_root = os.geteuid() == 0
        self.base = self.data = self.sockets = self.log = None
        self.port = None
        self.started = False

    def _run(self, *cmd, timeout=120, check=True) -> subprocess.CompletedProcess:
        argv = [str(self.bindir / cmd[0]), *map(str, cmd[1:])]
        if self.as_root:
            argv = ["runuser", "-u", SYSTEM_USER, "--", *argv]
        # cwd: a folder the server user may enter (pg_ctl checks the cwd)
        out = subprocess.run(
            argv,
            cwd=self.base,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
        if check and out.returncode != 0:
            raise RuntimeError(
                f"{' '.join(argv)} failed ({out.returncode}):\n"
                f"{out.stdout}\n{out.stderr}\n{self.log_tail()}"
            )
        return out

    def log_tail(self, chars=3000) -> str:
        if self.log is not None and self.log.exists():
            return f"server log ({self.log}):\n{self.log.read_text()[-chars:]}"
        return ""

    def _make_base(self) -> None:
        parents = [tempfile.gettempdir(), "/tmp", "/var/tmp"]
        if self.as_root:  # the postgres user must reach the folder
            parents = [p for p in parents if Path(p).is_dir() and _traversable(Path(p))]
            if not parents:
                raise RuntimeError("no temporary folder the postgres user can reach")
        self.base = Path(tempfile.mkdtemp(prefix="attncourse-pg-", dir=parents[0]))
        self.data = self.base / "data"
        self.sockets = self.base / "sockets"
        self.log = self.base / "server.log"
        self.sockets.mkdir()
        if self.as_root:
            user = pwd.getpwnam(SYSTEM_USER)
            for path in (self.base, self.sockets):
                os.chown(path, user.pw_uid, user.pw_gid)
        self.base.chmod(0o700)  # mkdtemp's mode; only the server's user enters

    def start(self) -> None:
        self._make_base()
        self._run(
            "initdb",
            "--pgdata",
            self.data,
            "--username",
            SUPERUSER,
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C",
            "--no-sync",
        )
        last = None
        for _ in range(3):  # another process may take the free port first
            self.port = free_port()
            options = (
                f"-c listen_addresses=127.0.0.1 -p {self.port} "
                f"-k {self.sockets} -c fsync=off -c synchronous_commit=off "
                "-c full_page_writes=off -c max_connections=200"
            )
            out = self._run(
                "pg_ctl",
                "--pgdata",
                self.data,
                "--log",
                self.log,
                "--options",
                options,
                "--wait",
                "--timeout",
                START_TIMEOUT,
                "start",
                check=False,
                timeout=START_TIMEOUT + 30,
            )
            if out.returncode == 0:
                self.started = True
                break
            last = f"{out.stdout}\n{out.stderr}\n{self.log_tail()}"
        else:
            raise RuntimeError(f"PostgreSQL did not start:\n{last}")
        self._wait_for_tcp()

    def _wait_for_tcp(self) -> None:
        import psycopg2

        deadline = time.monotonic() + START_TIMEOUT
        while True:
            try:
                psycopg2.connect(
                    host="127.0.0.1",
                    port=self.port,
                    user=SUPERUSER,
                    dbname="postgres",
                    connect_timeout=5,
                ).close()
                return
            except psycopg2.OperationalError as e:
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"PostgreSQL does not accept connections "
                        f"on 127.0.0.1:{self.port}: {e}\n"
                        f"{self.log_tail()}"
                    ) from e
                time.sleep(0.2)

    def create_database(self, name: str) -> str:
        """Create an empty database; returns its SQLAlchemy URL."""
        import psycopg2

        conn = psycopg2.connect(
            host="127.0.0.1", port=self.port, user=SUPERUSER, dbname="postgres"
        )
        try:
            conn.autocommit = True  # CREATE DATABASE refuses a transaction
            with conn.cursor() as cur:
                cur.execute(f'CREATE DATABASE "{name}"')
        finally:
            conn.close()
        return self.url(name)

    def url(self, name: str) -> str:
        return f"postgresql+psycopg2://{SUPERUSER}@127.0.0.1:{self.port}/{name}"

    def stop(self) -> None:
        try:
            if self.started:
                out = self._run(
                    "pg_ctl",
                    "--pgdata",
                    self.data,
                    "--mode",
                    "fast",
                    "--wait",
                    "stop",
                    check=False,
                    timeout=90,
                )
                if out.returncode != 0:
                    self._kill_postmaster()
        finally:
            self.started = False
            if self.base is not None:
                shutil.rmtree(self.base, ignore_errors=True)

    def _kill_postmaster(self) -> None:
        """Last resort: the server this object started (its pid file), SIGQUIT."""
        pid_file = self.data / "postmaster.pid"
        try:
            pid = int(pid_file.read_text().split()[0])
            os.kill(pid, 3)  # SIGQUIT: immediate shutdown
            for _ in range(50):
                os.kill(pid, 0)
                time.sleep(0.1)
        except (OSError, ValueError, IndexError):
            pass


def check_available() -> Path:
    """The PostgreSQL bin folder, or skip (fail in CI) naming what is missing."""
    try:
        import psycopg2  # noqa: F401
    except ImportError:
        _unavailable(
            "psycopg2 is not installed in this Python environment "
            "(pip install psycopg2-binary)"
        )
    bindir = find_bindir()
    if bindir is None:
        _unavailable(
            f"PostgreSQL server binaries (initdb, pg_ctl) not found ({INSTALL})"
        )
    if os.geteuid() == 0:
        if not shutil.which("runuser"):
            _unavailable(
                "runuser is not installed (util-linux): PostgreSQL cannot run as root"
            )
        try:
            pwd.getpwnam(SYSTEM_USER)
        except KeyError:
            _unavailable(
                f"no {SYSTEM_USER!r} system user to run PostgreSQL as "
                f"({INSTALL} creates it)"
            )
    return bindir


@pytest.fixture(scope="session")
def postgres_server():
    """A running PostgreSQL server (see the module docstring)."""
    server = PostgresServer(check_available())
    try:
        server.start()
    except Exception as e:
        server.stop()
        pytest.fail(f"could not start PostgreSQL: {e}")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def postgres_url(postgres_server):
    """The SQLAlchemy URL of a new, empty database on ``postgres_server``."""
    return postgres_server.create_database(f"gradebook_{uuid.uuid4().hex[:12]}")
