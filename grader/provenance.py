"""Did the student write it? Calls to ready-made attention, found statically.

An exercise that asks the learner to write soft attention is not solved by
calling ``attncourse.torch.soft_attention`` or ``F.scaled_dot_product_attention``;
the verdict cannot tell (the numbers are right). Staging therefore reads the
student's code (solution cells and their own cells) with ``ast`` and flags

* ``library-call``: a reference to (call, import, alias, base class of) a name
  in the assignment's ``FORBIDDEN`` list (``grader/assignments/<slug>.py``):
  the course library's own implementation of the exercise and the
  frameworks' built-in attention layers (``COURSE_ATTENTION``,
  ``BUILTIN_ATTENTION`` below; ``builtin-layers`` allows the built-ins,
  since using them is its task). A name is also matched from each of its
  components on (``attncourse.torch.multihead.nn.MultiheadAttention`` is
  ``torch.nn.MultiheadAttention``: modules re-export the modules they import);
* ``dynamic-code``: what a static scan cannot follow -- code run from strings
  (``exec`` / ``eval`` / ``compile``, ``importlib``, ``__import__``, ``runpy``,
  ``code``, ``timeit``, ``pydoc.locate``, pickles, subprocesses, IPython's
  API and magics other than ``%time`` / ``%timeit`` / ``%%capture``),
  attribute access by a computed name (``getattr`` with a computed name on
  anything but ``self``/``cls``, and ``getattr`` / ``vars`` / ``eval`` ...
  used as a value: ``reduce(getattr, ...)``, ``g = getattr``), introspection
  (``gc``, ``inspect``, ``sys.modules``, ``sys._getframe``, ``builtins``,
  ``__builtins__``, dunders such as ``__dict__`` / ``__subclasses__``, frame
  attributes such as ``f_globals``), a private attribute of a module
  (``collections._sys``), a module used as a value the scan cannot follow
  (passed, stored in a list, dict, class body or default, returned), a star
  import of a module that holds forbidden names, an import of a module that
  is not installed (a file the notebook wrote), code too long, too deep or
  not parsable, and a variable bound to more names than the scan keeps.

Both are for the instructor's review; the score is not changed, so a false
flag costs a minute of review, a missed one a wrong grade: the rules lean to
flagging. Deliberately clean: ``getattr(obj, "literal")`` (read as
``obj.literal``), ``getattr(self, name)`` on the student's own objects,
``hasattr`` / ``setattr``, ``isinstance(x, torch.Tensor)``, framework
functions passed as values (``activation=F.gelu``), ``tf.nn.moments``.

Names are resolved through the notebook's imports and assignments (``from
torch import nn``, ``import torch.nn.functional as F``, ``layer =
nn.MultiheadAttention``, ``getattr(F, "scaled_dot_product_attention")``,
``a if c else b``, star imports), with the instructor's cells (the setup
cell's imports) as context; the scan is flow-insensitive (a name bound
anywhere counts everywhere), so it over-reports rather than misses, and
IPython magics (``%time ...``) are read as code too.

It is a static check and cannot be complete: an object reached through
values it cannot follow (the return value of an unflagged call that hands out
functions, a module held by an object's attribute in an installed package)
can still hide a call. Runtime evidence closes that: a profile of which
library functions ran: the kernel start (``grader/kernel/probe.py``) could
wrap the ``FORBIDDEN`` callables in tripwires and add a ``sys.addaudithook``
hook (``exec``, ``compile``, ``import``, ``gc.get_objects``,
``sys._getframe`` events; Python code cannot remove it) before the student's
code runs. Both run in the student's kernel, so they are evidence, not proof.
"""

import ast
import importlib.machinery
import importlib.util
import os
import re
import sys
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from functools import lru_cache

