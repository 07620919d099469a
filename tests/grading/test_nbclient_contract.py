"""``GuardedExecute`` (grader/guard.py) leans on nbclient internals: it overrides
``_get_timeout``, ``_async_check_alive`` and ``output``, calls ``_cleanup_kernel``
and the run_sync wrappers, and swaps ``km`` itself. nbclient is pinned for that
(requirements.txt); these tests fail when an nbclient upgrade renames, drops or
re-signs any of it, or stops calling a hook guard.py overrides -- which would
otherwise silently switch off a time limit, the disk watchdog or the output cap.

Everything is derived from guard.py's source (``ast``), so the list stays true
while guard.py changes: every ``self.NAME(...)`` call to an inherited method,
every ``super().NAME(...)`` and ``NotebookClient.NAME(self, ...)`` call, every
override of an inherited method, and every ``self.NAME`` it reads without
setting it.
"""

import ast
import inspect
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import nbclient
import nbformat
import pytest

import grader.guard as guard

GUARD = Path(guard.__file__)
CLASS = "GuardedExecute"


@dataclass
class Call:
    name: str
    line: int
    positional: int  # positional arguments after self
    keywords: tuple[str, ...]
    starred: bool


@dataclass
class Uses:
    """What the class in guard.py takes from its bases."""

    own: set[str] = field(default_factory=set)  # methods defined in the class
    traits: set[str] = field(default_factory=set)  # class-level assignments
    self_calls: list[Call] = field(default_factory=list)
    super_calls: list[Call] = field(default_factory=list)
    explicit_calls: list[Call] = field(default_factory=list)  # NotebookClient.x(self)
    reads: dict[str, int] = field(default_factory=dict)  # self.NAME loads
    writes: set[str] = field(default_factory=set)  # self.NAME = ...


def _call(node: ast.Call, name: str, skip_first: bool = False) -> Call:
    args = node.args[1:] if skip_first else node.args
    return Call(
        name,
        node.lineno,
        len(args),
        tuple(k.arg for k in node.keywords if k.arg),
        any(isinstance(a, ast.Starred) for a in args)
        or any(k.arg is None for k in node.keywords),
    )


def _is_self(node) -> bool:
    return isinstance(node, ast.Name) and node.id == "self"


def analyse(source: str, class_name: str = CLASS) -> Uses:
    tree = ast.parse(source)
    (cls,) = [
        n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name
    ]
    uses = Uses()
    for item in cls.body:
        if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
            uses.own.add(item.name)
        elif isinstance(item, ast.Assign):
            uses.traits |= {t.id for t in item.targets if isinstance(t, ast.Name)}
    called = set()
    for node in ast.walk(cls):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            target, name = node.func.value, node.func.attr
            if _is_self(target):
                uses.self_calls.append(_call(node, name))
                called.add(id(node.func))
            elif (
                isinstance(target, ast.Call)
                and isinstance(target.func, ast.Name)
                and target.func.id == "super"
            ):
                uses.super_calls.append(_call(node, name))
            elif (
                isinstance(target, ast.Name)
                and target.id == "NotebookClient"
                and node.args
                and _is_self(node.args[0])
            ):
                uses.explicit_calls.append(_call(node, name, skip_first=True))
    for node in ast.walk(cls):
        if isinstance(node, ast.Attribute) and _is_self(node.value):
            if isinstance(node.ctx, ast.Store):
                uses.writes.add(node.attr)
            elif id(node) not in called:
                uses.reads.setdefault(node.attr, node.lineno)
    return uses


USES = analyse(GUARD.read_text())
BASES = guard.GuardedExecute.__mro__[1:]


def defining_class(name: str, bases=BASES):
    for cls in bases:
        if name in vars(cls):
            return cls
    return None


def signature_of(cls, name: str) -> inspect.Signature:
    """The real signature: nbclient's sync methods are ``run_sync`` wrappers
    ``(*args, **kwargs)`` around ``async_NAME`` (``_async_NAME`` when private)."""
    func = getattr(cls, name)
    sig = inspect.signature(func)
    kinds = [p.kind for p in sig.parameters.values()]
    if kinds == [inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD]:
        private = name.startswith("_")
        twin = f"_async_{name[1:]}" if private else f"async_{name}"
        assert hasattr(cls, twin), (
            f"{cls.__name__}.{name} is a (*args, **kwargs) wrapper but {twin} is gone"
        )
        sig = inspect.signature(getattr(cls, twin))
    return sig


def problems_with_calls(calls, bases=BASES, what="self") -> list[str]:
    problems = []
    for call in calls:
        owner = defining_class(call.name, bases)
        if owner is None:
            problems.append(
                f"guard.py:{call.line} calls {what}.{call.name}(), which no base "
                f"class defines any more"
            )
            continue
        if call.starred:
            continue
        sig = signature_of(owner, call.name)
        args = [object()] * call.positional
        kwargs = dict.fromkeys(call.keywords, object())
        try:
            sig.bind(object(), *args, **kwargs)  # object(): self
        except TypeError as exc:
            problems.append(
                f"guard.py:{call.line} calls {what}.{call.name} with "
                f"{call.positional} positional and {list(call.keywords)} keyword "
                f"arguments; {owner.__module__}.{owner.__name__}.{call.name}{sig} "
                f"does not accept that: {exc}"
            )
    return problems


def _inherited_self_calls(uses: Uses):
    return [c for c in uses.self_calls if c.name not in uses.own]


def _sources_of(bases) -> str:
    mods = {sys.modules[c.__module__] for c in bases if c.__module__ != "builtins"}
    return "\n".join(inspect.getsource(m) for m in mods)


