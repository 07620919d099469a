"""Chapters' Exercise sections and every points table come from the assignments.

Points are written once, in the nbgrader metadata of
``solutions/<slug>/<slug>.ipynb``; each chapter's *Exercise* section is the
``{assignment}`` directive (book/_ext/assignment_section.py), which renders the
source notebook's intro, parts, points, the learner's def/class lines and a
download of the release. Checked here without building the book: every toc
chapter has an assignment of its name (or is on the explicit UNGRADED list),
every assignment has a chapter, each Exercise section uses the directive and
nothing else but "not graded" ideas, every points table (intro cells, test-cell
comments, book/exercises.md, solutions/README.md) agrees with the metadata, and
the rendered text holds nothing of the solutions or hidden tests -- also after
a real Sphinx build of a tiny project (a few seconds), and on the built book
(``book`` marker).
"""

import importlib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from bs4 import BeautifulSoup
from support.book import ROOT, source_path, toc_files

from grader import leaks, reference

sect = importlib.import_module("assignment_section")  # book/_ext: see support.book

# Toc pages that are not chapters: they have no Exercise section.
NOT_CHAPTERS = {"book/index", "book/exercises", "book/glossary"}
# Chapters whose assignment does not exist yet: their Exercise section must say
# plainly that it is not graded. Remove a slug once solutions/<slug>/ exists.
UNGRADED: dict[str, str] = {  # slug -> why it has no assignment
    "attention-kernel": "its Triton assignment comes in a later landing (issue 31)",
}
EXTRA_OK = re.compile(r"not graded|^glossary", re.I)  # other admonitions allowed
CHECK_CALL = re.compile(r'check\("([\w-]+)", "(\w+)", "(tf|torch)"\)')


def chapter_slugs() -> list[str]:
    return [Path(d).name for d in toc_files() if d not in NOT_CHAPTERS]


def assignment_slugs() -> list[str]:
    return sorted(
        p.parent.name
        for p in (ROOT / "solutions").glob("*/*.ipynb")
        if p.stem == p.parent.name
    )


def source_nb(slug: str, root: Path = ROOT) -> Path:
    return root / "solutions" / slug / f"{slug}.ipynb"


GRADED = [s for s in chapter_slugs() if s not in UNGRADED]


# --- chapters and assignments -------------------------------------------------


def test_every_chapter_has_an_assignment_or_says_why_not():
    assert chapter_slugs(), "no chapters found in _toc.yml"
    missing = [s for s in GRADED if not source_nb(s).is_file()]
    assert not missing, (
        f"chapters without solutions/<slug>/<slug>.ipynb: {missing}"
        " (write the assignment, or list the chapter in UNGRADED "
        "with the reason)"
    )
    for slug, reason in UNGRADED.items():
        assert slug in chapter_slugs(), f"UNGRADED names {slug!r}, no toc chapter"
        assert not (ROOT / "solutions" / slug).exists(), (
            f"{slug} has an assignment now: remove it from UNGRADED ({reason}) and "
            f"use the {{assignment}} directive in its Exercise section"
        )


def test_every_assignment_has_a_chapter():
    chapters = set(chapter_slugs())
    orphans = [s for s in assignment_slugs() if s not in chapters]
    assert assignment_slugs() and not orphans, (
        f"assignments without a chapter book/<slug>.md in _toc.yml: {orphans}"
    )


# --- Exercise sections ----------------------------------------------------------

OPEN = re.compile(r"^(`{3,}|:{3,}|~{3,})\s*(?:\{([\w-]+)\})?\s*(.*?)\s*$")


def blocks(lines: list[str]) -> list[tuple[str, str, str, list[str]]]:
    """Top-level blocks: ("directive", name, argument, body) for fenced
    directives, ("fence", "", info, body) for code fences, ("text", "", "",
    [line]) for other non-blank lines."""
    out, i = [], 0
    while i < len(lines):
        m = OPEN.match(lines[i])
        if not m:
            if lines[i].strip():
                out.append(("text", "", "", [lines[i]]))
            i += 1
            continue
        fence, name, arg = m[1], m[2] or "", m[3]
        close = re.compile(rf"^{re.escape(fence[0])}{{{len(fence)},}}\s*$")
        j = i + 1
        while j < len(lines) and not close.match(lines[j]):
            j += 1
        out.append(("directive" if name else "fence", name, arg, lines[i + 1 : j]))
        i = j + 1
    return out


