"""The provenance scan (``grader.provenance``): what it must flag, what not.

The deny-list is the course library's public API, derived: every public name
of ``attncourse.numpy`` / ``.tf`` / ``.torch`` (``provenance.course_api``,
read from the modules' ``__all__``; checked here against the imported
modules) is attention-computing unless it is one of ``provenance.HELPERS``
(sizes, shapes, parameter dictionaries). Per assignment, every such name is
flagged in the assignment's own solution cell (staged as the grader stages
it), named directly, through an alias or a re-exporting submodule or a
literal ``getattr`` (``library-call``), or reached with a computed
``getattr``, ``importlib``, ``__import__`` or ``sys.modules``
(``dynamic-code``); what an assignment allows (``provenance.allow``) is
offered by its notebook and is not what it asks the learner to write. The
observed misses (``flash_attention(..., mask=...)`` in key-value-masking,
``FlashAttention``, ``gru_step``) are flagged by name.

Each attack in ``ATTACKS`` reaches a function an assignment forbids without
naming it plainly: ``getattr`` used as a value (``functools.reduce(getattr,
...)``, ``map``, an alias), introspection (``gc``, ``inspect``, frames,
``sys.modules`` reached through another module), a module object the scan
cannot follow (in a list, a dict, a class body, a default, a function
argument), re-exports (``attncourse.torch.multihead.nn``), code from strings
(``timeit``, ``pydoc.locate``, pickles, a module the notebook wrote, magics
with options) and the scan's own limits (alias cap, chain length, nested
magics). Each must be flagged (``library-call`` or ``dynamic-code``) for the
instructor, for seven assignments' lists.

The honest side: every assignment's reference solution and its catalogued
mistakes, staged as the grader stages them, and ordinary code
(``tf.nn.moments``, ``getattr(self, name)``, ``%timeit -n1 f(x)``) are not
flagged.
"""

import importlib
import re

import nbformat
import pytest
from support.grading import BUGS, WARNING_EDITS, release_notebook, student_solutions

from grader import assignments, provenance, staging
from grader import events as ev
from grader import notebooks as nbs
from grader.assignments import (
    attention_cost,
    flash_attention,
    kv_cache,
    multi_head_attention,
    positions,
    sparse_linear_attention,
    transformer_block,
)

