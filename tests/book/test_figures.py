"""The book's diagrams: book/figures/draw.py draws every committed SVG, byte for
byte, in English (book/figures/) and in Chinese (book/figures/zh/, the labels of
labels_zh.py); each SVG is self-contained (loads nothing, needs no font), keeps its
own light card (readable in dark mode) and is shown by some chapter."""

import re
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest
from support.book import ROOT

FIGURES = ROOT / "book" / "figures"
FOLDERS = {"en": FIGURES, "zh": FIGURES / "zh"}
LANGUAGES = pytest.mark.parametrize("language", sorted(FOLDERS))
NAMES = [
    "addressing-qkv",
    "scoring-three-steps",
    "soft-vs-hard",
    "masks-padding-causal",
    "self-attention",
    "seq2seq-two-styles",
    "cross-attention",
    "multihead-split-merge",
    "builtin-mask-polarity",
    "attention-cost-tiles",
    "transformer-block",
    "induction-heads",
    "rope-rotation",
    "kv-cache-gqa",
    "sliding-window-band",
    "linear-attention-state",
    "flash-attention-tiles",
    "flash-attention-backward",
    "attention-kernel-grid",
]
SVG = "{http://www.w3.org/2000/svg}"
XLINK = "{http://www.w3.org/1999/xlink}"


def committed(language: str = "en") -> list[str]:
    return sorted(p.stem for p in FOLDERS[language].glob("*.svg"))


