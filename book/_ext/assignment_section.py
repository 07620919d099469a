"""``{assignment} <slug>``: a chapter's Exercise section, read from its assignment.

The book must not promise what a notebook does not ask, so a chapter does not
describe its exercise in its own words: it writes

    ```{assignment} addressing
    ```

and this directive renders, from the nbgrader source notebook
``solutions/<slug>/<slug>.ipynb``:

* the notebook's intro cell (markdown; its title becomes a rubric, and its
  points table is replaced by one generated from the metadata);
* per part (TensorFlow, PyTorch): the points of its visible and hidden tests,
  read from the nbgrader metadata (``points``) -- the one place they are
  written -- with the public one-line description of each hidden-test cell,
  and the functions and classes the learner writes: their ``def``/``class``
  lines and docstrings only, taken after the ``### BEGIN/END SOLUTION``
  regions are removed (as nbgrader does for the release), so no solution
  body can be shown;
* a ``{download}`` link to the release notebook ``exercises/<slug>/<slug>.ipynb``
  (copied into the site: works offline).

Hidden-test cells contribute only their points and the comment that the
release shows. The rendered text is scanned by ``grader.leaks`` (solution
lines, hidden-test lines, reference numbers) before it is parsed: a leak is a
build error. So is a points statement in the notebook (the intro's table, a
"N points" comment of a test cell) that disagrees with the metadata.

``read_assignment`` and ``render_markdown`` are plain functions, used by
tests/book/test_exercise_sections.py without a Sphinx build.
"""

from __future__ import annotations

import ast
import copy
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective

PART_LABELS = {"tf": "TensorFlow", "torch": "PyTorch"}  # grade_id prefix -> label
STUB = ["# YOUR CODE HERE", "raise NotImplementedError()"]  # nbgrader's code stub
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^\s*(`{3,}|~{3,})")
POINTS_SAID = re.compile(r"(\d+)\s+points?\b")
HIDDEN_COMMENT = re.compile(r"^#\s*Hidden tests?,\s*\d+\s+points?\s*:\s*(.+)$")
# MyST syntax that pulls in other files or text: a notebook's markdown is plain
# Jupyter markdown, so none of it belongs there (an {include} of the solutions
# would pass the leak scan of the text and expand in the build)
MYST_MARKUP = re.compile(
    r"^\s*(`{3,}|~{3,}|:{3,})\s*\{|\{[A-Za-z][\w:+-]*\}`|\{\{", re.M
)


class AssignmentError(Exception):
    """The assignment cannot be rendered (missing, malformed, or would leak)."""


@dataclass
class Test:
    grade_id: str
    points: int
    hidden: bool
    says: str = ""  # the public description (hidden tests: the release's comment)


@dataclass
class Part:
    key: str  # "tf" or "torch", the grade_id prefix
    title: str  # "Part 1 · TensorFlow", from the part's interface cell
    tests: list[Test] = field(default_factory=list)
    stubs: list[str] = field(default_factory=list)  # def/class lines + docstrings
    names: list[str] = field(default_factory=list)  # what the learner writes

    @property
    def label(self) -> str:
        return PART_LABELS[self.key]

    @property
    def visible(self) -> int:
        return sum(t.points for t in self.tests if not t.hidden)

    @property
    def hidden(self) -> int:
        return sum(t.points for t in self.tests if t.hidden)

    @property
    def points(self) -> int:
        return self.visible + self.hidden


@dataclass
class Assignment:
    slug: str
    source: Path
    title: str
    intro: str  # markdown, title line removed
    parts: list[Part]

    @property
    def points(self) -> int:
        return sum(p.points for p in self.parts)


def _text(cell: dict) -> str:
    s = cell.get("source", "")
    return "".join(s) if isinstance(s, list) else s


def _meta(cell: dict) -> dict:
    return cell.get("metadata", {}).get("nbgrader") or {}


def _strip(code: str, begin: str, end: str, stub: list[str] | None) -> str:
    """``code`` without its ``begin``...``end`` regions, each replaced by
    ``stub`` at the marker's indentation: line by line, exactly as nbgrader's
    ClearSolutions and ClearHiddenTests do (a line *containing* a marker
    opens or closes a region and is dropped)."""
    out, inside = [], False
    for line in code.split("\n"):
        if begin in line:
            if inside:
                raise AssignmentError(f"nested {begin!r} regions")
            inside = True
            indent = re.match(r"\s*", line)[0]
            out += [indent + s for s in stub or []]
        elif end in line:
            inside = False
        elif not inside:
            out.append(line)
    if inside:
        raise AssignmentError(f"a {begin!r} region is never closed")
    return "\n".join(out)


def public_code(code: str) -> str:
    """A solution cell as the release shows it: each solution region replaced
    by nbgrader's stub; a solution cell without regions is all stub."""
    if "BEGIN SOLUTION" not in code:
        return "\n".join(STUB)
    return _strip(code, "BEGIN SOLUTION", "END SOLUTION", STUB)


def public_test(code: str) -> str:
    """A test cell as the release shows it: hidden-test regions removed."""
    return _strip(code, "BEGIN HIDDEN TESTS", "END HIDDEN TESTS", None)


def _stub(node: ast.FunctionDef | ast.ClassDef) -> ast.stmt:
    """``node`` with its body cut to its docstring (and its methods' stubs, for a
    class): the ``def``/``class`` lines the learner must keep, nothing else."""
    doc = [node.body[0]] if ast.get_docstring(node, clean=False) is not None else []
    stub = copy.copy(node)
    if isinstance(node, ast.ClassDef):
        methods = [
            _stub(n)
            for n in node.body
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
        ]
        stub.body = doc + methods or [ast.Expr(ast.Constant(...))]
    else:
        stub.body = [*doc, ast.Expr(ast.Constant(...))]
    return stub


def stubs(code: str, where: str) -> list[tuple[str, str]]:
    """(name, stub source) of every top-level function and class of a solution
    cell, from its public code only."""
    try:
        tree = ast.parse(public_code(code))
    except SyntaxError as err:
        raise AssignmentError(f"{where}: solution cell does not parse: {err}") from None
    except AssignmentError as err:
        raise AssignmentError(f"{where}: {err}") from None
    return [
        (n.name, ast.unparse(_stub(n)))
        for n in tree.body
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
    ]


def plain_markdown(text: str, where: str) -> str:
    """``text`` if it uses no MyST directive, role or substitution."""
    m = MYST_MARKUP.search(text)
    if m:
        raise AssignmentError(
            f"{where}: MyST markup {m[0].strip()!r} in notebook "
            "markdown (only plain Jupyter markdown is rendered)"
        )
    return text


def _heading(markdown: str) -> str | None:
    for line in markdown.splitlines():
        m = HEADING.match(line)
        if m:
            return m[2]
    return None


def _describe(test_code: str) -> str:
    """What a hidden-test cell checks, from its public comment: the
    "# Hidden tests, N points: ..." line and the comment lines that continue
    it (up to the "# They run when ..." line or the first line of code)."""
    lines = [line.strip() for line in public_test(test_code).splitlines()]
    for i, line in enumerate(lines):
        m = HIDDEN_COMMENT.match(line)
        if m:
            parts = [m[1].strip()]
            for more in lines[i + 1 :]:
                text = more.removeprefix("#").strip()
                if not more.startswith("#") or not text or text.startswith("They run"):
                    break
                parts.append(text)
            return " ".join(parts)
    return ""


def _points_said(cell: dict, test: Test, where: str) -> list[str]:
    """Problems: "N points" in a test cell's public comments != its metadata."""
    public = public_test(_text(cell))
    said = [
        int(n)
        for line in public.splitlines()
        if line.lstrip().startswith("#")
        for n in POINTS_SAID.findall(line)
    ]
    return [
        f"{where}: cell {test.grade_id!r} says {n} point(s), its nbgrader "
        f"metadata gives {test.points}"
        for n in said
        if n != test.points
    ]


def read_assignment(source: Path, slug: str | None = None) -> Assignment:
    """The public facts of an nbgrader source notebook (see the module doc)."""
    source = Path(source)
    slug = slug or source.stem
    if not source.is_file():
        raise AssignmentError(f"no assignment {slug!r}: {source} does not exist")
    try:
        nb = json.loads(source.read_text(encoding="utf-8"))
        cells = nb["cells"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise AssignmentError(f"{source}: not a notebook ({err})") from None
    intro_cells = [c for c in cells if _meta(c).get("grade_id") == "intro"]
    if len(intro_cells) != 1 or intro_cells[0].get("cell_type") != "markdown":
        raise AssignmentError(
            f"{source}: needs one markdown cell with grade_id 'intro'"
        )
    intro = plain_markdown(_text(intro_cells[0]), f"{source} intro")
    title = _heading(intro)
    if title is None:
        raise AssignmentError(f"{source}: the intro cell has no title heading")
    intro = "\n".join(
        line
        for line in intro.splitlines()
        if not (HEADING.match(line) and HEADING.match(line)[2] == title)
    )

    parts: dict[str, Part] = {}
    problems: list[str] = []

    def part_of(cell: dict) -> Part:
        key = _meta(cell).get("grade_id", "").split("-")[0]
        if key not in PART_LABELS:
            raise AssignmentError(
                f"{source}: cell {_meta(cell).get('grade_id')!r} belongs to no part "
                f"(grade ids start with one of {sorted(PART_LABELS)})"
            )
        return parts.setdefault(key, Part(key, PART_LABELS[key]))

    for cell in cells:
        m = _meta(cell)
        gid = m.get("grade_id", "")
        if m.get("task"):
            raise AssignmentError(
                f"{source}: manually graded task cell {gid!r} is not supported"
            )
        if gid.endswith("-interface") and cell.get("cell_type") == "markdown":
            text = plain_markdown(_text(cell), f"{source} {gid!r}")
            part_of(cell).title = _heading(text) or part_of(cell).title
        if m.get("solution") and cell.get("cell_type") == "code":
            part = part_of(cell)
            for name, stub in stubs(_text(cell), f"{source} {gid!r}"):
                part.names.append(name)
                part.stubs.append(stub)
        if m.get("grade"):
            points = m.get("points")
            if (
                not isinstance(points, int | float)
                or isinstance(points, bool)
                or points < 0
                or points != int(points)
            ):
                raise AssignmentError(
                    f"{source}: grade cell {gid!r} has no whole "
                    f"number of points ({points!r})"
                )
            hidden = "BEGIN HIDDEN TESTS" in _text(cell)
            says = _describe(_text(cell)) if hidden else ""
            test = Test(
                gid, int(points), hidden, plain_markdown(says, f"{source} {gid!r}")
            )
            part_of(cell).tests.append(test)
            problems += _points_said(cell, test, str(source))
    # the chapter's section is already called "Exercise"
    title = re.sub(r"^Exercise\s*[·:—–-]\s*", "", title) or title
    assignment = Assignment(slug, source, title, intro, list(parts.values()))
    problems += intro_table_problems(assignment)
    for part in assignment.parts:
        if not part.stubs:
            problems.append(
                f"{source}: part {part.label} asks for no function or "
                "class (no def/class in its solution cells)"
            )
        if not part.tests:
            problems.append(f"{source}: part {part.label} has no graded test")
    if problems:
        raise AssignmentError("\n".join(problems))
    return assignment


# --- markdown tables --------------------------------------------------------


def table_blocks(markdown: str) -> list[tuple[int, int]]:
    """(first, end) line ranges of the pipe tables in ``markdown``."""
    lines, blocks, start = markdown.splitlines(), [], None
    for i, line in enumerate([*markdown.splitlines(), ""]):
        if line.lstrip().startswith("|"):
            start = i if start is None else start
        elif start is not None:
            if i - start >= 2 and set(lines[start + 1].replace("|", "").strip()) <= set(
                "-: "
            ):
                blocks.append((start, i))
            start = None
    return blocks


def table_rows(lines: list[str]) -> list[list[str]]:
    """Cells of a pipe table's header and body rows (the rule line dropped)."""
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in lines]
    return [rows[0], *rows[2:]]


def intro_points_table(intro: str) -> tuple[int, int] | None:
    """The line range of the intro's points table: the table whose first
    header cell is "part"."""
    lines = intro.splitlines()
    for start, end in table_blocks(intro):
        if table_rows(lines[start:end])[0][0].lower() == "part":
            return start, end
    return None


def intro_table_problems(assignment: Assignment) -> list[str]:
    """Problems: the intro's points table disagrees with the metadata.

    Columns: part | visible tests | hidden tests | points, each number the
    points of that kind of test in that part."""
    where = f"{assignment.source}: intro points table"
    found = intro_points_table(assignment.intro)
    if found is None:
        return [f"{where}: missing (a table whose first column is 'part')"]
    header, *rows = table_rows(assignment.intro.splitlines()[found[0] : found[1]])
    header = [h.lower() for h in header]
    cols = {"visible": None, "hidden": None, "total": None}
    for i, h in enumerate(header[1:], 1):
        key = (
            "visible"
            if "visible" in h
            else "hidden"
            if "hidden" in h
            else "total"
            if h in ("points", "total")
            else None
        )
        if key:
            cols[key] = i
    if None in cols.values():
        return [
            f"{where}: expected the columns part | visible tests | hidden "
            f"tests | points, found {header}"
        ]
    problems, seen = [], set()
    by_label = {p.label.lower(): p for p in assignment.parts}
    for row in rows:
        part = by_label.get(row[0].lower())
        if part is None:
            problems.append(
                f"{where}: row {row[0]!r} is no part of the notebook "
                f"(parts: {[p.label for p in assignment.parts]})"
            )
            continue
        seen.add(part.key)
        want = {"visible": part.visible, "hidden": part.hidden, "total": part.points}
        for key, col in cols.items():
            cell = row[col] if col < len(row) else ""
            if cell != str(want[key]):
                problems.append(
                    f"{where}: {part.label} {header[col]!r} is {cell!r}, "
                    f"the metadata gives {want[key]}"
                )
    problems += [
        f"{where}: no row for part {p.label}"
        for p in assignment.parts
        if p.key not in seen
    ]
    return problems


# --- rendering --------------------------------------------------------------


# The section's own words, per edition. The notebooks are English in both: the
# Chinese edition (book/_ext/zh_edition.py, ``assignment_language: zh``) says so
# first and shows the notebook's prose (title, intro, test descriptions) in the
# Chinese of book/zh/_assignments.md (``zh_edition.translate_assignment``).
WORDS = {
    "en": {
        "lead": [],
        "header": "| part | you write | visible tests | hidden tests | points |",
        "hidden": "hidden tests",
        "visible": "visible test",
        "hidden_says": "when the notebook is graded, on other data",
        "visible_says": "run it in the notebook while you work",
        "test": "- {kind}, **{points}**: {says}",
        "download": "**Download the assignment:** {link} ({total} in all).",
        "overview": " How to work on it and submit: {doc}.",
        "part": (r"^", ""),
    },
    "zh": {
        "lead": [
            "```{note}",
            "作业笔记本用英文写成：题目说明、代码注释、测试和评分反馈都是英文。"
            "下面是题目的中文说明；要写的函数和类、它们的参数和文档字符串，"
            "都照录笔记本的原文，与笔记本中的一致。",
            "```",
            "",
        ],
        "header": "| 部分 | 你要实现的 | 可见测试 | 隐藏测试 | 分值 |",
        "hidden": "隐藏测试",
        "visible": "可见测试",
        "hidden_says": "评分时运行，用的是另一组数据",
        "visible_says": "做题时可在笔记本里直接运行",
        "test": "- {kind}，**{points}**：{says}",
        "download": "**下载作业（英文笔记本）：** {link}（共 {total}）。",
        "overview": "如何做题与提交：{doc}。",
        # "Part 1 · TensorFlow" -> "第 1 部分 · TensorFlow"
        "part": (r"^Part (\d+)\b", r"第 \1 部分"),
    },
}


