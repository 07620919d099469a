"""Did the student write it? Ready-made attention in the student's code.

Staging reads the student's cells (solution cells and their own) with ``ast``
and flags, for the instructor's review (the score is not changed):

* ``library-call``: a name that matches the assignment's ``FORBIDDEN``
  (``grader/assignments/<slug>.py``), called, imported, aliased, subclassed,
  fetched by a literal ``getattr`` or reached through a re-export
  (``attncourse.torch.multihead.nn.MultiheadAttention`` is also read as
  ``torch.nn.MultiheadAttention``). The course part is derived, not listed:
  ``COURSE_ATTENTION`` forbids everything under ``attncourse.numpy``, ``.tf``
  and ``.torch`` (whose public API :func:`course_api` reads from the modules'
  ``__all__``) and the two modules that run it (``benchmark``, ``training``),
  except ``HELPERS`` (sizes, shapes, parameter dictionaries: no attention is
  computed), what an assignment allows (``allow(...)``, said so in its
  notebook) and what its instructor cells use. ``BUILTIN_ATTENTION`` is the
  frameworks' own attention.
* ``dynamic-code``, coarsely, what the scan cannot follow: code from strings
  (``exec``, ``eval``, ``compile``, ``importlib``, ``__import__``, pickles,
  processes, IPython's API, magics other than ``%time``/``%timeit``/
  ``%%capture``), a computed attribute name (``getattr`` with a non-literal
  name on anything but ``self``/``cls``; ``getattr``/``vars`` as values),
  introspection (``gc``, ``inspect``, ``sys.modules``, frames, dunders), a
  module used as a value (passed, stored, returned), a private attribute of a
  module, an import of a module that is not installed, and the scan's limits.

Names are resolved flow-insensitively through the notebook's imports and
assignments (the instructor's cells as context): it over-reports rather than
misses. It cannot see objects handed out at run time by calls it does not know.
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

LIBRARY = os.path.join(os.path.dirname(os.path.dirname(__file__)), "attncourse")
FRAMEWORKS = ("numpy", "tf", "torch")


def _words(text: str) -> list[str]:
    return text.split()


# public names of attncourse.<framework> that compute no attention
HELPERS = frozenset(
    _words("""kv_cache_bytes block_param_shapes tiny_param_shapes get_params set_params
    gru_params_from_keras gru_params_from_torch gru_params_to_keras
    gru_params_to_torch mha_params_to_keras mha_params_to_torch""")
)


@lru_cache(maxsize=1)
def course_api() -> dict[str, dict[str, str]]:
    """{framework: {public name: its module}}: the ``__all__`` of each module
    of ``attncourse.<framework>``, read from the source (nothing imported)."""
    api: dict = {}
    for fw in FRAMEWORKS:
        api[fw] = {}
        folder = os.path.join(LIBRARY, fw)
        for file in sorted(f for f in os.listdir(folder) if f[0] != "_"):
            if file.endswith(".py"):
                with open(os.path.join(folder, file), encoding="utf-8") as f:
                    body = ast.parse(f.read()).body
                for n in body:
                    if isinstance(n, ast.Assign) and "__all__" in {
                        getattr(t, "id", "") for t in n.targets
                    }:
                        api[fw].update(
                            dict.fromkeys(ast.literal_eval(n.value), file[:-3])
                        )
    return api


def attention_api() -> dict[str, dict[str, str]]:
    """course_api() without HELPERS: the attention-computing names."""
    return {
        fw: {n: m for n, m in names.items() if n not in HELPERS}
        for fw, names in course_api().items()
    }


def allow(*names: str) -> tuple:
    """Exceptions to COURSE_ATTENTION: ``attncourse.<fw>[.<module>].<name>``."""
    return tuple(f"!attncourse.*.{n}" for n in names)


# Patterns: "a.b.c" (that name and anything under it), "a.*.leaf" (a name under
# a whose later component matches leaf, fnmatch-style), "a.*" (anything under
# a), "!pattern" (an exception: a name that matches it and ends in its leaf)
COURSE_ATTENTION = (
    *(f"attncourse.{fw}.*" for fw in FRAMEWORKS),
    "attncourse.benchmark",  # make_callables hands out the implementations
    "attncourse.training",  # runs the seq2seq models
    *allow(*sorted(HELPERS)),
)
BUILTIN_ATTENTION = tuple(
    _words("""keras.*.MultiHeadAttention keras.*.Attention keras.*.AdditiveAttention
    keras.*.GroupQueryAttention keras.*.GroupedQueryAttention
    keras.*.dot_product_attention keras.*.multi_head_attention*
    torch.*.MultiheadAttention torch.*.scaled_dot_product_attention
    torch.*.multi_head_attention_forward torch.*._native_multi_head_attention
    torch.*._scaled_dot_product_* torch.*._flash_attention*
    torch.*._triton_*attention torch.*.Transformer* torch.nn.modules.transformer
    torch.nn.attention torch.ops torch._C jax.*.dot_product_attention
    flax.*.*Attention keras_hub keras_nlp transformers flash_attn xformers""")
)
# where a computed attribute name (getattr(m, name)) can reach such functions
TRACKED_ROOTS = frozenset(
    _words(
        "attncourse torch tensorflow keras tf_keras keras_hub keras_nlp transformers "
        "jax flax"
    )
)
# builtins that run code or fetch by a computed name, wherever they are named
DYNAMIC_CALLS = frozenset(
    _words(
        "__import__ eval exec compile globals locals breakpoint vars __builtins__ "
        "__loader__ __spec__"
    )
)
# patterns as above: code from strings, introspection, other processes
DYNAMIC_MODULES = tuple(
    _words("""importlib imp pkgutil pkg_resources runpy zipimport site sys.modules
    sys._getframe sys._current_frames sys.meta_path sys.path_hooks
    sys.path_importer_cache sys.settrace sys.setprofile builtins __main__ gc
    inspect ctypes operator.attrgetter operator.methodcaller types.FunctionType
    types.LambdaType types.CodeType typing.get_type_hints typing.ForwardRef
    marshal pickle copyreg shelve dill cloudpickle joblib code codeop timeit pdb
    bdb trace profile cProfile doctest pydoc rlcompleter logging.config
    unittest.mock subprocess multiprocessing concurrent pty posix nt os.system
    os.popen os.exec* os.spawn* os.posix_spawn* IPython.get_ipython IPython.core
    IPython.embed* IPython.start_* IPython.terminal IPython.utils IPython.lib
    IPython.extensions ipykernel pandas.read_pickle torch.load torch.*.load
    torch.overrides torch.hub torch.package torch.serialization torch.library
    keras.*.deserialize* keras.*.get_registered_object keras.*.get_custom_objects
    keras.*.model_from_* keras.*.load_model tensorflow.saved_model""")
)
# attributes that reach globals, code, classes' namespaces or frames
DUNDERS = frozenset(
    _words("""__dict__ __getattribute__ __getattr__ __globals__ __subclasses__
    __builtins__ __import__ __loader__ __spec__ __code__ __closure__ __bases__
    __mro__ __base__ __reduce__ __reduce_ex__ __self__ __func__ __wrapped__
    __module__ __traceback__ __annotations__ __kwdefaults__ __defaults__
    f_globals f_locals f_builtins f_back f_code tb_frame tb_next gi_frame
    cr_frame ag_frame gi_code co_consts""")
)
# where frameworks re-export Keras (checked in this order)
KERAS_HOMES = _words(
    "tensorflow.python.keras tensorflow.keras tf_keras tensorflow.compat.v1.keras "
    "tensorflow.compat.v2.keras"
)
# what a component of a longer name usually stands for (a module's own import
# of it: ``attncourse.torch.multihead.nn`` is ``torch.nn``)
ALIASES = dict(
    pair.split("=")
    for pair in _words(
        "nn=torch.nn F=torch.nn.functional functional=torch.nn.functional "
        "tf=tensorflow th=torch np=numpy K=keras layers=keras.layers ops=keras.ops"
    )
)
SAFE_MAGICS = {"time", "timeit", "capture", "matplotlib"}  # run code as written
SAFE_SHELL = {"events", "display_pub"}  # get_ipython().<attr> that runs no code
OWN = {"self", "cls"}  # getattr(self, name): the student's own object
MAX_SOURCE = 2_000_000  # characters of student code read (more: flagged)
MAX_ALIASES = 16  # dotted names one variable may stand for (more: flagged)
MAX_NAME = 20_000  # characters of one dotted name kept
LONG_NAME = 300  # a longer dotted name is reported (a hiding place)
MAX_MAGIC_DEPTH = 6  # magics inside magics read (deeper: flagged)
_SUFFIXES = (".py", *importlib.machinery.EXTENSION_SUFFIXES)
_OPTIONS = re.compile(r"\s*(?:-[-\w]+(?:[ \t]+\d+)?[ \t]+)+")
# how a module-valued expression leaves what the scan follows, by its parent
_ESCAPES = {
    **dict.fromkeys((ast.Tuple, ast.List), "is put in a tuple or list"),
    **dict.fromkeys((ast.Call, ast.keyword), "is passed to a function"),
    **dict.fromkeys((ast.Return, ast.Yield, ast.YieldFrom, ast.Lambda), "is returned"),
    **dict.fromkeys((ast.Dict, ast.Set), "is put in a dict or set"),
    ast.arguments: "is a default argument",
}


def canonical(name: str) -> str:
    for old in KERAS_HOMES:
        if name == old or name.startswith(old + "."):
            return "keras" + name[len(old) :]
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
    """The pattern of ``forbidden`` that ``name`` hits (None: allowed)."""
    rules = [p for p in forbidden if not p.startswith("!")]
    excepted = [p[1:] for p in forbidden if p.startswith("!")]
    for c in candidates(name):
        leaf = c.rsplit(".", 1)[-1]
        if any(
            matches(c, e) and fnmatchcase(leaf, e.rsplit(".", 1)[-1]) for e in excepted
        ):
            continue
        hit = next((p for p in rules if matches(c, p)), None)
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
        return (LIBRARY,)
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


def _parse(source: str, problems: list, depth: int = 0) -> list[ast.AST]:
    """Modules of ``source`` (IPython syntax as Python) and of the code inside
    its magics; what cannot be read goes to ``problems``."""
    try:
        from IPython.core.inputtransformer2 import TransformerManager

        source = TransformerManager().transform_cell(source)
    except Exception:  # noqa: BLE001, S110  (unparsable: ast.parse reports it)
        pass
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
        # a cell with a syntax error does not run either (the guard flags
        # syntax-error); code too deep for this process, or inside a magic, may
        if depth or not isinstance(e, SyntaxError | ValueError):
            line = getattr(e, "lineno", None)
            where = f", line {line}" if line else ""
            problems.append(
                f"code the provenance check cannot parse ({type(e).__name__}{where})"
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
            m = _OPTIONS.match(arg.value)
            if inner and m:  # "%timeit -n1 -r1 code": the code after the options
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
        self.bound: dict[str, set] = {}
        self.local: set = set()  # names bound to something we cannot resolve
        self.star: list = []  # modules star-imported
        self.overflow: set = set()  # variables with more than MAX_ALIASES names
        for _ in range(6):  # alias chains: a few rounds reach a fixed point
            changed = False
            for node in (n for t in trees for n in ast.walk(t)):
                changed |= self._collect(node)
            if not changed:
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

    def _collect(self, node) -> bool:
        changed = False
        if isinstance(node, ast.Import):
            for a in node.names:
                top = a.name.split(".")[0]
                changed |= self._bind(a.asname or top, {a.name if a.asname else top})
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for a in node.names:
                if a.name != "*":
                    changed |= self._bind(
                        a.asname or a.name, {f"{node.module}.{a.name}"}
                    )
                elif node.module not in self.star:
                    self.star.append(node.module)
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.NamedExpr):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                changed |= self._assign(target, node.value)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
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
            isinstance(target, ast.Tuple | ast.List)
            and isinstance(value, ast.Tuple | ast.List)
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
        elif isinstance(base, ast.IfExp | ast.BoolOp | ast.NamedExpr) or (
            _literal_getattr(base) is not None
        ):
            roots = self.resolve(base)
        else:
            roots = set()
        suffix = "".join(f".{a}" for a in attrs)
        return {
            canonical(r + suffix) for r in roots if len(r) + len(suffix) <= MAX_NAME
        }


@dataclass
class _Context:
    label: str
    names: _Names
    forbidden: tuple
    found: Findings
    parents: dict


def scan(cells, forbidden=(), context=()) -> Findings:
    """Findings in ``cells`` [(label, source)], the student's code; ``context``
    [(label, source)] are the instructor's cells (their imports bind names, and
    the forbidden names they use are the assignment's own helpers)."""
    found = Findings()
    total = sum(len(src) for _, src in cells)
    if total > MAX_SOURCE:
        found.add(
            "dynamic",
            f"{total} characters of code: more than the "
            f"{MAX_SOURCE} the provenance check reads",
        )
        left, kept = MAX_SOURCE, []
        for label, src in cells:
            kept.append((label, src[:left]))
            left = max(0, left - len(src))
        cells = kept
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
    given = [t for _, src in context for t in _parse(src, [])]
    names = _Names(given + [t for _, trees in student for t in trees])
    for name in sorted(names.overflow):
        found.add(
            "dynamic",
            f"the variable {name} stands for more than {MAX_ALIASES} names "
            "(the provenance check keeps that many)",
        )
    # what the instructor's cells use is the assignment's helper, not its task
    used = {
        n
        for tree in given
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute | ast.Name)
        for n in names.resolve(node)
    }
    forbidden += tuple(f"!{n}" for n in sorted(used) if forbidden_match(n, forbidden))
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