def exercise_section(text: str) -> list[str] | None:
    """The lines of the ``## Exercise`` section (None if there is none),
    headings inside code fences and directives ignored."""
    lines, fence, start, end = text.splitlines(), None, None, None
    for i, line in enumerate(lines):
        m = OPEN.match(line)
        if fence:
            if re.match(rf"^{re.escape(fence[0])}{{{len(fence)},}}\s*$", line):
                fence = None
            continue
        if m:
            fence = m[1]
            continue
        if re.match(r"^#{1,2}\s", line):
            if start is not None and end is None:
                end = i
            if re.match(r"^##\s+Exercises?\s*$", line):
                assert start is None, "two Exercise sections"
                start, end = i + 1, None
    return None if start is None else lines[start:end]


def section_problems(slug: str, text: str) -> list[str]:
    """What is wrong with a chapter's Exercise section (empty: fine)."""
    section = exercise_section(text)
    if section is None:
        return [f"{slug}: no '## Exercise' section"]
    problems, directives, not_graded = [], [], 0
    for kind, name, arg, body in blocks(section):
        if kind == "directive" and name == "assignment":
            directives.append(arg)
            if any(line.strip() for line in body):
                problems.append(f"{slug}: the assignment directive takes no content")
        elif kind == "directive" and name == "admonition" and EXTRA_OK.search(arg):
            if "not graded" in arg.lower():
                not_graded += 1
                if re.search(r"hidden test|autograd|points", " ".join(body), re.I):
                    problems.append(
                        f"{slug}: a 'not graded' box promises tests or points: {arg!r}"
                    )
        else:
            shown = (body[0] if body else arg) if kind == "text" else f"{{{name}}}"
            problems.append(
                f"{slug}: the Exercise section holds {kind} {shown!r} outside the "
                "{assignment} directive (describe ungraded ideas in an admonition "
                "titled '... (not graded)')"
            )
    if slug in UNGRADED:
        if directives:
            problems.append(
                f"{slug}: no assignment exists, but the section uses "
                f"the directive {directives}"
            )
        if not not_graded:
            problems.append(
                f"{slug}: has no assignment ({UNGRADED[slug]}); its "
                "section must say so in an admonition titled "
                "'Not graded: ...'"
            )
    elif directives != [slug]:
        problems.append(
            f"{slug}: the Exercise section must hold exactly one "
            f"```{{assignment}} {slug}``` (found {directives})"
        )
    return problems


@pytest.mark.parametrize("slug", chapter_slugs())
def test_exercise_section_is_rendered_from_the_assignment(slug):
    text = source_path(f"book/{slug}").read_text(encoding="utf-8")
    assert section_problems(slug, text) == []


def test_section_check_rejects_what_a_chapter_must_not_say():
    ok = "# T\n\n## Exercise\n\n```{assignment} addressing\n```\n"
    assert section_problems("addressing", ok) == []
    prose = ok + "\nThe assignment also asks for kernel regression.\n"
    assert any("outside the" in p for p in section_problems("addressing", prose))
    wrong = ok.replace("{assignment} addressing", "{assignment} self-attention")
    assert section_problems("addressing", wrong)
    missing = "# T\n\n## Exercise\n\nWrite multi-head attention.\n\n## Next\n"
    assert section_problems("multi-head-attention", missing)
    promise = ok + (
        "\n```{admonition} More (not graded)\nHidden tests check it.\n```\n"
    )
    assert section_problems("addressing", promise)
    ungraded_but_silent = "# T\n\n## Exercise\n\nWrite streaming attention.\n"
    assert section_problems("attention-cost", ungraded_but_silent)  # graded
    # headings inside a code cell neither start nor end the section
    cell = "```{code-cell} ipython3\n# a comment\n## Exercise\n```\n\n"
    early = ok.replace("## Exercise", cell + "## Exercise")
    assert section_problems("addressing", early) == []
    inside = ok + "\n```{code-cell} ipython3\n## More\n```\n"
    assert any("{code-cell}" in p for p in section_problems("addressing", inside))


# --- points: the metadata, and every table that repeats it ----------------------


