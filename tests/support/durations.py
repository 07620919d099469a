"""Where the minutes of a test run went, from pytest's JUnit XML report.

    python tests/support/durations.py _build/junit.xml [--top 30] [--md OUT]

prints the slowest tests and the total per test file (setup, call and
teardown together, as the report records them; a module-scoped fixture's
time lands on the first test that uses it). ``.ci/run`` prints it at the end
of every CI log; ``--md`` also writes the tables as markdown.
"""

import argparse
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path


def cases(report: Path) -> list[dict]:
    """One dict per test case: file, name, seconds, outcome."""
    rows = []
    for case in ET.parse(report).getroot().iter("testcase"):
        module = case.get("classname", "")
        path = module.split("::")[0]
        parts = path.split(".")
        # classname "tests.grading.test_x" or "tests.grading.test_x.TestClass"
        while parts and not parts[-1].startswith("test_"):
            parts.pop()
        file = "/".join(parts) + ".py" if parts else module
        outcome = "passed"
        for kind in ("failure", "error", "skipped"):
            if case.find(kind) is not None:
                outcome = kind
        rows.append(
            {
                "file": file,
                "name": case.get("name", "?"),
                "seconds": float(case.get("time") or 0.0),
                "outcome": outcome,
            }
        )
    return rows


def per_file(rows: list[dict]) -> list[tuple[str, float, int]]:
    totals, counts = defaultdict(float), defaultdict(int)
    for r in rows:
        totals[r["file"]] += r["seconds"]
        counts[r["file"]] += 1
    return sorted(
        ((f, totals[f], counts[f]) for f in totals), key=lambda t: t[1], reverse=True
    )


def tables(rows: list[dict], top: int) -> str:
    total = sum(r["seconds"] for r in rows)
    lines = [f"## The {top} slowest tests (of {len(rows)}, {total:.0f} s in all)", ""]
    lines += ["| seconds | outcome | test |", "| ---: | --- | --- |"]
    for r in sorted(rows, key=lambda r: r["seconds"], reverse=True)[:top]:
        lines.append(
            f"| {r['seconds']:.1f} | {r['outcome']} | {r['file']}::{r['name']} |"
        )
    lines += ["", "## Per file", "", "| seconds | share | tests | file |"]
    lines.append("| ---: | ---: | ---: | --- |")
    for file, seconds, n in per_file(rows):
        share = seconds / total if total else 0.0
        lines.append(f"| {seconds:.1f} | {share:.1%} | {n} | {file} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", type=Path, help="pytest --junitxml file")
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--md", type=Path, help="also write the tables here")
    args = parser.parse_args(argv)
    if not args.report.is_file():
        print(f"durations: no report at {args.report}", file=sys.stderr)
        return 1
    text = tables(cases(args.report), args.top)
    # the processes that test modules left running (tests/support/leftovers.py)
    leftovers = args.report.parent / "leftovers.md"
    if leftovers.is_file():
        text += "\n" + leftovers.read_text()
    print(text)
    if args.md:
        args.md.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