SETUP = [
    (
        "setup",
        "import attncourse\nimport keras\nimport tensorflow as tf\n"
        "import torch\nfrom torch import nn\nimport numpy as np\n",
    )
]
# assignment -> (its FORBIDDEN, a course module, a forbidden function in it)
TARGETS = {
    "transformer-block": (
        transformer_block.FORBIDDEN,
        "attncourse.torch",
        "transformer_block",
    ),
    "positions": (positions.FORBIDDEN, "attncourse.torch", "apply_rope"),
    "kv-cache": (kv_cache.FORBIDDEN, "attncourse.torch", "decode_step"),
    "attention-cost": (
        attention_cost.FORBIDDEN,
        "attncourse.torch",
        "scaled_dot_product_attention",
    ),
    "flash-attention": (
        flash_attention.FORBIDDEN,
        "attncourse.torch",
        "flash_attention",
    ),
    "sparse-linear-attention": (
        sparse_linear_attention.FORBIDDEN,
        "attncourse.torch",
        "sliding_window_attention",
    ),
    "multi-head-attention": (
        multi_head_attention.FORBIDDEN,
        "attncourse.torch",
        "multi_head_attention",
    ),
}
# {mod}: the module, {fn}: the function, {a} + {b} == {fn} (a computed name)
ATTACKS = {
    # the hostile review (/tmp/e/evasion.py)
    "reduce(getattr)": "import functools\nimport {mod} as at\n"
    "f = functools.reduce(getattr, ['{a}' + '{b}'], at)",
    "map(getattr)": "import {mod} as at\nf = next(map(getattr, [at], ['{a}' + '{b}']))",
    "gc.get_objects": "import gc\nf = [o for o in gc.get_objects()\n"
    "     if getattr(o, '__name__', '') == '{a}' + '{b}'][0]",
    "getattr alias": "g = getattr\nimport {mod} as at\nf = g(at, '{a}' + '{b}')",
    "dir + getattr loop": "import {mod} as at\nfor n in dir(at):\n"
    "    if n == '{a}' + '{b}':\n        f = getattr(at, n)",
    "sys.modules": "import sys\nf = sys.modules['{mod}'].{fn}",
    "type(module)": "import {mod} as at\nM = type(at)",
    # getattr / builtins in other disguises
    "partial(getattr)": "import functools\nimport {mod} as at\n"
    "f = functools.partial(getattr, at)('{a}' + '{b}')",
    "getattr.__call__": "import {mod} as at\nf = getattr.__call__(at, '{a}' + '{b}')",
    "unicode getattr": "import {mod} as at\n\uff47 = \uff47\uff45\uff54attr\n"
    "f = \uff47(at, '{a}' + '{b}')",
    "getattr on a parameter": "def pick(m, n):\n    return getattr(m, n)\n"
    "import {mod} as at\nf = pick(at, '{a}' + '{b}')",
    "lambda default getattr": "import {mod} as at\n"
    "f = (lambda g=getattr: g(at, '{a}' + '{b}'))()",
    "shadowed exec": "exec = exec\nexec('import {mod} as at; f = at.' + '{a}' + '{b}')",
    "eval default": "def run(s, ev=eval):\n    return ev(s)\n"
    "f = run('{mod}.' + '{a}' + '{b}')",
    "__builtins__": "f = __builtins__.getattr(attncourse.torch, '{a}' + '{b}')",
    "builtins module": "import builtins as b\n"
    "f = b.getattr(attncourse.torch, '{a}{b}')",
    "getattr dunder literal": "d = getattr(attncourse.torch, '__dict__')\n"
    "f = d['{a}' + '{b}']",
    "object.__getattribute__": "import {mod} as at\n"
    "f = object.__getattribute__(at, '{a}' + '{b}')",
    "operator.attrgetter": "from operator import attrgetter as ag\n"
    "import {mod} as at\nf = ag('{a}' + '{b}')(at)",
    "_operator.attrgetter": "import _operator\nimport {mod} as at\n"
    "f = _operator.attrgetter('{a}' + '{b}')(at)",
    "inspect.getattr_static": "import inspect\nimport {mod} as at\n"
    "f = inspect.getattr_static(at, '{a}' + '{b}')",
    # a module object where the scan cannot follow it
    "module in a list": "ms = [{mod}]\nf = ms[0].{fn}",
    "module in a dict": "d = {{'m': {mod}}}\nf = d['m'].{fn}",
    "module through a parameter": "def call(m):\n    return m.{fn}\nf = call({mod})",
    "module as a lambda default": "f = (lambda m={mod}: m.{fn})()",
    "module in a class body": "class Box:\n    m = {mod}\nf = Box.m.{fn}",
    "module on an attribute": "class Box:\n    pass\nb = Box()\nb.m = {mod}\n"
    "f = b.m.{fn}",
    "module returned": "def get():\n    return {mod}\nf = get().{fn}",
    "module by decorator": "@lambda g: g({mod})\ndef f(m):\n    return m.{fn}",
    "module in a for loop": "for m in ({mod},):\n    f = m.{fn}",
    "module as match subject": "match {mod}:\n    case object({fn}=f):\n        pass",
    "module through with": "import contextlib\n"
    "with contextlib.nullcontext({mod}) as m:\n    f = m.{fn}",
    "string.Formatter.get_field": "import string\n"
    "f = string.Formatter().get_field('0.' + '{a}' + '{b}', [{mod}], {{}})[0]",
    # reaching sys.modules / frames / globals through other objects
    "os.sys.modules": "import os\nf = os.sys.modules['{mod}'].{fn}",
    "collections._sys.modules": "import collections\n"
    "f = collections._sys.modules['{mod}'].{fn}",
    "sys._getframe": "import sys\n"
    "f = sys._getframe().f_globals['attncourse'].torch.{fn}",
    "traceback frame": "try:\n    1 / 0\nexcept ZeroDivisionError as e:\n"
    "    g = e.__traceback__.tb_frame.f_globals",
    "generator frame": "def gen():\n    yield\n"
    "g = gen().gi_frame.f_globals['attncourse']",
    "star import, name rebound": "from {mod} import *\nf = {fn}\n{fn} = None",
    # code from strings, other processes, files
    "timeit string": "import timeit\n"
    "timeit.Timer('import {mod} as a; a.' + '{a}' + '{b}').timeit(1)",
    "pydoc.locate": "import pydoc\nf = pydoc.locate('{mod}.' + '{a}' + '{b}')",
    "logging.config factory": "import logging.config\n"
    "logging.config.dictConfig({{'version': 1}})",
    "typing.get_type_hints": "import typing\n"
    "def h() -> '{mod}.{fn}':\n    pass\nf = typing.get_type_hints(h)['return']",
    "numpy allow_pickle": "import io\nf = np.load(io.BytesIO(b''), allow_pickle=True)",
    "torch.load": "import io\nf = torch.load(io.BytesIO(b''), weights_only=False)",
    "subprocess": "import subprocess, sys\n"
    "subprocess.run([sys.executable, '-c', 'import {mod}'])",
    "os.system": "import os\nos.system('python -c 1')",
    "a module the notebook wrote": "open('helper.py', 'w').write('x = 1')\n"
    "import helper\nf = helper.x",
    "shell escape": "!python -c 'import {mod}'",
    "%run magic": "%run helper.py",
    "get_ipython().run_cell": "get_ipython().run_cell("
    "'import {mod} as a; f = a.' + '{fn}')",
    "timeit with options": "%timeit -n1 -r1 f = {mod}.{fn}",
    "nested magics": "%time %time %time %time %time %time %time %time f = {mod}.{fn}",
    # the course library and frameworks re-export what they import
    "re-exported nn": "f = attncourse.torch.multihead.nn.MultiheadAttention(8, 2)",
    "re-exported torch": "import attncourse.torch.transformer as T\n"
    "o = T.torch.nn.functional.scaled_dot_product_attention(q, k, v)",
    "re-exported keras": "o = attncourse.tf.multihead.keras.ops.dot_product_attention",
    "torch.nn.modules.TransformerEncoderLayer": "l = torch.nn.modules"
    ".TransformerEncoderLayer(8, 2, 16, batch_first=True)",
    "course bridge to nn.MultiheadAttention": "m = attncourse.torch.to_torch_mha(p, 2)",
    "course GQA as MHA": "o = attncourse.torch.grouped_query_attention("
    "a, a, a, p, 2, 2)",
    "keras deserialize": "l = keras.layers.deserialize("
    "{{'class_name': 'MultiHeadAttention', 'config': {{}}}})",
    "torch.overrides": "fs = torch.overrides.get_overridable_functions()",
    # the scan's own limits
    "alias cap": "".join(f"m = np.x{i}\n" for i in range(20)) + "m = {mod}\nf = m.{fn}",
    "a long chain": "f = torch" + ".nn.functional.torch" * 400,
    "a chain too deep to parse here": "f = torch" + ".nn.functional.torch" * 1200,
    "timeit cell with options": "%%timeit -n1 -r1\nf = {mod}.{fn}",
}


