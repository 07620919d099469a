"""Verdicts on hidden tests, computed in the grader process, not the kernel.

``JudgeHiddenTests`` runs in nbgrader's autograde pipeline right after the
notebook was executed (``GuardedExecute``, ``IgnorePattern``) and before
``SaveAutoGrades`` writes the scores to the gradebook. It reads the message
stream as the grader saw it (``resources["attncourse"]["stream"]``, logged by
``GuardedExecute`` per executed cell), not the outputs the kernel left in the
notebook. For every cell it

1. checks the integrity report the kernel's probe published after the cell
   (``grader.kernel.probe``): exactly one, the cell's last output, for the
   right execution of this kernel, listing no changes; and that nothing came
   for the cell after it had finished, no message was malformed and no
   display update carried a report (``stream_problems``). A cell the grader
   interrupted may lack its report (the interrupt can land in the probe):
   that is not tampering, and the next cell's report covers its changes.
   Anything else is tampering: from that cell on, every test cell gets an
   error output ("not graded") and so 0 points, and the submission is
   flagged ``tampered`` (an instructor can still override by hand: manual
   scores win over auto scores in nbgrader);
2. for a test cell: no ``clear_output`` in it and no display update that
   rewrote one of its outputs (from any cell) -- either could replace a
   result after it was recorded; the test then scores 0 and the submission is
   flagged ``tampered``;
3. for a hidden test cell -- one that calls ``check("<id>", "<check>", "<fw>")``
   -- takes the results the kernel recorded (``grader.kernel.observations``),
   exactly one per call, and judges them with ``grader.checks.verdict`` against the
   expected outputs computed here for this grading run's inputs
   (``resources["attncourse"]["reference"]``, from ``GuardedExecute``). A wrong
   result gets the GradingError output a student would have seen from an
   in-kernel check (feedback names the likely mistake); a hidden test that
   ran but recorded nothing, or recorded twice, is tampering;
4. removes our reports from the outputs, so the saved notebook and the
   feedback hold only what the student should see.

The scores themselves are nbgrader's: ``SaveAutoGrades`` gives a test cell
its points when it has no error output and no stderr output.
"""

import re

import nbformat
from nbgrader.preprocessors import NbGraderPreprocessor
from nbgrader.utils import is_grade
from traitlets import Unicode

from grader import events as _events
from grader import judging
from grader.checks import verdict
from grader.guard import error_output
from grader.kernel.errors import GradingError
from grader.kernel.observations import load_payload, ours, parse_observation

CHECK_CALL = re.compile(
    r"""\bcheck\(\s*["']([\w-]+)["']\s*,\s*["'](\w+)["']\s*,\s*["'](\w+)["']"""
)


def checks_in(source: str) -> list[tuple[str, str, str]]:
    return CHECK_CALL.findall(source)


def judge_recorded(assignment, check_name, framework, recorded: dict, ref) -> None:
    """Raise GradingError unless the recorded results match, case by case."""
    check_def = judging.check_def(assignment, check_name, framework)
    observed, error = recorded["observed"], recorded["error"]
    for case in check_def.cases:
        if case in observed:
            verdict(
                check_def,
                framework,
                case,
                ref.inputs(case),
                ref.expected(case),
                observed[case],
            )
        elif error is not None and error["case"] == case:
            raise GradingError(error["message"])
        else:
            raise GradingError(f"no results were recorded for case {case!r}")


def grading_error_output(exc: GradingError):
    out = error_output("GradingError", str(exc))
    out["traceback"] = exc._render_traceback_()
    return out


