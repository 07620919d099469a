"""Verdicts on hidden tests, computed in the grader process, not the kernel.

``JudgeHiddenTests`` runs in nbgrader's autograde pipeline right after the
notebook was executed (``GuardedExecute``, ``IgnorePattern``) and before
``SaveAutoGrades`` writes the scores to the gradebook. For every cell it

1. reads the integrity report the kernel's probe published after the cell
   (``grader.kernel.probe``). A report that lists changes, or a cell
   that ran without a report, is tampering: from that cell on, every test cell
   gets an error output ("not graded") and so 0 points, and the submission is
   flagged ``tampered`` (an instructor can still override by hand: manual
   scores win over auto scores in nbgrader);
2. for a hidden test cell -- one that calls ``check("<id>", "<check>", "<fw>")``
   -- reads the results the kernel recorded (``grader.kernel.observations``)
   and judges them with ``grader.core.verdict`` against the
   expected outputs computed here for this grading run's inputs
   (``resources["attncourse"]["reference"]``, from ``GuardedExecute``). A wrong
   result gets the GradingError output a student would have seen from an
   in-kernel check (feedback names the likely mistake); a hidden test that
   ran but recorded nothing, or recorded twice, is tampering;
3. removes our reports from the outputs, so the saved notebook and the
   feedback hold only what the student should see.

The scores themselves are nbgrader's: ``SaveAutoGrades`` gives a test cell
its points when it has no error output and no stderr output.
"""

import json
import re

from nbgrader.preprocessors import NbGraderPreprocessor
from nbgrader.utils import is_grade
from traitlets import Unicode

from grader import events as _events
from grader import judging
from grader.core import verdict
from grader.guard import error_output
from grader.kernel.errors import GradingError
from grader.kernel.observations import (
    INTEGRITY,
    OBSERVATION,
    ours,
    parse_observation,
    payloads,
)

CHECK_CALL = re.compile(
    r"""\bcheck\(\s*["']([\w-]+)["']\s*,\s*["'](\w+)["']\s*,\s*["'](\w+)["']""")


def checks_in(source: str) -> list[tuple[str, str, str]]:
    return CHECK_CALL.findall(source)


def judge_recorded(assignment, check_name, framework, recorded: dict, ref) -> None:
    """Raise GradingError unless the recorded results match, case by case."""
    check_def = judging.check_def(assignment, check_name, framework)
    observed, error = recorded["observed"], recorded["error"]
    for case in check_def.cases:
        if case in observed:
            verdict(check_def, framework, case, ref.inputs(case), ref.expected(case),
                    observed[case])
        elif error is not None and error["case"] == case:
            raise GradingError(error["message"])
        else:
            raise GradingError(f"no results were recorded for case {case!r}")


def grading_error_output(exc: GradingError):
    out = error_output("GradingError", str(exc))
    out["traceback"] = exc._render_traceback_()
    return out


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
        self.events = _events.Events(self.state_dir, self.assignment, student,
                                     "verdicts", self.log)
        self.ref = ctx.get("reference")
        status = ctx.get("status", {})
        tamper = None  # (cell index, what)
        reported = set()
        for index, cell in enumerate(nb.cells):
            if cell.cell_type != "code":
                continue
            name = _label(cell, index)
            if status.get(index) == "ran":
                changed = self._integrity(cell)
                new = [c for c in changed if c not in reported]
                if new:
                    reported.update(new)
                    self.events.flag("tampered", f"after {name}: " + "; ".join(new))
                if changed and tamper is None:
                    tamper = (index, name)
            if is_grade(cell) and status.get(index) == "ran":
                if tamper is not None:
                    cell.outputs.append(error_output(
                        "NotGraded", f"not graded: the notebook changed what grading "
                        f"relies on (detected after {tamper[1]}); every test from "
                        f"there on scores 0 -- your instructor will review it"))
                else:
                    problem = self._judge(cell, name)
                    if problem:
                        tamper = (index, name)
                        self.events.flag("tampered", f"{name}: {problem}")
            cell.outputs = [o for o in cell.outputs if not ours(o)]
        self.events.save()
        resources.pop("attncourse", None)
        return nb, resources

    def _integrity(self, cell) -> list[str]:
        reports = payloads(cell, INTEGRITY)
        if not reports:
            return ["no integrity report (the probe was removed or its output "
                    "suppressed)"]
        changed = []
        for raw in reports:
            try:
                report = json.loads(raw) if isinstance(raw, str) else raw
                changed += [str(c) for c in report.get("changed", [])]
            except (ValueError, AttributeError):
                changed.append("an unreadable integrity report")
        return sorted(set(changed))

    def _judge(self, cell, name) -> str | None:
        """Judge a hidden test cell in place; return a tampering description."""
        calls = checks_in(cell.source)
        if not calls:
            return None
        if any(o.get("output_type") == "error" for o in cell.outputs):
            return None  # failed in the kernel already (0 points)
        recorded = []
        for raw in payloads(cell, OBSERVATION):
            try:
                recorded.append(parse_observation(raw))
            except (ValueError, KeyError, TypeError) as exc:
                return f"an unreadable recorded result ({exc})"
        for assignment, check_name, framework in calls:
            key = (assignment, check_name, framework)
            matches = [r for r in recorded if r["key"] == key]
            if len(matches) != 1:
                how = "no result" if not matches else f"{len(matches)} results"
                cell.outputs.append(error_output(
                    "NotGraded", f"not graded: the hidden test recorded {how} for "
                    f"{check_name} ({framework}) -- your instructor will review it"))
                return f"the hidden test recorded {how} for {check_name}/{framework}"
            try:
                if self.ref is None or assignment != self.assignment:
                    raise RuntimeError(f"no grading data for {assignment!r}")
                judge_recorded(assignment, check_name, framework, matches[0], self.ref)
            except GradingError as exc:
                cell.outputs.append(grading_error_output(exc))
                return None
            except Exception as exc:  # noqa: BLE001  (a grader bug: say little)
                self.log.exception("judging %s failed", name)
                cell.outputs.append(grading_error_output(GradingError(
                    "the grader could not check your code; this is probably not "
                    "your mistake -- tell your instructor")))
                self.events.note(f"{name}: grader error {type(exc).__name__}: {exc}")
                return None
        return None


def _label(cell, index):
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") or \
        f"cell {index + 1}"