@pytest.mark.parametrize("slug", assignment_slugs())
def test_intro_table_and_test_comments_agree_with_the_metadata(slug):
    """read_assignment raises on any disagreement (the build does too)."""
    a = sect.read_assignment(source_nb(slug))
    nb = json.loads(source_nb(slug).read_text())
    points = sum(
        c["metadata"]["nbgrader"]["points"]
        for c in nb["cells"]
        if c.get("metadata", {}).get("nbgrader", {}).get("grade")
    )
    assert a.points == points and [p.key for p in a.parts] == ["tf", "torch"]


def mutated(tmp_path: Path, slug: str, edit) -> Path:
    nb = json.loads(source_nb(slug).read_text())
    edit(nb["cells"])
    path = tmp_path / "solutions" / slug / f"{slug}.ipynb"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(nb))
    return path


def test_points_disagreeing_with_the_metadata_are_refused(tmp_path):
    def more_hidden_points(cells):
        for c in cells:
            if c["metadata"].get("nbgrader", {}).get("grade_id") == "tf-hidden":
                c["metadata"]["nbgrader"]["points"] = 4

    with pytest.raises(sect.AssignmentError) as err:
        sect.read_assignment(mutated(tmp_path / "a", "addressing", more_hidden_points))
    assert "'hidden tests' is '3', the metadata gives 4" in str(err.value)
    assert "says 3 point(s), its nbgrader metadata gives 4" in str(err.value)

    def wrong_intro(cells):
        c = cells[0]
        c["source"] = "".join(c["source"]).replace(
            "| PyTorch | 1 | 3 | 4 |", "| PyTorch | 1 | 3 | 5 |"
        )

    with pytest.raises(sect.AssignmentError, match="PyTorch 'points' is '5'"):
        sect.read_assignment(mutated(tmp_path / "b", "addressing", wrong_intro))


def table(text: str, first_header: str) -> list[list[str]]:
    """Body rows of the first pipe table whose first header cell is given."""
    lines = text.splitlines()
    for start, end in sect.table_blocks(text):
        header, *rows = sect.table_rows(lines[start:end])
        if header[0].lower() == first_header:
            return rows
    raise AssertionError(f"no table starting with {first_header!r}")


def exercises_page_problems(text: str) -> list[str]:
    """book/exercises.md: one row per assignment in toc order, each linking the
    release and its chapter, with the metadata's points (TF + PyTorch); the
    ungraded chapters named."""
    problems, order = [], [s for s in chapter_slugs() if s in assignment_slugs()]
    rows = table(text, "exercise")
    link = re.compile(
        r"^\{download\}`([\w-]+)\.ipynb <\.\./exercises/([\w-]+)/"
        r"([\w-]+)\.ipynb>`$"
    )
    slugs = []
    for row in rows:
        m = link.match(row[0])
        if not m or len(set(m.groups())) != 1:
            problems.append(f"exercises.md: bad download link {row[0]!r}")
            continue
        slug = m[1]
        slugs.append(slug)
        if row[1] != f"{{doc}}`{slug}`":
            problems.append(
                f"exercises.md {slug}: chapter column must be "
                f"{{doc}}`{slug}`, is {row[1]!r}"
            )
        want = " + ".join(
            str(p.points) for p in sect.read_assignment(source_nb(slug)).parts
        )
        if row[3] != want:
            problems.append(
                f"exercises.md {slug}: points {row[3]!r}, the metadata gives {want!r}"
            )
    if slugs != order:
        problems.append(f"exercises.md rows {slugs}, assignments in toc order {order}")
    problems += [
        f"exercises.md does not name the ungraded chapter {s}"
        for s in UNGRADED
        if f"{{doc}}`{s}`" not in text
    ]
    return problems


def check_points(slug: str) -> dict[str, dict[str, int]]:
    """{part: {hidden check: points}} from the source notebook (grader's view)."""
    nb = json.loads(source_nb(slug).read_text())
    found: dict[str, dict[str, int]] = {}
    for c in nb["cells"]:
        m = c.get("metadata", {}).get("nbgrader", {})
        calls = CHECK_CALL.findall("".join(c["source"]))
        if m.get("grade") and calls:
            assert len(calls) == 1, f"{slug} {m['grade_id']}: one check per cell"
            _, check, part = calls[0]
            found.setdefault(part, {})[check] = m["points"]
    return found


