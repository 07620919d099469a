"""The parts of sandboxed grading one by one (test_grading_protection runs
them together through the grading command).

Staging (repairing and rejecting submissions), the observation format, the
per-run grading inputs, the verdict on recorded results, the integrity probe,
the bubblewrap command line, and small sandboxed kernels (NumPy only, so they
start in about a second) for what the sandbox itself guarantees.
"""

import json
import os
import socket
from pathlib import Path

import nbformat
import numpy as np
import pytest
from support.ci import skip_or_fail
from support.grading import ROOT

from grader import events as ev
from grader import fresh, reference, sandbox, staging
from grader import notebooks as nbs
from grader.kernel.errors import GradingError
from grader.kernel.observations import (
    OBSERVATION,
    decode_arrays,
    observation_payload,
    parse_observation,
)
from grader.verdicts import checks_in, judge_recorded

A = "addressing"


class Quiet:
    def __init__(self):
        self.flags, self.notes = {}, []

    def flag(self, name, note=""):
        assert name in ev.FLAGS
        self.flags.setdefault(name, []).append(note)

    def note(self, text):
        self.notes.append(text)


def release():
    return nbformat.read(str(ROOT / "exercises" / A / f"{A}.ipynb"), as_version=4)


# ------------------------------------------------------------------ staging
def test_rebuild_restores_tests_and_keeps_student_cells():
    nb = release()
    cells = nb.cells
    sol = next(c for c in cells if staging.gid(c) == "tf-solution")
    sol.source = "def soft_lookup_tf(*a):\n    return 1"
    helper = nbformat.v4.new_code_cell("def helper():\n    return 2")
    cells.insert(cells.index(sol) + 1, helper)
    hidden = next(c for c in cells if staging.gid(c) == "tf-hidden")
    cells.remove(hidden)  # deleted test
    visible = next(c for c in cells if staging.gid(c) == "tf-visible")
    visible.source = "print('visible tests passed')"  # edited test
    cells.insert(0, cells.pop(cells.index(visible)))  # moved test
    q = Quiet()
    out, code = staging.rebuild(nb, release(), q)
    ids = [staging.gid(c) for c in out.cells]
    expected = [staging.gid(c) for c in release().cells if staging.gid(c)]
    assert [g for g in ids if g] == expected
    graded = {staging.gid(c): c for c in out.cells if staging.gid(c)}
    assert graded["tf-solution"].source == sol.source
    assert graded["tf-visible"].source == next(
        c.source for c in release().cells if staging.gid(c) == "tf-visible"
    )
    assert out.cells[out.cells.index(graded["tf-solution"]) + 1].source == helper.source
    assert "def helper" in "\n".join(code)
    notes = " ".join(sum(q.flags.values(), []))
    assert "tf-hidden was deleted" in notes and "tf-visible was edited" in notes
    assert "moved" in notes
    nbformat.validate(out)
    assert len({c.id for c in out.cells}) == len(out.cells)


@pytest.mark.parametrize(
    "raw, what",
    [
        (b"", "empty file"),
        (b"   \n", "empty file"),
        (b"{", "not valid JSON"),
        (b"[1, 2]", "not a Jupyter notebook"),
        (b'{"nbformat": 9, "cells": []}', "not a Jupyter notebook"),
        (b"\xff\xfe\x00", "not valid JSON"),
    ],
)
def test_unreadable_notebooks_are_malformed(tmp_path, raw, what):
    folder = tmp_path / "s" / A
    folder.mkdir(parents=True)
    (folder / f"{A}.ipynb").write_bytes(raw)
    q = Quiet()
    assert staging.stage_one(folder, tmp_path / "out", A, {A: release()}, q) is None
    assert what in " ".join(q.flags["malformed"])


def test_old_formats_are_converted(tmp_path):
    nb = nbformat.from_dict(nbs.read(ROOT / "exercises" / A / f"{A}.ipynb"))
    folder = tmp_path / "s" / A
    folder.mkdir(parents=True)
    (folder / f"{A}.ipynb").write_text(nbformat.writes(nbformat.convert(nb, 3)))
    q = Quiet()
    path = staging.stage_one(folder, tmp_path / "out", A, {A: release()}, q)
    staged = nbformat.read(str(path), as_version=4)
    assert (staged.nbformat, staged.nbformat_minor) == (4, 5)
    assert "nbformat 3.0" in q.flags["old-format"][0]