def problems_with_overrides(uses: Uses, cls, bases=BASES) -> list[str]:
    problems = []
    base_source = _sources_of(bases)
    for name in sorted(uses.own):
        owner = defining_class(name, bases)
        if owner is None or name.startswith("__"):
            continue  # our own method, or __init__-like
        ours = list(inspect.signature(getattr(cls, name)).parameters)
        theirs = list(signature_of(owner, name).parameters)
        if ours != theirs:
            problems.append(
                f"guard.py overrides {owner.__name__}.{name}: ours takes {ours}, "
                f"{owner.__module__}'s takes {theirs}"
            )
        called = f"self.{name}(" in base_source
        # nbclient's hooks (on_cell_executed, ...) run as run_hook(self.NAME, ...)
        hooked = re.search(rf"run_hook\(\s*self\.{name}\b", base_source)
        if not called and not hooked:
            problems.append(
                f"guard.py overrides {owner.__name__}.{name}, but no base class "
                f"calls self.{name}(...) any more: the override would never run"
            )
    return problems


def test_the_analysis_finds_what_guard_py_uses():
    """A guard against the analysis itself going blind (e.g. a class rename)."""
    inherited = {c.name for c in _inherited_self_calls(USES)}
    assert {"execute_cell", "start_new_kernel", "_cleanup_kernel"} <= inherited
    assert {c.name for c in USES.super_calls} >= {"output", "_async_check_alive"}
    assert {"_get_timeout", "_async_check_alive", "output"} <= USES.own
    assert "__init__" in {c.name for c in USES.explicit_calls}


def test_inherited_methods_guard_py_calls_exist_with_those_signatures():
    calls = _inherited_self_calls(USES) + USES.super_calls
    assert problems_with_calls(calls) == []


def test_explicit_notebookclient_calls_match_its_signatures():
    problems = problems_with_calls(
        USES.explicit_calls, bases=(nbclient.NotebookClient,), what="NotebookClient"
    )
    assert problems == []


def test_overrides_match_and_are_still_called_by_nbclient():
    assert problems_with_overrides(USES, guard.GuardedExecute) == []


def test_private_names_come_from_nbclient_or_nbconvert():
    """The private names guard.py uses and does not define live in the packages
    pinned for it (a private name of nbgrader's would need its own pin)."""
    private = {
        c.name
        for c in _inherited_self_calls(USES) + USES.super_calls
        if c.name.startswith("_") and not c.name.startswith("__")
    }
    private |= {n for n in USES.own if n.startswith("_") and defining_class(n)}
    assert private, "guard.py uses no private name: update this test's docstring"
    homes = {n: defining_class(n).__module__.split(".")[0] for n in private}
    assert set(homes.values()) <= {"nbclient", "nbconvert"}, homes


def test_state_guard_py_reads_or_swaps_exists_on_a_notebook_client():
    """Attributes guard.py reads but never sets (``timeout``, ``log``, ``nb``,
    ``resources``...) and the ones it swaps under nbclient (``km``, ``kc``) exist
    after the same set-up its ``preprocess`` does."""
    ge = guard.GuardedExecute()
    nbclient.NotebookClient.__init__(ge, nbformat.v4.new_notebook(), None)
    ge.reset_execution_trackers()
    ge._check_assign_resources({"metadata": {}})
    methods = USES.own | {c.name for c in USES.self_calls}
    needed = {
        n: line
        for n, line in USES.reads.items()
        if n not in USES.writes | USES.traits | methods
    }
    shared = {
        n
        for n in USES.writes
        if hasattr(nbclient.NotebookClient(nbformat.v4.new_notebook()), n)
    }
    assert {"km", "kc"} <= shared, shared
    missing = [
        f"self.{n} (guard.py:{line})"
        for n, line in needed.items()
        if not hasattr(ge, n)
    ]
    assert missing == []
    client = inspect.getsource(nbclient.client)
    assert [n for n in shared if f"self.{n}" not in client] == []


# -- the checks can fail -------------------------------------------------------
class _Resigned(nbclient.NotebookClient):
    """An 'upgrade' that gives a private hook a new required parameter."""

    async def _async_check_alive(self, kernel):
        return None


_HOSTILE_SOURCE = """
class Guarded(Base):
    def _get_timeout(self, cell):
        return 1
    async def _async_check_alive(self):
        await super()._async_check_alive()
    def run(self, cell):
        self.execute_cell(cell, 0, store_history=True, extra=1)
        self._cleanup_kernel()
        self.vanished_method()
"""


def test_the_checks_fail_on_a_changed_nbclient():
    uses = analyse(_HOSTILE_SOURCE, "Guarded")
    bases = _Resigned.__mro__
    calls = problems_with_calls(_inherited_self_calls(uses) + uses.super_calls, bases)
    text = "\n".join(calls)
    assert "vanished_method" in text
    assert "_async_check_alive" in text  # super() call no longer binds
    assert "execute_cell" in text  # extra=1 is not a parameter of execute_cell

    class Guarded(_Resigned):
        def _get_timeout(self, cell):
            return 1

        async def _async_check_alive(self):
            return None

    overrides = "\n".join(problems_with_overrides(uses, Guarded, Guarded.__mro__[1:]))
    assert "_async_check_alive" in overrides  # signatures differ


@pytest.mark.parametrize("hook", ["_get_timeout", "_async_check_alive", "output"])
def test_an_override_nbclient_no_longer_calls_is_reported(hook, monkeypatch):
    real = inspect.getsource

    def without_calls(obj):
        return real(obj).replace(f"self.{hook}(", f"self.{hook}_renamed(")

    monkeypatch.setattr(inspect, "getsource", without_calls)
    problems = problems_with_overrides(USES, guard.GuardedExecute)
    assert any(hook in p and "never run" in p for p in problems), problems
