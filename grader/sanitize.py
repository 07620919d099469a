"""Nothing a student wrote or printed is active content where people look at it.

A graded notebook is shown as HTML on the Jupyter server's origin -- in
nbgrader's formgrader (``/formgrader/submissions/<id>``, with the instructor's
session) and as the feedback page. Whatever ran there could call the Jupyter
API as the instructor (rewrite ``nbgrader_config.py``: code execution at the
next grading). Three layers, each enough on its own for what it covers:

1. **At the source** -- ``SanitizeStudentContent``, in the autograde pipeline
   after ``JudgeHiddenTests`` (so grader-owned outputs exist) and before
   ``SaveAutoGrades``, rewrites the graded copy that formgrader and feedback
   render. The student controls every markdown cell that is not the
   instructor's (extra and solution cells -- and we check them all: a locked
   cell only passes if it is harmless too) and every output of every code
   cell (locked cells are restored, but their outputs come from the
   student's kernel). So:

   * outputs keep only ``text/plain``, ``image/png`` and ``image/jpeg`` (plain
     base64); HTML, SVG, JavaScript, markdown, LaTeX, widget views and every
     other type are removed, and their source is kept as ``text/plain`` so the
     instructor still reads what was printed; output metadata is rebuilt
     (only numeric width/height of images); stream and error outputs are text
     already and stay as they are (the GradingError / NotGraded messages of
     ``grader.verdicts`` and ``grader.guard`` among them);
   * a markdown cell is rendered with nbconvert's own renderer; if the HTML
     holds anything but plain markdown markup (raw tags outside a short
     allowlist, event handlers, comments, ``javascript:``/``data:``/any other
     scheme than http(s)/mailto in links, a missing attachment) the cell is
     replaced by its source in a fenced code block: it shows as text;
     attachments other than PNG/JPEG/GIF (SVG, HTML) are dropped; the check
     is bounded in time whatever the input: a cell's source and its HTML are
     checked up to ``MAX_MARKDOWN`` and ``MAX_HTML`` characters, a notebook's up to
     ``MAX_MARKDOWN_NOTEBOOK`` in all (past either the cell is shown as text,
     cut), and a ``<`` that does not open an allowed tag closed before the
     next ``<`` is refused before ``html.parser`` (quadratic on unclosed
     comments and tags) sees the fragment;
   * cell tags that are not plain words and notebook metadata other than the
     kernelspec and language (widget state, titles) are dropped.

2. **At render** -- ``nbgrader_config.py`` turns on nbconvert's
   ``HTMLExporter.sanitize_html`` (HTML and markdown outputs through bleach,
   JavaScript and widget outputs not rendered) for the feedback and the
   formgrader, whose exporters both read that config, and replaces the
   ``strip_files_prefix`` filter -- the last filter nbgrader's formgrade and
   feedback templates apply to markdown cells, where ``sanitize_html`` does
   not reach -- with ``markdown_cell_html``: the same prefix stripping, then
   bleach with the allowlist below. Notebooks graded before this existed are
   rendered safely too.

3. **In the browser** -- ``FormgraderCSP`` (this module is also a Jupyter
   server extension, enabled for the grader role in
   classroom/jupyter/grader/) sends a Content-Security-Policy with every
   ``/formgrader/`` page: ``script-src 'self'`` plus the hashes of exactly
   those inline scripts and handlers that nbgrader's own templates write
   (found by matching each inline script of the page against the templates
   installed, where every ``{{ value }}`` may only be a plain word or path);
   no ``'unsafe-inline'``, no other origin but the folder of the exporter's
   MathJax (``HTMLExporter.mathjax_url``; MathJax 2 evaluates the page's
   configuration block, hence ``'unsafe-eval'``), ``object-src``/``frame-src``
   ``'none'``, ``connect-src 'self'``. Files served from a submission folder
   get ``sandbox`` as well.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from html.parser import HTMLParser
from pathlib import Path

from nbgrader.preprocessors import NbGraderPreprocessor

# ------------------------------------------------------------------ policy
# What nbconvert's markdown renderer writes for plain markdown (headings with
# anchors, lists, tables, code, footnotes, math left as text).
SAFE_TAGS = frozenset(
    {
        "a",
        "abbr",
        "b",
        "blockquote",
        "br",
        "code",
        "dd",
        "del",
        "div",
        "dl",
        "dt",
        "em",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "hr",
        "i",
        "img",
        "kbd",
        "li",
        "ol",
        "p",
        "pre",
        "s",
        "section",
        "span",
        "strong",
        "sub",
        "sup",
        "table",
        "tbody",
        "td",
        "tfoot",
        "th",
        "thead",
        "tr",
        "ul",
    }
)
SAFE_ATTRS = {
    "*": frozenset({"class", "id", "title"}),
    "a": frozenset({"href"}),
    "img": frozenset({"src", "alt", "width", "height"}),
    "ol": frozenset({"start"}),
    "td": frozenset({"align", "style"}),
    "th": frozenset({"align", "style"}),
}
SAFE_SCHEMES = frozenset({"http", "https", "mailto"})
RASTER = ("image/png", "image/jpeg", "image/gif")
STYLE_OK = re.compile(r"\s*text-align\s*:\s*(left|right|center)\s*;?\s*", re.I)
IMAGE_DATA = re.compile(r"data:image/(png|jpeg|gif);base64,[A-Za-z0-9+/=\s]*", re.I)
SCHEME = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*):")
# URL characters browsers drop before they look at the scheme
URL_NOISE = re.compile(r"[\x00-\x20\x7f]+")
SAFE_OUTPUT_TYPES = ("text/plain", "image/png", "image/jpeg")
BASE64 = re.compile(r"[A-Za-z0-9+/=\s]*")
OBJECT_REPR = re.compile(r"<[\w.]+ object(?: at 0x[0-9a-fA-F]+)?>")
SAFE_TAG = re.compile(r"[A-Za-z0-9_-]{1,64}")
NOTEBOOK_METADATA = ("kernelspec", "language_info")
# markdown text checked: per cell (its source, and the HTML it renders to)
# and per notebook; the course's cells are under 5 000 characters each
MAX_MARKDOWN = 50_000
MAX_MARKDOWN_NOTEBOOK = 200_000
# ... and of the HTML a cell renders to (escaping makes up to 6 of 1)
MAX_HTML = 8 * MAX_MARKDOWN
SHORT_HEAD = 1_000  # what a cell past the notebook's budget keeps, as text
# what may follow a '<' in checked HTML: an allowed tag's name, then its end
TAG_START = re.compile(r"/?([A-Za-z][A-Za-z0-9]*)(?=[\s/>])")
AS_TEXT_NOTE = (
    "*Shown as text by the grader: this cell contained raw HTML, an "
    "unsafe link or an attachment that cannot be shown safely.*"
)


def url_ok(value: str, tag: str = "a") -> bool:
    """A link or image address that cannot run script."""
    url = URL_NOISE.sub("", value or "")
    if tag == "img" and IMAGE_DATA.fullmatch(url):
        return True
    match = SCHEME.match(url)
    return match is None or match.group(1).lower() in SAFE_SCHEMES


def attribute_ok(tag: str, name: str, value: str | None) -> bool:
    name = name.lower()
    if name not in SAFE_ATTRS["*"] and name not in SAFE_ATTRS.get(tag, ()):
        return False
    if name in ("href", "src"):
        return url_ok(value or "", tag)
    if name == "style":
        return bool(STYLE_OK.fullmatch(value or ""))
    return True


class _Checker(HTMLParser):
    """Collects why an HTML fragment is not plain markdown markup."""

    def __init__(self):
        super().__init__(convert_charrefs=False)
        self.problems: list[str] = []

    def _tag(self, tag, attrs):
        if tag not in SAFE_TAGS:
            self.problems.append(f"<{tag}>")
        for name, value in attrs:
            if not attribute_ok(tag, name, value):
                self.problems.append(f"<{tag} {name}=...>")

    def handle_starttag(self, tag, attrs):
        self._tag(tag, attrs)

    def handle_startendtag(self, tag, attrs):
        self._tag(tag, attrs)

    def handle_endtag(self, tag):
        if tag not in SAFE_TAGS:
            self.problems.append(f"</{tag}>")

    def handle_data(self, data):
        if "<" in data:  # a tag this parser did not see as one: a browser might
            self.problems.append("a stray '<'")

    def handle_comment(self, data):
        self.problems.append("an HTML comment")

    def handle_decl(self, decl):
        self.problems.append("a declaration")

    def handle_pi(self, data):
        self.problems.append("a processing instruction")

    def unknown_decl(self, data):
        self.problems.append("a declaration")


def _tags_problems(fragment: str) -> list[str]:
    """A linear pre-check: every ``<`` opens (or closes) an allowed tag that
    ends before the next ``<``. ``html.parser`` rescans to the end of the
    text for each unclosed comment or tag (quadratic: 200 KB of ``<!--``
    took 16 s); what fails here never reaches it."""
    if len(fragment) > MAX_HTML:
        return [f"more than {MAX_HTML} characters of HTML"]
    if "<!--" in fragment:
        return ["an HTML comment"]
    for segment in fragment.split("<")[1:]:
        match = TAG_START.match(segment)
        if match is None or ">" not in segment:
            return ["a stray '<'"]
        if match.group(1).lower() not in SAFE_TAGS:
            return [f"<{match.group(1).lower()}>"]
    return []


def html_problems(fragment: str) -> list[str]:
    """Why ``fragment`` is more than plain markdown markup ([] if it is not)."""
    early = _tags_problems(fragment)
    if early:
        return early
    checker = _Checker()
    try:
        checker.feed(fragment)
        checker.close()
    except Exception as exc:  # noqa: BLE001  (unparseable: unsafe)
        return [f"unparseable HTML ({type(exc).__name__})"]
    if checker.rawdata.strip():
        checker.problems.append("an unfinished tag")
    return sorted(set(checker.problems))


def render_markdown(source: str, attachments: dict | None = None) -> str:
    """The HTML nbconvert's exporters make of a markdown cell (raises on a
    missing attachment, as they do)."""
    from nbconvert.filters.markdown_mistune import IPythonRenderer, MarkdownWithMath

    renderer = IPythonRenderer(escape=False, attachments=attachments or {})
    return MarkdownWithMath(renderer=renderer).render(source)


def markdown_problems(source: str, attachments: dict | None = None) -> list[str]:
    if len(source) > MAX_MARKDOWN:
        return [f"more than {MAX_MARKDOWN} characters"]
    try:
        rendered = render_markdown(source, attachments)
    except Exception as exc:  # noqa: BLE001  (e.g. a missing attachment)
        return [f"cannot be rendered ({type(exc).__name__}: {str(exc)[:80]})"]
    return html_problems(rendered)


def as_text_markdown(source: str) -> str:
    """Markdown that shows ``source`` verbatim: a fenced code block whose fence
    is longer than any run of backticks inside."""
    source = source.replace("\r\n", "\n").replace("\r", "\n")
    longest = max((len(m) for m in re.findall(r"`+", source)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{AS_TEXT_NOTE}\n\n{fence}\n{source}\n{fence}\n"


def _text(value) -> str:
    if isinstance(value, list):
        return "".join(str(v) for v in value)
    if isinstance(value, str):
        return value
    return json.dumps(value, indent=1, sort_keys=True, default=str)


def safe_attachments(attachments) -> dict:
    """Only raster images in plain base64 (SVG and HTML attachments dropped)."""
    kept = {}
    for name, bundle in (attachments or {}).items():
        if not isinstance(bundle, dict):
            continue
        data = {
            m: v
            for m, v in bundle.items()
            if m in RASTER and isinstance(v, str) and BASE64.fullmatch(v)
        }
        if data:
            kept[name] = data
    return kept


def _cut(source: str, limit: int) -> str:
    if len(source) <= limit:
        return source
    return (
        source[:limit] + f"\n[... {len(source) - limit} characters cut by the grader]"
    )


def sanitize_markdown_cell(cell, budget: list[int] | None = None) -> list[str]:
    """Neutralise one markdown cell in place; returns what was wrong.
    ``budget`` (``[characters]``, shared by a notebook's cells) is what may
    still be checked: past it the cell is shown as text, cut, unchecked."""
    problems = []
    attachments = cell.get("attachments")
    if attachments:
        kept = safe_attachments(attachments)
        dropped = sorted(set(attachments) - set(kept))
        if dropped:
            problems.append(f"attachments {', '.join(dropped)} removed")
        cell["attachments"] = kept
        if not kept:
            del cell["attachments"]
    source = _text(cell.get("source", ""))
    checked = min(len(source), MAX_MARKDOWN)  # markdown_problems reads no more
    if budget is not None and budget[0] < checked:
        # past the notebook's budget: a short head as text, no check
        budget[0] = 0
        cell["source"] = as_text_markdown(_cut(source, SHORT_HEAD))
        cell.pop("attachments", None)
        return [
            *problems,
            f"past the {MAX_MARKDOWN_NOTEBOOK} characters of markdown checked "
            "per notebook",
        ]
    found = markdown_problems(source, cell.get("attachments"))
    if budget is not None:
        budget[0] -= checked
    if found:
        problems += found
        cell["source"] = as_text_markdown(_cut(source, MAX_MARKDOWN - 1_000))
        cell.pop("attachments", None)
        if markdown_problems(cell["source"]):  # cannot happen; never show it raw
            cell["source"] = AS_TEXT_NOTE
    return problems


def sanitize_output(output) -> list[str]:
    """Keep an output's text and raster images only; returns the removed types."""
    if output.get("output_type") not in (
        "display_data",
        "execute_result",
        "update_display_data",
    ):
        return []  # stream and error outputs are text
    data = output.get("data") or {}
    kept, removed = {}, {}
    for mime, value in data.items():
        if mime == "text/plain" and isinstance(value, (str, list)):
            kept[mime] = _text(value)
        elif (
            mime in SAFE_OUTPUT_TYPES
            and isinstance(value, str)
            and BASE64.fullmatch(value)
        ):
            kept[mime] = value
        else:
            removed[mime] = value
    metadata = {}
    for mime in ("image/png", "image/jpeg"):
        meta = (output.get("metadata") or {}).get(mime)
        if mime in kept and isinstance(meta, dict):
            size = {
                k: meta[k]
                for k in ("width", "height")
                if isinstance(meta.get(k), (int, float))
                and not isinstance(meta.get(k), bool)
            }
            if size:
                metadata[mime] = size
    if removed:
        plain = kept.get("text/plain", "")
        if not plain.strip() or OBJECT_REPR.fullmatch(plain.strip()):
            kept["text/plain"] = "\n".join(
                f"[{mime} output, shown as text by the grader]\n{_text(value)}"
                for mime, value in removed.items()
            )
    output["data"] = kept
    output["metadata"] = metadata
    return sorted(removed)


def sanitize_notebook(nb) -> list[str]:
    """Neutralise everything student-controlled in ``nb``; what was changed."""
    changes = []
    budget = [MAX_MARKDOWN_NOTEBOOK]  # markdown characters still checked
    for index, cell in enumerate(nb.cells):
        where = _label(cell, index)
        tags = cell.get("metadata", {}).get("tags")
        if tags is not None:
            good = (
                [t for t in tags if isinstance(t, str) and SAFE_TAG.fullmatch(t)]
                if isinstance(tags, list)
                else []
            )
            if good != tags:
                changes.append(f"{where}: cell tags removed")
                cell.metadata["tags"] = good
        if cell.get("cell_type") == "markdown":
            found = sanitize_markdown_cell(cell, budget)
            if found:
                changes.append(f"{where}: markdown shown as text ({'; '.join(found)})")
        elif cell.get("cell_type") == "code":
            for output in cell.get("outputs", []):
                removed = sanitize_output(output)
                if removed:
                    changes.append(
                        f"{where}: output {', '.join(removed)} shown as text"
                    )
        elif cell.get("cell_type") == "raw":
            cell.get("metadata", {}).pop("raw_mimetype", None)
            cell.get("metadata", {}).pop("format", None)
    extra = sorted(set(nb.metadata) - set(NOTEBOOK_METADATA))
    for key in extra:
        del nb.metadata[key]
    if extra:
        changes.append(f"notebook metadata removed: {', '.join(extra)}")
    return changes


def _label(cell, index):
    gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
    return gid or f"cell {index + 1}"


class SanitizeStudentContent(NbGraderPreprocessor):
    """See the module docstring (1. at the source)."""

    def preprocess(self, nb, resources):
        changes = sanitize_notebook(nb)
        info = resources.get("nbgrader", {})
        for change in changes:
            self.log.info(
                "%s/%s: %s",
                info.get("student", "?"),
                info.get("assignment", "?"),
                change,
            )
        return nb, resources


# ------------------------------------------------------------ at render time
def clean_fragment(fragment: str) -> str:
    """``fragment`` with everything but plain markdown markup escaped (shown as
    text) and unsafe attributes removed -- bleach, with the policy above."""
    import bleach

    kwargs = {}
    try:
        from bleach.css_sanitizer import CSSSanitizer

        kwargs["css_sanitizer"] = CSSSanitizer(allowed_css_properties=["text-align"])
    except ImportError:  # tinycss2 missing: no style attributes at all
        pass
    allow_style = "css_sanitizer" in kwargs

    def attributes(tag, name, value):
        if name == "style" and not allow_style:
            return False
        return attribute_ok(tag, name, value)

    return bleach.clean(
        fragment,
        tags=SAFE_TAGS,
        attributes=attributes,
        protocols=[*SAFE_SCHEMES, "data"],
        strip=False,
        strip_comments=True,
        **kwargs,
    )


def markdown_cell_html(text: str) -> str:
    """The ``strip_files_prefix`` filter of nbgrader's formgrade and feedback
    templates (their last step for markdown cells), then ``clean_fragment``."""
    from nbconvert.filters.strings import strip_files_prefix

    return clean_fragment(strip_files_prefix(text))


# ------------------------------------------------------- Content-Security-Policy
CSP_BASE = {
    "default-src": "'none'",
    "style-src": "'self' 'unsafe-inline'",
    "img-src": "'self' data:",
    "font-src": "'self' data:",
    "connect-src": "'self'",
    "form-action": "'self'",
    "base-uri": "'none'",
    "object-src": "'none'",
    "frame-src": "'none'",
    "worker-src": "'none'",
}
KEPT_DIRECTIVES = ("frame-ancestors", "report-uri")  # from jupyter_server / the hub
INLINE_SCRIPT = re.compile(r"<script\b([^>]*)>(.*?)</script\s*>", re.S | re.I)
HANDLER = re.compile(r"""\son[a-z]+\s*=\s*"([^"{}]*)\"""", re.I)
# What a {{ ... }} may stand for in a template's inline script: ids, paths,
# a time zone; no quote, backslash, bracket, parenthesis, space or ``=`` -- it
# can neither leave a string literal nor call or assign anything.
TEMPLATE_VALUE = r"[\w./+:-]*"


def _sha(text: str) -> str:
    return (
        "'sha256-"
        + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()
        + "'"
    )


def template_scripts(folders) -> tuple[list[re.Pattern], set[str]]:
    """Patterns of the inline scripts in the templates under ``folders`` and
    the hashes of their static event handlers."""
    patterns, handlers = [], set()
    for folder in folders:
        for path in sorted(Path(folder).rglob("*")):
            if path.suffix not in (".tpl", ".j2", ".html") or not path.is_file():
                continue
            text = path.read_text(errors="replace")
            for attrs, body in INLINE_SCRIPT.findall(text):
                if "src=" in attrs or "{%" in body or "{#" in body or not body.strip():
                    continue
                parts = re.split(r"\{\{.*?\}\}", body, flags=re.S)
                patterns.append(
                    re.compile(TEMPLATE_VALUE.join(re.escape(p) for p in parts), re.S)
                )
            handlers.update(_sha(h) for h in HANDLER.findall(text))
    return patterns, handlers


def script_folder(url: str) -> str | None:
    """The folder of an https script URL as a CSP source (MathJax loads its
    extensions from beside itself), or None."""
    match = re.fullmatch(
        r"(https://[\w.-]+(?::\d+)?/(?:[\w.~-]+/)*)[^/?#]*(?:[?#].*)?", url or ""
    )
    return match.group(1) if match else None


def page_policy(page: str, patterns, handlers, kept: dict, sources=()) -> str:
    """The policy for one formgrader page: its own inline scripts allowed
    (and the folders in ``sources``: MathJax's, which also needs
    ``'unsafe-eval'`` for the page's ``text/x-mathjax-config`` block)."""
    hashes = set()
    for attrs, body in INLINE_SCRIPT.findall(page):
        kind = re.search(r"""type\s*=\s*["']?([\w/+.-]+)""", attrs, re.I)
        if "src=" in attrs.lower() or (
            kind
            and kind.group(1).lower()
            not in ("text/javascript", "application/javascript", "module")
        ):
            continue
        if any(p.fullmatch(body) for p in patterns):
            hashes.add(_sha(body))
    scripts = [
        "'self'",
        *sources,
        *(["'unsafe-eval'"] if sources else []),
        *sorted(hashes),
    ]
    if handlers:
        scripts += ["'unsafe-hashes'", *sorted(handlers)]
    directives = {**CSP_BASE, "script-src": " ".join(scripts), **kept}
    if sources:
        directives["font-src"] += " " + " ".join(sources)
    return "; ".join(f"{k} {v}" for k, v in directives.items())


def kept_directives(header: str, base_url: str = "/") -> dict:
    """frame-ancestors and report-uri of the server's own policy (a relative
    report-uri made absolute: formgrader pages sit one folder deeper)."""
    kept = {}
    for part in (header or "").split(";"):
        name, _, value = part.strip().partition(" ")
        value = value.strip()
        if name.lower() == "report-uri" and not re.match(r"/|\w+:", value):
            value = base_url.rstrip("/") + "/" + value
        if name.lower() in KEPT_DIRECTIVES:
            kept[name.lower()] = value
    return kept


def make_transform(base_url: str, folders, settings=None):
    """A tornado output transform that sets the policy on formgrader pages;
    ``settings`` (the web app's) lends the formgrader's exporter, whose
    MathJax folder the submission pages may load scripts from."""
    from tornado.web import OutputTransform

    patterns, handlers = template_scripts(folders)
    prefix = base_url.rstrip("/") + "/formgrader/"
    files = re.compile(
        re.escape(prefix) + r"submissions/(?!components/)[^/]+/"
        r"(?!(?:next|prev|next_incorrect|prev_incorrect)/?$).+"
    )

    class FormgraderCSP(OutputTransform):
        def __init__(self, request):
            super().__init__(request)
            self.path = request.path or ""

        def transform_first_chunk(self, status_code, headers, chunk, finishing):
            if self.path.startswith(prefix):
                kept = kept_directives(
                    headers.get("Content-Security-Policy", ""), base_url
                )
                if files.fullmatch(self.path):
                    policy = "; ".join(
                        [
                            "sandbox",
                            "default-src 'none'",
                            "img-src 'self' data:",
                            "style-src 'self' 'unsafe-inline'",
                            *(f"{k} {v}" for k, v in kept.items()),
                        ]
                    )
                else:
                    html = ""
                    if "html" in headers.get("Content-Type", "") and finishing:
                        html = chunk.decode("utf-8", errors="replace")
                    exporter = (settings or {}).get("nbgrader_exporter")
                    folder = script_folder(getattr(exporter, "mathjax_url", ""))
                    policy = page_policy(
                        html,
                        patterns,
                        handlers,
                        kept,
                        [folder] if folder and folder in html else [],
                    )
                headers["Content-Security-Policy"] = policy
            return status_code, headers, chunk

    return FormgraderCSP


def _jupyter_server_extension_points():
    return [{"module": "grader.sanitize"}]


def _load_jupyter_server_extension(serverapp):
    """Enabled for the grader role (classroom/jupyter/grader): the policy on
    every formgrader page of this server."""
    from jupyter_core.paths import jupyter_path
    from nbgrader.server_extensions.formgrader import handlers

    folders = [
        handlers.template_path,
        *[
            str(Path(p) / n)
            for p in jupyter_path("nbconvert", "templates")
            for n in ("base", "classic")
        ],
    ]
    settings = serverapp.web_app.settings
    transform = make_transform(settings.get("base_url", "/"), folders, settings)
    serverapp.web_app.transforms.insert(0, transform)  # before any compression
    serverapp.log.info("grader.sanitize: Content-Security-Policy on /formgrader/")