def scan(code: str, forbidden):
    return provenance.scan([("torch-solution", code)], forbidden, SETUP)


@pytest.mark.parametrize("assignment", list(TARGETS))
@pytest.mark.parametrize("attack", list(ATTACKS))
def test_attack_is_flagged(attack, assignment):
    forbidden, mod, fn = TARGETS[assignment]
    half = len(fn) // 2
    code = ATTACKS[attack].format(mod=mod, fn=fn, a=fn[:half], b=fn[half:])
    found = scan(code, forbidden)
    assert found.calls or found.dynamic, (attack, assignment, code)


@pytest.mark.parametrize(
    "code, expected",
    [
        ("f = functools.reduce(getattr, ['x'], at)", "getattr used as a value"),
        ("f = getattr(attncourse.torch, 'soft_attention')", "soft_attention"),
        ("m = getattr(attncourse, 'torch')\nf = m.soft_attention", "soft_attention"),
        ("g = id(getattr(torch, 'nn'))", "torch.nn is passed to a function"),
        ("import gc\ngc.get_objects()", "imports gc"),
        ("ms = [attncourse.torch]", "attncourse.torch is put in a tuple or list"),
        ("import os\nos.sys.modules['x']", "os.sys.modules"),
        ("import helper", "not installed"),
        ("%timeit -n1 f = attncourse.torch.soft_attention", "soft_attention"),
        ("!ls", "get_ipython().system"),
    ],
)
def test_notes_say_what_was_found(code, expected):
    """The instructor reads the note: it names the construct."""
    found = scan(code, provenance.COURSE_ATTENTION)
    assert any(expected in n for n in found.calls + found.dynamic), found


