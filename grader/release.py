"""Regenerate the student release ``exercises/`` from ``solutions/``.

    python -m grader release [ASSIGNMENT ...]

Runs ``nbgrader generate_assignment "*" --force`` (or one call per given id; it
also records the hidden tests in gradebook.db), then checks the release for
leaks: no hidden/ data, no solution code, no hidden-test text, no reference
numbers. Exits non-zero if anything leaked. Commit ``exercises/`` afterwards.
"""

import argparse
import sys
from pathlib import Path

from grader import leaks
from grader.nbgrader_cli import ROOT, nbgrader


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("assignments", nargs="*")
    parser.add_argument("--root", type=Path, default=ROOT)
    args = parser.parse_args(argv)
    for assignment in args.assignments or ["*"]:  # "*": all in one process
        nbgrader(args.root, "generate_assignment", assignment, "--force")
    problems = leaks.scan_release(args.root)
    for p in problems:
        print("LEAK:", p)
    if problems:
        return 1
    print("release OK: exercises/ holds no solutions, hidden tests or reference data")
    return 0


if __name__ == "__main__":
    sys.exit(main())