# Patterns: "a.b.c" (that name and anything under it), "a.*.leaf" (a name under
# a whose later component matches leaf, fnmatch-style), "a.*" (anything under a).
COURSE_ATTENTION = (
    "attncourse.*.soft_attention",
    "attncourse.*.key_value_attention",
    "attncourse.*.scaled_dot_product_attention",
    "attncourse.*.multi_head_attention",
    "attncourse.*.MultiHeadAttention",
    "attncourse.*.CustomAttention*",
    "attncourse.*.SelfAttention*",
    "attncourse.*.AttentionLayer",
    "attncourse.*.CrossAttention",
    "attncourse.*.StatisticalAttention",
    # what computes attention inside: GQA with one query head per kv head is
    # MHA, a decode step and the blocks and models run it
    "attncourse.*.grouped_query_attention",
    "attncourse.*.GroupedQueryAttention",
    "attncourse.*.decode_step",
    "attncourse.*.transformer_block",
    "attncourse.*.decoder_block",
    "attncourse.*.TransformerBlock",
    "attncourse.*.DecoderBlock",
    "attncourse.*.tiny_transformer",
    "attncourse.*.TinyTransformer",
)
COURSE_MASKS = (
    "attncourse.*.sequence_mask",
    "attncourse.*.causal_mask",
    "attncourse.*.masked_softmax",
    "attncourse.*.to_keras_mask",
    "attncourse.*.to_torch_mha_mask",
    "attncourse.*.to_sdpa_mask",
)
BUILTIN_ATTENTION = (
    "keras.*.MultiHeadAttention",
    "keras.*.Attention",
    "keras.*.AdditiveAttention",
    "keras.*.GroupQueryAttention",
    "keras.*.GroupedQueryAttention",
    "keras.*.dot_product_attention",
    "keras.*.multi_head_attention*",
    "torch.*.MultiheadAttention",
    "torch.*.scaled_dot_product_attention",
    "torch.*.multi_head_attention_forward",
    "torch.*._native_multi_head_attention",
    "torch.*._scaled_dot_product_*",
    "torch.*._flash_attention*",
    "torch.*._triton_*attention",
    # anywhere under torch: torch.nn.modules.TransformerEncoderLayer too
    "torch.*.Transformer*",
    "torch.nn.modules.transformer",
    "torch.nn.attention",
    "torch.ops",
    "torch._C",
    "keras_hub",
    "keras_nlp",
    "transformers",
    "flash_attn",
    "xformers",
    # the course's bridges build the built-in layer (builtin-layers allows them)
    "attncourse.*.to_torch_mha",
    "attncourse.*.to_keras_mha",
)
# where a computed attribute name (getattr(m, name)) can reach such functions
TRACKED_ROOTS = (
    "attncourse",
    "torch",
    "tensorflow",
    "keras",
    "tf_keras",
    "keras_hub",
    "keras_nlp",
    "transformers",
    "jax",
    "flax",
)
# builtins that run code or fetch attributes by a computed name: flagged
# wherever they are named (called, passed, aliased, shadowed)
DYNAMIC_CALLS = {
    "__import__": "__import__()",
    "eval": "eval()",
    "exec": "exec()",
    "compile": "compile()",
    "globals": "globals()",
    "locals": "locals()",
    "breakpoint": "breakpoint()",
    "vars": "vars()",
    "__builtins__": "__builtins__",
    "__loader__": "__loader__",
    "__spec__": "__spec__",
}
# patterns as above: code from strings, introspection, other processes
DYNAMIC_MODULES = (
    "importlib",
    "imp",
    "pkgutil",
    "pkg_resources",
    "runpy",
    "zipimport",
    "site",
    "sys.modules",
    "sys._getframe",
    "sys._current_frames",
    "sys.meta_path",
    "sys.path_hooks",
    "sys.path_importer_cache",
    "sys.settrace",
    "sys.setprofile",
    "builtins",
    "__main__",
    "gc",
    "inspect",
    "ctypes",
    "operator.attrgetter",
    "operator.methodcaller",
    "types.FunctionType",
    "types.LambdaType",
    "types.CodeType",
    "typing.get_type_hints",
    "typing.ForwardRef",
    "marshal",
    "pickle",
    "copyreg",
    "shelve",
    "dill",
    "cloudpickle",
    "joblib",
    "code",
    "codeop",
    "timeit",
    "pdb",
    "bdb",
    "trace",
    "profile",
    "cProfile",
    "doctest",
    "pydoc",
    "rlcompleter",
    "logging.config",
    "unittest.mock",
    "subprocess",
    "multiprocessing",
    "concurrent",
    "pty",
    "posix",
    "nt",
    "os.system",
    "os.popen",
    "os.exec*",
    "os.spawn*",
    "os.posix_spawn*",
    # IPython's shell runs strings (run_cell, magics); IPython.display is fine
    "IPython.get_ipython",
    "IPython.core",
    "IPython.embed*",
    "IPython.start_*",
    "IPython.terminal",
    "IPython.utils",
    "IPython.lib",
    "IPython.extensions",
    "ipykernel",
    "pandas.read_pickle",
    "torch.load",
    "torch.*.load",
    "torch.overrides",
    "torch.hub",
    "torch.package",
    "torch.serialization",
    "torch.library",
    "keras.*.deserialize*",
    "keras.*.get_registered_object",
    "keras.*.get_custom_objects",
    "keras.*.model_from_*",
    "keras.*.load_model",
    "tensorflow.saved_model",
)
DUNDERS = {
    "__dict__",
    "__getattribute__",
    "__getattr__",
    "__globals__",
    "__subclasses__",
    "__builtins__",
    "__import__",
    "__loader__",
    "__spec__",
    "__code__",
    "__closure__",
    "__bases__",
    "__mro__",
    "__base__",
    "__reduce__",
    "__reduce_ex__",
    "__self__",
    "__func__",
    "__wrapped__",
    "__module__",
    "__traceback__",
    "__annotations__",
    "__kwdefaults__",
    "__defaults__",
    # frames, tracebacks, generators: their globals hold every module
    "f_globals",
    "f_locals",
    "f_builtins",
    "f_back",
    "f_code",
    "tb_frame",
    "tb_next",
    "gi_frame",
    "cr_frame",
    "ag_frame",
    "gi_code",
    "co_consts",
}
# how frameworks re-export each other (checked in this order)
CANONICAL = (
    ("tensorflow.python.keras", "keras"),
    ("tensorflow.keras", "keras"),
    ("tf_keras", "keras"),
    ("tensorflow.compat.v1.keras", "keras"),
    ("tensorflow.compat.v2.keras", "keras"),
)
# what a component of a longer name usually stands for (a module's own import
# of it: ``attncourse.torch.multihead.nn`` is ``torch.nn``)
ALIASES = {
    "nn": "torch.nn",
    "F": "torch.nn.functional",
    "functional": "torch.nn.functional",
    "tf": "tensorflow",
    "th": "torch",
    "np": "numpy",
    "K": "keras",
    "layers": "keras.layers",
    "ops": "keras.ops",
}
# magics that run the code they are given as it is written (no $/{} expansion)
SAFE_MAGICS = {"time", "timeit", "capture", "matplotlib"}
# get_ipython().<attr> that runs no code from strings (hooks, display)
SAFE_SHELL = {"events", "display_pub"}
OWN = {"self", "cls"}  # getattr(self, name): the student's own object
MAX_SOURCE = 2_000_000  # characters of student code read (more: flagged)
MAX_ALIASES = 16  # dotted names one variable may stand for (more: flagged)
MAX_NAME = 20_000  # characters of one dotted name kept
LONG_NAME = 300  # a longer dotted name is reported (a hiding place)
MAX_MAGIC_DEPTH = 6  # magics inside magics read (deeper: flagged)
_SUFFIXES = (".py", *importlib.machinery.EXTENSION_SUFFIXES)


