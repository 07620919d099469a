"""The part of the grader that runs inside the student's kernel (sandboxed).

Only this package (with an empty ``grader/__init__.py`` above it) and
``attncourse`` are mounted into the sandbox. It records; it never judges:

* ``recorder.check`` -- what hidden tests call; publishes the student's
  results on the grading inputs as a display output;
* ``runners`` -- per assignment, how to call the student's code;
* ``adapters``, ``errors`` -- tensors in and out, student errors as messages;
* ``inputs`` -- the inputs file (inputs only);
* ``observations`` -- the wire format of recorded results and probe reports;
* ``probe`` -- the kernel's start: preload, integrity probe, ipykernel.

Nothing here may import the grader-side modules (``grader.assignments``,
``grader.numeric``, ``grader.judging``, ...): a test checks it.
"""

from grader.kernel.errors import GradingError
from grader.kernel.recorder import check

__all__ = ["GradingError", "check"]
