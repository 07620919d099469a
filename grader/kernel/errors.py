"""The one exception graders raise, and how student errors are reported.

``GradingError`` is an ``AssertionError`` (nbgrader gives a test cell 0 points
for any error). In a Jupyter kernel it renders as its message only -- IPython
calls ``_render_traceback_`` instead of printing the stack -- so a failing
hidden test never shows the hidden test's own source lines, the grader's code
or the reference data in the student's feedback. Errors raised *by the
student's code* keep the student's own frames, which is what helps them.
"""

import os
import re
import traceback

# frames in the grader package (kernel side and grader side) are not the student's
_GRADING_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_RED, _RESET = "\x1b[0;31m", "\x1b[0m"
MAX_FRAMES = 8


class GradingError(AssertionError):
    """A test failed; the message says what is wrong and, if known, why."""

    def _render_traceback_(self):
        lines = str(self).splitlines() or [""]
        return [f"{_RED}{type(self).__name__}{_RESET}: {lines[0]}", *lines[1:]]


def _student_frames(tb) -> list[str]:
    """Formatted frames of ``tb`` after the last grader frame (the student's code)."""
    frames = traceback.extract_tb(tb)
    last_grader = max((i for i, f in enumerate(frames)
                       if os.path.abspath(f.filename).startswith(_GRADING_DIR)),
                      default=-1)
    frames = frames[last_grader + 1:][-MAX_FRAMES:]
    return traceback.format_list(frames)


_NUMBER = re.compile(r"-?\d+\.\d{3,}(?:[eE][-+]?\d+)?")
MAX_MESSAGE = 600


def redact(text: str) -> str:
    """Shorten a message and hide long decimals (they could be grader data)."""
    text = _NUMBER.sub("<number>", text)
    return text if len(text) <= MAX_MESSAGE else text[:MAX_MESSAGE] + " [...]"


def student_error(what: str, exc: BaseException) -> GradingError:
    """A GradingError describing an exception raised inside the student's code."""
    if isinstance(exc, GradingError):
        return exc
    name = type(exc).__name__
    if isinstance(exc, NotImplementedError):
        head = f"{what} is not implemented yet (it raised NotImplementedError)."
    else:
        message = redact(str(exc)).strip().splitlines()
        first = message[0] if message else ""
        head = f"{what} raised {name}: {first}"
        if len(message) > 1:
            head += "\n" + "\n".join(message[1:12])
    frames = _student_frames(exc.__traceback__)
    if frames and not isinstance(exc, NotImplementedError):
        head += "\nWhere (your code last):\n" + "".join(frames).rstrip()
    return GradingError(head)


def call_student(what: str, fn, *args, **kwargs):
    """Call student code; any exception becomes a GradingError naming ``what``."""
    try:
        return fn(*args, **kwargs)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # noqa: BLE001  (student code may raise anything)
        raise student_error(what, exc) from None


def internal_error(exc: BaseException, log_dir=None) -> GradingError:
    """A grader bug: tell the student little (no data), log the details.

    The traceback goes to ``<log_dir>/grader-errors.log`` (by default the
    notebook's ``hidden/`` folder, which never reaches students)."""
    import datetime
    from pathlib import Path

    log_dir = Path(log_dir) if log_dir is not None else Path.cwd() / "hidden"
    if log_dir.is_dir():
        with open(log_dir / "grader-errors.log", "a") as log:
            log.write(f"--- {datetime.datetime.now().isoformat()}\n")
            log.write("".join(traceback.format_exception(exc)))
    return GradingError(
        f"the grader could not check your code ({type(exc).__name__}); this is "
        f"probably not your mistake -- tell your instructor"
    )