def integrity_problems(entry: dict) -> tuple[list[str], list[str]]:
    """(changes the probe reported, problems with the reports themselves) of
    one executed cell's stream log (``GuardedExecute._begin``)."""
    reports = entry.get("reports") or []
    excused = bool(entry.get("interrupted"))  # by the grader
    changed, problems = [], []
    if not reports:
        if not excused:
            problems.append(
                "no integrity report (the probe was removed or its output suppressed)"
            )
        return changed, problems
    if len(reports) > 1:
        problems.append(f"{len(reports)} integrity reports (one is the probe's)")
    for _position, raw in reports:
        try:
            report = load_payload(raw, "integrity report")
            cell = report.get("cell")
            found = report.get("changed")
            if (
                report.get("v") != 1
                or not isinstance(cell, int)
                or not isinstance(found, list)
            ):
                raise ValueError("unknown format")
        except ValueError:
            problems.append("an unreadable integrity report")
            continue
        changed += [str(c)[:200] for c in found[:100]]
        if report.get("error") and not excused:
            problems.append(f"the probe could not finish ({str(report['error'])[:80]})")
        run = entry.get("run")
        if (cell != run) if not entry.get("lag") else not 1 <= cell <= run:
            problems.append(f"an integrity report for execution {cell}, not {run}")
    if len(reports) == 1 and reports[0][0] != entry.get("content", 0) - 1:
        problems.append(
            "the integrity report is not the cell's last output "
            "(something was displayed or cleared after it)"
        )
    return sorted(set(changed)), problems


def stream_problems(entry: dict) -> list[str]:
    """What no honest kernel sends, in any cell."""
    problems = []
    if entry.get("late"):
        problems.append(
            "messages came for this cell after it had finished ("
            + ", ".join(entry["late"][:5])
            + ")"
        )
    if entry.get("malformed"):
        problems.append(f"{entry['malformed']} malformed messages")
    if entry.get("ours_updates"):
        problems.append("a display update carried a grading report")
    if entry.get("dropped"):
        problems.append("more grading reports than fit the size limit")
    return problems


def test_cell_problems(entry: dict, touched: int, spawned: int = 0) -> list[str]:
    """What could replace a test's results after they were recorded, or let
    the student's code step outside the test's limits (a memory case's cap
    holds for the kernel's process only)."""
    problems = []
    if spawned:
        problems.append(
            f"{spawned} more process(es) ran while the hidden test ran (the "
            f"grader's watchdog saw them): a test calls the solution in the "
            f"kernel alone"
        )
    if entry.get("cleared_after_result"):
        problems.append(
            "the test's outputs were cleared (clear_output) after its result was "
            "recorded"
        )
    if touched:
        problems.append("a display update rewrote the test's outputs")
    return problems


