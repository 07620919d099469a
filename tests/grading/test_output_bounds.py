"""A notebook's outputs are bounded per cell and per notebook, in every form.

Course O is graded once through the real command (``python -m grader
grade``, sandboxed), every student in one run:

* ``many-errors``: one cell sends 150 errors of about 2 MB each
  (``showtraceback`` in a loop); every error used to be kept (only its
  traceback cut to 20 lines);
* ``many-cells``: 150 cells of the student's own, each printing just under
  the cell's cap (no cell over its cap: 15 MB kept, no flag);
* ``display-updates``: 60 cells each grow a display to just under the cap
  with a display update (5.7 MB kept, no flag);
* ``stream-flood``: streams under 400 made-up names (each name kept its own
  head past the cap), then 3 000 tiny writes (more, on a loaded machine,
  outlast nbclient's wait for the output after the cell's reply: a timeout);
* ``reference``: the honest student in the same run: full marks, no flag.

The course runs with ``max_cells = 100`` (``nbgrader_config.py``), so
``many-cells`` also meets the bound on code cells. Every hostile student
keeps full marks (the output lost is its own), is flagged ``output-limit``,
and its autograded notebook and feedback stay small; the grading processes'
own peak memory (``peak_rss_mib`` of the report) stays under ``PEAK_MIB``.
Measured on this course before the notebook budget: a worker peaked at
1627 MiB and ``many-errors`` came back as a ``grader-error`` (its result was
over the 64 MiB the client takes); with it: 216 MiB, files under 0.6 MB.

The unit tests at the end drive ``GuardedExecute``'s counting with made-up
messages, no kernel; one bounds the time the sanitizer spends on markdown.
"""

import json
from dataclasses import dataclass

import nbformat
import pytest
from support.grading import ROOT, copy_course, student_solutions
from support.run_grader import grade

from grader import events as ev
from grader import notebooks as nbs

A = "addressing"
RELEASE = nbs.read(ROOT / "exercises" / A / f"{A}.ipynb")
REF = student_solutions(A, "reference")
MAX_CELLS = 100  # the course's bound on code cells (the release has 8)
# a grading worker's own peak (measured: 216 MiB; 1627 MiB before the bounds):
# its usual size and a few copies of the largest message the sockets take
PEAK_MIB = 512
FILE_BYTES = 2_000_000  # an autograded notebook or feedback page, at most


@dataclass
class Case:
    student: str
    torch: str = REF["torch-solution"]  # the PyTorch solution cell
    own: tuple = ()  # cells of the student's own after it
    notes: tuple = ()  # what the report must say
    also: frozenset = frozenset()  # review flags the code may raise besides


def submission(case: Case):
    nb = nbs.submission(RELEASE, {**REF, "torch-solution": case.torch})
    at = next(
        i for i, c in enumerate(nb["cells"]) if nbs.grade_id(c) == "torch-solution"
    )
    nb["cells"][at + 1 : at + 1] = [nbformat.v4.new_code_cell(s) for s in case.own]
    return nb


MANY_ERRORS = """
for _i in range(150):
    try:
        raise ValueError("e" * 1_000_000)
    except ValueError:
        get_ipython().showtraceback()
"""
STREAM_FLOOD = """
import sys as _sys

_name = _sys.stdout.name
for _i in range(400):  # each made-up stream name kept its own head
    _sys.stdout.name = f"s{_i}"
    print("n" * 50_000, flush=True)
_sys.stdout.name = _name
for _i in range(3_000):
    print("f", flush=True)
"""
DISPLAY_UPDATE = """\
from IPython.display import display

_h = display("a small output", display_id=True)
_h.update("u" * 95_000)
"""
REVIEW = frozenset({"suspicious", "dynamic-code"})  # no effect on the score
PER_CELL = "torch-solution: more than 100000 characters of output"
PER_NOTEBOOK = "the notebook's outputs passed 400000 characters"
CASES = [
    Case("reference"),
    Case(
        "many-errors",
        torch=REF["torch-solution"] + MANY_ERRORS,
        notes=(PER_CELL,),
        also=REVIEW,  # get_ipython() is IPython's API
    ),
    Case(
        "many-cells",
        own=tuple(f"print('p' * 99_000)  # {i}" for i in range(150)),
        notes=(PER_NOTEBOOK, f"past the limit of {MAX_CELLS} code cells"),
    ),
    Case(
        "display-updates",
        own=(DISPLAY_UPDATE,) * 60,
        notes=("a display update of 95", PER_NOTEBOOK),
    ),
    Case("stream-flood", torch=REF["torch-solution"] + STREAM_FLOOD, notes=(PER_CELL,)),
]


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """Course O, every student graded in one run."""
    root = tmp_path_factory.mktemp("bounds") / "courseO"
    copy_course(root, [A])
    for case in CASES:
        folder = root / "submitted" / case.student / A
        folder.mkdir(parents=True)
        nbs.write(nbformat.from_dict(submission(case)), folder / f"{A}.ipynb")
    with open(root / "nbgrader_config.py", "a") as f:
        f.write(f"\nc.GuardedExecute.max_cells = {MAX_CELLS}\n")
    graded = grade(root, "--cell-timeout", "120")
    peak = graded.report.get("cluster", {}).get("peak_rss_mib")
    print(f"\ncourse O: {graded.seconds:.0f} s, grader peak RSS {peak} MiB")
    assert graded.code == 0, graded.tail()
    return graded