def canonical(name: str) -> str:
    for old, new in CANONICAL:
        if name == old or name.startswith(old + "."):
            return new + name[len(old) :]
    return name


def matches(name: str, pattern: str) -> bool:
    """See the pattern forms above (linear in ``len(name)``)."""
    if "*" not in pattern:
        return name == pattern or name.startswith(pattern + ".")
    if ".*" not in pattern:  # a wildcard in the last component: "a.b.Leaf*"
        k = pattern.count(".") + 1
        return fnmatchcase(".".join(name.split(".", k)[:k]), pattern)
    head, _, leaf = pattern.partition(".*")
    if not name.startswith(head + "."):
        return False
    leaf = leaf.lstrip(".")
    rest = name[len(head) + 1 :].split(".")
    return not leaf or any(fnmatchcase(part, leaf) for part in rest)


def candidates(name: str) -> list[str]:
    """``name`` and what it is read as from each later component on:
    ``os.sys.modules`` -> ``sys.modules``, ``collections._sys`` -> ``sys``,
    ``attncourse.torch.tiny.F.sdpa`` -> ``torch.nn.functional.sdpa``."""
    parts = name.split(".")
    first = parts[0].lstrip("_") or parts[0]
    out = [canonical(".".join([first, *parts[1:]]))]
    for i in range(1, min(len(parts), 64)):
        part = parts[i].lstrip("_") or parts[i]
        rest = "".join(f".{p}" for p in parts[i + 1 :])
        if part in TRACKED_ROOTS or _dynamic_module(part + rest):
            out.append(canonical(part + rest))
        if part in ALIASES and not out[0].startswith(ALIASES[part].split(".")[0]):
            out.append(canonical(ALIASES[part] + rest))
    return list(dict.fromkeys(out))


