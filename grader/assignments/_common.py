"""Helpers shared by the assignments' reference definitions (grader side)."""

import numpy as np

from grader.checks import Check


def rng(seed: int) -> np.random.Generator:
    """The generator an assignment draws its cases from."""
    return np.random.default_rng(seed)


def layer_checks(
    runs,
    targets,
    *,
    variants,
    mask_variants,
    notes,
    reminder,
    grads,
    grad_reminder,
    hidden,
    forward_hidden=True,
) -> dict:
    """The three checks of a layer assignment: ``forward`` (no mask),
    ``masks`` (the mask mistakes first) and ``gradients`` (the keys in
    ``grads``); ``hidden`` tells the verdict which positions must get 0."""
    common = {"targets": targets, "case_notes": notes}
    return {
        "forward": Check(
            name="forward",
            runner=runs["forward"],
            compare=("weights", "outputs"),
            variants=variants,
            reminder=reminder,
            hidden=hidden if forward_hidden else None,
            **common,
        ),
        "masks": Check(
            name="masks",
            runner=runs["masks"],
            compare=("weights", "outputs"),
            variants=mask_variants + variants,
            reminder=reminder,
            hidden=hidden,
            **common,
        ),
        "gradients": Check(
            name="gradients",
            runner=runs["gradients"],
            compare=grads,
            variants=variants,
            reminder=grad_reminder,
            **common,
        ),
    }