def solutions_readme_problems(text: str) -> list[str]:
    """solutions/README.md: per assignment, the visible + hidden points of each
    part and each hidden check's points (the same in both parts)."""
    problems, seen = [], []
    pair = re.compile(r"^(\d+)(?: visible)? \+ (\d+)(?: hidden)?$")
    for row in table(text, "assignment"):
        slug = row[0].strip("`")
        seen.append(slug)
        if not source_nb(slug).is_file():
            problems.append(f"solutions/README.md: no assignment {slug!r}")
            continue
        a = sect.read_assignment(source_nb(slug))
        for part, cell in zip(a.parts, row[1:3], strict=True):
            m = pair.match(cell)
            if not m or (int(m[1]), int(m[2])) != (part.visible, part.hidden):
                problems.append(
                    f"solutions/README.md {slug} {part.label}: {cell!r}, "
                    f"the metadata gives {part.visible} + {part.hidden}"
                )
        checks = check_points(slug)
        if checks.get("tf") != checks.get("torch"):
            problems.append(
                f"{slug}: the parts' checks differ, one column cannot "
                f"show them: {checks}"
            )
        listed = {name: int(n) for name, n in re.findall(r"`(\w+)` (\d+)", row[3])}
        if listed != checks.get("tf"):
            problems.append(
                f"solutions/README.md {slug}: checks {listed}, the "
                f"notebook has {checks.get('tf')}"
            )
    if sorted(seen) != assignment_slugs():
        problems.append(
            f"solutions/README.md lists {seen}, the assignments are "
            f"{assignment_slugs()}"
        )
    return problems


def test_exercises_page_agrees_with_the_metadata():
    text = (ROOT / "book" / "exercises.md").read_text(encoding="utf-8")
    assert exercises_page_problems(text) == []
    wrong = text.replace("| 5 + 5 |", "| 5 + 6 |", 1)
    assert any("gives '5 + 5'" in p for p in exercises_page_problems(wrong))
    dropped = "\n".join(x for x in text.splitlines() if "builtin-layers" not in x)
    assert any("toc order" in p for p in exercises_page_problems(dropped))


def test_solutions_readme_table_agrees_with_the_metadata():
    text = (ROOT / "solutions" / "README.md").read_text(encoding="utf-8")
    assert solutions_readme_problems(text) == []
    wrong = text.replace("`masked_attention` 3", "`masked_attention` 2")
    assert any("masked_attention" in p for p in solutions_readme_problems(wrong))
    wrong = text.replace(
        "| `soft-hard-attention` | 1 + 4 |", "| `soft-hard-attention` | 1 + 5 |"
    )
    assert any("gives 1 + 4" in p for p in solutions_readme_problems(wrong))


def test_readme_names_the_chapters_without_an_assignment():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Exercises and grading", 1)[1].split("\n## ", 1)[0]
    assert "Each chapter has an nbgrader assignment" not in text
    for slug in UNGRADED:
        assert f"`{slug}`" in section, f"README's grading section omits {slug}"


# --- what the directive renders --------------------------------------------------


def regions(code: str, begin: str, end: str) -> tuple[list[str], list[str]]:
    """(lines inside begin...end regions, lines outside), nbgrader's way: a
    line containing a marker opens or closes a region."""
    inside, outside, open_ = [], [], False
    for line in code.split("\n"):
        if begin in line:
            open_ = True
        elif end in line:
            open_ = False
        else:
            (inside if open_ else outside).append(line)
    return inside, outside


def solution_and_hidden_lines(slug: str, root: Path = ROOT) -> list[str]:
    """Every line (6+ characters) of the solution regions and hidden tests
    that the release does not show elsewhere (stricter than leaks.secret_lines:
    shorter lines, comments included)."""
    secret, public = [], []
    for c in json.loads(source_nb(slug, root).read_text())["cells"]:
        code = "".join(c["source"])
        sol, rest = regions(code, "BEGIN SOLUTION", "END SOLUTION")
        hid, rest = regions("\n".join(rest), "BEGIN HIDDEN TESTS", "END HIDDEN TESTS")
        secret += sol + hid
        public += rest
    public_text = "\n".join(public)
    return [
        s.strip()
        for s in secret
        if len(s.strip()) >= 6 and s.strip() not in public_text
    ]


