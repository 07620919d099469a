"""The Chinese edition (中文版): the English chapters with translated prose.

Each English page ``book/<name>.md`` is cut into items (:func:`split`): code cells,
verbatim pieces (front matter, labels, display math, code fences, the
``{assignment}`` directive, blank lines) and *prose units* (a paragraph, a heading,
a list, a table, a figure or admonition directive, one glossary entry). The
translation file ``book/zh/<name>.md`` holds one Chinese text per prose unit, under a
marker naming the hash of the English text it translates::

    <!-- en 3f2a9c1b7e4d | In the chapters so far the queries, keys and… -->
    在前面几章里，查询、键和值都来自外部……

The Chinese page is the English page with each unit replaced by its translation
(:func:`assemble`); code cells and every verbatim piece are the English bytes, so
the code is never copied by hand and its cached outputs are the English build's.

Drift is an error: an English unit whose hash no translation names is *missing*
(new or edited English), a translation whose hash no English unit has any more is
*stale*, and a translation that is the English text itself, or has no Chinese in
it, is *untranslated* (``sync`` writes the English as a placeholder). A translation
may not change the math, code or cross-reference targets of its unit
(:func:`span_problems`), and shows each glossary term it links with the glossary's
Chinese term (:func:`term_problems`).

One term per concept: :data:`VARIANTS` lists the words the edition does *not* use
for a concept, each with the term it uses (存储器, not 记忆, for the fixed-size
memory); a translation using one is *invalid* (:func:`variant_problems`), except
inside quotation marks (a note quoted verbatim, an alias named). The glossary names
the aliases that readers of other Chinese textbooks know (:data:`ALIASES`:
注意力评分函数 in 《动手学深度学习》), each in quotation marks in its entry.

The Exercise sections come from the English assignment notebooks through the
``{assignment}`` directive (book/_ext/assignment_section.py); the notebooks stay
English, the Chinese page does not. Their prose units (the title, each paragraph of
the intro, each hidden test's description) are translated in one file,
``book/zh/_assignments.md`` (:func:`assignments_path`), under the same markers and with
the same drift checks (:func:`assignments_report`, listed as ``_assignments``); the
directive's own sentences are translated in ``assignment_section.WORDS``.

    python book/_ext/zh_edition.py status [NAME ...]   coverage and problems (exit 1)
    python book/_ext/zh_edition.py sync NAME ...       rewrite translation files in the
                                                       English order, with placeholders
                                                       (NAME _assignments: the
                                                       Exercise sections)
    python book/_ext/zh_edition.py build [--path-output DIR] [--allow-drift]
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
ZH = ROOT / "book" / "zh"  # the translations
META = ZH / "_meta.yml"  # the book's title, the toc captions
EDITION = "zh"  # the folder of the Chinese site below the English one
SEARCH_DICT = "search-dict.txt"  # jieba's user dictionary in the generated project
ASSIGNMENTS_NAME = "_assignments"  # the Exercise sections' prose, all assignments
ASSIGNMENT = re.compile(r"^```\{assignment\}\s+(\S+)", re.M)

MARKER = re.compile(r"^<!-- en ([0-9a-f]{12})(?: \| .*?)? -->$")
# a comment line of a translation file that is no marker (a file's or a
# section's heading): not part of any translation
COMMENT_LINE = re.compile(r"^<!--(?! en [0-9a-f]{12}).*-->$")
HEADING = re.compile(r"^#{1,6} ")
LABEL = re.compile(r"^\([\w:.-]+\)=$")
FENCE = re.compile(r"^(`{3,}|~{3,}|:{3,})(.*)$")
DIRECTIVE = re.compile(r"^\{([\w-]+)\}")
CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff]")
# directives that are code or generated, never prose
VERBATIM_DIRECTIVES = {"code-cell", "math", "assignment"}
# directives whose argument is a title to translate (others keep their first line)
TITLED_DIRECTIVES = {"admonition", "dropdown", "rubric", "card", "topic", "sidebar"}


@dataclass
class Item:
    kind: str  # "verbatim", "code" or "unit"
    text: str  # the lines, joined by "\n" (no trailing newline)
    line: int  # 1-based first line in the English file

    @property
    def hash(self) -> str:
        return unit_hash(self.text)


def unit_hash(text: str) -> str:
    normal = "\n".join(line.rstrip() for line in text.strip("\n").splitlines())
    return hashlib.sha256(normal.encode()).hexdigest()[:12]


def _fence_end(lines: list[str], start: int, fence: str) -> int:
    """Index of the line closing the fence opened at ``start`` (or the last line)."""
    char, size = fence[0], len(fence)
    for i in range(start + 1, len(lines)):
        stripped = lines[i].strip()
        if stripped and set(stripped) == {char} and len(stripped) >= size:
            return i
    return len(lines) - 1


def _glossary_items(block: list[str], first: int) -> list[Item]:
    """The glossary directive: its fence lines verbatim, each entry a unit."""
    items = [Item("verbatim", block[0], first)]
    body, i = block[1:-1], 0
    while i < len(body):
        if not body[i].strip():
            items.append(Item("verbatim", body[i], first + 1 + i))
            i += 1
            continue
        j = i
        while j < len(body) and body[j].strip():
            j += 1
        items.append(Item("unit", "\n".join(body[i:j]), first + 1 + i))
        i = j
    items.append(Item("verbatim", block[-1], first + len(block) - 1))
    return items


def split(text: str) -> list[Item]:
    """The items of a MyST page; ``"\\n".join`` of their texts gives ``text`` back."""
    lines = text.split("\n")
    items: list[Item] = []
    i = 0
    if lines and lines[0] == "---":
        end = lines.index("---", 1)
        items.append(Item("verbatim", "\n".join(lines[: end + 1]), 1))
        i = end + 1
    while i < len(lines):
        line = lines[i]
        fence = FENCE.match(line)
        if not line.strip() or LABEL.match(line) or line.startswith("+++"):
            items.append(Item("verbatim", line, i + 1))
            i += 1
        elif fence:
            end = _fence_end(lines, i, fence.group(1))
            block = lines[i : end + 1]
            name = DIRECTIVE.match(fence.group(2).strip())
            if name and name.group(1) == "glossary":
                items += _glossary_items(block, i + 1)
            elif name is None or name.group(1) in VERBATIM_DIRECTIVES:
                kind = "code" if name and name.group(1) == "code-cell" else "verbatim"
                items.append(Item(kind, "\n".join(block), i + 1))
            else:
                items.append(Item("unit", "\n".join(block), i + 1))
            i = end + 1
        elif line.strip() == "$$":
            end = next(
                (j for j in range(i + 1, len(lines)) if lines[j].strip() == "$$"),
                len(lines) - 1,
            )
            items.append(Item("verbatim", "\n".join(lines[i : end + 1]), i + 1))
            i = end + 1
        elif HEADING.match(line):
            items.append(Item("unit", line, i + 1))
            i += 1
        else:
            j = i + 1
            while (
                j < len(lines)
                and lines[j].strip()
                and not FENCE.match(lines[j])
                and not HEADING.match(lines[j])
                and not LABEL.match(lines[j])
            ):
                j += 1
            items.append(Item("unit", "\n".join(lines[i:j]), i + 1))
            i = j
    return items


# ---------------------------------------------------------------- translations


@dataclass
class Translation:
    hash: str
    text: str
    line: int  # of its marker in the translation file


def read_translations(path: Path) -> list[Translation]:
    if not path.exists():
        return []
    found: list[Translation] = []
    current: Translation | None = None
    body: list[str] = []
    for number, line in enumerate(path.read_text(encoding="utf-8").split("\n"), 1):
        marker = MARKER.match(line)
        if marker:
            if current:
                current.text = "\n".join(body).strip("\n")
                found.append(current)
            current, body = Translation(marker.group(1), "", number), []
        elif current and not COMMENT_LINE.match(line):
            body.append(line)
    if current:
        current.text = "\n".join(body).strip("\n")
        found.append(current)
    return found


INLINE = [
    # (inline math and code may wrap onto the next line, as in the English)
    ("math", re.compile(r"(?<![\\$])\$(?!\$)(.+?)(?<!\\)\$", re.S)),
    ("display math", re.compile(r"\$\$(.+?)\$\$", re.S)),
    # a code span closes with as many backticks as it opened with (CommonMark)
    (
        "code",
        re.compile(r"(?<![`}])(?P<ticks>`+)(?!`)(?P<v>.+?)(?<!`)(?P=ticks)(?!`)", re.S),
    ),
    ("link target", re.compile(r"\{(?:doc|ref|download|numref)\}`[^`<]*<([^>`]+)>`")),
    ("link target", re.compile(r"\{(?:doc|ref|download|numref)\}`([^`<]+)`")),
    ("option", re.compile(r"^\s*(:(?!alt:)[\w-]+:.*)$", re.M)),
]


def spans(text: str) -> Counter:
    found: Counter = Counter()
    text_no_roles = re.sub(r"\{[a-z]+\}`[^`]*`", "", text)
    for kind, pattern in INLINE:
        source = text if kind in ("link target", "option") else text_no_roles
        if kind == "math":
            source = re.sub(r"\$\$.+?\$\$", "", source, flags=re.S)
        if kind == "code":  # a directive's fence is no code span
            source = re.sub(r"^[ \t]*(`{3,}|~{3,}|:{3,}).*$", "", source, flags=re.M)
        for match in pattern.finditer(source):
            value = match.group("v") if kind == "code" else match.group(1)
            found[(kind, " ".join(value.split()))] += 1
    return found


# a line break between two Chinese characters (or full-width punctuation)
# (emphasis stars on one side at most: ``**粗**`` + ``*斜*`` must not touch)
_HAN = "\u3000-\u303f\u3400-\u4dbf\u4e00-\u9fff\uff00-\uffef"
CJK_BREAK = re.compile(
    rf"([{_HAN}]\**)\n[ \t]*(?=[{_HAN}])|([{_HAN}])\n[ \t]*(?=\*+[{_HAN}])"
)


def join_cjk_lines(text: str) -> str:
    """Join the lines of a Chinese paragraph where both sides are Chinese: HTML
    shows a line break as a space, which Chinese text does not have. A line that
    opens a list item (``* ``), a table row or a heading starts with no Chinese
    character, so the Markdown structure stays."""
    return CJK_BREAK.sub(lambda m: m.group(1) or m.group(2), text)


def span_problems(english: str, chinese: str) -> list[str]:
    """Math, code, link targets and directive options the translation added or
    altered: each must appear in the English unit (the Chinese may drop one)."""
    have = spans(english)
    problems = []
    for kind, value in spans(chinese):
        if have[(kind, value)] == 0:
            problems.append(f"{kind} not in the English: {value[:60]!r}")
    problems += term_problems(english, chinese)
    first_en, first_zh = english.split("\n", 1)[0], chinese.split("\n", 1)[0]
    fence = FENCE.match(first_en)
    if fence:
        name = DIRECTIVE.match(fence.group(2).strip())
        head = f"{fence.group(1)}{{{name.group(1)}}}" if name else fence.group(1)
        if name and name.group(1) not in TITLED_DIRECTIVES:
            head = first_en.rstrip()  # e.g. a figure keeps its file
        if not first_zh.startswith(head):
            problems.append(f"must open with {head!r} as the English does")
    return problems


TERM = re.compile(r"\{term\}`([^`<]*?)\s*(?:<([^>`]+)>)?`")


def term_roles(text: str) -> list[tuple[str, str]]:
    """The ``{term}`` roles of a text as (shown text, glossary target)."""
    return [
        (m.group(1).strip(), (m.group(2) or m.group(1)).strip())
        for m in TERM.finditer(text)
    ]


def term_problems(english: str, chinese: str) -> list[str]:
    """A translation links the same glossary entries as its English unit, each
    shown with the Chinese term of the termbase (the English glossary)."""
    targets_en = Counter(t.lower() for _, t in term_roles(english))
    roles_zh = term_roles(chinese)
    targets_zh = Counter(t.lower() for _, t in roles_zh)
    problems = []
    if targets_zh != targets_en:
        problems.append(
            f"{{term}} targets {sorted(targets_zh.elements())} differ from the "
            f"English {sorted(targets_en.elements())}"
        )
    terms = termbase()
    for shown, target in roles_zh:
        chinese_term = terms.get(target.lower())
        if chinese_term is None:
            problems.append(f"{{term}} target {target!r} is not in the glossary")
        elif chinese_term not in shown:
            problems.append(
                f"{{term}} {target!r} must show the glossary's Chinese "
                f"{chinese_term!r} (shows {shown!r})"
            )
    return problems


# one term per concept: (pattern of a variant, the edition's term). A variant in
# quotation marks is allowed (a note quoted word for word, an alias named).
VARIANTS: list[tuple[str, str]] = [
    (r"(?<!长短期)(?<!短时)(?<!长时)记忆", "存储器"),  # the fixed-size memory
    (r"(?i:kv) ?头|键值头|键/值 头", "键/值头"),
    (r"硬性注意力", "硬注意力"),
    (r"软性注意力", "软注意力"),
    (r"右下对齐", "右下角对齐"),
    (r"左上对齐", "左上角对齐"),
    (r"层规范化|层标准化|层正则化", "层归一化"),
    (r"评分函数", "打分函数"),  # (得分函数估计量 is REINFORCE)
    (r"掩蔽|遮蔽", "掩码"),
    (r"集束搜索", "束搜索"),
    (r"语境向量|上下文变量", "上下文向量"),
    (r"令牌", "词元"),
    (r"前馈层", "前馈网络"),
    (r"(?i:kv) ?缓存|键/值缓存|KV-?cache 缓存", "键值缓存"),
    (r"自我注意力|内部注意力", "自注意力"),
    (r"点乘注意力|内积注意力", "点积注意力"),
    (r"编码器[-－–]解码器注意力", "交叉注意力"),
    (r"老师强制|教师强迫", "教师强制"),
    (r"编码器[–—]解码器(?!注意力)", "编码器-解码器"),  # one hyphen, as d2l-zh
]
# the glossary's Chinese term -> names readers of 《动手学深度学习》 (d2l-zh) or
# 《神经网络与深度学习》 know for it; its entry names each in quotation marks
ALIASES: dict[str, list[str]] = {
    "注意力打分函数": ["注意力评分函数"],
    "掩码": ["掩蔽"],
    "层归一化": ["层规范化"],
    "前馈网络": ["基于位置的前馈网络"],
    "上下文向量": ["上下文变量"],
    "交叉注意力": ["编码器－解码器注意力"],
    "自注意力": ["内部注意力"],
    "软注意力": ["软性注意力"],
    "硬注意力": ["硬性注意力"],
    "键值缓存": ["KV 缓存"],
}
QUOTED = re.compile(r"“[^”]*”|「[^」]*」|‘[^’]*’")


def variant_problems(chinese: str) -> list[str]:
    """The :data:`VARIANTS` a translation uses outside quotation marks, math,
    code and link targets."""
    text = re.sub(r"\$[^$]*\$|`[^`]*`|<[^>\n]*>", " ", chinese)
    text = QUOTED.sub(" ", text)
    problems = []
    for pattern, term in VARIANTS:
        for found in sorted(set(re.findall(pattern, text))):
            problems.append(f"uses {found!r}: the edition's term is {term!r}")
    return problems


def glossary_problems(english: str, chinese: str) -> list[str]:
    """A Chinese glossary entry: its Chinese term, then the English term(s)."""
    heads_en = [line for line in english.split("\n") if not line.startswith(" ")]
    if len(heads_en) == len(english.split("\n")):
        return []  # not an entry (the page's heading and lead)
    heads_zh = [line for line in chinese.split("\n") if not line.startswith(" ")]
    chinese_term = termbase().get(heads_en[0].strip().lower())
    if chinese_term is None:
        return [f"the English entry {heads_en[0]!r} names no Chinese term"]
    want = [chinese_term] + heads_en
    if heads_zh != want:
        return [f"entry must open with the lines {want} (has {heads_zh})"]
    return [
        f"entry {chinese_term!r} must name the alias “{alias}” (ALIASES)"
        for alias in ALIASES.get(chinese_term, [])
        if f"“{alias}" not in chinese
    ]


@dataclass
class Report:
    name: str
    units: int = 0
    translated: int = 0
    missing: list[str] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)
    untranslated: list[str] = field(default_factory=list)
    invalid: list[str] = field(default_factory=list)

    @property
    def problems(self) -> list[str]:
        return self.missing + self.stale + self.untranslated + self.invalid

    def as_dict(self) -> dict:
        return {
            "page": self.name,
            "units": self.units,
            "translated": self.translated,
            "coverage": round(self.translated / self.units, 4) if self.units else 1,
            "missing": len(self.missing),
            "stale": len(self.stale),
            "untranslated": len(self.untranslated),
            "invalid": len(self.invalid),
        }


def _excerpt(text: str, size: int = 70) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= size else flat[: size - 1] + "…"


def english_path(name: str) -> Path:
    return ROOT / "book" / f"{name}.md"


def translation_path(name: str) -> Path:
    return ZH / f"{name}.md"


def assemble(name: str, allow_drift: bool = False) -> tuple[str, Report]:
    """The Chinese page of ``book/<name>.md`` and its report. A unit without a
    usable translation keeps its English text (the report says so)."""
    items = split(english_path(name).read_text(encoding="utf-8"))
    translations = read_translations(translation_path(name))
    rel = translation_path(name).relative_to(ROOT)
    by_hash: dict[str, list[Translation]] = {}
    for t in translations:
        by_hash.setdefault(t.hash, []).append(t)
    report, out, used = Report(name), [], set()
    for item in items:
        if item.kind != "unit":
            out.append(item.text)
            continue
        report.units += 1
        candidates = [t for t in by_hash.get(item.hash, []) if id(t) not in used]
        where = f"book/{name}.md:{item.line}"
        if not candidates:
            report.missing.append(
                f"{where}: no translation of {item.hash} ({_excerpt(item.text)})"
            )
            out.append(item.text)
            continue
        t = candidates[0]
        used.add(id(t))
        if unit_hash(t.text) == item.hash or not CJK.search(t.text):
            report.untranslated.append(f"{rel}:{t.line}: {item.hash} is still English")
            out.append(item.text)
            continue
        bad = span_problems(item.text, t.text) + variant_problems(t.text)
        if name == "glossary":
            bad += glossary_problems(item.text, t.text)
        if bad:
            report.invalid += [f"{rel}:{t.line}: {item.hash}: {p}" for p in bad]
        report.translated += 1
        out.append(join_cjk_lines(t.text))
    for t in translations:
        if id(t) not in used:
            report.stale.append(
                f"{rel}:{t.line}: {t.hash} translates English that is no longer "
                f"there ({_excerpt(t.text, 40)})"
            )
    return "\n".join(out), report


# ---------------------------------------------------------------- exercises


def _assignment_module():
    sys.path.insert(0, str(Path(__file__).parent))
    import assignment_section

    return assignment_section


def assignment_slugs() -> list[str]:
    """The assignments the book's pages render, in page order."""
    slugs = []
    for name in page_names():
        slugs += ASSIGNMENT.findall(english_path(name).read_text(encoding="utf-8"))
    return slugs


