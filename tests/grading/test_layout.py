"""The two packages keep to their audiences and to where their code runs.

* ``attncourse`` (learners) never imports nbgrader, nbclient or the grader;
* ``grader.kernel`` (mounted into the sandbox) imports nothing grader-side:
  no references, no known mistakes, no judging -- so nothing in the student's
  kernel can compute an expected output with the grader's code;
* ``grader.numeric`` (the float64 reference maths) is independent of
  ``attncourse``: it imports NumPy only.

Checked from the sources (every import statement, also inside functions) and
by importing in a fresh interpreter and listing what got loaded.
"""

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def imported_modules(path: Path) -> set[str]:
    """Absolute module names imported anywhere in ``path`` (relative ones resolved)."""
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                name = ".".join([*base, node.module] if node.module else base)
            else:
                name = node.module
            found.add(name)
            found.update(f"{name}.{a.name}" for a in node.names)
    return found


def sources(folder: str):
    return sorted((ROOT / folder).rglob("*.py"))


def is_under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


@pytest.mark.parametrize("path", sources("attncourse"), ids=lambda p: p.name)
def test_the_learners_library_never_imports_grading_code(path):
    bad = {
        m
        for m in imported_modules(path)
        if any(is_under(m, p) for p in ("nbgrader", "nbclient", "grader"))
    }
    assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"


@pytest.mark.parametrize("path", sources("grader/kernel"), ids=lambda p: p.name)
def test_the_kernel_side_imports_nothing_grader_side(path):
    bad = {
        m
        for m in imported_modules(path)
        if is_under(m, "grader") and not is_under(m, "grader.kernel") and m != "grader"
    }
    # the one deliberate exception: outside the sandbox, check() judges at once
    # with grader.judging, imported lazily (absent in the sandbox -> ImportError)
    if path.name == "recorder.py":
        bad -= {"grader.judging"}
    assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"


def test_the_package_root_mounted_in_the_sandbox_imports_nothing():
    tree = ast.parse((ROOT / "grader" / "__init__.py").read_text())
    assert all(isinstance(n, ast.Expr) for n in tree.body), (
        "grader/__init__.py is mounted into the sandbox: keep it a docstring only"
    )


def test_the_reference_maths_is_independent_of_the_library():
    assert imported_modules(ROOT / "grader" / "numeric.py") == {"numpy"}


def loaded_after_import(module: str) -> list[str]:
    code = f"import sys, json; import {module}; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_importing_the_kernel_side_loads_no_grader_side_module():
    loaded = loaded_after_import(
        "grader.kernel.recorder, grader.kernel.probe, "
        "grader.kernel.runners.multi_head_attention"
    )
    grader_side = [
        m
        for m in loaded
        if is_under(m, "grader") and not is_under(m, "grader.kernel") and m != "grader"
    ]
    assert grader_side == []
    assert not [m for m in loaded if is_under(m, "nbgrader")]


def test_importing_the_library_loads_no_grading_code():
    loaded = loaded_after_import("attncourse, attncourse.numpy, attncourse.testing")
    assert not [
        m
        for m in loaded
        if any(is_under(m, p) for p in ("nbgrader", "nbclient", "grader"))
    ]


def assignment_slugs():
    from grader.assignments import ASSIGNMENTS

    return list(ASSIGNMENTS)


@pytest.mark.parametrize("slug", assignment_slugs())
def test_each_assignment_is_one_slug_and_one_definition(slug):
    """The slug names the chapter, the source notebook, the release, the
    runner and the reference module; the kernel-side runs and the grader-side
    checks describe the same checks, and every hidden test calls one of them."""
    from grader import assignments
    from grader.kernel import runners
    from grader.verdicts import checks_in

    module = assignments.get(slug)
    snake = slug.replace("-", "_")
    assert module.__name__ == f"grader.assignments.{snake}"
    assert runners.get(slug).__name__ == f"grader.kernel.runners.{snake}"
    assert slug == module.NAME
    for attr in ("SEED", "make_cases", "expected", "CHECKS", "crosscheck"):
        assert hasattr(module, attr), f"{slug}: no {attr}"
    assert (ROOT / "book" / f"{slug}.md").is_file()
    assert (ROOT / "solutions" / slug / f"{slug}.ipynb").is_file()
    assert (ROOT / "exercises" / slug / f"{slug}.ipynb").is_file()
    runs = runners.runs(slug)
    cases = set(module.make_cases())
    assert set(runs) == set(module.CHECKS)
    for name, check in module.CHECKS.items():
        assert check.name == name and check.runner is runs[name]
        wants_grads = any(k.startswith("grad_") for k in check.compare)
        assert runs[name].gradients == wants_grads, name
        assert set(check.cases) <= cases, name
        for variant in check.variants:  # a variant names cases the assignment has
            assert variant.cases is None or set(variant.cases) <= cases, variant.tag
    source = json.loads((ROOT / "solutions" / slug / f"{slug}.ipynb").read_text())
    calls = {c for cell in source["cells"] for c in checks_in("".join(cell["source"]))}
    assert calls, f"{slug}: no hidden test calls check()"
    for assignment, check_name, framework in calls:
        assert assignment == slug and check_name in module.CHECKS, (
            assignment,
            check_name,
        )
        assert framework in ("tf", "torch")
    assert {c for _, c, _ in calls} == set(module.CHECKS), "a check no test calls"