CLEAN = {
    "tf.nn.moments": "mean, var = tf.nn.moments(x, axes=[-1], keepdims=True)",
    "own getattr": "class Net:\n    def w(self, i):\n"
    "        return getattr(self, f'w{i}')",
    "literal getattr": "w = getattr(layer, 'weight', None)",
    "literal getattr on a module": "d = getattr(torch, 'float32')\n"
    "lin = getattr(torch.nn, 'Linear')(8, 8)\nf = getattr(nn.functional, 'gelu')",
    "hasattr and setattr": "if hasattr(x, 'numpy'):\n    setattr(obj, name, 1)",
    "isinstance": "ok = isinstance(x, torch.Tensor) and x.dtype == torch.float32",
    "dtype keyword": "t = torch.tensor(x, dtype=torch.float64)\n"
    "u = tf.constant(x, dtype=tf.float64)",
    "function as a value": "import torch.nn.functional as F\n"
    "def ff(x, act=F.gelu):\n    return act(x)",
    "own nn.Module": "class Block(nn.Module):\n    def __init__(self):\n"
    "        super().__init__()\n        self.lin = nn.Linear(8, 8)\n"
    "    def forward(self, x):\n        n = sum(1 for _ in self.modules())\n"
    "        return self.lin(x)",
    "keras model": "m = keras.Sequential([keras.layers.Dense(4)])\n"
    "m.compile(optimizer='adam', loss='mse')",
    "own function with a forbidden name": "def transformer_block(x, p, h):\n"
    "    return x\ny = transformer_block(1, 2, 3)",
    "time magics": "%time y = f(x)\n%timeit -n1 -r1 f(x)",
    "numpy and math": "import math\nimport numpy as np\n"
    "s = np.sqrt(2) * math.pi\nz = np.load('x.npy')",
    "keras ops": "z = keras.ops.softmax(x, axis=-1)\nw = keras.ops.matmul(a, b)",
    "torch ops": "z = torch.softmax(a @ b.transpose(-2, -1) / math.sqrt(8), dim=-1)",
}


@pytest.mark.parametrize("code", list(CLEAN.values()), ids=list(CLEAN))
def test_ordinary_code_is_clean(code):
    found = scan(code, transformer_block.FORBIDDEN)
    assert not found.calls and not found.dynamic, found


class Quiet:
    def __init__(self):
        self.flags, self.notes = {}, []

    def flag(self, name, note=""):
        assert name in ev.FLAGS, name
        self.flags.setdefault(name, []).append(note)

    def note(self, text):
        self.notes.append(text)


def staged_flags(assignment, solutions) -> dict:
    """flag -> notes of ``solutions`` staged and scanned as the grader does."""
    release = release_notebook(assignment)
    nb = nbformat.from_dict(nbs.submission(release, solutions))
    q = Quiet()
    staged, _ = staging.rebuild(nb, nbformat.from_dict(release), q)
    staging.check_provenance(staged, nbformat.from_dict(release), assignment, q)
    return q.flags


def students(assignment):
    found = {b.student for b in BUGS if b.assignment == assignment}
    return ["reference", *sorted(found), *(["warning"] * (assignment in WARNING_EDITS))]


@pytest.mark.parametrize("assignment", list(assignments.ASSIGNMENTS))
def test_honest_solutions_stay_clean(assignment):
    """Staged as the grader stages them: the blank release, the reference
    solution and every catalogued mistake of every assignment are not
    flagged (the test cells are context, never scanned)."""
    flags = staged_flags(assignment, {})
    assert not {"library-call", "dynamic-code"} & set(flags), ("blank", flags)
    for student in students(assignment):
        flags = staged_flags(assignment, student_solutions(assignment, student))
        assert not {"library-call", "dynamic-code"} & set(flags), (student, flags)


def test_a_hostile_cell_in_a_staged_submission_is_flagged():
    """The same path as the grader: a reduce(getattr) in the solution cell."""
    release = release_notebook("transformer-block")
    sol = student_solutions("transformer-block", "reference")
    sol["torch-solution"] += (
        "\n\nimport functools\n"
        "_f = functools.reduce(getattr, ['transformer' + '_block'], "
        "attncourse.torch)\n"
    )
    nb = nbformat.from_dict(nbs.submission(release, sol))
    q = Quiet()
    staged, _ = staging.rebuild(nb, nbformat.from_dict(release), q)
    staging.check_provenance(
        staged, nbformat.from_dict(release), "transformer-block", q
    )
    assert "getattr used as a value" in " ".join(q.flags["dynamic-code"])