def read_assignment(slug: str):
    sect = _assignment_module()
    return sect.read_assignment(ROOT / "solutions" / slug / f"{slug}.ipynb", slug)


def has_prose(text: str) -> bool:
    """Whether ``text`` has words outside its math and code (``$$u < p_j$$`` on
    one line is a unit of :func:`split`, but has nothing to translate)."""
    bare = re.sub(r"\$\$.+?\$\$|\$[^$]*\$|`[^`]*`", "", text, flags=re.S)
    return re.search(r"[A-Za-z]{2}", bare) is not None


def _intro_items(assignment) -> list[Item]:
    """The intro's items; its points table (replaced by the generated one) and
    units without prose are verbatim."""
    items = split(assignment.intro)
    found = _assignment_module().intro_points_table(assignment.intro)
    table = (
        "\n".join(assignment.intro.splitlines()[found[0] : found[1]]) if found else None
    )
    for item in items:
        if item.text == table or not has_prose(item.text):
            item.kind = "verbatim"
    return items


def assignment_units(assignment) -> list[str]:
    """The prose of an Exercise section that the notebook supplies: its title,
    the units of its intro, the description of each hidden test (once each)."""
    units = [assignment.title]
    units += [i.text for i in _intro_items(assignment) if i.kind == "unit"]
    units += [t.says for p in assignment.parts for t in p.tests if t.says]
    return list(dict.fromkeys(units))