@pytest.fixture(scope="module", params=sorted(FOLDERS))
def redrawn(request, tmp_path_factory):
    """(language, the folder draw.py wrote that language's figures to)."""
    out = tmp_path_factory.mktemp(f"figures-{request.param}")
    proc = subprocess.run(
        [
            sys.executable,
            str(FIGURES / "draw.py"),
            "--language",
            request.param,
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "missing from font" not in proc.stderr, proc.stderr[-2000:]
    return request.param, out


@LANGUAGES
def test_the_figures_are_the_named_ones(language):
    assert committed(language) == sorted(NAMES)


def test_draw_py_reproduces_every_committed_svg(redrawn):
    language, out = redrawn
    drawn = sorted(p.stem for p in out.glob("*.svg"))
    assert drawn == committed(language)
    stale = [
        name
        for name in drawn
        if (out / f"{name}.svg").read_bytes()
        != (FOLDERS[language] / f"{name}.svg").read_bytes()
    ]
    # (the committed files were drawn by another process: equal bytes also show
    # that the output has no dates, random ids or machine paths)
    assert not stale, (
        f"committed {language} SVGs differ from what draw.py draws: {stale}; "
        f"run .venv/bin/python book/figures/draw.py --language {language}"
    )


def test_every_chinese_label_is_chinese_or_kept_on_purpose():
    """Each entry of labels_zh.LABELS is Chinese, or maps to itself on purpose
    (code, names, the example's English words). draw.py itself fails on a label
    missing there, and, drawing every figure, on an entry no figure draws."""
    sys.path.insert(0, str(FIGURES))
    try:
        from labels_zh import LABELS
    finally:
        sys.path.remove(str(FIGURES))
    kept = [s for s, zh in LABELS.items() if zh == s]
    translated = [zh for s, zh in LABELS.items() if zh != s]
    assert all(re.search(r"[\u4e00-\u9fff]", zh) for zh in translated), translated
    assert len(translated) > 3 * len(kept), (len(translated), len(kept))


MISSING_LABEL = """
import sys
sys.path.insert(0, sys.argv[1])
import draw, labels_zh
del labels_zh.LABELS[sys.argv[2]]
labels_zh.LABELS["a label no figure draws"] = "没有图画它"
draw.draw(sys.argv[4:], __import__("pathlib").Path(sys.argv[3]), language="zh")
"""


def test_a_missing_or_unused_chinese_label_fails_the_drawing(tmp_path):
    """A label the figures draw but LABELS lacks, and an entry of LABELS that no
    figure draws, each fail draw.py with the string named; the figures without a
    gap are still written."""
    title = "Soft addressing: attention reads every slot, weighted"
    proc = subprocess.run(
        [sys.executable, "-c", MISSING_LABEL, str(FIGURES), title, str(tmp_path)]
        + NAMES,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "1 label(s) missing from book/figures/labels_zh.py" in proc.stderr
    assert f"addressing-qkv: {title!r}" in proc.stderr
    assert "1 label(s) of book/figures/labels_zh.py that no figure draws" in (
        proc.stderr
    )
    assert "'a label no figure draws'" in proc.stderr
    written = sorted(p.stem for p in tmp_path.iterdir())
    assert written == sorted(set(NAMES) - {"addressing-qkv"})


def path_box(d: str) -> tuple[float, float, float, float]:
    numbers = [float(v) for v in re.findall(r"-?\d+(?:\.\d+)?", d)]
    xs, ys = numbers[0::2], numbers[1::2]
    return min(xs), min(ys), max(xs), max(ys)


@LANGUAGES
@pytest.mark.parametrize("name", NAMES)
def test_svg_is_self_contained(name, language):
    path = FOLDERS[language] / f"{name}.svg"
    text = path.read_text(encoding="utf-8")
    root = ET.fromstring(text)  # well-formed XML
    assert root.tag == f"{SVG}svg"
    view = [float(v) for v in root.get("viewBox", "").split()]
    assert len(view) == 4 and view[2] > 0 and view[3] > 0, "no usable viewBox"
    # about 700-900 px wide before the page scales it (1 pt = 4/3 px)
    assert 700 <= view[2] * 4 / 3 <= 900, view
    tags = {el.tag.removeprefix(SVG) for el in root.iter()}
    assert not tags & {"image", "script", "foreignObject", "text", "font"}, tags
    for el in root.iter():
        for attr, value in el.attrib.items():
            if attr in ("href", f"{XLINK}href"):
                assert value.startswith("#"), f"{name}: {attr}={value}"
            for url in re.findall(r"url\(([^)]*)\)", value):
                assert url.strip("'\" ").startswith("#"), f"{name}: url({url})"
    # no URL anywhere, except the two namespace names
    rest = re.sub(r'xmlns(:\w+)?="[^"]*"', "", text)
    assert not re.search(r"https?:|file:|//[a-z]", rest, re.I), name
    assert "<!DOCTYPE" not in text and "<metadata" not in text
    assert "@import" not in text and "@font-face" not in text


@LANGUAGES
@pytest.mark.parametrize("name", NAMES)
def test_svg_draws_its_own_light_card(name, language):
    """An <img> SVG cannot see the site's dark mode: the first thing drawn is an
    opaque white card over (nearly) the whole picture, so dark ink never lands on
    the dark page."""
    root = ET.fromstring((FOLDERS[language] / f"{name}.svg").read_bytes())
    _, _, width, height = (float(v) for v in root.get("viewBox").split())
    filled = [
        el
        for el in root.iter(f"{SVG}path")
        if re.search(r"fill:\s*#[0-9a-f]{6}", el.get("style", ""))
    ]
    assert filled, f"{name}: nothing filled"
    card = filled[0]
    assert re.search(r"fill:\s*#ffffff", card.get("style")), card.get("style")
    assert "opacity" not in card.get("style")
    x0, y0, x1, y1 = path_box(card.get("d"))
    assert x1 - x0 >= 0.98 * width and y1 - y0 >= 0.98 * height, (x0, y0, x1, y1)


def test_every_figure_is_shown_by_a_chapter():
    """Each SVG is inserted with ```{figure} figures/<name>.svg``` somewhere."""
    sources = "\n".join(
        p.read_text(encoding="utf-8") for p in (ROOT / "book").glob("*.md")
    )
    used = set(re.findall(r"```\{figure\}\s+figures/([\w-]+)\.svg", sources))
    unused = sorted(set(committed()) - used)
    assert not unused, f"figures no chapter shows: {unused}"
    missing = sorted(used - set(committed()))
    assert not missing, f"chapters show figures that do not exist: {missing}"
