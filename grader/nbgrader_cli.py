"""Run nbgrader commands for the course (shared by release and grade_all).

``python -m grader.nbgrader_cli <args>`` is ``nbgrader <args>`` minus a slow
import (``attncourse._startup``: jsonschema's unused "iri" check, about half
of nbgrader's start-up, paid by every nbgrader command).
"""

import os
import subprocess
import sys
import time
from pathlib import Path

import attncourse._startup  # noqa: F401  (before nbformat/nbgrader)

ROOT = Path(__file__).resolve().parents[1]


def path_with_this_python(path: str) -> str:
    """``path`` with this Python's bin folder first: nbgrader runs the ``alembic``
    executable from PATH to open a gradebook, also when no venv is activated."""
    bin_dir = str(Path(sys.executable).parent)
    parts = [p for p in path.split(os.pathsep) if p and p != bin_dir]
    return os.pathsep.join([bin_dir, *parts])


def nbgrader_command(*args: str, env=None) -> tuple[list[str], dict]:
    """The command line and environment of ``python -m nbgrader <args>``."""
    env = dict(os.environ if env is None else env)
    env.setdefault("PYTHONHASHSEED", "0")
    env["PATH"] = path_with_this_python(env.get("PATH", ""))
    return [sys.executable, "-m", "grader.nbgrader_cli", *args], env


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
    from grader.assignments import ASSIGNMENTS

    present = {p.parent.name for p in (root / source_dir).glob("*/*.ipynb")}
    ordered = [a for a in ASSIGNMENTS if a in present]
    return ordered + sorted(present - set(ordered))


if __name__ == "__main__":
    from nbgrader.apps.nbgraderapp import main

    sys.exit(main())