def assignments_path() -> Path:
    return ZH / f"{ASSIGNMENTS_NAME}.md"


def assignment_translations() -> dict[str, str]:
    """English unit hash -> its Chinese, for the units translated."""
    return {
        t.hash: join_cjk_lines(t.text)
        for t in read_translations(assignments_path())
        if CJK.search(t.text) and unit_hash(t.text) != t.hash
    }


def translate_assignment(assignment):
    """The assignment with its prose in Chinese (a unit not translated keeps its
    English: :func:`assignments_report` names it)."""
    import copy

    table = assignment_translations()

    def tr(text: str) -> str:
        return table.get(unit_hash(text), text) if text else text

    out = copy.deepcopy(assignment)
    out.title = tr(assignment.title)
    out.intro = "\n".join(
        tr(i.text) if i.kind == "unit" else i.text for i in _intro_items(assignment)
    )
    for part in out.parts:
        for test in part.tests:
            test.says = tr(test.says)
    return out


def assignments_report() -> Report:
    """Coverage and drift of ``book/zh/_assignments.md``, as for a page."""
    report = Report(ASSIGNMENTS_NAME)
    rel = assignments_path().relative_to(ROOT)
    translations = {t.hash: t for t in read_translations(assignments_path())}
    wanted: dict[str, str] = {}  # hash -> English unit
    where: dict[str, str] = {}  # hash -> the first notebook that has it
    for slug in assignment_slugs():
        for unit in assignment_units(read_assignment(slug)):
            wanted.setdefault(unit_hash(unit), unit)
            where.setdefault(unit_hash(unit), f"solutions/{slug}/{slug}.ipynb")
    for key, text in wanted.items():
        report.units += 1
        t = translations.get(key)
        if t is None:
            report.missing.append(
                f"{where[key]}: no translation of {key} ({_excerpt(text)})"
            )
            continue
        if unit_hash(t.text) == key or not CJK.search(t.text):
            report.untranslated.append(f"{rel}:{t.line}: {key} is still English")
            continue
        bad = span_problems(text, t.text) + variant_problems(t.text)
        report.invalid += [f"{rel}:{t.line}: {key}: {p}" for p in bad]
        report.translated += 1
    for h, t in translations.items():
        if h not in wanted:
            report.stale.append(
                f"{rel}:{t.line}: {h} translates English that is no longer "
                f"there ({_excerpt(t.text, 40)})"
            )
    return report


