"""JupyterHub configuration of the attention course on one Linux server.

    cd /srv/attention-course/hub
    jupyterhub -f /opt/attention-course/classroom/jupyterhub_config.py

Users are the server's Unix accounts (PAM). The roster file (ATTNCOURSE_ROSTER,
default ./roster.txt beside the hub's database) lists who is who, one person a
line:

    instructor alice
    student bob
    student carol

* students join the hub group ``nbgrader-attention-course``: nbgrader's
  JupyterHubAuthPlugin shows them the course's assignments (fetch, submit,
  fetch feedback in JupyterLab's Assignments tab);
* instructors join ``formgrade-attention-course`` (and the students' group,
  to try the assignments as a student would): they may open the formgrader
  service ``attention-course`` at /services/attention-course/formgrader --
  in its own browser tab: JupyterHub >= 4.1 sends ``frame-ancestors 'none'``,
  so the formgrader cannot load inside JupyterLab's iframe -- and use the
  hub's admin page to start or stop servers;
* the formgrader runs as its own Unix account ``grader-attention-course``
  (ATTNCOURSE_GRADER) whose home holds the course directory (a clone of the course
  repository, mode 0700: solutions, hidden tests, gradebook).

Every setting that differs between machines is an environment variable; see
classroom/README.md. Nothing here is specific to a test.
"""

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
COURSE = "attention-course"
STUDENTS_GROUP = f"nbgrader-{COURSE}"
GRADERS_GROUP = f"formgrade-{COURSE}"


def setting(name: str, default: str) -> str:
    return os.environ.get(name) or default


# The Python environment with JupyterLab, nbgrader, jupytext, attncourse,
# TensorFlow and PyTorch: the hub's own by default.
PREFIX = Path(setting("ATTNCOURSE_PYTHON_PREFIX", sys.prefix))
BIN = PREFIX / "bin"
EXCHANGE = setting("ATTNCOURSE_EXCHANGE", "/srv/nbgrader/exchange")
GRADER = setting("ATTNCOURSE_GRADER", f"grader-{COURSE}")
COURSE_ROOT = setting("ATTNCOURSE_COURSE_ROOT", f"/home/{GRADER}/{COURSE}")
ROSTER = Path(setting("ATTNCOURSE_ROSTER", "roster.txt"))
HUB_IP = setting("ATTNCOURSE_HUB_IP", "")  # the public address; "" = all interfaces
HUB_PORT = int(setting("ATTNCOURSE_HUB_PORT", "8000"))
HUB_API_PORT = int(setting("ATTNCOURSE_HUB_API_PORT", "8081"))
PROXY_API_PORT = int(setting("ATTNCOURSE_PROXY_API_PORT", "8001"))
FORMGRADER_PORT = int(setting("ATTNCOURSE_FORMGRADER_PORT", "9999"))
# configurable-http-proxy, installed by `npm ci --prefix classroom`
PROXY = setting(
    "ATTNCOURSE_PROXY_COMMAND",
    str(HERE / "node_modules" / ".bin" / "configurable-http-proxy"),
)
CONFIG_DIRS = HERE / "jupyter"  # per-role Jupyter configuration