def forbidden_match(name: str, forbidden) -> str | None:
    for candidate in candidates(name):
        hit = next((p for p in forbidden if matches(candidate, p)), None)
        if hit:
            return hit
    return None


def dynamic_match(name: str) -> str | None:
    return next((c for c in candidates(name) if _dynamic_module(c)), None)


def _dynamic_module(name: str) -> bool:
    return any(matches(name, m) for m in DYNAMIC_MODULES)


@lru_cache(maxsize=4096)
def is_module(name: str) -> bool:
    """Is ``name`` an installed module (found on disk, nothing imported)?"""
    parts = name.split(".")
    if len(parts) > 8 or not all(p.isidentifier() for p in parts):
        return False
    if parts[0] in sys.builtin_module_names:
        return len(parts) == 1
    locations = _locations(parts[0])
    if locations is None:
        return False
    if parts[0] == "tensorflow":  # its API namespaces live under _api/v2
        locations = [*locations, *(os.path.join(p, "_api", "v2") for p in locations)]
    for part in parts[1:]:
        found = []
        for loc in locations:
            path = os.path.join(loc, part)
            if os.path.isdir(path):
                found.append(path)
            elif any(os.path.isfile(path + x) for x in _SUFFIXES):
                return part == parts[-1]
        if not found:
            return False
        locations = found
    return True


@lru_cache(maxsize=1024)
def _locations(top: str) -> tuple | None:
    """Where the top-level module ``top`` is (None: not installed); the
    course library from this checkout, wherever the grader runs."""
    if top == "attncourse":
        return (os.path.join(os.path.dirname(os.path.dirname(__file__)), top),)
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError, AttributeError):
        return None
    return None if spec is None else tuple(spec.submodule_search_locations or ())


def _installed(top: str) -> bool:
    return (
        top in sys.stdlib_module_names
        or top in sys.builtin_module_names
        or _locations(top) is not None
    )


@dataclass
class Findings:
    calls: list = field(default_factory=list)  # library-call notes
    dynamic: list = field(default_factory=list)  # dynamic-code notes

    def add(self, kind: str, note: str) -> None:
        notes = self.calls if kind == "call" else self.dynamic
        if note not in notes:
            notes.append(note)


def _transform(source: str) -> str:
    """IPython syntax (magics, ``!cmd``) as plain Python."""
    try:
        from IPython.core.inputtransformer2 import TransformerManager

        return TransformerManager().transform_cell(source)
    except Exception:  # noqa: BLE001  (unparsable: ast.parse reports it)
        return source


_OPTIONS = re.compile(r"\s*(?:-[-\w]+(?:[ \t]+\d+)?[ \t]+)+")