def _check(node, ctx: _Context, inner=False) -> None:
    where = f"{ctx.label} line {getattr(node, 'lineno', '?')}"
    found = ctx.found
    if isinstance(node, ast.Import | ast.ImportFrom):
        _check_import(node, where, ctx.forbidden, found)
        return
    if isinstance(node, ast.Attribute):
        if node.attr in DUNDERS:
            found.add("dynamic", f"{where}: introspection ({node.attr})")
        attrs = _chain(node)[1]
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
        for attr in set(node.kwd_attrs) & DUNDERS:  # case C(attr=x): subject.attr
            found.add("dynamic", f"{where}: introspection ({attr})")
    literal = _literal_getattr(node)
    if literal is not None and (literal[1] in DUNDERS or literal[1][:1] == "_"):
        found.add("dynamic", f"{where}: getattr(..., {literal[1]!r})")
    loaded = isinstance(getattr(node, "ctx", None), ast.Load)
    if isinstance(node, ast.Attribute | ast.Name) and loaded or literal is not None:
        resolved = () if inner else sorted(ctx.names.resolve(node))
        for name in resolved:
            _check_name(name, where, ctx.forbidden, found)
        how = _escapes(node, ctx.parents) if resolved else None
        if how and any(is_module(c) for n in resolved for c in candidates(n)):
            found.add(
                "dynamic",
                f"{where}: the module {resolved[0]} {how}, where the "
                "provenance check cannot follow it",
            )
    if isinstance(node, ast.Name) and loaded:
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
        for name in {canonical(full), canonical(module)} - {""}:
            _check_name(name, where, forbidden, found, verb="imports ")