def read_roster(path: Path) -> tuple[list[str], list[str]]:
    """(instructors, students) from lines 'instructor NAME' / 'student NAME'."""
    instructors, students = [], []
    if not path.exists():
        print(
            f"[attention-course] no roster at {path.resolve()}: nobody can log in",
            file=sys.stderr,
        )
        return instructors, students
    for number, line in enumerate(path.read_text().splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        if len(parts) != 2 or parts[0] not in ("instructor", "student"):
            raise ValueError(
                f"{path}:{number}: expected 'instructor NAME' or "
                f"'student NAME', got {line!r}"
            )
        (instructors if parts[0] == "instructor" else students).append(parts[1])
    return instructors, students


INSTRUCTORS, STUDENTS = read_roster(ROSTER)

c = get_config()  # noqa: F821  (provided by traitlets when it loads this file)

# ---------------------------------------------------------------- the hub
c.JupyterHub.ip = HUB_IP
c.JupyterHub.port = HUB_PORT
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = HUB_API_PORT
# The hub's state (database, cookie secret) lives in its working directory.
c.JupyterHub.db_url = "sqlite:///jupyterhub.sqlite"
c.JupyterHub.cookie_secret_file = "jupyterhub_cookie_secret"
c.ConfigurableHTTPProxy.command = [PROXY]
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{PROXY_API_PORT}"

# ---------------------------------------------------------------- who logs in
# Local Unix accounts with their passwords. The hub must run as root to check
# passwords and to start each user's server as that user.
c.JupyterHub.authenticator_class = "pam"
c.Authenticator.allowed_users = set(INSTRUCTORS + STUDENTS)
# Only the roster logs in: a student removed from roster.txt loses access at the
# next restart, and the grader account (a hub user, below) never logs in.
c.Authenticator.allow_existing_users = False
c.Authenticator.admin_users = set()  # instructors get the scopes they need below
# The grader account is a hub user too (it never logs in: it is not allowed):
# the formgrader asks the hub, through nbgrader's JupyterHubAuthPlugin, which
# courses the account running it grades.
c.JupyterHub.load_groups = {
    STUDENTS_GROUP: {"users": sorted(set(STUDENTS + INSTRUCTORS))},
    GRADERS_GROUP: {"users": sorted(set(INSTRUCTORS + [GRADER]))},
}

# ---------------------------------------------------------------- roles (RBAC)
c.JupyterHub.load_roles = [
    {  # students: find the course's service (nbgrader lists courses through it)
        "name": STUDENTS_GROUP,
        "groups": [STUDENTS_GROUP],
        "scopes": ["list:services", f"read:services!service={COURSE}"],
    },
    {  # instructors: the formgrader, the admin page, start/stop servers
        "name": GRADERS_GROUP,
        "groups": [GRADERS_GROUP],
        "scopes": [
            f"access:services!service={COURSE}",
            "list:services",
            f"read:services!service={COURSE}",
            "admin-ui",
            "list:users",
            "read:users",
            "read:groups",
            "admin:servers",
        ],
    },
    {  # the formgrader service: read the course's groups; `nbgrader db student
        # add` (and the formgrader's "add student") puts a student in the group
        "name": f"{COURSE}-service",
        "services": [COURSE],
        "scopes": [
            "list:users",
            "read:users:name",
            "read:users:groups",
            f"read:groups!group={STUDENTS_GROUP}",
            f"groups!group={STUDENTS_GROUP}",
            "list:services",
            f"read:services!service={COURSE}",
        ],
    },
]
# What a single-user server's own token ($JUPYTERHUB_API_TOKEN) may do: nbgrader's
# JupyterHubAuthPlugin reads the user's groups, the course list finds the
# formgrader service. The hub grants only the part the user holds.
c.Spawner.server_token_scopes = [
    "users:activity!user",
    "read:users:name!user",
    "read:users:groups!user",
    "list:services",
    f"read:services!service={COURSE}",
]

# ---------------------------------------------------------------- user servers
COMMON_ENV = {
    "PATH": os.pathsep.join([str(BIN), "/usr/local/bin", "/usr/bin", "/bin"]),
    "ATTNCOURSE_EXCHANGE": EXCHANGE,
    # the course's quiet-kernel settings (see the course Makefile)
    "TF_CPP_MIN_LOG_LEVEL": "3",
    "TF_ENABLE_ONEDNN_OPTS": "0",
    "KERAS_BACKEND": "tensorflow",
}


def config_path(role: str) -> str:
    return os.pathsep.join([str(CONFIG_DIRS / role), str(CONFIG_DIRS / "common")])


c.Spawner.cmd = [str(BIN / "jupyterhub-singleuser")]
c.Spawner.default_url = "/lab"
c.Spawner.notebook_dir = "~"
c.Spawner.environment = dict(COMMON_ENV)
c.Spawner.start_timeout = 120
c.Spawner.http_timeout = 90


def pre_spawn_hook(spawner):
    """Instructors get the course list, students only the assignment list."""
    groups = {g.name for g in spawner.user.groups}
    role = "instructor" if GRADERS_GROUP in groups else "student"
    spawner.environment["JUPYTER_CONFIG_PATH"] = config_path(role)


c.Spawner.pre_spawn_hook = pre_spawn_hook

# ---------------------------------------------------------------- the formgrader
# A JupyterLab server run by the hub as the grader account, in the course
# directory, reachable only with access:services!service=attention-course
# (the formgrade-attention-course group). Open it in its own tab:
#     https://<hub>/services/attention-course/formgrader
c.JupyterHub.services = [
    {
        "name": COURSE,  # must equal the nbgrader course id
        "url": f"http://127.0.0.1:{FORMGRADER_PORT}",
        "command": [str(BIN / "jupyterhub-singleuser")],
        "user": GRADER,
        "cwd": COURSE_ROOT,
        "oauth_no_confirm": True,
        "display": True,
        "environment": {
            **COMMON_ENV,
            "JUPYTER_CONFIG_PATH": config_path("grader"),
            "JUPYTERHUB_DEFAULT_URL": "/lab",
            # nbgrader's JupyterHubAuthPlugin needs a user name to format its
            # API calls (it is not the identity the service acts with)
            "JUPYTERHUB_USER": GRADER,
        },
    },
]
