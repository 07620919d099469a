"""The per-student table at the end of a grading run, and gradebook fixes.

``zero(...)`` gives a submission that could not be graded (missing,
malformed, another assignment's notebook, or one nbgrader failed on) a row in
the gradebook with every test at 0 -- nbgrader's own API:
``Gradebook.update_or_create_submission`` then ``grade.auto_score = 0`` on
each grade. Only ``auto_score`` is written, never ``manual_score``: a manual
score an instructor gives in the formgrader keeps winning.

``build(...)`` reads the scores back from the gradebook (``grade.score``:
manual if set, else auto) and the flags and notes from the event logs, and
``write(...)`` saves them as JSON and markdown; ``table(...)`` is the text
printed at the end of ``grade_all``.
"""

import datetime
import html
import json
import os
import re
from pathlib import Path

from grader import events as _events


def _gradebook(db_url, course_id):
    from nbgrader.api import Gradebook

    from grader.nbgrader_cli import path_with_this_python

    os.environ["PATH"] = path_with_this_python(os.environ.get("PATH", ""))
    return Gradebook(db_url, course_id)


def zero(db_url, course_id, assignment: str, student: str) -> None:
    with _gradebook(db_url, course_id) as gb:
        gb.update_or_create_student(student)
        sub = gb.update_or_create_submission(assignment, student)
        for nb in sub.notebooks:
            for grade in nb.grades:
                grade.auto_score = 0
                grade.needs_manual_grade = False
        gb.db.commit()


def graded(db_url, course_id, assignment: str, student: str) -> bool:
    """True if the gradebook has an automatic score for every test cell."""
    from nbgrader.api import MissingEntry

    with _gradebook(db_url, course_id) as gb:
        try:
            sub = gb.find_submission(assignment, student)
        except MissingEntry:
            return False
        grades = [g for nb in sub.notebooks for g in nb.grades]
        return bool(grades) and all(
            g.auto_score is not None or g.manual_score is not None for g in grades
        )


def part_of(grade_name: str) -> str:
    """The part a test cell belongs to: its grade id up to the first '-'."""
    return grade_name.split("-", 1)[0]


def build(db_url, course_id, state_dir, pairs, sandboxed: bool, limits: dict) -> dict:
    """The report of ``pairs`` [(assignment, student)]."""
    from nbgrader.api import MissingEntry

    rows = []
    with _gradebook(db_url, course_id) as gb:
        for assignment, student in pairs:
            ev = _events.load(state_dir, assignment, student)
            row = {
                "student": student,
                "assignment": assignment,
                "parts": {},
                "score": 0.0,
                "max": 0.0,
                "graded": False,
                "flags": sorted(ev["flags"]),
                "details": ev["flags"],
                "notes": ev["notes"],
                "timings": _events.timings(state_dir, assignment, student),
            }
            try:
                sub = gb.find_submission(assignment, student)
            except MissingEntry:
                sub = None
            if sub is not None:
                row["graded"] = True
                for nb in sub.notebooks:
                    for g in nb.grades:
                        part = row["parts"].setdefault(
                            part_of(g.name), {"score": 0.0, "max": 0.0}
                        )
                        part["score"] += float(g.score or 0)
                        part["max"] += float(g.max_score or 0)
                        row["cells"] = {
                            **row.get("cells", {}),
                            g.name: float(g.score or 0),
                        }
                row["score"] = sum(p["score"] for p in row["parts"].values())
                row["max"] = sum(p["max"] for p in row["parts"].values())
            rows.append(row)
    return {
        "generated": datetime.datetime.now().isoformat(timespec="seconds"),
        "course": course_id,
        "sandbox": sandboxed,
        "limits": limits,
        "flags": _events.FLAGS,
        "rows": rows,
    }


def _num(x) -> str:
    return f"{x:g}"


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_MD_PUNCT = re.compile(r"([\\`*_\[\]|~])")


def plain(text) -> str:
    """``text`` without control characters (no terminal escapes) on one line."""
    return _CONTROL.sub("?", str(text)).replace("\n", " ").replace("\r", " ")


def md(text) -> str:
    """Student-controlled ``text`` (ids, notes) as literal markdown text, never
    markup: HTML-escaped (no tag, no entity of its own, no autolink) and the
    characters of links, images, code, emphasis and table cells
    backslash-escaped. It never starts a line, so ``-``/``#`` stay plain."""
    return _MD_PUNCT.sub(r"\\\1", html.escape(plain(text), quote=False))


