"""Task functions that stand in for ``grader.cluster.grade_task`` in the
Dask tests (importable by the worker processes: the tests' folder is on the
path they inherit)."""

import os
import time


def crash_or_grade(task):
    """A ``bad*`` student's task kills its worker process; the others pass."""
    from distributed import get_worker

    if task.student.startswith("bad"):
        os._exit(1)
    time.sleep(0.2)
    return {
        "success": True,
        "files": {f"{task.notebook}.ipynb": task.student.encode()},
        "events": {},
        "worker": get_worker().address,
    }