def _parse(source: str, problems: list, depth: int = 0) -> list[ast.AST]:
    """Modules of ``source`` and of the code inside its magics; what cannot be
    read goes to ``problems``."""
    try:
        tree = ast.parse(_transform(source))
    except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
        # a cell with a syntax error does not run either (the guard flags
        # syntax-error); code too deep for this process may run in a kernel
        # with a higher recursion limit, and code inside a magic may run
        line = getattr(e, "lineno", None)
        if depth or not isinstance(e, SyntaxError | ValueError):
            problems.append(
                f"code the provenance check cannot parse ({type(e).__name__}"
                + (f", line {line}" if line else "")
                + ")"
            )
        return []
    trees = [tree]
    for node in ast.walk(tree):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("run_line_magic", "run_cell_magic")
        ):
            continue
        if depth >= MAX_MAGIC_DEPTH:
            problems.append(f"magics nested more than {MAX_MAGIC_DEPTH} deep")
            break
        for arg in node.args[1:]:
            if not (isinstance(arg, ast.Constant) and isinstance(arg.value, str)):
                problems.append(f"line {node.lineno}: a magic with computed code")
                continue
            inner: list = []
            parsed = _parse(arg.value, inner, depth + 1)
            if inner:  # "%timeit -n1 -r1 code": read the code after the options
                m = _OPTIONS.match(arg.value)
                if m:
                    inner = []
                    parsed = _parse(arg.value[m.end() :], inner, depth + 1)
            problems += [f"line {node.lineno}: in a magic: {p}" for p in inner]
            trees += parsed
    return trees


def _chain(node) -> tuple[ast.AST, list[str]]:
    """``a.b.c`` -> (Name a, ["b", "c"]), iteratively."""
    attrs = []
    while isinstance(node, ast.Attribute):
        attrs.append(node.attr)
        node = node.value
    return node, attrs[::-1]


def _literal_getattr(node) -> tuple[ast.AST, str] | None:
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "getattr"
        and len(node.args) >= 2
        and isinstance(node.args[1], ast.Constant)
        and isinstance(node.args[1].value, str)
    ):
        return node.args[0], node.args[1].value
    return None


class _Names:
    """Flow-insensitive bindings: variable -> dotted names it may stand for."""

    def __init__(self, trees):
        self.trees = trees
        self.bound: dict[str, set] = {}
        self.local: set = set()  # names bound to something we cannot resolve
        self.star: list = []  # modules star-imported
        self.overflow: set = set()  # variables with more than MAX_ALIASES names
        for _ in range(6):  # alias chains: a few rounds reach a fixed point
            if not self._collect():
                break

    def _bind(self, name: str, values) -> bool:
        values = {v for v in values if len(v) <= MAX_NAME}
        have = self.bound.setdefault(name, set())
        new = values - have
        if new and len(have) + len(new) > MAX_ALIASES:
            self.overflow.add(name)
        if new and len(have) < MAX_ALIASES:
            have.update(sorted(new)[: MAX_ALIASES - len(have)])
            return True
        return False

    def _collect(self) -> bool:
        changed = False
        for tree in self.trees:
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    for a in node.names:
                        if a.asname:
                            changed |= self._bind(a.asname, {a.name})
                        else:
                            top = a.name.split(".")[0]
                            changed |= self._bind(top, {top})
                elif (
                    isinstance(node, ast.ImportFrom) and node.module and not node.level
                ):
                    for a in node.names:
                        if a.name == "*":
                            if node.module not in self.star:
                                self.star.append(node.module)
                        else:
                            changed |= self._bind(
                                a.asname or a.name, {f"{node.module}.{a.name}"}
                            )
                elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.NamedExpr)):
                    targets = (
                        node.targets if isinstance(node, ast.Assign) else [node.target]
                    )
                    for target in targets:
                        changed |= self._assign(target, node.value)
                elif isinstance(
                    node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
                ):
                    self.local.add(node.name)
                elif isinstance(node, ast.arg):
                    self.local.add(node.arg)
                elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                    self.local.add(node.id)
        return changed

    def _assign(self, target, value) -> bool:
        if value is None:
            return False
        if isinstance(target, ast.Name):
            found = self.resolve(value)
            return self._bind(target.id, found) if found else False
        if (
            isinstance(target, (ast.Tuple, ast.List))
            and isinstance(value, (ast.Tuple, ast.List))
            and len(target.elts) == len(value.elts)
        ):
            changed = False
            for t, v in zip(target.elts, value.elts, strict=True):
                changed |= self._assign(t, v)
            return changed
        return False

    def resolve(self, node) -> set:
        """The dotted names ``node`` may stand for (empty: unknown)."""
        if isinstance(node, ast.IfExp):
            return self.resolve(node.body) | self.resolve(node.orelse)
        if isinstance(node, ast.BoolOp):
            return set().union(*(self.resolve(v) for v in node.values))
        if isinstance(node, ast.NamedExpr):
            return self.resolve(node.value)
        literal = _literal_getattr(node)
        if literal is not None:
            return {f"{v}.{literal[1]}" for v in self.resolve(literal[0])}
        base, attrs = _chain(node)
        if isinstance(base, ast.Name):
            roots = set(self.bound.get(base.id, ()))
            if not roots and base.id not in self.local:
                roots = {f"{m}.{base.id}" for m in self.star}
        elif isinstance(base, (ast.IfExp, ast.BoolOp, ast.NamedExpr)) or (
            _literal_getattr(base) is not None
        ):
            roots = self.resolve(base)
        else:
            roots = set()
        suffix = "".join(f".{a}" for a in attrs)
        return {
            canonical(r + suffix) for r in roots if len(r) + len(suffix) <= MAX_NAME
        }