@pytest.mark.slow
@pytest.mark.sandbox
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.student)
def test_output_is_bounded_per_notebook(graded, case):
    """Full marks (the output lost is the student's own), ``output-limit``
    for every hostile student and only that, small files."""
    row = graded.rows[case.student]
    got = (row["parts"]["tf"]["score"], row["parts"]["torch"]["score"])
    assert got == (4, 4), (row["notes"], row.get("cells"))
    expected = set() if case.student == "reference" else {"output-limit"}
    assert expected <= set(row["flags"]) <= expected | case.also, row["notes"]
    notes = "\n".join(row["notes"])
    for text in case.notes:
        assert text in notes, (text, notes)
    for folder in ("autograded", "feedback"):
        for path in (graded.root / folder / case.student / A).glob("*.*"):
            assert path.stat().st_size < FILE_BYTES, (path, path.stat().st_size)


@pytest.mark.slow
@pytest.mark.sandbox
def test_what_a_bounded_notebook_keeps(graded):
    def outputs(student):
        path = graded.root / "autograded" / student / A / f"{A}.ipynb"
        cells = json.loads(path.read_text())["cells"]
        return {nbs.grade_id(c) or i: c.get("outputs", []) for i, c in enumerate(cells)}

    kept = outputs("many-errors")["torch-solution"]
    errors = [o for o in kept if o["output_type"] == "error"]
    assert [o["ename"] for o in errors] == ["ValueError"], kept
    assert len(json.dumps(kept)) < 10_000, kept
    assert "not kept by the grader" in json.dumps(kept[-1])
    kept = outputs("many-cells").values()
    assert sum("truncated by the grader" in json.dumps(c) for c in kept) > 50
    assert any("not run: the notebook has more than" in json.dumps(c) for c in kept)
    # the first made-up name fits the cap, the second keeps a head (as
    # stdout), the other 398 names and the 3 000 writes nothing
    streams = outputs("stream-flood")["torch-solution"]
    assert [o["name"] for o in streams] == ["s0", "stdout"], streams
    assert len(json.dumps(streams)) < 100_000 + 2_000


@pytest.mark.slow
@pytest.mark.sandbox
def test_the_grading_workers_memory_is_bounded(graded):
    """Whatever the output form, the grading processes (not the kernels)
    stay near their usual size."""
    peak = graded.report["cluster"]["peak_rss_mib"]
    assert 0 < peak < PEAK_MIB, peak


# ------------------------------------------------------------ unit tests
def _client(tmp_path, cells=4, **traits):
    """A GuardedExecute ready to take messages for ``cells`` code cells, no
    kernel."""
    from nbclient import NotebookClient
    from traitlets.config import Config

    from grader.guard import GuardedExecute

    cfg = Config()
    for key, value in traits.items():
        setattr(cfg.GuardedExecute, key, value)
    pre = GuardedExecute(config=cfg)
    nb = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell(f"x = {i}") for i in range(cells)]
    )
    NotebookClient.__init__(pre, nb, None)
    pre.reset_execution_trackers()
    pre.events = ev.Events(tmp_path, "a", "s", "execute")
    pre.status, pre.stream, pre._touched = {}, {}, {}
    pre._runs, pre._kernel_interrupted, pre._by_msg = 0, False, {}
    pre._current, pre.clear_before_next_output = None, False
    pre._replaying, pre.restarts = False, 0
    pre._new_notebook_budget()
    return pre


def _send(pre, index, kind, content, replay=False):
    """One iopub message for cell ``index`` (the cell being run)."""
    if pre._current is None or pre._current["cell"] != index:
        pre._new_cell_budget()
        pre._begin(index, replay=replay)
    msg = {
        "msg_type": kind,
        "header": {"msg_type": kind},
        "parent_header": {"msg_id": f"m{index}"},
        "content": content,
    }
    return pre.process_message(msg, pre.nb.cells[index], index)