def test_nbgrader_files_are_kept_and_not_extra(tmp_path):
    folder = tmp_path / "s" / A
    folder.mkdir(parents=True)
    (folder / f"{A}.ipynb").write_text(nbformat.writes(release()))
    for name in (staging.TIMESTAMP, staging.SECRET):
        (folder / name).write_text("x")
    q = Quiet()
    path = staging.stage_one(folder, tmp_path / "out", A, {A: release()}, q)
    assert q.flags == {}
    assert {p.name for p in path.parent.iterdir()} == {
        f"{A}.ipynb",
        staging.TIMESTAMP,
        staging.SECRET,
    }


def test_shadowing_names():
    for name in (
        "numpy.py",
        "torch.py",
        "attncourse",
        "math.py",
        "os.py",
        "tensorflow",
        "json.py",
    ):
        assert staging.shadows(name), name
    for name in ("notes.txt", "my_helpers_xyz.py", "data.csv", "plot.png"):
        assert not staging.shadows(name), name


def test_suspicious_code_scan():
    assert staging.scan(["x = 1\ndef f(q):\n    return q @ q.T"]) == []
    found = staging.scan(
        [
            "import os\nos._exit(0)",
            "np.allclose = lambda *a: True",
            "open('hidden/reference.npz')",
            "import socket",
        ]
    )
    assert {
        "exits the kernel",
        "patches library functions",
        "grader files",
        "network",
    } <= set(found)