def _label_line(label: str, node) -> str:
    return f"{label} line {getattr(node, 'lineno', '?')}"


def scan(cells, forbidden=(), context=()) -> Findings:
    """Findings in ``cells`` [(label, source)], the student's code; ``context``
    [(label, source)] are the instructor's cells (their imports bind names).
    """
    found = Findings()
    total = sum(len(src) for _, src in cells)
    if total > MAX_SOURCE:
        found.add(
            "dynamic",
            f"{total} characters of code: more than the "
            f"{MAX_SOURCE} the provenance check reads",
        )
        cells = _truncate(cells)
    try:
        _scan(cells, tuple(forbidden), context, found)
    except (RecursionError, MemoryError) as e:
        found.add(
            "dynamic",
            f"code the provenance check could not read ({type(e).__name__}: "
            "nested too deep)",
        )
    return found


def _scan(cells, forbidden, context, found) -> None:
    student = []
    for label, src in cells:
        problems: list = []
        student.append((label, _parse(src, problems)))
        for p in problems:
            found.add("dynamic", f"{label}: {p}")
    names = _Names(
        [t for _, src in context for t in _parse(src, [])]
        + [t for _, trees in student for t in trees]
    )
    for name in sorted(names.overflow):
        found.add(
            "dynamic",
            f"the variable {name} stands for more than {MAX_ALIASES} names "
            "(the provenance check keeps that many)",
        )
    for label, trees in student:
        for tree in trees:
            parents = {
                id(child): parent
                for parent in ast.walk(tree)
                for child in ast.iter_child_nodes(parent)
            }
            # only whole chains: a.b.c is resolved once, not again as a.b and a
            inner = {
                id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute)
            }
            ctx = _Context(label, names, forbidden, found, parents)
            for node in ast.walk(tree):
                _check(node, ctx, id(node) in inner)


@dataclass
class _Context:
    label: str
    names: _Names
    forbidden: tuple
    found: Findings
    parents: dict


def _truncate(cells):
    out, left = [], MAX_SOURCE
    for label, src in cells:
        out.append((label, src[:left]))
        left = max(0, left - len(src))
    return out