def _points(n: int, language: str = "en") -> str:
    if language == "zh":
        return f"{n} 分"
    return f"{n} point" if n == 1 else f"{n} points"


def _words(language: str) -> dict:
    if language not in WORDS:
        raise AssignmentError(
            f"assignment_language must be one of {sorted(WORDS)}, not {language!r}"
        )
    return WORDS[language]


def points_table(assignment: Assignment, language: str = "en") -> list[str]:
    rows = [_words(language)["header"], "| --- | --- | --- | --- | --- |"]
    for p in assignment.parts:
        names = ", ".join(f"`{n}`" for n in p.names)
        rows.append(
            f"| {p.label} | {names} | {_points(p.visible, language)} | "
            f"{_points(p.hidden, language)} | **{p.points}** |"
        )
    return rows


def _fence(code: str) -> str:
    longest = max((len(m) for m in re.findall(r"`{3,}", code)), default=2)
    return "`" * (longest + 1)


def _intro_markdown(assignment: Assignment, language: str = "en") -> list[str]:
    """The intro with headings as rubrics (a nested heading would break the
    chapter's sections) and its points table replaced by the generated one."""
    lines = assignment.intro.splitlines()
    found = intro_points_table(assignment.intro)
    if found:
        lines[found[0] : found[1]] = points_table(assignment, language)
    else:
        lines += ["", *points_table(assignment, language)]
    out, fenced = [], None
    for line in lines:
        fence = FENCE.match(line)
        if fence and (fenced is None or fence[1].startswith(fenced)):
            fenced = None if fenced else fence[1]
        m = None if fenced else HEADING.match(line)
        out += [f"```{{rubric}} {m[2]}", "```"] if m else [line]
    return out