def sync_assignments() -> Path:
    """Rewrite ``_assignments.md`` in the order of the pages' assignments, as
    :func:`sync` does for a page."""
    old = {t.hash: t for t in read_translations(assignments_path())}
    blocks = [
        "<!-- Chinese prose of the Exercise sections: the units of each assignment "
        "notebook solutions/<slug>/<slug>.ipynb (title, intro, hidden-test "
        "descriptions), each once (book/_ext/zh_edition.py). -->"
    ]
    kept: set[str] = set()
    for slug in assignment_slugs():
        blocks.append(f"<!-- ==== {slug} ==== -->")
        for unit in assignment_units(read_assignment(slug)):
            h = unit_hash(unit)
            if h in kept:
                continue
            kept.add(h)
            text = old[h].text if h in old else unit
            blocks.append(f"<!-- en {h} | {_excerpt(unit, 60)} -->\n{text}")
    for h, t in old.items():
        if h not in kept:
            blocks.append(
                f"<!-- en {h} | STALE: its English changed or went; translate "
                f"the new unit and delete this one -->\n{t.text}"
            )
    path = assignments_path()
    path.write_text("\n\n".join(blocks) + "\n", encoding="utf-8")
    return path


def sync(name: str) -> Path:
    """Rewrite the translation file in the English order: kept translations, an
    English placeholder under the marker of each missing unit, and stale
    translations (marked ``stale``, so they still fail) where they stood."""
    items = [i for i in split(english_path(name).read_text()) if i.kind == "unit"]
    old = read_translations(translation_path(name))
    pool: dict[str, list[Translation]] = {}
    for t in old:
        pool.setdefault(t.hash, []).append(t)
    kept_ids = set()
    blocks = [
        f"<!-- Chinese prose of book/{name}.md, one unit per marker "
        "(book/_ext/zh_edition.py). -->"
    ]
    for item in items:
        t = pool.get(item.hash, []) and pool[item.hash].pop(0)
        if t:
            kept_ids.add(id(t))
        text = t.text if t else item.text
        blocks.append(f"<!-- en {item.hash} | {_excerpt(item.text, 60)} -->\n{text}")
    for t in old:
        if id(t) not in kept_ids:
            blocks.append(
                f"<!-- en {t.hash} | STALE: its English changed or went; translate "
                f"the new unit and delete this one -->\n{t.text}"
            )
    path = translation_path(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n\n".join(blocks) + "\n", encoding="utf-8")
    return path


# ---------------------------------------------------------------- the book


def toc() -> dict:
    return yaml.safe_load((ROOT / "_toc.yml").read_text())


def page_names() -> list[str]:
    """Every page of the English toc, as ``book/<name>`` -> ``<name>``."""
    sys.path.insert(0, str(Path(__file__).parent))
    from execute_parallel import toc_names

    return [n.removeprefix("book/") for n in toc_names(ROOT / "_toc.yml")]


def meta() -> dict:
    return yaml.safe_load(META.read_text(encoding="utf-8"))


@functools.cache
def termbase() -> dict[str, str]:
    """English glossary term (lower case) -> its Chinese term, read from the
    English glossary: each definition opens with the Chinese term."""
    text = english_path("glossary").read_text(encoding="utf-8")
    terms: dict[str, str] = {}
    for item in split(text):
        lines = item.text.split("\n")
        if item.kind != "unit" or len(lines) < 2 or not lines[1].startswith("  "):
            continue
        heads = [line for line in lines if not line.startswith(" ")]
        definition = lines[len(heads)].strip()
        chinese = re.match(r"(.+?)(?: \(|\.(?:\s|$))", definition)
        if chinese and CJK.search(chinese.group(1)):
            for head in heads:
                terms[head.strip().lower()] = chinese.group(1).strip()
    return terms


def zh_toc() -> dict:
    captions = meta()["captions"]
    data = toc()
    for part in data.get("parts", []):
        if part["caption"] not in captions:
            raise SystemExit(
                f"{META.relative_to(ROOT)}: no caption for {part['caption']!r}"
            )
        part["caption"] = captions[part["caption"]]
    return data


def zh_source(out_root: Path) -> Path:
    """The generated Chinese Jupyter Book project."""
    return out_root / "_build" / "zh-src"


def zh_config(out_root: Path) -> dict:
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    config["title"] = meta()["title"]
    config["author"] = meta().get("author", config["author"])
    config["execute"]["cache"] = str(out_root / "_build" / ".jupyter_cache")
    config["exclude_patterns"] += ["_build", "solutions", "exercises", SEARCH_DICT]
    sphinx = config["sphinx"]
    sphinx["local_extensions"] = {
        name: str(ROOT / path) for name, path in sphinx["local_extensions"].items()
    }
    # the query splitter that cuts 教师强制 into the index's words
    sphinx["local_extensions"]["zh_search"] = str(ROOT / "book" / "_ext")
    sphinx["config"].update(
        {
            "language": "zh_CN",
            "html_search_language": "zh",
            "html_search_options": {"dict": str(zh_source(out_root) / SEARCH_DICT)},
            "language_switch_edition": EDITION,
            "assignment_language": "zh",
        }
    )
    config["latex"]["latex_documents"]["targetname"] = "attention-course-zh.tex"
    return config


def write_if_changed(path: Path, text: str) -> None:
    """Sphinx rebuilds what changed; an unchanged page keeps its mtime."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")


BOLD = re.compile(r"\*\*([^*\n]+?)\*\*")
# a term, not a phrase: jieba indexes only the 2- and 3-character words inside a
# dictionary word, so a bold sentence as one word would hide its longer terms
SEARCH_WORD = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fffA-Za-z0-9]{2,6}")


def bold_terms(text: str) -> set[str]:
    """The Chinese terms a page introduces in bold (``**教师强制**``): words
    of two to six characters, no punctuation, math or code."""
    found = {m[1].replace(" ", "") for m in BOLD.finditer(text)}
    return {w for w in found if CJK.search(w) and SEARCH_WORD.fullmatch(w)}


def search_words() -> list[str]:
    """The words the Chinese search index keeps whole (see zh_search.py): the
    glossary's Chinese terms, ``search_words`` of _meta.yml and the bold terms
    of every page, without spaces (jieba's dictionary has none)."""
    words = {t for t in termbase().values() if CJK.search(t)}
    words |= {a for aliases in ALIASES.values() for a in aliases if CJK.search(a)}
    words |= set(meta().get("search_words", []))
    for name in page_names():
        words |= bold_terms(assemble(name)[0])
    return sorted({w.replace(" ", "") for w in words})


def search_dictionary() -> str:
    """jieba's user dictionary: the :func:`search_words` stay whole words in the
    search index (so 多头注意力 finds multi-head attention), each also cut into
    the smaller words jieba knows."""
    return "".join(f"{w} 100000 n\n" for w in search_words())


def generate(src: Path, out_root: Path, allow_drift: bool) -> list[Report]:
    """Write the Chinese Jupyter Book project into ``src``."""
    reports = []
    for name in page_names():
        text, report = assemble(name, allow_drift)
        reports.append(report)
        write_if_changed(src / "book" / f"{name}.md", text)
    reports.append(assignments_report())
    write_if_changed(
        src / "_config.yml", yaml.safe_dump(zh_config(out_root), allow_unicode=True)
    )
    write_if_changed(
        src / "_toc.yml", yaml.safe_dump(zh_toc(), allow_unicode=True, sort_keys=False)
    )
    write_if_changed(src / SEARCH_DICT, search_dictionary())
    for folder in ("solutions", "exercises"):
        link = src / folder
        if not link.is_symlink():
            link.symlink_to(ROOT / folder)
    # the diagrams: the Chinese SVGs (draw.py --language zh) under the English
    # names, so the figure directives stay the English bytes
    figures = src / "book" / "figures"
    if figures.exists():
        shutil.rmtree(figures)
    english = ROOT / "book" / "figures"
    shutil.copytree(english, figures, ignore=shutil.ignore_patterns("zh"))
    for svg in sorted((english / "zh").glob("*.svg")):
        shutil.copyfile(svg, figures / svg.name)
    return reports


def coverage_text(reports: list[Report]) -> str:
    rows = [
        "| page | units | translated | missing | stale | untranslated | invalid |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in reports:
        d = r.as_dict()
        rows.append(
            f"| {r.name} | {d['units']} | {d['translated']} | {d['missing']} "
            f"| {d['stale']} | {d['untranslated']} | {d['invalid']} |"
        )
    total = sum(r.units for r in reports)
    done = sum(r.translated for r in reports)
    rows.append(f"| **all** | {total} | {done} ({done / max(total, 1):.1%}) | | | | |")
    return "\n".join(rows)


def uncached(src: Path, cache_path: Path) -> list[str]:
    """Chinese notebooks whose code the English build has not executed."""
    import jupytext
    from jupyter_cache import get_cache

    cache = get_cache(str(cache_path))
    missing = []
    for page in sorted((src / "book").glob("*.md")):
        notebook = jupytext.read(page)
        if "kernelspec" not in notebook.metadata:
            continue
        try:
            cache.match_cache_notebook(notebook)
        except KeyError:
            missing.append(page.name)
    return missing


def build(out_root: Path, allow_drift: bool) -> int:
    start = time.perf_counter()
    src = zh_source(out_root)
    reports = generate(src, out_root, allow_drift)
    report_dir = out_root / "_build" / "zh-report"
    report_dir.mkdir(parents=True, exist_ok=True)
    (report_dir / "coverage.json").write_text(
        json.dumps([r.as_dict() for r in reports], indent=1) + "\n"
    )
    (report_dir / "coverage.md").write_text(coverage_text(reports) + "\n")
    problems = [p for r in reports for p in r.problems]
    if problems and not allow_drift:
        print("The Chinese edition is out of date with the English:", file=sys.stderr)
        print("\n".join(problems), file=sys.stderr)
        print(
            "(python book/_ext/zh_edition.py sync NAME writes placeholders; "
            "--allow-drift builds with the English text)",
            file=sys.stderr,
        )
        return 1
    cache = out_root / "_build" / ".jupyter_cache"
    missing = uncached(src, cache)
    if missing:
        print(
            f"Not in the English execution cache {cache}: {', '.join(missing)}; "
            "build the English edition first (make book).",
            file=sys.stderr,
        )
        return 1
    jb = Path(sys.executable).with_name("jupyter-book")
    proc = subprocess.run(
        # --all: every page again (cheap, nothing executes), so a changed title
        # reaches every page's navigation
        [str(jb), "build", str(src), "--all", "-W", "-n", "--keep-going"],
        capture_output=True,
        text=True,
    )
    (report_dir / "build.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        print(proc.stdout[-6000:], proc.stderr[-6000:], file=sys.stderr)
        return proc.returncode
    site = out_root / "_build" / "html" / EDITION
    if site.exists():
        shutil.rmtree(site)
    shutil.copytree(src / "_build" / "html", site)
    seconds = time.perf_counter() - start
    (report_dir / "build-seconds.txt").write_text(f"{seconds:.1f}\n")
    print(coverage_text(reports))
    print(f"Chinese edition: {site} ({seconds:.1f} s)")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    status_cmd = sub.add_parser("status", help="coverage and problems")
    status_cmd.add_argument("names", nargs="*")
    sync_cmd = sub.add_parser("sync", help="rewrite translation files")
    sync_cmd.add_argument("names", nargs="+")
    build_cmd = sub.add_parser("build", help="build the Chinese site")
    build_cmd.add_argument("--path-output", type=Path, default=ROOT)
    build_cmd.add_argument("--allow-drift", action="store_true")
    args = parser.parse_args(argv)
    if args.command == "sync":
        for name in args.names:
            path = sync_assignments() if name == ASSIGNMENTS_NAME else sync(name)
            print(path.relative_to(ROOT))
        return 0
    if args.command == "status":
        reports = [
            assignments_report() if n == ASSIGNMENTS_NAME else assemble(n)[1]
            for n in (args.names or [*page_names(), ASSIGNMENTS_NAME])
        ]
        print(coverage_text(reports))
        problems = [p for r in reports for p in r.problems]
        print("\n".join(problems))
        return 1 if problems else 0
    return build(args.path_output.resolve(), args.allow_drift)


if __name__ == "__main__":
    sys.exit(main())