def _kept(pre, index=None) -> int:
    cells = pre.nb.cells if index is None else [pre.nb.cells[index]]
    return len(json.dumps([c.outputs for c in cells]))


def _error(size, lines=100):
    return {
        "ename": "E" * size,
        "evalue": "v" * size,
        "traceback": ["t" * size] * lines,
    }


def test_many_big_errors_keep_one_short_error(tmp_path):
    pre = _client(tmp_path)
    for _ in range(200):
        _send(pre, 0, "error", _error(100_000))
    kept = pre.nb.cells[0].outputs
    errors = [o for o in kept if o["output_type"] == "error"]
    assert len(errors) == 1 and _kept(pre) < 5_000, _kept(pre)
    assert len(errors[0]["evalue"]) < 400 and len(errors[0]["traceback"]) == 10
    assert "not kept by the grader" in kept[-1]["text"]  # a note on stdout
    assert "output-limit" in pre.events.flags
    # small errors fill the budget, then one short error more, nothing else
    for _ in range(2000):
        _send(pre, 1, "error", _error(10, lines=1))
    kept = pre.nb.cells[1].outputs
    assert 900 <= len(kept) <= 1002 and _kept(pre, 1) < 150_000


def test_cells_under_their_cap_meet_the_notebooks(tmp_path):
    pre = _client(tmp_path, cells=40)
    for i in range(40):  # each cell under its own cap
        _send(pre, i, "stream", {"name": "stdout", "text": "p" * 99_000})
        _send(pre, i, "stream", {"name": "stderr", "text": "q" * 10})
        _send(pre, i, "error", _error(10, lines=1))
    assert _kept(pre) < 400_000 + 40 * 10_000, _kept(pre)
    last = pre.nb.cells[-1].outputs  # past the notebook's budget: still seen
    assert [o.get("name") or o["output_type"] for o in last] == [
        "stdout",
        "stderr",
        "error",
    ]
    notes = pre.events.flags["output-limit"]
    assert sum("passed 400000 characters" in n for n in notes) == 1, notes
    assert len(notes) == 1, notes  # not one per cell


def test_every_output_form_counts(tmp_path):
    pre = _client(tmp_path, cells=6)
    big = "m" * 200_000
    # metadata, a display id, a stream's name, an execution count
    _send(pre, 0, "display_data", {"data": {"text/plain": "1"}, "metadata": {"a": big}})
    _send(
        pre,
        1,
        "display_data",
        {"data": {"text/plain": "1"}, "metadata": {}, "transient": {"display_id": big}},
    )
    _send(pre, 2, "stream", {"name": big, "text": "1"})
    _send(
        pre, 3, "execute_result", {"data": {}, "metadata": {}, "execution_count": big}
    )
    assert _kept(pre) < 10_000, _kept(pre)
    assert pre.stream[3]["malformed"] == 1
    # a message kind of megabytes is logged as "other"
    _send(pre, 4, "x" * 1_000_000, {"data": {}})
    assert pre.stream[4]["order"] == ["other"]
    # nested deeper than the stack: counted all the same
    from grader.guard import _size

    deep = "x"
    for _ in range(100_000):
        deep = {"k": [deep]}
    assert _size(deep) == 100_000 * (1 + 8) + 1
    # a flood of tiny streams
    for _ in range(5_000):
        _send(pre, 5, "stream", {"name": "stdout", "text": "f\n"})
    assert _kept(pre, 5) < 110_000


def test_display_updates_and_clears_pay_for_every_growth(tmp_path):
    pre = _client(tmp_path, cells=2)
    small = {"data": {"text/plain": "s"}, "metadata": {}}
    _send(pre, 0, "display_data", {**small, "transient": {"display_id": "d"}})
    for i in range(50):  # grow, shrink, grow: shrinking earns nothing back
        size = 30_000 if i % 2 == 0 else 1
        update = {"data": {"text/plain": "u" * size}, "metadata": {}}
        _send(
            pre, 1, "update_display_data", {**update, "transient": {"display_id": "d"}}
        )
        _send(pre, 1, "clear_output", {"wait": False})
        _send(pre, 1, "stream", {"name": "stdout", "text": "c" * 5_000})
    assert _kept(pre) < 110_000, _kept(pre)
    assert pre._nb_chars <= 110_000
    assert len(pre.stream[1]["order"]) <= 1000