# ------------------------------------------------------- observations etc.
def test_observation_round_trip_and_rejections():
    observed = {
        "main": {"outputs": np.ones((2, 3)), "grad_beta": None, "ids": np.arange(3)}
    }
    payload = json.dumps(observation_payload(A, "soft_lookup", "tf", observed))
    parsed = parse_observation(payload)
    assert parsed["key"] == (A, "soft_lookup", "tf")
    assert parsed["observed"]["main"]["grad_beta"] is None
    np.testing.assert_array_equal(parsed["observed"]["main"]["ids"], np.arange(3))
    bad = json.loads(payload)
    import base64
    import io

    buf = io.BytesIO()
    np.save(buf, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    bad["cases"][0]["arrays"] = base64.b64encode(buf.getvalue()).decode()
    with pytest.raises(ValueError):
        parse_observation(json.dumps(bad))  # pickles are never loaded
    with pytest.raises(ValueError):
        parse_observation("x" * (9 * 1024 * 1024))
    with pytest.raises(ValueError):
        decode_arrays("not base64 !!")


def test_grading_inputs_are_per_student_reproducible_and_output_free(tmp_path):
    key = fresh.secret(tmp_path)
    assert (tmp_path / "secret").stat().st_mode & 0o777 == 0o600
    a1 = fresh.for_student(tmp_path, A, "alice")
    assert (
        reference.ReferenceData(a1).arrays.keys()
        == reference.ReferenceData(
            fresh.for_student(tmp_path, A, "alice")
        ).arrays.keys()
    )
    same = fresh.for_student(tmp_path, A, "alice")
    bob = fresh.for_student(tmp_path, A, "bob")
    np.testing.assert_array_equal(a1["main/in/queries"], same["main/in/queries"])
    assert not np.allclose(a1["main/in/queries"], bob["main/in/queries"])
    committed = reference.load_file(reference.source_path(ROOT, A))
    assert not np.allclose(a1["main/in/queries"], committed.inputs("main")["queries"])
    kernel_side = fresh.inputs_only(a1)
    assert all("/out/" not in k for k in kernel_side)
    assert "seed" not in str(kernel_side["__meta__"])
    assert fresh.seed_for(key, A, "alice") != fresh.seed_for(b"other", A, "alice")


def test_judge_recorded_reports_cases_in_order():
    from grader.kernel import recorder as api

    arrays = fresh.draw(A, 7)
    ref = reference.ReferenceData(arrays)
    src = nbs.read(ROOT / "solutions" / A / f"{A}.ipynb")
    namespace = {"__name__": "__main__"}
    for cell in src["cells"]:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell["cell_type"] == "code" and meta and not meta.get("grade"):
            exec(
                nbs.solution_cells(src).get(meta["grade_id"], nbs.source(cell)),
                namespace,
            )
    observed = api.observe(
        A,
        "soft_lookup",
        "torch",
        namespace,
        reference.ReferenceData(fresh.inputs_only(arrays)),
    )
    recorded = parse_observation(
        json.dumps(observation_payload(A, "soft_lookup", "torch", observed))
    )
    judge_recorded(A, "soft_lookup", "torch", recorded, ref)  # passes
    main = recorded["observed"]["main"]
    main["outputs"] = main["outputs"] * 2
    with pytest.raises(GradingError, match="mismatch in outputs against the reference"):
        judge_recorded(A, "soft_lookup", "torch", recorded, ref)
    failed = {
        "key": (A, "soft_lookup", "torch"),
        "observed": {},
        "error": {"case": "main", "message": "f raised ValueError: x"},
    }
    with pytest.raises(GradingError, match="raised ValueError"):
        judge_recorded(A, "soft_lookup", "torch", failed, ref)
    assert checks_in(
        'from x import check\ncheck("addressing", "soft_lookup", "tf")'
    ) == [(A, "soft_lookup", "tf")]


def test_probe_sees_patched_functions_and_restores_clean():
    import math

    from grader.kernel.probe import Probe

    probe = Probe()
    assert probe.changes() == []
    original = np.allclose, math.isclose
    try:
        np.allclose = lambda *a, **k: True
        math.isclose = lambda *a, **k: True
        assert {"numpy.allclose", "math.isclose"} <= set(probe.changes())
    finally:
        np.allclose, math.isclose = original
    assert probe.changes() == []


def test_events_are_written_per_phase_and_merged(tmp_path):
    e = ev.Events(tmp_path, A, "bob", "stage")
    e.flag("renamed", "graded x.ipynb")
    e.save()
    e = ev.Events(tmp_path, A, "bob", "execute")
    e.flag("timeout", "tf-solution: interrupted")
    e.save()
    e = ev.Events(tmp_path, A, "bob", "execute")  # a regrade replaces its phase
    e.flag("crashed", "tf-solution: segfault")
    e.save()
    merged = ev.load(tmp_path, A, "bob")
    assert set(merged["flags"]) == {"renamed", "crashed"}
    assert ev.path(tmp_path, A, "../../etc/x").parent == tmp_path / "log" / A
    # names that differ only in unsafe characters keep logs of their own
    names = ("x y", "x_y", "x/y", "..", ".", "")
    paths = {ev.path(tmp_path, A, n) for n in names}
    assert len(paths) == len(names)
    assert all(p.parent == tmp_path / "log" / A for p in paths)


# ------------------------------------------------------------------ sandbox
def test_bwrap_command_line(tmp_path):
    cmd = sandbox.command(
        ["python", "-c", "pass"], rundir=tmp_path, inputs=None, limits=sandbox.Limits()
    )
    joined = " ".join(cmd)
    for flag in (
        "--unshare-net",
        "--unshare-pid",
        "--die-with-parent",
        "--new-session",
        "--clearenv",
        "--proc /proc",
    ):
        assert flag in joined
    binds = [cmd[i + 1] for i, x in enumerate(cmd) if x in ("--bind", "--ro-bind")]
    assert f"{tmp_path}" in binds  # the connection file's folder, read-only
    assert "--bind" not in cmd  # no host folder is writable; sockets: a tmpfs
    assert str(ROOT) not in binds and str(ROOT / "solutions") not in binds
    assert str(ROOT / "attncourse") in binds
    # the kernel side of the grader, and nothing else of it
    assert str(ROOT / "grader" / "kernel") in binds
    assert str(ROOT / "grader" / "__init__.py") in binds
    assert not [
        b
        for b in binds
        if b.startswith(str(ROOT / "grader"))
        and b
        not in (str(ROOT / "grader" / "kernel"), str(ROOT / "grader" / "__init__.py"))
    ]


def test_user_namespace_mode_as_an_unprivileged_user(monkeypatch, tmp_path):
    """How bubblewrap runs for an instructor who is not root: in an
    unprivileged user namespace, with no nested namespaces and no network."""
    import subprocess

    if os.geteuid() != 0:
        pytest.skip("covered by the sandboxed kernels when not root")
    monkeypatch.setattr(sandbox, "is_root", lambda: False)
    listener = socket.create_server(("127.0.0.1", 0))  # reachable from the host
    port = listener.getsockname()[1]
    args = sandbox.namespace_args()
    assert "--unshare-user" in args and "--disable-userns" in args
    probe = (
        "import os, socket, subprocess\nprint(os.getuid())\n"
        "print(subprocess.run(['unshare', '-U', 'true']).returncode != 0)\n"
        f"try:\n    socket.create_connection(('127.0.0.1', {port}), 2)\n"
        "    print('network')\nexcept OSError:\n    print('no network')"
    )
    cmd = [
        sandbox.bwrap(),
        *args,
        "--die-with-parent",
        "--new-session",
        "--clearenv",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        *[
            x
            for p in ("/usr", "/lib", "/lib64", "/bin")
            if Path(p).exists()
            for x in ("--ro-bind", p, p)
        ],
        "--",
        "/usr/bin/python3",
        "-c",
        probe,
    ]

    def drop():
        os.setgroups([])
        os.setgid(65534)
        os.setuid(65534)

    out = subprocess.run(
        cmd, preexec_fn=drop, capture_output=True, text=True, timeout=60
    )
    listener.close()
    assert out.stdout.split("\n")[:3] == ["65534", "True", "no network"], out


@pytest.fixture
def light_kernels(monkeypatch):
    """Sandboxed kernels that preload NumPy only (start in about a second):
    fast enough for `make test-fast`, which runs them where bubblewrap is."""
    if sandbox.check_available() is not None:
        skip_or_fail(f"bubblewrap sandbox unavailable: {sandbox.check_available()}")
    monkeypatch.setenv("GRADER_PRELOAD", "attncourse,numpy")


def run_cells(sources, sandboxed=True, timeout=30, **km_args):
    from nbclient import NotebookClient

    from grader.sandbox import SandboxedKernelManager

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])
    km = SandboxedKernelManager(kernel_name="python3", **km_args)
    km.sandbox = sandboxed
    client = NotebookClient(nb, km=km, timeout=timeout, allow_errors=True)
    try:
        client.execute()
    finally:
        from jupyter_core.utils import run_sync

        if km.has_kernel:  # a kernel manager passed in is not shut down by nbclient
            run_sync(km.shutdown_kernel)(now=True)
        else:
            run_sync(km.cleanup_resources)()
    assert not km.rundir.exists()
    out = []
    for cell in nb.cells:
        text = []
        for o in cell.outputs:
            if o.output_type == "stream":
                text.append(o.text)
            elif o.output_type == "error":
                text.append(f"{o.ename}: {o.evalue}")
        out.append("".join(text))
    return out