def _check(node, ctx: _Context, inner=False) -> None:
    where = _label_line(ctx.label, node)
    found, names, forbidden = ctx.found, ctx.names, ctx.forbidden
    if isinstance(node, ast.Import | ast.ImportFrom):
        _check_import(node, where, forbidden, found)
        return
    if isinstance(node, ast.Attribute):
        if node.attr in DUNDERS:
            found.add("dynamic", f"{where}: introspection ({node.attr})")
        base, attrs = _chain(node)
        if not inner and len(attrs) * 2 + sum(map(len, attrs)) > LONG_NAME:
            found.add(
                "dynamic",
                f"{where}: an attribute chain of {len(attrs)} names "
                f"({'.'.join(attrs)[:60]}...)",
            )
    if (
        isinstance(node, ast.keyword)
        and node.arg in ("allow_pickle", "weights_only")
        and not (
            isinstance(node.value, ast.Constant)
            and node.value.value is (node.arg == "weights_only")
        )
    ):  # np.load(..., allow_pickle=True), torch.load(..., weights_only=False)
        found.add("dynamic", f"{where}: {node.arg}= (a pickle can import anything)")
    if isinstance(node, ast.MatchClass):
        for attr in node.kwd_attrs:  # case C(attr=x): reads x = subject.attr
            if attr in DUNDERS:
                found.add("dynamic", f"{where}: introspection ({attr})")
    literal = _literal_getattr(node)
    if literal is not None and (literal[1] in DUNDERS or literal[1].startswith("_")):
        found.add("dynamic", f"{where}: getattr(..., {literal[1]!r})")
    if (
        isinstance(node, ast.Attribute | ast.Name)
        and isinstance(getattr(node, "ctx", None), ast.Load)
        or literal is not None
    ):
        resolved = () if inner else sorted(names.resolve(node))
        for name in resolved:
            _check_name(name, where, forbidden, found)
        how = _escapes(node, ctx.parents) if resolved else None
        if how and any(is_module(c) for n in resolved for c in candidates(n)):
            found.add(
                "dynamic",
                f"{where}: the module {resolved[0]} {how}, where the "
                "provenance check cannot follow it",
            )
    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
        _check_builtin(node, where, ctx)


def _check_import(node, where, forbidden, found) -> None:
    module = getattr(node, "module", None) or ""
    if isinstance(node, ast.ImportFrom) and (node.level or not module):
        found.add("dynamic", f"{where}: a relative import (a file the notebook wrote)")
        return
    top = (module or node.names[0].name).split(".")[0]
    if not _installed(top):
        found.add(
            "dynamic",
            f"{where}: imports {top}, not installed where the grader runs "
            "(a file the notebook wrote?): its code is not read",
        )
    elif top.startswith("_") and top != "__future__":
        found.add("dynamic", f"{where}: imports the private module {top}")
    for a in node.names:
        if a.name == "*":
            hit = _may_hold(module, forbidden)
            if hit:
                found.add(
                    "dynamic",
                    f"{where}: from {module} import * (it holds {hit}; the "
                    "provenance check cannot tell its names from yours)",
                )
            continue
        full = a.name if isinstance(node, ast.Import) else f"{module}.{a.name}"
        for name in (canonical(full), canonical(module)):
            if name:
                _check_name(name, where, forbidden, found, imports=True)


def _check_name(name, where, forbidden, found, imports=False) -> None:
    verb = "imports " if imports else ""
    if len(name) > LONG_NAME:
        found.add(
            "dynamic",
            f"{where}: an attribute chain of {len(name)} characters ({name[:60]}...)",
        )
    hit = forbidden_match(name, forbidden)
    if hit:
        found.add("call", f"{where}: {verb}{name} ({_why(hit)})")
    dyn = dynamic_match(name)
    if dyn:
        found.add("dynamic", f"{where}: {verb}{name}")
    # a private attribute on the way to another (collections._sys.modules),
    # or anywhere under the course library or a framework (decoding._attend)
    parts = name.split(".")
    private = [
        i
        for i, p in enumerate(parts[1:], 1)
        if p.startswith("_") and not p.endswith("__")
    ]
    if private and (private[0] < len(parts) - 1 or parts[0] in TRACKED_ROOTS):
        found.add("dynamic", f"{where}: {name} (a private attribute of a module)")


def _may_hold(module: str, forbidden) -> str | None:
    """A pattern that may match a name under ``module``."""
    module = canonical(module)
    for p in forbidden:
        head = p.split(".*")[0].split("*")[0].rstrip(".")
        if module.startswith(head) or head.startswith(module + "."):
            return p
    return None