def table(report: dict) -> str:
    """A plain-text table: one line per student and assignment."""
    parts = sorted({p for r in report["rows"] for p in r["parts"]})
    head = ["student", "assignment", *(plain(p) for p in parts), "total", "flags"]
    lines = []
    for r in report["rows"]:
        cells = [plain(r["student"]), plain(r["assignment"])]
        for p in parts:
            s = r["parts"].get(p)
            cells.append(f"{_num(s['score'])}/{_num(s['max'])}" if s else "-")
        cells.append(f"{_num(r['score'])}/{_num(r['max'])}")
        cells.append(", ".join(plain(f) for f in r["flags"]) or "-")
        lines.append(cells)
    widths = [max(len(str(x)) for x in col) for col in zip(head, *lines, strict=True)]
    fmt = "  ".join(f"{{:{w}}}" for w in widths)
    out = [fmt.format(*head), fmt.format(*("-" * w for w in widths))]
    out += [fmt.format(*cells) for cells in lines]
    return "\n".join(out)


def cluster_lines(cluster: dict) -> list[str]:
    """Where the run autograded: the Dask cluster, its workers, the refused."""
    if not cluster.get("workers"):
        return []
    kind = "embedded local cluster" if cluster.get("embedded") else "cluster"
    return [
        "",
        f"Autograded on the Dask {kind} at {md(cluster['scheduler'])}: "
        f"{len(cluster['workers'])} worker(s), the largest grading process "
        f"{cluster.get('peak_rss_mib', 0)} MiB.",
    ] + [
        f"- worker {md(w)} refused: {md(why)}"
        for w, why in sorted(cluster.get("refused", {}).items())
    ]


def markdown(report: dict) -> str:
    parts = sorted({p for r in report["rows"] for p in r["parts"]})
    sandbox = (
        "on (bubblewrap)"
        if report["sandbox"]
        else "**OFF (--no-sandbox): student code could read grader files**"
    )
    lines = [
        f"# Grading report ({md(report['course'])})",
        "",
        f"Generated {report['generated']}. Sandbox: {sandbox}. "
        f"Limits: "
        + ", ".join(f"{md(k)} {md(v)}" for k, v in report["limits"].items()),
        "",
        "| student | assignment | "
        + " | ".join(md(p) for p in parts)
        + " | total | flags |",
        "| --- | --- | " + " | ".join("---" for _ in parts) + " | --- | --- |",
    ]
    for r in report["rows"]:
        cells = [
            f"{_num(r['parts'][p]['score'])}/{_num(r['parts'][p]['max'])}"
            if p in r["parts"]
            else "-"
            for p in parts
        ]
        lines.append(
            f"| {md(r['student'])} | {md(r['assignment'])} | "
            + " | ".join(cells)
            + f" | {_num(r['score'])}/{_num(r['max'])} | "
            + (", ".join(md(f) for f in r["flags"]) or "")
            + " |"
        )
    if report.get("steps"):
        lines += [
            "",
            f"Seconds per step ({report.get('workers', 1)} autograde "
            f"worker(s)): "
            + ", ".join(f"{k} {v:g}" for k, v in report["steps"].items()),
        ]
    lines += cluster_lines(report.get("cluster") or {})
    flagged = [r for r in report["rows"] if r["flags"] or r["notes"]]
    if flagged:
        lines += ["", "## What happened", ""]
        for r in flagged:
            lines.append(f"### {md(r['student'])} / {md(r['assignment'])}")
            lines += [f"- {md(n)}" for n in r["notes"]] or ["- (no details)"]
            lines.append("")
    used = sorted({f for r in report["rows"] for f in r["flags"]})
    if used:
        lines += ["## Flags", ""]
        lines += [f"- {md(f)}: {md(report['flags'].get(f, ''))}" for f in used]
    return "\n".join(lines) + "\n"


def json_text(report: dict) -> str:
    """JSON in which ``<``, ``>`` and ``&`` appear only as \\u escapes (the same
    data; never markup, even pasted into an HTML page)."""
    text = json.dumps(report, indent=1)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def write(report: dict, path: Path) -> tuple[Path, Path]:
    """Write ``<path>.json`` and ``<path>.md``; return both paths."""
    path = Path(path)
    stem = path.with_suffix("") if path.suffix in (".json", ".md") else path
    js, md_path = stem.with_suffix(".json"), stem.with_suffix(".md")
    js.write_text(json_text(report) + "\n")
    md_path.write_text(markdown(report))
    return js, md_path
