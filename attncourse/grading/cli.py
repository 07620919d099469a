"""Run nbgrader commands for the course (shared by release and grade_all)."""

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def nbgrader_command(*args: str, env=None) -> tuple[list[str], dict]:
    """The command line and environment of ``python -m nbgrader <args>``."""
    env = dict(os.environ if env is None else env)
    env.setdefault("PYTHONHASHSEED", "0")
    # nbgrader runs `alembic` from PATH: use the one beside this Python
    bin_dir = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join([bin_dir, env.get("PATH", "")])
    return [sys.executable, "-m", "attncourse.grading.nbgrader_main", *args], env


def nbgrader(root: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """``python -m nbgrader <args>`` from the course root, output passed through."""
    cmd, env = nbgrader_command(*args)
    print("$ nbgrader " + " ".join(args), flush=True)
    start = time.monotonic()
    result = subprocess.run(cmd, cwd=root, env=env)
    print(f"  ({time.monotonic() - start:.0f} s)", flush=True)
    if check and result.returncode:
        raise SystemExit(f"nbgrader {args[0]} failed (exit {result.returncode})")
    return result


def assignments_in(root: Path, source_dir: str = "solutions") -> list[str]:
    """Assignment ids present in the source directory, in course order."""
    from .tasks import ASSIGNMENTS

    present = {p.parent.name for p in (root / source_dir).glob("*/*.ipynb")}
    ordered = [a for a in ASSIGNMENTS if a in present]
    return ordered + sorted(present - set(ordered))