def test_sandboxed_kernel_limits_and_isolation(light_kernels, tmp_path):
    secret = tmp_path / "grader-only.txt"
    secret.write_text("secret")
    # A listener of our own on the host's loopback: reachable from here, so a
    # kernel that shares the host's network would connect to it.
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    socket.create_connection(("127.0.0.1", port), 2).close()
    out = run_cells(
        [
            "import os, resource\nlim = resource.getrlimit\n"
            "print(os.getuid(), lim(resource.RLIMIT_AS)[0], lim(resource.RLIMIT_NPROC)[0])",  # noqa: E501
            f"open({str(secret)!r}).read()",
            f"import socket\nsocket.create_connection(('127.0.0.1', {port}), 2)\n"
            "print('connected')",
            "open('/tmp/big', 'wb').write(b'x' * (100 * 1024 * 1024))",
            "open('/usr/pwned', 'w')",
            "print(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))",
            "import numpy as np\nx = np.ones(10**11)",
        ],
        memory_limit=2 * sandbox.GiB,
        process_limit=300,
    )
    listener.close()
    uid, mem, nproc = out[0].split()
    assert int(uid) != 0 or os.geteuid() != 0
    assert int(mem) == 2 * sandbox.GiB and int(nproc) == 300
    assert "FileNotFoundError" in out[1]
    assert "connected" not in out[2], "the sandboxed kernel reached the host"
    assert "ConnectionRefusedError" in out[2] or "Network is unreachable" in out[2]
    assert "No space left" in out[3] or "File too large" in out[3]
    assert "Read-only file system" in out[4] or "Permission denied" in out[4]
    assert len(json.loads(out[5])) <= 3  # bwrap's init, the kernel (+ listing)
    assert "MemoryError" in out[6]