def test_our_reports_are_bounded_per_notebook(tmp_path, monkeypatch):
    from grader import guard
    from grader.kernel.observations import OBSERVATION

    monkeypatch.setattr(guard, "MAX_OURS_NOTEBOOK", 50_000)
    pre = _client(tmp_path, cells=8)
    for i in range(8):
        ours = {"data": {OBSERVATION: "o" * 20_000}, "metadata": {}}
        _send(pre, i, "display_data", ours)
    dropped = [pre.stream[i]["dropped"] for i in range(8)]
    assert dropped == [0, 0, 1, 1, 1, 1, 1, 1], dropped
    assert _kept(pre) < 50_000
    # a replay's outputs are thrown away: they are not charged to the notebook
    pre = _client(tmp_path, cells=2)
    pre._replaying = True
    _send(pre, 0, "stream", {"name": "stdout", "text": "r" * 90_000}, replay=True)
    assert pre._nb_chars == 0


def test_the_reply_of_a_cell_is_cut_too(tmp_path):
    pre = _client(tmp_path, cells=1)
    cell = pre.nb.cells[0]
    cell["execution_count"] = "c" * 100_000
    reply = {"content": {"status": "error", **_error(1_000_000)}}
    pre.on_cell_executed(cell=cell, cell_index=0, execute_reply=reply)
    assert cell["execution_count"] is None
    assert len(cell.outputs) == 1 and _kept(pre) < 5_000
    assert len(reply["content"]["evalue"]) == 1_000_000  # the reply itself: as sent


def test_cells_past_the_bound_are_the_students_own(tmp_path):
    pre = _client(tmp_path, cells=30, max_cells=10)
    for i in (0, 5, 29):  # the release's cells (with nbgrader ids)
        pre.nb.cells[i].metadata["nbgrader"] = {"grade_id": f"g{i}"}
    # 3 of the release's, 7 of the student's own: 1-4 and 6-8
    assert pre._skipped_cells() == list(range(9, 29))


def test_honest_outputs_are_far_from_the_bounds():
    """The reference solutions print under 200 characters per notebook (each
    output charged at least 100): the notebook budget is 400 000."""
    from grader.guard import GuardedExecute

    assert GuardedExecute.max_notebook_output.default_value >= 4 * 100_000
    releases = list((ROOT / "exercises").glob("*/*.ipynb"))
    assert releases
    for path in releases:
        cells = [c for c in nbs.read(path)["cells"] if c["cell_type"] == "code"]
        assert len(cells) < GuardedExecute.max_cells.default_value // 10, path


def test_streams_and_errors_with_our_mime_type_are_charged(tmp_path):
    """Only a display or a result carries our reports: a stream or an error
    with our mime type in a ``data`` dict is charged like any other (it was
    not charged at all: 80 streams of 5 MB made a grader-error)."""
    from grader.kernel.observations import INTEGRITY, OBSERVATION

    pre = _client(tmp_path, cells=3)
    for mime in (OBSERVATION, INTEGRITY) * 10:
        stream = {"name": "stdout", "text": "S" * 500_000, "data": {mime: {}}}
        _send(pre, 0, "stream", stream)
    for mime in (OBSERVATION, INTEGRITY) * 10:
        _send(pre, 1, "error", {**_error(50_000), "data": {mime: {}}})
    assert _kept(pre, 0) < 110_000 and _kept(pre, 1) < 110_000, _kept(pre)
    errors = [o for o in pre.nb.cells[1].outputs if o["output_type"] == "error"]
    assert len(errors) == 1, len(errors)
    assert "output-limit" in pre.events.flags
    log = pre.stream[1]  # an error is logged as an error, never as our report
    assert set(log["order"]) == {"error"} and not log["observations"], log["order"]
    assert not log["reports"] and not log["dropped"]
    # an update carrying our reports is still never applied (and counted)
    _send(
        pre,
        2,
        "display_data",
        {"data": {"text/plain": "s"}, "metadata": {}, "transient": {"display_id": "d"}},
    )
    update = {
        "data": {OBSERVATION: {}, "text/plain": "u" * 1_000},
        "metadata": {},
        "transient": {"display_id": "d"},
    }
    _send(pre, 2, "update_display_data", update)
    assert pre.nb.cells[2].outputs[0]["data"] == {"text/plain": "s"}
    assert pre.stream[2]["ours_updates"] == 1


