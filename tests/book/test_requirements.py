"""The requirement files install the course on every platform the README names.

Offline and fast: the files are parsed with ``packaging`` and their environment
markers evaluated for each platform, so a pin that only works on the CI machine
(``tensorflow-cpu`` has no macOS wheel) fails here, on Linux, before a learner on
a Mac finds out. Which wheels exist is not checked (that needs the registry);
the markers encode what was found there (see requirements.txt).
"""

import importlib.metadata as md
import re
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
LEARNER = ROOT / "requirements.txt"
DEV = ROOT / "requirements-dev.txt"
CONSTRAINTS = ROOT / "constraints.txt"

PLATFORMS = {
    "linux-x86_64": {"sys_platform": "linux", "platform_machine": "x86_64",
                     "platform_system": "Linux", "os_name": "posix"},
    "linux-aarch64": {"sys_platform": "linux", "platform_machine": "aarch64",
                      "platform_system": "Linux", "os_name": "posix"},
    "macos-arm64": {"sys_platform": "darwin", "platform_machine": "arm64",
                    "platform_system": "Darwin", "os_name": "posix"},
    "macos-x86_64": {"sys_platform": "darwin", "platform_machine": "x86_64",
                     "platform_system": "Darwin", "os_name": "posix"},
    "windows": {"sys_platform": "win32", "platform_machine": "AMD64",
                "platform_system": "Windows", "os_name": "nt"},
}  # fmt: skip
# The TensorFlow distribution each platform must get: the CPU-only one where
# PyPI has it, else `tensorflow` (CPU-only on those platforms anyway).
TENSORFLOW = {
    "linux-x86_64": "tensorflow-cpu",
    "windows": "tensorflow-cpu",
    "linux-aarch64": "tensorflow",
    "macos-arm64": "tensorflow",
    "macos-x86_64": "tensorflow",
}
COURSE = {"numpy", "torch", "keras", "matplotlib", "jupyterlab", "jupytext"}
# Only the tests, grading, benchmarks and classroom need these: not in the
# learners' file.
DEV_ONLY = {"pytest", "hypothesis", "ruff", "nbgrader", "jupyterhub", "playwright",
            "psycopg2-binary", "beautifulsoup4"}  # fmt: skip


def environment(platform: str) -> dict[str, str]:
    env = dict(default_environment())
    env.update(PLATFORMS[platform])
    env.update(python_version="3.11", python_full_version="3.11.7")
    env.update(implementation_name="cpython", platform_python_implementation="CPython")
    return env


def parse(path: Path, seen=None) -> list[tuple[Requirement, Path, int]]:
    """Requirements of a pip requirements file (``-r`` followed), with where."""
    seen = set() if seen is None else seen
    assert path not in seen, f"{path.name} includes itself"
    seen.add(path)
    out = []
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = re.split(r"(^|\s)#", raw, maxsplit=1)[0].strip()
        if not line:
            continue
        if line.startswith(("-r ", "--requirement ")):
            out += parse(path.parent / line.split(maxsplit=1)[1], seen)
            continue
        assert not line.startswith("-"), f"{path.name}:{number}: option {line!r}"
        out.append((Requirement(line), path, number))
    return out


def selected(reqs, platform: str) -> dict[str, Requirement]:
    env = environment(platform)
    chosen = {}
    for req, path, number in reqs:
        if req.marker is None or req.marker.evaluate(env):
            name = canonicalize_name(req.name)
            assert name not in chosen, (
                f"{path.name}:{number}: {name} twice on {platform}"
            )
            chosen[name] = req
    return chosen


def pins(platform: str) -> dict[str, str]:
    """constraints.txt as it applies on ``platform``: name -> version."""
    out = {}
    for name, req in selected(parse(CONSTRAINTS), platform).items():
        (spec,) = req.specifier  # one exact pin per line
        assert spec.operator == "==", f"constraints.txt: {req} is not an exact pin"
        out[name] = spec.version
    return out


@pytest.mark.parametrize("platform", sorted(PLATFORMS))
def test_each_platform_gets_one_tensorflow_torch_keras_and_numpy(platform):
    learner = selected(parse(LEARNER), platform)
    tensorflows = {n for n in learner if n in ("tensorflow", "tensorflow-cpu")}
    assert tensorflows == {TENSORFLOW[platform]}, (platform, tensorflows)
    assert set(learner) >= COURSE, COURSE - set(learner)
    constraint = pins(platform)
    for name in (*tensorflows, *COURSE):
        assert name in constraint, f"{name} has no pin in constraints.txt on {platform}"