def test_without_the_sandbox_the_kernel_sees_everything(light_kernels, tmp_path):
    """What --no-sandbox means: the same kernel reads the grader's files."""
    secret = tmp_path / "grader-only.txt"
    secret.write_text("secret")
    out = run_cells([f"print(open({str(secret)!r}).read())"], sandboxed=False)
    assert out[0].strip() == "secret"


def test_guarded_execute_survives_a_disk_filler_and_a_crash(light_kernels, tmp_path):
    from traitlets.config import Config

    from grader.guard import GuardedExecute

    cfg = Config()
    cfg.Execute.timeout = 20
    cfg.GuardedExecute.state_dir = str(tmp_path / "state")
    nb = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_code_cell(s)
            for s in [
                "x = 41",
                "import json, sys, os\nfolder = os.path.dirname(json.load(open("
                "sys.argv[sys.argv.index('-f') + 1]))['ip'])\n"
                "for i in range(40):\n    try:\n"
                "        open(f'{folder}/f{i}', 'wb').write(b'x' * 2**20)\n"
                "    except OSError:\n        pass\n"
                "import time\ntime.sleep(10)",
                "print('after', x + 1)",
                "import os\nos._exit(7)",
                "print('still', x)",
            ]
        ]
    )
    pre = GuardedExecute(config=cfg)
    resources = {"nbgrader": {"student": "s", "assignment": "not-a-task"}}
    nb, resources = pre.preprocess(nb, resources)
    outs = [
        "".join(o.get("text", "") + o.get("evalue", "") for o in c.outputs)
        for c in nb.cells
    ]
    assert "socket folder" in outs[1]
    assert "after 42" in outs[2]
    assert "exited with code 7" in outs[3]
    assert "still 41" in outs[4]
    log = ev.load(tmp_path / "state", "not-a-task", "s")
    assert set(log["flags"]) == {"crashed", "disk"}
    assert resources["attncourse"]["status"] == {
        0: "ran",
        1: "crashed",
        2: "ran",
        3: "crashed",
        4: "ran",
    }


def test_check_records_instead_of_judging_when_observing(monkeypatch):
    """In a grading kernel the hidden test publishes results, never a verdict."""
    from grader.kernel import recorder as api

    published = []
    monkeypatch.setattr(api, "_publish", lambda mime, p: published.append((mime, p)))
    monkeypatch.setenv(api.MODE_ENV, "observe")
    monkeypatch.setenv(api.INPUTS_ENV, "/nonexistent/inputs.npz")
    assert api.check(A, "soft_lookup", "tf", namespace={}) is None  # no raise
    mime, payload = published[0]
    assert mime == OBSERVATION
    parsed = parse_observation(payload)
    assert parsed["observed"] == {} and "not found" in parsed["error"]["message"]


# ------------------------------------- the probe watches the runner modules
def test_the_kernel_preloads_every_runner_module():
    """check() imports grader.kernel.runners.<module> at the first hidden
    test: unless it is loaded before the snapshot, nothing of it is watched."""
    from grader.kernel import probe
    from grader.kernel.runners import MODULES

    wanted = {f"grader.kernel.runners.{m}" for m in MODULES.values()}
    wanted.add("grader.kernel.runners._common")
    assert wanted <= set(probe.GRADER_MODULES) <= set(probe.PRELOAD)