class JudgeHiddenTests(NbGraderPreprocessor):
    """See the module docstring."""

    state_dir = Unicode("", help="grader-only folder: event logs").tag(config=True)

    def preprocess(self, nb, resources):
        ctx = resources.get("attncourse")
        if ctx is None:  # not executed by GuardedExecute: nothing recorded
            return nb, resources
        info = resources.get("nbgrader", {})
        self.assignment = info.get("assignment", "unknown")
        student = info.get("student", "unknown")
        self.events = _events.Events(
            self.state_dir, self.assignment, student, "verdicts", self.log
        )
        self.ref = ctx.get("reference")
        status = ctx.get("status", {})
        stream = ctx.get("stream", {})
        touched = ctx.get("touched", {})
        spawned = ctx.get("spawned", {})
        tamper = None  # (cell index, what)
        reported = set()
        for index, cell in enumerate(nb.cells):
            if cell.cell_type != "code":
                continue
            name = _label(cell, index)
            ran = status.get(index) == "ran"
            entry = stream.get(index) if ran else None
            if ran and entry is None:
                entry = {"reports": [], "run": 0}  # ran, but nothing was logged
            problems = []
            if entry is not None:
                changed, problems = integrity_problems(entry)
                problems += stream_problems(entry)
                new = [c for c in changed if c not in reported]
                if new:
                    reported.update(new)
                    self.events.flag("tampered", f"after {name}: " + "; ".join(new))
                if (changed or problems) and tamper is None:
                    tamper = (index, name)
            if is_grade(cell) and ran:
                problems += test_cell_problems(
                    entry, touched.get(index, 0), spawned.get(index, 0)
                )
                if not problems and tamper is None:
                    problems = self._judge(cell, name, entry)
                elif tamper is not None:  # not judged; say what else was wrong
                    problems += _count_problems(cell, entry)
                if problems and tamper is None:
                    tamper = (index, name)
                if tamper is not None:
                    cell.outputs.append(
                        error_output(
                            "NotGraded",
                            f"not graded: the notebook changed what grading "
                            f"relies on or replaced recorded results (detected at "
                            f"{tamper[1]}); every test from there on scores 0 -- your "
                            f"instructor will review it",
                        )
                    )
            for problem in problems:
                self.events.flag("tampered", f"{name}: {problem}")
            cell.outputs = [o for o in cell.outputs if not ours(o)]
            if is_grade(cell) and no_values(cell):
                self.events.note(
                    f"{name}: a value shown during the test was kept as a display "
                    f"(it cannot set the cell's score)"
                )
        self.events.save()
        resources.pop("attncourse", None)
        return nb, resources

    def _judge(self, cell, name, entry) -> list[str]:
        """Judge a hidden test cell in place; return tampering descriptions."""
        calls = checks_in(cell.source)
        observations = entry.get("observations") or []
        if any(o.get("output_type") == "error" for o in cell.outputs) and calls:
            return []  # failed in the kernel already (0 points)
        problems = _count_problems(cell, entry)
        if problems or not calls:
            return problems
        recorded = []
        for _, raw in observations:
            try:
                recorded.append(parse_observation(raw))
            except (ValueError, KeyError, TypeError) as exc:
                return [f"an unreadable recorded result ({str(exc)[:200]})"]
        for assignment, check_name, framework in calls:
            key = (assignment, check_name, framework)
            matches = [r for r in recorded if r["key"] == key]
            if len(matches) != 1:
                how = "no result" if not matches else f"{len(matches)} results"
                return [f"the hidden test recorded {how} for {check_name}/{framework}"]
            try:
                if self.ref is None or assignment != self.assignment:
                    raise RuntimeError(f"no grading data for {assignment!r}")
                judge_recorded(assignment, check_name, framework, matches[0], self.ref)
            except GradingError as exc:
                cell.outputs.append(grading_error_output(exc))
                return []
            except Exception as exc:  # noqa: BLE001  (a grader bug: say little)
                self.log.exception("judging %s failed", name)
                cell.outputs.append(
                    grading_error_output(
                        GradingError(
                            "the grader could not check your code; this is probably not "  # noqa: E501
                            "your mistake -- tell your instructor"
                        )
                    )
                )
                self.events.note(f"{name}: grader error {type(exc).__name__}: {exc}")
                return []
        return []


def no_values(cell) -> bool:
    """Turn a test cell's ``execute_result`` outputs into ``display_data``.

    nbgrader scores a test cell by its first error *or* ``execute_result``: a
    value (``sys.displayhook('ok')`` from the student's code during the test)
    before the grader's error would give full or partial credit. No test cell
    of the course ends in a value, so only student code makes one. Returns
    True if one was turned.
    """
    turned = False
    for i, out in enumerate(cell.outputs):
        if out.get("output_type") == "execute_result":
            cell.outputs[i] = nbformat.v4.new_output(
                "display_data",
                data=out.get("data", {}),
                metadata=out.get("metadata", {}),
            )
            turned = True
    return turned


def _count_problems(cell, entry) -> list[str]:
    """Exactly one recorded result per hidden test call, none elsewhere."""
    calls = checks_in(cell.source)
    observations = entry.get("observations") or []
    if not calls:
        return (
            ["a test cell without a hidden test recorded results"]
            if observations
            else []
        )
    if len(observations) != len(calls):
        how = f"{len(observations)} results" if observations else "no result"
        return [f"the hidden test recorded {how} for {len(calls)} checks"]
    return []


def _label(cell, index):
    return (
        cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        or f"cell {index + 1}"
    )
