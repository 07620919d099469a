"""Generate (or check) the hidden reference data of every assignment.

    python -m grader references            # write what changed
    python -m grader references --check    # fail if stale

For each assignment: inputs and weights from a fixed seed, expected outputs
(and gradients) from the float64 NumPy reference in
``grader.assignments``, cross-checked against the attncourse library
(NumPy, and TensorFlow / PyTorch autograd for gradients), and a sanity check
that every known wrong variant really differs from the reference -- so each
hint can only fire for its own mistake. Written to
``solutions/<assignment>/hidden/reference.npz`` (grader-only: stripped from
the release and the feedback by ``grader.hooks``). A file is
rewritten only if an array changed by more than 1e-6, so regenerating does not
churn git.
"""

import argparse
import sys
from pathlib import Path

import numpy as np

from grader import assignments, reference
from grader.checks import ATOL, GRAD_ATOL

TOLERANCE = 1e-6
ROOT = Path(__file__).resolve().parents[1]


def build(assignment: str, crosscheck: bool = True) -> dict:
    """The reference arrays of ``assignment`` (cross-checked if asked)."""
    module = assignments.get(assignment)
    cases = module.make_cases()
    expected = {c: module.expected(c, inputs) for c, inputs in cases.items()}
    if crosscheck:
        for c, inputs in cases.items():
            module.crosscheck(c, inputs, expected[c])
    check_variants(module, cases, expected)
    return reference.pack(module.NAME, module.SEED, cases, expected)


def check_variants(module, cases: dict, expected: dict) -> None:
    """Every variant must be clearly wrong on some compared key of its cases."""
    for check in module.CHECKS.values():
        for variant in check.variants:
            for case in check.cases:
                if variant.cases is not None and case not in variant.cases:
                    continue
                predicted = variant.compute(cases[case])
                gaps = []
                for key, value in predicted.items():
                    exp = np.asarray(expected[case][key])
                    value = np.asarray(value)
                    if value.shape != exp.shape:
                        gaps.append(np.inf)
                        continue
                    gap = np.max(np.abs(value.astype(float) - exp.astype(float)))
                    gaps.append(gap / (GRAD_ATOL if key.startswith("grad_") else ATOL))
                if not gaps or max(gaps) < 100:
                    raise AssertionError(
                        f"{module.NAME}/{check.name}: variant {variant.tag!r} is "
                        f"indistinguishable from the reference on case {case!r}"
                    )


def differences(old: dict, new: dict, tol: float = TOLERANCE) -> list[str]:
    """Keys whose arrays differ (shape, dtype kind, or values by more than tol)."""
    diffs = [f"missing {k}" for k in sorted(set(new) - set(old))]
    diffs += [f"extra {k}" for k in sorted(set(old) - set(new))]
    for k in sorted(set(old) & set(new)):
        a, b = np.asarray(old[k]), np.asarray(new[k])
        if a.shape != b.shape or a.dtype.kind != b.dtype.kind:
            diffs.append(f"{k}: {a.shape}/{a.dtype} != {b.shape}/{b.dtype}")
        elif a.dtype.kind in "fc":
            if not np.allclose(a, b, rtol=0, atol=tol):
                diffs.append(f"{k}: max difference {np.max(np.abs(a - b)):.3g}")
        elif not np.array_equal(a, b):
            diffs.append(f"{k}: values differ")
    return diffs


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("assignments", nargs="*", default=list(assignments.ASSIGNMENTS))
    parser.add_argument("--root", type=Path, default=ROOT, help="the course root")
    parser.add_argument(
        "--check",
        action="store_true",
        help="only compare with the stored files; exit 1 if stale",
    )
    parser.add_argument(
        "--no-crosscheck",
        action="store_true",
        help="skip the comparison with the library (no TF/torch)",
    )
    args = parser.parse_args(argv)
    stale = 0
    for assignment in args.assignments:
        arrays = build(assignment, crosscheck=not args.no_crosscheck)
        path = reference.source_path(args.root, assignment)
        old = reference.load_file(path).arrays if path.exists() else {}
        diffs = differences(old, arrays)
        if not diffs:
            print(f"{assignment}: up to date ({path.relative_to(args.root)})")
            continue
        stale += 1
        if args.check:
            print(f"{assignment}: STALE -- {'; '.join(diffs[:5])}")
        else:
            reference.save(path, arrays)
            print(
                f"{assignment}: wrote {path.relative_to(args.root)} "
                f"({len(diffs)} changes)"
            )
    if args.check and stale:
        print("run `python -m grader references` to regenerate")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