def _load_runners():
    """What the kernel has loaded before its snapshot (the test before)."""
    import importlib

    from grader.kernel.runners import MODULES

    for m in ("_common", *MODULES.values()):
        importlib.import_module(f"grader.kernel.runners.{m}")


def _attacks() -> list:
    """(what the probe reports, object, attribute or key, the hostile value)."""
    from grader.kernel.runners import _common, positions, tiny_transformer

    pos = "grader.kernel.runners.positions"
    tiny = "grader.kernel.runners.tiny_transformer"
    r = positions.RUNS["rope"]
    return [
        (f"{pos}.RETURNED", positions, "RETURNED", 1),  # private-ish constants
        (f"{tiny}.OTHER_ERROR", tiny_transformer, "OTHER_ERROR", 1),
        (f"{pos}.ROPE", positions.ROPE, "torch", "x"),  # a dict mutated in place
        (f"{pos}.RUNS", positions.RUNS, "rope", _common.Run(print, r.cases)),
        (f"{pos}.RUNS", r, "cases", ("default",)),  # a frozen dataclass
        (f"{pos}.checked_rope", positions.checked_rope.__closure__[0],
         "cell_contents", print),  # a closure cell
        (f"{tiny}.outcome", tiny_transformer.outcome, "__kwdefaults__", {"c": 1}),
        ("grader.kernel.runners._common.lookup", _common, "lookup", print),
        ("grader.kernel.runners._common.Run", _common.Run, "__init__", print),
    ]  # fmt: skip


def test_the_probe_sees_rebound_constants_containers_and_private_helpers():
    """Before the fix the probe watched public callables only: rebinding an
    outcome code or a target name, mutating RUNS, a frozen Run or a closure
    went unseen. Each change is reported, and undoing it is clean again."""
    from grader.kernel.probe import Probe

    _load_runners()
    probe = Probe()
    assert probe.changes() == []
    for label, target, name, value in _attacks():
        is_map = isinstance(target, dict)
        # object.__setattr__ gets past a frozen dataclass (not on a class)
        put = setattr if isinstance(target, type) else object.__setattr__
        before = target[name] if is_map else getattr(target, name)
        try:
            if is_map:
                target[name] = value
            else:
                put(target, name, value)
            assert label in probe.changes(), (label, name)
        finally:
            if is_map:
                target[name] = before
            else:
                put(target, name, before)
        assert probe.changes() == [], label


def test_the_probe_sees_a_replaced_runner_module_and_import_module():
    import importlib
    import sys
    import types

    from grader.kernel import runners
    from grader.kernel.probe import Probe

    _load_runners()
    probe = Probe()
    name = "grader.kernel.runners.positions"
    real, real_import = sys.modules[name], importlib.import_module
    try:
        sys.modules[name] = types.ModuleType(name)
        assert f"sys.modules[{name!r}]" in probe.changes()
        sys.modules[name] = real
        importlib.import_module = lambda n, p=None: real
        assert "importlib.import_module" in probe.changes()
        importlib.import_module = real_import

        class Liar(types.ModuleType):
            pass

        runners.__class__ = Liar
        assert "grader.kernel.runners (module class replaced)" in probe.changes()
    finally:
        sys.modules[name], importlib.import_module = real, real_import
        runners.__class__ = types.ModuleType
    assert probe.changes() == []


def integrity_reports(sources, timeout=60) -> list:
    """What the sandboxed kernel's probe reported after each cell."""
    from jupyter_core.utils import run_sync
    from nbclient import NotebookClient

    from grader.kernel.observations import INTEGRITY
    from grader.sandbox import SandboxedKernelManager

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])
    km = SandboxedKernelManager(kernel_name="python3")
    client = NotebookClient(nb, km=km, timeout=timeout, allow_errors=True)
    try:
        client.execute()
    finally:
        if km.has_kernel:
            run_sync(km.shutdown_kernel)(now=True)
    reports = []
    for cell in nb.cells:
        found = [
            json.loads(o["data"][INTEGRITY])["changed"]
            for o in cell.outputs
            if o.output_type == "display_data" and INTEGRITY in o.get("data", {})
        ]
        assert len(found) == 1, cell.outputs
        reports.append(found[0])
    return reports