# ------------------------------------------------- the deny-list, derived
def allowed(assignment) -> set:
    """The course names ``assignment`` allows: its ``provenance.allow``."""
    forbidden = assignments.get(assignment).FORBIDDEN
    return {p.rsplit(".", 1)[-1] for p in forbidden if p.startswith("!attncourse")}


def test_the_api_read_from_source_is_the_modules_public_api():
    """``course_api`` (read from the source, nothing imported) is each
    framework module's ``__all__``, and every public function or class the
    modules define is forbidden unless it is a helper."""
    for fw, names in provenance.course_api().items():
        module = importlib.import_module(f"attncourse.{fw}")
        assert set(module.__all__) == set(names), fw
        for sub in {*names.values()}:
            mod = importlib.import_module(f"attncourse.{fw}.{sub}")
            for attr in dir(mod):
                obj = getattr(mod, attr)
                if attr.startswith("_") or not callable(obj):
                    continue
                if not getattr(obj, "__module__", "").startswith(f"attncourse.{fw}"):
                    continue
                name = f"attncourse.{fw}.{sub}.{attr}"
                hit = provenance.forbidden_match(name, provenance.COURSE_ATTENTION)
                assert bool(hit) == (attr not in provenance.HELPERS), name


def test_helpers_are_parameter_bookkeeping_of_the_api():
    """The rule for "not attention-computing": a helper sizes, shapes or
    converts parameters (its name says so) and is part of the API."""
    api = set().union(*provenance.course_api().values())
    assert api >= provenance.HELPERS
    for name in provenance.HELPERS:
        assert re.search(r"param|_bytes$", name), name


@pytest.mark.parametrize("assignment", list(assignments.ASSIGNMENTS))
def test_an_allowance_is_offered_by_the_notebook_and_is_not_the_task(assignment):
    release = release_notebook(assignment)
    text = " ".join(nbs.source(c) for c in release["cells"])
    asked = {
        re.sub(r"_?(tf|torch|TF|Torch)$", "", m)
        for code in student_solutions(assignment, "reference").values()
        for m in re.findall(r"^(?:def|class) (\w+)", code, re.M)
    }
    for name in allowed(assignment) - provenance.HELPERS:
        assert f"{name}" in text, (assignment, name)
        assert name not in asked, (assignment, name)


# form -> (code: the last line uses {fw}.{name}, the flag that line must get)
FORMS = {
    "attribute": ("_x{i} = attncourse.{fw}.{name}", "library-call"),
    "re-export": ("_x{i} = attncourse.{fw}.{module}.{name}(q, k, v)", "library-call"),
    "from-import alias": (
        "from attncourse.{fw} import {name} as _f{i}\n_x{i} = _f{i}(q, k, v)",
        "library-call",
    ),
    "module alias": (
        "import attncourse.{fw} as _m{i}\n_x{i} = _m{i}.{name}",
        "library-call",
    ),
    "literal getattr": ("_x{i} = getattr(attncourse.{fw}, '{name}')", "library-call"),
    "computed getattr": (
        "_x{i} = getattr(attncourse.{fw}, '{a}' + '{b}')",
        "dynamic-code",
    ),
    "importlib": (
        "import importlib\n_x{i} = importlib.import_module('attncourse.{fw}').{name}",
        "dynamic-code",
    ),
    "__import__": (
        "_x{i} = __import__('attncourse.{fw}', fromlist=['x']).{name}",
        "dynamic-code",
    ),
    "sys.modules": (
        "import sys\n_x{i} = sys.modules['attncourse.{fw}'].{name}",
        "dynamic-code",
    ),
}


