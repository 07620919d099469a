"""The mistakes that recur across assignments, each written once.

Every attention exercise can go wrong in the same few ways -- the scale left
out or put after the softmax, the softmax over the queries, the mask inverted,
ignored, added to the scores or filled with 0. Each factory here returns the
``Variant`` with its tag and hint; the assignment passes how its reference
computes the wrong result, and the names its interface uses (the scale's
symbol, the mask's argument), so the hint speaks the exercise's words.
"""

from grader.checks import Variant

FILL = "masked_fill(~mask, -1e9) / tf.where(mask, scores, -1e9)"


def missing_scale(compute, scale="sqrt(d_k)", cases=None) -> Variant:
    return Variant(
        "missing-scale",
        f"the scores are not divided by {scale}: softmax(scores / {scale}).",
        compute,
        cases,
    )


def scale_after_softmax(compute, scale="sqrt(d_k)", cases=None) -> Variant:
    return Variant(
        "scale-after-softmax",
        f"the 1/{scale} scaling is applied to the weights after the softmax; it "
        f"scales the SCORES: softmax(scores / {scale}).",
        compute,
        cases,
    )


def softmax_axis(compute, cases=None) -> Variant:
    return Variant(
        "softmax-axis",
        "the softmax runs over the queries axis; each query (row) needs a "
        "distribution over the keys, so normalise over the last axis.",
        compute,
        cases,
    )


def inverted_mask(compute, mask="attention_mask", cases=None) -> Variant:
    return Variant(
        "inverted-mask",
        f"the {mask} polarity is inverted: True = attend (the course's "
        f"convention), False = hidden.",
        compute,
        cases,
    )


def mask_ignored(compute, mask="attention_mask", cases=None) -> Variant:
    return Variant(
        "mask-ignored",
        f"{mask} is not applied: hidden keys still receive weight.",
        compute,
        cases,
    )


def mask_added(compute, cases=None) -> Variant:
    # huggingface/transformers#41443, huggingface/pytorch-image-models#2674
    return Variant(
        "mask-added",
        f"the bool mask is ADDED to the scores (True counts as +1), which masks "
        f"nothing; fill the hidden scores with a large negative number ({FILL}).",
        compute,
        cases,
    )


def mask_zero_fill(compute, cases=None) -> Variant:
    return Variant(
        "mask-zero-fill",
        "hidden scores are set to 0 (or multiplied by the mask), but softmax "
        "gives a score of 0 the weight exp(0) = 1; fill them with a large "
        "negative number (-1e9) instead.",
        compute,
        cases,
    )