def _escapes(node, parents) -> str | None:
    """How a module-valued ``node`` leaves what the scan follows (None: it
    does not): dereferenced, called, compared, bound to a plain name."""
    child, parent = node, parents.get(id(node))
    while isinstance(parent, ast.IfExp | ast.BoolOp | ast.NamedExpr) and (
        not isinstance(parent, ast.IfExp) or child is not parent.test
    ):
        child, parent = parent, parents.get(id(parent))
    if parent is None or isinstance(parent, ast.Expr | ast.Compare):
        return None
    if isinstance(parent, ast.Attribute) or (
        isinstance(parent, ast.Call) and child is parent.func
    ):
        return None
    if isinstance(parent, ast.IfExp):  # the test of a conditional
        return None
    if isinstance(parent, ast.Tuple | ast.List):
        holder = parents.get(id(parent))
        if (
            isinstance(holder, ast.Assign)
            and holder.value is parent
            and all(
                isinstance(t, ast.Tuple | ast.List)
                and len(t.elts) == len(parent.elts)
                and all(isinstance(e, ast.Name) for e in t.elts)
                for t in holder.targets
            )
            and not _in_class(holder, parents)
        ):
            return None
        return "is put in a tuple or list"
    if isinstance(parent, ast.Assign | ast.AnnAssign) and child is parent.value:
        targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
        if all(isinstance(t, ast.Name) for t in targets):
            return "is a class attribute" if _in_class(parent, parents) else None
        return "is stored in an attribute or item"
    if isinstance(parent, ast.Call | ast.keyword):
        return "is passed to a function"
    if isinstance(parent, ast.arguments):
        return "is a default argument"
    if isinstance(parent, ast.Return | ast.Yield | ast.YieldFrom | ast.Lambda):
        return "is returned"
    if isinstance(parent, ast.Dict | ast.Set):
        return "is put in a dict or set"
    return f"is used in a {type(parent).__name__}"


def _in_class(node, parents) -> bool:
    scope = parents.get(id(node))
    while scope is not None and not isinstance(
        scope, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef
    ):
        scope = parents.get(id(scope))
    return isinstance(scope, ast.ClassDef)


def _check_builtin(node, where, ctx: _Context) -> None:
    """Builtins that fetch by a computed name or run code, however named."""
    name, parent = node.id, ctx.parents.get(id(node))
    called = isinstance(parent, ast.Call) and parent.func is node
    if name in DYNAMIC_CALLS:
        how = DYNAMIC_CALLS[name] if called else f"{name} used as a value"
        ctx.found.add("dynamic", f"{where}: {how}")
    elif name == "getattr":
        if not called:
            ctx.found.add("dynamic", f"{where}: getattr used as a value")
        elif _literal_getattr(parent) is None:
            obj = parent.args[0] if parent.args else None
            if not (isinstance(obj, ast.Name) and obj.id in OWN):
                shown = sorted(ctx.names.resolve(obj)) if obj is not None else []
                target = shown[0] if shown else "an object"
                ctx.found.add("dynamic", f"{where}: getattr({target}, <computed name>)")
    elif name == "get_ipython" and not _safe_magic(node, ctx.parents):
        call = parent if called else None
        attr = ctx.parents.get(id(call)) if call is not None else None
        what = attr.attr if isinstance(attr, ast.Attribute) else "..."
        if not (called and not call.args and what in SAFE_SHELL):
            ctx.found.add("dynamic", f"{where}: IPython's API (get_ipython().{what})")


def _safe_magic(node, parents) -> bool:
    """``get_ipython().run_line_magic("time", "code")`` and the like."""
    call = parents.get(id(node))
    attr = parents.get(id(call))
    outer = parents.get(id(attr))
    return (
        isinstance(call, ast.Call)
        and not call.args
        and isinstance(attr, ast.Attribute)
        and attr.attr in ("run_line_magic", "run_cell_magic")
        and isinstance(outer, ast.Call)
        and outer.func is attr
        and bool(outer.args)
        and isinstance(outer.args[0], ast.Constant)
        and outer.args[0].value in SAFE_MAGICS
    )


def _why(pattern: str) -> str:
    if pattern.startswith("attncourse") and "_mha" not in pattern:
        return "the course library's implementation"
    if pattern == "resource" or pattern.startswith("resource."):
        return "the memory cases' address-space limit"
    if pattern.startswith(("torch.autograd", "torch.func")):
        return "autograd, where the exercise asks for the gradients by hand"
    if "nan" in pattern.lower():
        return "NaN scrubbing, where the exercise asks to skip the tiles"
    return "a built-in attention layer or function"