@pytest.mark.parametrize("slug", assignment_slugs())
def test_rendered_section_shows_the_interface_and_nothing_secret(slug):
    text = sect.render(slug, ROOT)
    src = source_nb(slug)
    ref = reference.load_file(reference.source_path(ROOT, slug))
    assert (
        leaks.scan_text(
            text, leaks.secret_lines(src), leaks.reference_numbers(ref), slug
        )
        == []
    )
    shown = [line for line in solution_and_hidden_lines(slug) if line in text]
    assert not shown, f"solution or hidden-test lines in the section: {shown}"
    assert "check(" not in text and "BEGIN" not in text
    a = sect.read_assignment(src)
    for part in a.parts:
        assert part.names and all(f"`{n}`" in text for n in part.names)
        assert f"{part.title} — {part.points} points" in text
    assert f"</exercises/{slug}/{slug}.ipynb>" in text
    headings = [
        b
        for b in blocks(text.splitlines())
        if b[0] == "text" and b[3][0].startswith("#")
    ]
    assert not headings, "a heading would break the chapter's sections"


TOY_INTRO = """\
# Exercise · Toy

Intro text of the toy.

| part | visible tests | hidden tests | points |
| --- | --- | --- | --- |
| TensorFlow | 1 | 2 | 3 |
| PyTorch | 1 | 2 | 3 |
"""
TOY_SOLUTION = '''\
import math

def toy_{fw}(x, scale=2.0):
    """Scale x (public docstring)."""
    ### BEGIN SOLUTION
    secret_value = x * scale * 31337  # SOLUTION_BODY_MARKER
    return secret_value
    ### END SOLUTION

### BEGIN SOLUTION
def helper_written_in_solution(x):
    """HELPER_DOC_MARKER"""
    return x
### END SOLUTION

class ToyLayer{fw}:
    """Public class doc."""
    CLASS_ATTRIBUTE = "CLASS_ATTR_MARKER"

    def __init__(self, n):
        ### BEGIN SOLUTION
        self.n = n * 4242
        ### END SOLUTION
'''
TOY_HIDDEN = """\
# Hidden tests, 2 points: the toy on other data.
### BEGIN HIDDEN TESTS
from grader.kernel import check
check("toy", "HIDDEN_CHECK_MARKER", "{fw}")
### END HIDDEN TESTS
"""


def cell(kind: str, gid: str, source: str, **meta) -> dict:
    nbg = {
        "grade": False,
        "grade_id": gid,
        "locked": kind == "markdown",
        "schema_version": 3,
        "solution": False,
        "task": False,
        **meta,
    }
    c = {"cell_type": kind, "metadata": {"nbgrader": nbg}, "source": source}
    if kind == "code":
        c.update(outputs=[], execution_count=None)
    return c