def render_markdown(
    assignment: Assignment,
    release_link: str,
    overview_doc: str = "",
    language: str = "en",
) -> str:
    """The MyST text of the Exercise section. ``release_link``: the download
    target of the release notebook (``/`` = relative to the Sphinx source dir);
    ``language``: the edition ("en" or "zh") of the section's own words."""
    words = _words(language)
    name = Path(release_link).name
    lines = [
        *words["lead"],
        f"```{{rubric}} {assignment.title}",
        "```",
        "",
        *_intro_markdown(assignment, language),
        "",
    ]
    for part in assignment.parts:
        points = _points(part.points, language)
        title = re.sub(*words["part"], part.title)
        lines += [f"```{{rubric}} {title} — {points}", "```", ""]
        code = "\n\n".join(part.stubs)
        fence = _fence(code)
        lines += [f"{fence}python", code, fence, ""]
        for t in part.tests:
            kind = words["hidden"] if t.hidden else words["visible"]
            says = t.says or words["hidden_says" if t.hidden else "visible_says"]
            points = _points(t.points, language)
            lines.append(words["test"].format(kind=kind, points=points, says=says))
        lines.append("")
    total = _points(assignment.points, language)
    link = f"{{download}}`{name} <{release_link}>`"
    more = (
        words["overview"].format(doc=f"{{doc}}`{overview_doc}`") if overview_doc else ""
    )
    lines += [words["download"].format(link=link, total=total) + more, ""]
    return "\n".join(lines)


