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
  since using them is its task);
* ``dynamic-code``: what a static scan cannot follow -- ``importlib``,
  ``__import__``, ``exec`` / ``eval`` / ``compile``, ``getattr`` / ``vars``
  with a computed name on a course or framework module, ``globals()``,
  ``sys.modules``, dunder introspection (``__dict__``, ``__subclasses__``...).

Both are for the instructor's review; the score is not changed. Names are
resolved through the notebook's imports and assignments (``from torch
import nn``, ``import torch.nn.functional as F``, ``layer = nn.MultiheadAttention``,
``getattr(F, "scaled_dot_product_attention")``, star imports), with the
instructor's cells (the setup cell's imports) as context; the scan is
flow-insensitive (a name bound anywhere counts everywhere), so it over-reports
rather than misses, and IPython magics (``%time ...``) are read as code too.

It is a static check: code that reaches a function through objects it computed
at run time (``[torch][0]``, ``().__class__...``) can hide it; the dunder and
``getattr`` rules make the common ways visible.
"""

import ast
from dataclasses import dataclass, field
from fnmatch import fnmatchcase

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
    "torch.nn.Transformer*",
    "torch.nn.modules.transformer",
    "torch.nn.attention",
    "torch.ops",
    "torch._C",
    "keras_hub",
    "keras_nlp",
    "transformers",
    "flash_attn",
    "xformers",
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
DYNAMIC_CALLS = {
    "__import__": "__import__()",
    "eval": "eval()",
    "exec": "exec()",
    "compile": "compile()",
    "globals": "globals()",
    "locals": "locals()",
    "breakpoint": "breakpoint()",
}
DYNAMIC_MODULES = (
    "importlib",
    "imp",
    "pkgutil",
    "runpy",
    "sys.modules",
    "builtins",
    "operator.attrgetter",
    "operator.methodcaller",
    "inspect.getmembers",
    "types.FunctionType",
    "types.CodeType",
    "marshal",
    "pickle",
    "dill",
    "cloudpickle",
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
}
# how frameworks re-export each other (checked in this order)
CANONICAL = (
    ("tensorflow.python.keras", "keras"),
    ("tensorflow.keras", "keras"),
    ("tf_keras", "keras"),
    ("tensorflow.compat.v1.keras", "keras"),
    ("tensorflow.compat.v2.keras", "keras"),
)
MAX_SOURCE = 2_000_000  # characters of student code read (more: flagged)
MAX_ALIASES = 16  # dotted names one variable may stand for
MAX_NAME = 20_000  # characters of one dotted name kept
LONG_NAME = 300  # a longer dotted name is reported (a hiding place)


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


def forbidden_match(name: str, forbidden) -> str | None:
    name = canonical(name)
    return next((p for p in forbidden if matches(name, p)), None)


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


def _parse(source: str, depth: int = 0) -> list[ast.AST]:
    """Modules of ``source`` and of the code inside its magics."""
    try:
        tree = ast.parse(_transform(source))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    trees = [tree]
    if depth < 2:
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("run_line_magic", "run_cell_magic")
            ):
                for arg in node.args[1:]:
                    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                        trees += _parse(arg.value, depth + 1)
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
        for _ in range(4):  # alias chains: a few rounds reach a fixed point
            if not self._collect():
                break

    def _bind(self, name: str, values) -> bool:
        values = {v for v in values if len(v) <= MAX_NAME}
        have = self.bound.setdefault(name, set())
        new = values - have
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
        literal = _literal_getattr(node)
        if literal is not None:
            return {f"{v}.{literal[1]}" for v in self.resolve(literal[0])}
        base, attrs = _chain(node)
        if isinstance(base, ast.Name):
            roots = set(self.bound.get(base.id, ()))
            if not roots and base.id not in self.local:
                roots = {f"{m}.{base.id}" for m in self.star}
        else:
            literal = _literal_getattr(base)
            roots = self.resolve(base) if literal is not None else set()
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
    student = [(label, _parse(src)) for label, src in cells]
    names = _Names(
        [t for _, src in context for t in _parse(src)]
        + [t for _, trees in student for t in trees]
    )
    for label, trees in student:
        for tree in trees:
            # only whole chains: a.b.c is resolved once, not again as a.b and a
            inner = {
                id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute)
            }
            for node in ast.walk(tree):
                _check(node, label, names, forbidden, found, id(node) in inner)
    return found


def _truncate(cells):
    out, left = [], MAX_SOURCE
    for label, src in cells:
        out.append((label, src[:left]))
        left = max(0, left - len(src))
    return out


def _check(node, label, names, forbidden, found, inner=False) -> None:
    where = _label_line(label, node)
    if isinstance(node, ast.Import | ast.ImportFrom):
        module = getattr(node, "module", None) or ""
        for a in node.names:
            full = a.name if isinstance(node, ast.Import) else f"{module}.{a.name}"
            for name in (canonical(full), canonical(module)):
                if not name:
                    continue
                hit = forbidden_match(name, forbidden)
                if hit:
                    found.add("call", f"{where}: imports {name} ({_why(hit)})")
                if _dynamic_module(name):
                    found.add("dynamic", f"{where}: imports {name}")
        return
    if (
        isinstance(node, ast.Attribute | ast.Name)
        and isinstance(getattr(node, "ctx", None), ast.Load)
        or _literal_getattr(node) is not None
    ):
        if isinstance(node, ast.Attribute) and node.attr in DUNDERS:
            found.add("dynamic", f"{where}: introspection ({node.attr})")
        for name in () if inner else sorted(names.resolve(node)):
            if len(name) > LONG_NAME:
                found.add(
                    "dynamic",
                    f"{where}: an attribute chain of {len(name)} "
                    f"characters ({name[:60]}...)",
                )
            hit = forbidden_match(name, forbidden)
            if hit:
                found.add("call", f"{where}: {name} ({_why(hit)})")
            if _dynamic_module(name):
                found.add("dynamic", f"{where}: {name}")
    if (
        isinstance(node, ast.Name)
        and node.id in DYNAMIC_CALLS
        and node.id not in names.local
        and node.id not in names.bound
    ):
        found.add("dynamic", f"{where}: {DYNAMIC_CALLS[node.id]}")
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ("getattr", "vars", "hasattr", "setattr", "delattr")
        and node.args
    ):
        computed = (
            node.func.id == "vars"
            or len(node.args) < 2
            or not (
                isinstance(node.args[1], ast.Constant)
                and isinstance(node.args[1].value, str)
            )
        )
        targets = names.resolve(node.args[0])
        tracked = sorted(t for t in targets if t.split(".")[0] in TRACKED_ROOTS)
        if computed and tracked:
            found.add(
                "dynamic", f"{where}: {node.func.id}({tracked[0]}, <computed name>)"
            )


def _dynamic_module(name: str) -> bool:
    return any(name == m or name.startswith(m + ".") for m in DYNAMIC_MODULES)


def _why(pattern: str) -> str:
    if pattern.startswith("attncourse"):
        return "the course library's implementation"
    return "a built-in attention layer or function"