def make_toy(root: Path, slug: str = "toy", intro: str = TOY_INTRO) -> Path:
    cells = [cell("markdown", "intro", intro)]
    for n, (fw, label) in enumerate((("tf", "TensorFlow"), ("torch", "PyTorch")), 1):
        cells += [
            cell("markdown", f"{fw}-interface", f"## Part {n} · {label}\n\nWrite it."),
            cell("code", f"{fw}-solution", TOY_SOLUTION.format(fw=fw), solution=True),
            cell(
                "code",
                f"{fw}-visible",
                f"assert toy_{fw}(1) == 2",
                grade=True,
                points=1,
            ),
            cell(
                "code",
                f"{fw}-hidden",
                TOY_HIDDEN.format(fw=fw),
                grade=True,
                points=2,
                locked=True,
            ),
        ]
    nb = {
        "cells": cells,
        "metadata": {"kernelspec": {"name": "python3"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    src = root / "solutions" / slug / f"{slug}.ipynb"
    src.parent.mkdir(parents=True)
    src.write_text(json.dumps(nb))
    release = root / "exercises" / slug / f"{slug}.ipynb"
    release.parent.mkdir(parents=True)
    release.write_text(json.dumps({**nb, "cells": []}))
    return src


def test_toy_assignment_shows_def_lines_never_solution_bodies(tmp_path):
    make_toy(tmp_path)
    text = sect.render("toy", tmp_path)
    for public in (
        "def toy_tf(x, scale=2.0):",
        "Scale x (public docstring).",
        "class ToyLayertorch:",
        "def __init__(self, n):",
        "Public class doc.",
        "Intro text of the toy.",
        "hidden tests, **2 points**: the toy on other data.",
        "visible test, **1 point**",
        "{download}`toy.ipynb </exercises/toy/toy.ipynb>`",
        "```{rubric} Toy",
    ):
        assert public in text, public
    for secret in (
        "31337",
        "SOLUTION_BODY_MARKER",
        "helper_written_in_solution",
        "HELPER_DOC_MARKER",
        "4242",
        "HIDDEN_CHECK_MARKER",
        "grader.kernel",
        "CLASS_ATTR_MARKER",
        "import math",
    ):
        assert secret not in text, secret


def test_reference_number_in_the_notebook_text_fails_the_render(tmp_path):
    """The directive's own leak scan: an intro that quotes an expected value."""
    src = make_toy(tmp_path, intro=TOY_INTRO + "\nThe answer is 0.7182818.\n")
    reference.save(
        src.parent / "hidden" / "reference.npz",
        {"case/out/y": np.array([0.7182818, 2.5])},
    )
    with pytest.raises(sect.AssignmentError, match=r"(?s)would leak.*0\.7182818"):
        sect.render("toy", tmp_path)


@pytest.mark.parametrize(
    "markup",
    [
        "```{literalinclude} ../solutions/toy/toy.ipynb\n```",
        ":::{include} ../solutions/toy/hidden/notes.md\n:::",
        "See {download}`the data <../solutions/toy/hidden/reference.npz>`.",
        "{{ secret }}",
    ],
)
def test_notebook_markdown_cannot_pull_in_other_files(tmp_path, markup):
    """The leak scan reads the text; MyST would expand these in the build."""
    make_toy(tmp_path, intro=TOY_INTRO + "\n" + markup + "\n")
    with pytest.raises(sect.AssignmentError, match="MyST markup"):
        sect.render("toy", tmp_path)


def test_unknown_or_unreleased_assignment_is_an_error(tmp_path):
    with pytest.raises(sect.AssignmentError, match="no assignment 'nope'"):
        sect.render("nope", tmp_path)
    with pytest.raises(sect.AssignmentError, match="not an assignment slug"):
        sect.render("../solutions/x", tmp_path)
    make_toy(tmp_path)
    (tmp_path / "exercises" / "toy" / "toy.ipynb").unlink()
    with pytest.raises(sect.AssignmentError, match="no release of 'toy'"):
        sect.render("toy", tmp_path)


# --- a real Sphinx build of a tiny project -----------------------------------------

CONF = """\
import sys
sys.path.insert(0, {ext!r})
extensions = ["myst_nb", "assignment_section"]
myst_enable_extensions = ["amsmath", "colon_fence", "dollarmath"]
nb_execution_mode = "off"
root_doc = "book/index"
exclude_patterns = ["_build", "solutions", "exercises"]
"""
CHAPTER = """\
---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
kernelspec:
  display_name: Python 3
  language: python
  name: python3
---

# Chapter {slug}

Text.

## Exercise

```{{assignment}} {slug}
```
"""


def tiny_project(root: Path, slugs: list[str], pages: dict[str, str]) -> Path:
    (root / "book").mkdir(parents=True)
    (root / "conf.py").write_text(CONF.format(ext=str(ROOT / "book" / "_ext")))
    for slug in slugs:
        if (ROOT / "solutions" / slug).is_dir():
            shutil.copytree(ROOT / "solutions" / slug, root / "solutions" / slug)
            shutil.copytree(ROOT / "exercises" / slug, root / "exercises" / slug)
    (root / "book" / "exercises.md").write_text("# Exercises\n")
    for name, text in pages.items():
        (root / "book" / f"{name}.md").write_text(text)
    toc = "\n".join(["exercises", *pages])
    (root / "book" / "index.md").write_text(f"# Index\n\n```{{toctree}}\n{toc}\n```\n")
    return root


def sphinx(src: Path, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "sphinx",
            "-W",
            "-n",
            "--keep-going",
            "-q",
            "-b",
            "html",
            str(src),
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )


GOOD = ["addressing", "multi-head-attention"]  # a function; a class with methods
BAD = ["nope", "toy"]  # no such assignment; an intro table that disagrees


@pytest.fixture(scope="module")
def tiny_build(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """One Sphinx build (myst-nb, -W -n --keep-going) of two real chapters'
    Exercise sections and two broken ones."""
    tmp = tmp_path_factory.mktemp("tiny-book")
    src = tiny_project(
        tmp / "src", GOOD, {s: CHAPTER.format(slug=s) for s in GOOD + BAD}
    )
    make_toy(
        src,
        intro=TOY_INTRO.replace("| PyTorch | 1 | 2 | 3 |", "| PyTorch | 1 | 2 | 4 |"),
    )
    return tmp / "out", sphinx(src, tmp / "out")


@pytest.mark.parametrize("slug", GOOD)
def test_tiny_build_renders_the_section_offline_and_leaks_nothing(tiny_build, slug):
    out, built = tiny_build
    log = built.stdout + built.stderr
    stray = [
        line
        for line in log.splitlines()
        if re.search(r"WARNING|ERROR", line)
        and not re.search(r"book/(nope|toy)\.md", line)
    ]
    assert not stray, log
    page = out / "book" / f"{slug}.html"
    text = leaks.html_text(page)
    ref = reference.load_file(reference.source_path(ROOT, slug))
    assert (
        leaks.scan_text(
            text,
            leaks.secret_lines(source_nb(slug)),
            leaks.reference_numbers(ref),
            str(page),
        )
        == []
    )
    shown = [line for line in solution_and_hidden_lines(slug) if line in text]
    assert not shown, shown
    a = sect.read_assignment(source_nb(slug))
    assert all(n in text for p in a.parts for n in p.names)
    assert all(f"{p.title} — {p.points} points" in text for p in a.parts)
    doc = BeautifulSoup(page.read_text(), "html.parser")
    exercise = doc.find("section", id="exercise")
    assert exercise is not None and not exercise.find("section"), (
        "the assignment must not add sections to the chapter"
    )
    links = [a["href"] for a in exercise.select("a.download")]
    assert len(links) == 1 and links[0].endswith(f"/{slug}.ipynb"), links
    downloaded = (page.parent / links[0]).resolve()
    release = ROOT / "exercises" / slug / f"{slug}.ipynb"
    assert downloaded.read_bytes() == release.read_bytes()
    overview = exercise.find("a", href=re.compile(r"(^|/)exercises\.html$"))
    assert overview is not None, "no link to the Exercises page"


def test_tiny_build_fails_on_a_bad_assignment(tiny_build):
    _, built = tiny_build
    log = built.stdout + built.stderr
    assert built.returncode != 0, log
    assert "nope.md:18: ERROR: {assignment} nope: no assignment 'nope'" in log
    assert "PyTorch 'points' is '4', the metadata gives 3" in log


# --- the built book (slow: the session's full build) --------------------------------


@pytest.mark.book
@pytest.mark.parametrize("slug", assignment_slugs())
def test_built_chapter_shows_its_assignment_and_nothing_secret(site, slug):
    """The Exercise section of the real site (the chapter's own teaching code
    may share generic lines with a solution, so only the section is scanned)."""
    page = site / "book" / f"{slug}.html"
    doc = BeautifulSoup(page.read_text(encoding="utf-8"), "html.parser")
    section = doc.find("section", id="exercise")
    assert section is not None, f"{page} has no Exercise section"
    text = section.get_text()
    ref = reference.load_file(reference.source_path(ROOT, slug))
    assert (
        leaks.scan_text(
            text,
            leaks.secret_lines(source_nb(slug)),
            leaks.reference_numbers(ref),
            str(page),
        )
        == []
    )
    assert not [line for line in solution_and_hidden_lines(slug) if line in text]
    assert all(
        n in text for p in sect.read_assignment(source_nb(slug)).parts for n in p.names
    )
    links = [a["href"] for a in section.select("a.download")]
    assert len(links) == 1, links
    release = ROOT / "exercises" / slug / f"{slug}.ipynb"
    assert (page.parent / links[0]).resolve().read_bytes() == release.read_bytes()