def leak_problems(text: str, source: Path) -> list[str]:
    """What of the solutions, hidden tests or reference numbers ``text`` shows
    (grader.leaks, the scanner the release and the feedback pass through)."""
    import numpy as np

    from grader import leaks, reference

    ref_path = source.parent / reference.HIDDEN_DIR / reference.FILENAME
    ref_values = (
        leaks.reference_numbers(reference.load_file(ref_path))
        if ref_path.exists()
        else np.zeros(0)
    )
    problems = leaks.scan_text(
        text,
        leaks.secret_lines(source),
        ref_values,
        f"Exercise section of {source.stem}",
    )
    for marker in ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN", "END HIDDEN"):
        if marker in text:
            problems.append(f"Exercise section of {source.stem}: contains {marker!r}")
    return problems


def render(
    slug: str,
    root: Path,
    source_dir: str = "solutions",
    release_dir: str = "exercises",
    overview_doc: str = "",
    language: str = "en",
) -> str:
    """Read, render and leak-check the Exercise section of ``slug``."""
    if not re.fullmatch(r"[a-z0-9][a-z0-9-]*", slug):
        raise AssignmentError(f"{slug!r} is not an assignment slug")
    root = Path(root)
    source = root / source_dir / slug / f"{slug}.ipynb"
    assignment = read_assignment(source, slug)
    release = root / release_dir / slug / f"{slug}.ipynb"
    if not release.is_file():
        raise AssignmentError(
            f"no release of {slug!r}: {release} does not exist "
            "(python -m grader release)"
        )
    if language == "zh":  # the notebook's prose in Chinese
        import zh_edition  # beside this file (book/_ext), on the path

        assignment = zh_edition.translate_assignment(assignment)
    text = render_markdown(
        assignment, f"/{release_dir}/{slug}/{slug}.ipynb", overview_doc, language
    )
    problems = leak_problems(text, source)
    if problems:
        raise AssignmentError(
            "the Exercise section would leak:\n" + "\n".join(problems)
        )
    return text


class AssignmentDirective(SphinxDirective):
    """``{assignment} <slug>``: see the module docstring."""

    required_arguments = 1
    has_content = False

    def run(self) -> list[nodes.Node]:
        slug = self.arguments[0]
        config = self.env.config
        root = Path(self.env.srcdir)
        for folder in (config.assignment_source_dir, config.assignment_release_dir):
            self.env.note_dependency(str(root / folder / slug / f"{slug}.ipynb"))
        if config.assignment_language == "zh":
            import zh_edition

            self.env.note_dependency(str(zh_edition.assignments_path()))
        try:
            text = render(
                slug,
                root,
                config.assignment_source_dir,
                config.assignment_release_dir,
                config.assignment_overview_doc,
                config.assignment_language,
            )
        except AssignmentError as err:
            raise self.error(f"{{assignment}} {slug}: {err}") from None
        container = nodes.container(classes=["assignment"])
        lines = StringList(text.splitlines(), source=self.get_source_info()[0])
        self.state.nested_parse(lines, self.content_offset, container)
        return [container]


def setup(app: Sphinx) -> dict:
    # folders relative to the Sphinx source dir (the course root for the book)
    app.add_config_value("assignment_source_dir", "solutions", "env", str)
    app.add_config_value("assignment_release_dir", "exercises", "env", str)
    # a page on how to work on and submit exercises ("" = no link)
    app.add_config_value("assignment_overview_doc", "/book/exercises", "env", str)
    # the edition: "en", or "zh" (Chinese words around the English notebook's)
    app.add_config_value("assignment_language", "en", "env", str)
    app.add_directive("assignment", AssignmentDirective)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
