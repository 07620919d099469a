"""Grade every submission: generate, autograde, feedback, grades.csv.

    python -m attncourse.grading.grade_all [--force] [ASSIGNMENT ...]

Put submissions in ``submitted/<student>/<assignment>/<assignment>.ipynb`` (or
collect them with ``nbgrader collect`` / ``nbgrader zip_collect``), then run
this from anywhere. Steps (with assignment ids given, "*" is replaced by each):

1. check that the hidden reference data is up to date
   (``attncourse.grading.references --check``);
2. ``nbgrader generate_assignment "*" --force`` -- records the current hidden
   tests in gradebook.db (autograde restores them from there) and refreshes
   the release;
3. ``nbgrader autograde "*"`` -- every student and assignment in one call
   (``--force`` regrades submissions that were graded before);
4. ``nbgrader generate_feedback "*"`` -- then checks that the feedback holds
   no hidden data, hidden-test text or reference numbers (fails otherwise);
5. ``nbgrader export --to grades.csv`` -- one row per student and assignment.

Release feedback to students only after this command succeeds.
"""

import argparse
import sys
from pathlib import Path

from . import leaks, references
from .cli import ROOT, assignments_in, nbgrader


def submitted(root: Path, assignment: str) -> list[str]:
    return sorted(p.parent.parent.name
                  for p in (root / "submitted").glob(f"*/{assignment}/*.ipynb"))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("assignments", nargs="*",
                        help="assignment ids (default: every one with submissions)")
    parser.add_argument("--root", type=Path, default=ROOT, help="the course root")
    parser.add_argument("--force", action="store_true",
                        help="regrade and rewrite feedback that exists already")
    parser.add_argument("--to", default="grades.csv", help="the grades file")
    args = parser.parse_args(argv)
    root = args.root.resolve()

    present = args.assignments or assignments_in(root)
    if references.main(["--check", "--no-crosscheck", "--root", str(root), *present]):
        return 1
    todo = [a for a in present if submitted(root, a)]
    if not todo:
        print("no submissions found under submitted/<student>/<assignment>/")
        return 1
    force = ["--force"] if args.force else []
    for assignment in todo:
        print(f"== {assignment}: {', '.join(submitted(root, assignment))}")
    # one nbgrader process per step: "*" covers every assignment at once
    batch = ["*"] if not args.assignments else todo
    for assignment in batch:
        nbgrader(root, "generate_assignment", assignment, "--force")
    for assignment in batch:
        nbgrader(root, "autograde", assignment, *force)
    for assignment in batch:
        nbgrader(root, "generate_feedback", assignment, *force)
    problems = leaks.scan_release(root) + leaks.scan_feedback(root)
    for p in problems:
        print("LEAK:", p)
    if problems:
        print("do NOT release this feedback")
        return 1
    nbgrader(root, "export", "--to", args.to)
    print(f"grades written to {root / args.to}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
