"""nbgrader hooks that keep the hidden reference data away from students.

nbgrader copies every non-notebook file of ``solutions/<assignment>/`` into the
release (``generate_assignment``) and into ``autograded/`` (``autograde``; the
sandboxed kernels never see ``autograded/`` -- the verdict is computed in the
grader, see solutions/GRADING_SECURITY.md -- but an in-kernel ``check`` outside
sandboxed grading reads it there), and ``generate_feedback`` copies the
autograded folder's files into ``feedback/``. ``CourseDirectory.ignore`` cannot be used:
it would also keep the data out of ``autograded/``. So nbgrader_config.py sets

    c.GenerateAssignment.post_convert_hook = strip_hidden(<release dir>)
    c.GenerateFeedback.post_convert_hook = strip_hidden(<feedback dir>)

which delete every ``hidden/`` folder under those directories after each
conversion (CLI and formgrader alike). nbgrader only logs a failing hook, so
``grader.leaks`` checks the result again in the release and grading
scripts and in the tests.
"""

import shutil
import sys
from functools import partial
from pathlib import Path

from grader.reference import HIDDEN_DIR


def hidden_dirs(directory) -> list[Path]:
    """Every ``hidden/`` folder under ``directory``."""
    directory = Path(directory)
    if not directory.exists():
        return []
    return sorted(p for p in directory.rglob(HIDDEN_DIR) if p.is_dir())


def remove_hidden(directory, **hook_kwargs) -> list[Path]:
    """Delete every ``hidden/`` folder under ``directory``; return what was removed.

    Accepts (and ignores) nbgrader's hook keywords assignment, student, notebooks.
    """
    removed = hidden_dirs(directory)
    for path in removed:
        shutil.rmtree(path)
        print(f"[grader] removed hidden data {path}", file=sys.stderr)
    return removed


def strip_hidden(directory):
    """A post_convert_hook that strips ``hidden/`` folders under ``directory``."""
    return partial(remove_hidden, Path(directory))