@pytest.mark.parametrize("form", list(FORMS))
@pytest.mark.parametrize("assignment", list(assignments.ASSIGNMENTS))
def test_every_attention_name_of_the_library_is_flagged(assignment, form):
    """Each attention-computing name of the three framework modules (derived:
    ``provenance.attention_api``), used in the assignment's solution cell in
    this form, is flagged on its own line; the assignment's allowances are not
    flagged as library calls."""
    template, flag = FORMS[form]
    solutions = student_solutions(assignment, "reference")
    code = solutions["torch-solution"].rstrip("\n")
    lines = {}  # line number -> (dotted name, allowed)
    api = provenance.attention_api()
    for fw, names in api.items():
        for name, module in sorted(names.items()):
            i = len(lines)
            half = len(name) // 2
            snippet = template.format(
                i=i, fw=fw, name=name, module=module, a=name[:half], b=name[half:]
            )
            code += "\n" + snippet
            shown = f"{module}.{name}" if "{module}" in template else name
            lines[code.count("\n") + 1] = (
                f"attncourse.{fw}.{shown}",
                name in allowed(assignment),
            )
    solutions["torch-solution"] = code
    flags = staged_flags(assignment, solutions)
    notes = {}
    for kind in ("library-call", "dynamic-code"):
        for note in flags.get(kind, []):
            m = re.match(r"torch-solution line (\d+):", note)
            if m:
                notes.setdefault((kind, int(m[1])), []).append(note)
    missed, wrong = [], []
    for line, (name, ok) in lines.items():
        got = notes.get((flag, line), [])
        if flag == "library-call":
            got = [n for n in got if name in n]
            if ok and got:
                wrong.append(name)
        if not ok and not got:
            missed.append(name)
    assert not missed, (assignment, form, "not flagged", missed)
    assert not wrong, (assignment, form, "allowed but flagged", wrong)
    assert len(lines) == sum(map(len, api.values())) > 200


OBSERVED = [
    # the misses: full marks and no flag before the list was derived
    (
        "key-value-masking",
        "tf-solution",
        "o, lse = attncourse.tf.flash_attention(q, k, v, mask=m)",
        "attncourse.tf.flash_attention",
    ),
    (
        "key-value-masking",
        "torch-solution",
        "from attncourse.torch import flash_attention as fa\n"
        "o, lse = fa(q, k, v, mask=m)",
        "attncourse.torch.flash_attention",
    ),
    (
        "flash-attention",
        "torch-solution",
        "o = attncourse.torch.FlashAttention.apply(q, k, v)",
        "attncourse.torch.FlashAttention",
    ),
    (
        "sparse-linear-attention",
        "torch-solution",
        "class Mine(attncourse.torch.FlashAttention):\n    pass",
        "attncourse.torch.FlashAttention",
    ),
    (
        "cross-attention-seq2seq",
        "torch-solution",
        "s = attncourse.torch.gru_step(x, h, p)",
        "attncourse.torch.gru_step",
    ),
    (
        "cross-attention-seq2seq",
        "tf-solution",
        "s = attncourse.tf.seq2seq.gru_step(x, h, p)",
        "attncourse.tf.seq2seq.gru_step",
    ),
    (
        "tiny-transformer",
        "torch-solution",
        "s = attncourse.torch.induction_score(w, t)",
        "attncourse.torch.induction_score",
    ),
]


@pytest.mark.parametrize(
    "assignment, part, code, name", OBSERVED, ids=[f"{o[0]}:{o[3]}" for o in OBSERVED]
)
def test_observed_misses_are_flagged(assignment, part, code, name):
    solutions = student_solutions(assignment, "reference")
    solutions[part] += "\n" + code + "\n"
    flags = staged_flags(assignment, solutions)
    assert any(name in n for n in flags.get("library-call", [])), flags


def test_the_notebooks_own_helpers_stay_allowed():
    """builtin-layers' bridges (its reference calls them) and attention-cost's
    masked_softmax (its notebook offers it) are not flagged; their neighbours
    are."""
    sol = student_solutions("attention-cost", "reference")
    sol["torch-solution"] += "\nw = attncourse.torch.masked_softmax(s, m)\n"
    assert not staged_flags("attention-cost", sol)
    sol["torch-solution"] += "\nm = attncourse.torch.causal_mask(4, 4)\n"
    flags = staged_flags("attention-cost", sol)
    assert any("causal_mask" in n for n in flags["library-call"]), flags
    # tiny-transformer's find_heads may call the chapter's previous-token score
    sol = student_solutions("tiny-transformer", "reference")
    sol["tf-solution"] += "\ns = attncourse.tf.previous_token_score(w)\n"
    assert not staged_flags("tiny-transformer", sol)


def test_what_the_instructor_cells_use_is_allowed():
    """A name the assignment's own (locked) cells use is its helper."""
    context = [("setup", "import attncourse\nm = attncourse.torch.causal_mask(3, 3)")]
    forbidden = assignments.get("self-attention").FORBIDDEN
    code = (
        "a = attncourse.torch.causal_mask(5, 5)\nb = attncourse.torch.sequence_mask(x)"
    )
    found = provenance.scan([("torch-solution", code)], forbidden, context)
    assert [n for n in found.calls if "causal_mask" in n] == [], found
    assert any("sequence_mask" in n for n in found.calls), found