@pytest.mark.parametrize("platform", sorted(PLATFORMS))
@pytest.mark.parametrize("path", [LEARNER, DEV], ids=lambda p: p.name)
def test_every_requirement_is_pinned_and_agrees_with_constraints(path, platform):
    constraint = pins(platform)
    for name, req in selected(parse(path), platform).items():
        assert req.specifier, f"{path.name}: {req} has no version"
        assert name in constraint, f"{path.name}: {name} not in constraints.txt"
        assert req.specifier.contains(constraint[name], prereleases=True), (
            f"{path.name}: {req} but constraints.txt pins {name}=={constraint[name]}"
        )


def test_both_tensorflow_pins_are_one_version():
    versions = {
        str(req.specifier)
        for req, _, _ in parse(LEARNER) + parse(CONSTRAINTS)
        if canonicalize_name(req.name) in ("tensorflow", "tensorflow-cpu")
    }
    assert len(versions) == 1, versions


def test_learners_file_holds_no_test_or_grading_tools():
    learner = {canonicalize_name(r.name) for r, _, _ in parse(LEARNER)}
    dev_files = {p.name for _, p, _ in parse(DEV)}
    assert learner.isdisjoint(DEV_ONLY), learner & DEV_ONLY
    assert dev_files == {"requirements.txt", "requirements-dev.txt"}
    dev = {canonicalize_name(r.name) for r, p, _ in parse(DEV) if p == DEV}
    assert dev >= DEV_ONLY, DEV_ONLY - dev


def test_nbclient_is_pinned_exactly_and_says_why():
    """grader/guard.py overrides nbclient's private methods: an unpinned nbclient
    can drop a time limit silently (tests/grading/test_nbclient_contract.py)."""
    text = LEARNER.read_text()
    (req,) = [r for r, _, _ in parse(LEARNER) if r.name == "nbclient"]
    (spec,) = req.specifier
    assert spec.operator == "=="
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("nbclient"))
    comment = []
    for line in reversed(lines[:at]):
        if not line.startswith("#"):
            break
        comment.append(line)
    why = " ".join(comment)
    assert "guard.py" in why and "private" in why, why
    assert "test_nbclient_contract" in why, why


def _closure(names: set[str]) -> set[str]:
    """Installed distributions that ``names`` pull in on this machine."""
    env = dict(default_environment())
    todo, seen = list(names), set()
    while todo:
        name = canonicalize_name(todo.pop())
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = md.distribution(name).requires or []
        except md.PackageNotFoundError:
            continue
        for line in requires:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({**env, "extra": ""}):
                todo.append(req.name)
    return seen


def test_the_learner_set_covers_what_the_library_and_book_import():
    """attncourse/ and book/_ext/ import only what requirements.txt installs
    (what `make book` installs); grader-only packages would be a leak."""
    learner = _closure({r.name for r, _, _ in parse(LEARNER)} | {"attncourse"})
    modules = md.packages_distributions()
    imported = set()
    for folder in ("attncourse", "book/_ext"):
        for path in (ROOT / folder).rglob("*.py"):
            for match in re.finditer(
                r"^\s*(?:from|import)\s+([A-Za-z_]\w*)", path.read_text(), re.M
            ):
                imported.add(match.group(1))
    missing = {}
    for module in sorted(imported):
        dists = {canonicalize_name(d) for d in modules.get(module, [])}
        if dists and dists.isdisjoint(learner):
            missing[module] = sorted(dists)
    assert missing == {}, f"imported but not installed by requirements.txt: {missing}"
    assert "nbgrader" not in learner


def test_make_book_installs_the_learners_set_and_make_test_both():
    makefile = (ROOT / "Makefile").read_text()
    rules = dict(re.findall(r"^([\w$().-]+):([^\n=]*)$", makefile, re.M))
    assert "$(STAMP)" in rules["book"].split() and "$(DEV_STAMP)" not in rules["book"]
    assert "lint" in rules["test"].split()
    assert "$(DEV_STAMP)" in rules["lint"].split()
    assert "pip install -r requirements-dev.txt -c constraints.txt" in makefile
    assert "pip install -r requirements.txt -c constraints.txt" in makefile
    conda = (ROOT / "environment.yml").read_text()
    assert "- -r requirements.txt" in conda and "- -c constraints.txt" in conda


TRITON_PLATFORMS = {"linux-x86_64"}


@pytest.mark.parametrize("platform", sorted(PLATFORMS))
def test_triton_is_pinned_for_linux_x86_64_only(platform):
    """attncourse.triton_flash needs Triton; PyPI has it for Linux only, and
    the course pins it where it was tried (README)."""
    learner = selected(parse(LEARNER), platform)
    constraint = pins(platform)
    if platform in TRITON_PLATFORMS:
        assert str(learner["triton"].specifier) == "==3.9.0"
        assert constraint["triton"] == "3.9.0"
    else:
        assert "triton" not in learner and "triton" not in constraint