def test_a_sandboxed_kernel_reports_a_rebound_runner_constant(light_kernels):
    """The hostile review's attack in a real kernel (preloading NumPy only:
    the runner modules are loaded whatever $GRADER_PRELOAD says). Before the
    fix the runner module was imported by the cell itself, after the snapshot,
    and the report was empty."""
    clean, attack, honest = integrity_reports(
        [
            "import sys\nprint(sorted(m for m in sys.modules if 'runners.' in m))",
            "import grader . kernel . runners . positions as P\nP.RAISED_OTHER = 1",
            "x = 1 + 1",
        ]
    )
    assert clean == []
    assert attack == ["grader.kernel.runners.positions.RAISED_OTHER"]
    assert honest == attack  # it stays changed: every later cell is reported


def test_the_internals_scan_reads_imports_and_attribute_chains():
    """Spaces around the dots (valid Python) got past the pattern; the AST
    check reads what the code imports and reaches, aliases resolved."""
    hostile = [
        "import grader . kernel . runners . positions as P\nP.RAISED_OTHER = 1",
        "from grader . kernel . runners import positions",
        "from grader import kernel",
        "import grader\ngrader .kernel.runners.positions.RETURNED = 1",
        "import sys as s\nm = s . modules",
        "m = getattr(__import__('sys'), 'modules')",
        "import gc as g\ng . get_objects()",
        "%%time\nimport grader . kernel",
        "from sys import modules as mods",
    ]
    for code in hostile:
        assert "grader internals" in staging.scan([code]), code
    honest = [
        "%matplotlib inline\nimport matplotlib.pyplot as plt",
        "grader_note = 'a'\nmodules = [1]\nx = grader_note.upper()",
        "import numpy as np\nnp.sum(np.ones(3))",
        "def f(:\n    pass",  # does not parse: the pattern alone decides
    ]
    for code in honest:
        assert staging.scan([code]) == [], code
    assert "grader internals" in staging.scan(["def f(:\n  grader.kernel"])


@pytest.mark.parametrize(
    ("value", "dtype"),
    [
        (np.array([1 + 2j]), "complex128"),
        (np.array([{"a": 1}], dtype=object), "object"),
        (np.array(["1.0"]), "<U3"),
        (np.zeros(2, dtype=[("a", "f4")]), "[('a', '<f4')]"),
        (np.array([1], dtype="datetime64[s]"), "datetime64[s]"),
    ],
)
def test_to_numpy_refuses_what_is_not_real_numbers(value, dtype):
    """For every assignment (not only the Part 3 runners): a dtype the wire
    format refuses is named as the student's mistake, never recorded (the
    grader would read it as a forged result: ``tampered``)."""
    from grader.kernel.adapters import to_numpy

    with pytest.raises(GradingError, match="return real numbers") as error:
        to_numpy(value, "f(x): outputs")
    assert str(error.value).startswith(f"f(x): outputs has dtype {dtype}")
    for ok in (np.ones(2, np.float32), np.arange(3), np.array([True]), 1.5):
        assert to_numpy(ok).dtype.kind in "biuf"


def test_a_complex_result_of_an_early_assignment_is_the_students_mistake():
    """addressing has no Part 3 ``refuse_unreal``: before the fix its complex
    weights went onto the wire, whose decoder refuses them (``tampered``)."""
    import torch
    from support.grading import student_solutions

    from grader.assignments import addressing

    ns = {"torch": torch, "np": np, "__name__": "__main__"}
    exec(student_solutions(A, "reference")["torch-solution"], ns)
    exec(
        "_honest = soft_lookup_torch\n"
        "def soft_lookup_torch(*args):\n"
        "    out, w = _honest(*args)\n"
        "    return out, w.detach().to(torch.complex64)\n",
        ns,
    )
    c = addressing.CHECKS["soft_lookup"]
    inputs = addressing.make_cases()["main"]
    with pytest.raises(GradingError, match="weights has dtype complex64.*real"):
        c.run("torch", ns, inputs, gradients=c.runner.gradients)