def _check_name(name, where, forbidden, found, verb="") -> None:
    if len(name) > LONG_NAME:
        found.add(
            "dynamic",
            f"{where}: an attribute chain of {len(name)} characters ({name[:60]}...)",
        )
    hit = forbidden_match(name, forbidden)
    if hit:
        found.add("call", f"{where}: {verb}{name} ({_why(hit)})")
    if dynamic_match(name):
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
        if not p.startswith("!") and (
            module.startswith(head) or head.startswith(module + ".")
        ):
            return p
    return None


def _escapes(node, parents) -> str | None:
    """How a module-valued ``node`` leaves what the scan follows (None: it
    does not): it is dereferenced (``.name`` or a literal ``getattr``),
    called, compared or bound to a plain name."""
    child, parent = node, parents.get(id(node))
    while isinstance(parent, ast.IfExp | ast.BoolOp | ast.NamedExpr) and not (
        isinstance(parent, ast.IfExp) and child is parent.test
    ):
        child, parent = parent, parents.get(id(parent))
    if (
        parent is None
        or isinstance(parent, ast.Expr | ast.Compare | ast.Attribute | ast.IfExp)
        or isinstance(parent, ast.Call)
        and child is parent.func
    ):
        return None
    literal = _literal_getattr(parent)
    if literal is not None and child is literal[0]:
        # getattr(module, "name") reads an attribute, as module.name does: the
        # name is checked (and followed) as the getattr call's own
        return None
    if isinstance(parent, ast.Assign | ast.AnnAssign) and child is parent.value:
        targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
        if not all(isinstance(t, ast.Name) for t in targets):
            return "is stored in an attribute or item"
        scope = parents.get(id(parent))
        while scope is not None and not isinstance(
            scope, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef
        ):
            scope = parents.get(id(scope))
        return "is a class attribute" if isinstance(scope, ast.ClassDef) else None
    return _ESCAPES.get(type(parent), f"is used in a {type(parent).__name__}")


def _check_builtin(node, where, ctx: _Context) -> None:
    """Builtins that fetch by a computed name or run code, however named."""
    name, parent = node.id, ctx.parents.get(id(node))
    called = isinstance(parent, ast.Call) and parent.func is node
    if name in DYNAMIC_CALLS:
        how = f"{name}()" if called and name.isidentifier() else name
        ctx.found.add(
            "dynamic", f"{where}: {how if called else name + ' used as a value'}"
        )
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
    if pattern.startswith("attncourse"):
        return "the course library's implementation"
    if pattern == "resource" or pattern.startswith("resource."):
        return "the memory cases' address-space limit"
    if pattern.startswith(("torch.autograd", "torch.func")):
        return "autograd, where the exercise asks for the gradients by hand"
    if "nan" in pattern.lower():
        return "NaN scrubbing, where the exercise asks to skip the tiles"
    return "a built-in attention layer or function"