def test_numbers_are_charged_by_their_digits(tmp_path):
    """A number costs the length of its JSON text (it cost 8 whatever its
    size: two cells of 6 000 ints of 4 201 digits kept 50 MB), measured
    without converting it (an int past ``sys.get_int_max_str_digits()``
    cannot be)."""
    import sys
    import time

    from grader.guard import _size

    assert _size(10**4200) >= 4201 and _size(-(10**20)) >= 22
    assert _size(12) == _size(True) == _size(None) == 8
    assert _size(1.0000000000000002e-300) >= len("1.0000000000000002e-300")
    huge = 1 << 200_000  # 60 206 digits: str() of it raises
    assert sys.get_int_max_str_digits() and _size(huge) >= 60_206
    began = time.monotonic()
    assert _size([10**4200] * 6000) >= 6000 * 4201
    assert time.monotonic() - began < 1
    pre = _client(tmp_path, cells=2)
    for i in range(2):
        json_data = {"application/json": {"v": [10**4200] * 6000}}
        _send(pre, i, "display_data", {"data": json_data, "metadata": {}})
    assert _kept(pre) < 10_000, _kept(pre)
    assert "output-limit" in pre.events.flags


def test_a_huge_markdown_cell_is_checked_in_bounded_time():
    """``html.parser`` is quadratic on unclosed comments and tags (200 KB of
    ``<!--`` took 16 s, in the grader's process): the sanitizer checks a
    bounded amount of markdown and HTML, per cell and per notebook, and
    refuses a stray ``<`` before the parser sees it; what it does not check
    is shown as text, cut."""
    import time

    from grader import sanitize
    from grader.sanitize import AS_TEXT_NOTE, html_problems, sanitize_notebook

    attacks = ["<!--" * 250_000, "<div>\n" + "<a " * 300_000]
    small = ["<!--" * 12_000, "<div>\n" + "<a " * 16_000, "<div>\n<a title='>" * 4000]
    cells = [nbformat.v4.new_markdown_cell(s) for s in [*attacks, *small] * 2]
    cells += [
        nbformat.v4.new_markdown_cell("<div>\n" + "<a " * 16_000) for _ in range(40)
    ]
    nb = nbformat.v4.new_notebook(cells=cells)
    began = time.monotonic()
    changes = sanitize_notebook(nb)
    took = time.monotonic() - began
    assert took < 1.5, took  # measured: under 0.3 s
    assert len(changes) == len(cells), changes
    assert "more than 50000 characters" in changes[0], changes[0]
    assert "past the 200000 characters" in changes[-1], changes[-1]
    for cell in nb.cells:  # all shown as text, none as HTML
        assert cell.source.startswith(AS_TEXT_NOTE), cell.source[:100]
        assert len(cell.source) < sanitize.MAX_MARKDOWN + 500
        assert not sanitize.markdown_problems(cell.source)
    # one cell of 1 MB on its own: well under a second
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(attacks[0])])
    began = time.monotonic()
    assert sanitize_notebook(nb) and time.monotonic() - began < 0.5
    assert nb.cells[0].source.startswith(AS_TEXT_NOTE)
    assert "characters cut by the grader" in nb.cells[0].source
    # the HTML check alone, on what the parser was quadratic on
    for fragment in ("<!--" * 250_000, "<a " * 100_000, "<p>" + "<?" * 100_000):
        began = time.monotonic()
        assert html_problems(fragment)
        assert time.monotonic() - began < 0.2
    # honest markup still passes
    assert (
        html_problems('<p>a <a href="https://x.org">b</a><br/><img src="p.png"/></p>')
        == []
    )


def test_an_unreadable_message_is_skipped(tmp_path):
    """A kernel that lifted its own int-to-str limit can send an int the
    grader's JSON parser refuses (ValueError): the message is counted as
    malformed and skipped, the cell goes on."""
    import asyncio

    from jupyter_client.session import Session

    session, frames = Session(key=b"k"), []
    for content in (
        {"name": "stdout", "text": "1" * 5_000},
        {"execution_state": "idle"},
    ):
        kind = "stream" if "name" in content else "status"
        msg = session.msg(kind, content, parent={"msg_id": "m0"})
        frames.append(session.serialize(msg))
    frames[0][-1] = b'{"name": "stdout", "text": ' + b"1" * 5_000 + b"}"
    frames[0][1] = session.sign(frames[0][2:])  # re-signed: only JSON fails

    class Channel:
        async def get_msg(self, timeout=None):
            return session.deserialize(frames.pop(0)[1:])

    class Client:
        iopub_channel = Channel()

    pre = _client(tmp_path, cells=1)
    pre.kc, pre.record_timing = Client(), False
    pre._new_cell_budget()
    pre._begin(0, replay=False)
    asyncio.run(pre._async_poll_output_msg("m0", pre.nb.cells[0], 0))
    assert pre.stream[0]["malformed"] == 1 and pre.stream[0]["closed"]
    assert not frames
