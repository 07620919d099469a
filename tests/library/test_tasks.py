"""attncourse.tasks (the generated copy/reverse/sort digit tasks the
self-attention chapter trains on) and the readable heatmap annotations."""

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib.colors import to_rgb  # noqa: E402

from attncourse.plotting import show_heatmaps  # noqa: E402
from attncourse.tasks import (  # noqa: E402
    TASKS,
    batch_indices,
    prediction_accuracy,
    token_task,
)


@pytest.mark.parametrize("kind", TASKS)
def test_token_task_shapes_dtype_and_determinism(kind):
    inputs, targets = token_task(kind, 50, 7, vocab_size=5, seed=3)
    assert inputs.shape == targets.shape == (50, 7)
    assert inputs.dtype == targets.dtype == np.int64
    assert inputs.min() >= 0 and inputs.max() <= 4
    again = token_task(kind, 50, 7, vocab_size=5, seed=3)
    assert all(
        np.array_equal(a, b) for a, b in zip((inputs, targets), again, strict=True)
    )
    other, _ = token_task(kind, 50, 7, vocab_size=5, seed=4)
    assert not np.array_equal(inputs, other)


def test_token_task_targets_mean_what_the_kind_says():
    x, y = token_task("copy", 20, 6, seed=0)
    assert np.array_equal(x, y) and x is not y
    x, y = token_task("reverse", 20, 6, seed=0)
    assert all(list(y[r]) == list(x[r])[::-1] for r in range(20))
    x, y = token_task("sort", 20, 6, seed=0)
    assert all(list(y[r]) == sorted(x[r]) for r in range(20))
    # the targets are copies: editing them leaves the inputs alone
    y[:] = -1
    assert x.min() >= 0


def test_token_task_bad_arguments_name_the_problem():
    with pytest.raises(ValueError, match=r"kind must be one of .*'reverse'"):
        token_task("reversed", 10, 5)
    with pytest.raises(ValueError, match="length must be >= 1"):
        token_task("copy", 10, 0)
    with pytest.raises(TypeError, match="num_examples must be an int"):
        token_task("copy", 10.0, 5)
    with pytest.raises(ValueError, match="seed must be >= 0"):
        token_task("copy", 10, 5, seed=-1)


def test_batch_indices_are_seeded_and_never_repeat_within_a_batch():
    idx = batch_indices(30, steps=40, batch_size=30, seed=1)
    assert idx.shape == (40, 30) and idx.dtype == np.int64
    assert all(sorted(row) == list(range(30)) for row in idx)  # a permutation
    assert np.array_equal(idx, batch_indices(30, 40, 30, seed=1))
    assert not np.array_equal(idx, batch_indices(30, 40, 30, seed=2))
    with pytest.raises(ValueError, match=r"batch_size \(31\) is larger"):
        batch_indices(30, 1, 31)
    with pytest.raises(ValueError, match="steps must be >= 1"):
        batch_indices(30, 0, 5)


def test_prediction_accuracy_counts_tokens_and_whole_rows():
    targets = np.array([[1, 2, 3], [4, 5, 6]])
    predicted = np.array([[1, 2, 3], [4, 0, 6]])
    assert prediction_accuracy(predicted, targets) == pytest.approx((5 / 6, 1 / 2))
    assert prediction_accuracy(targets, targets) == (1.0, 1.0)
    with pytest.raises(ValueError, match="take argmax"):
        prediction_accuracy(np.zeros((2, 3, 10), int), targets)  # logits
    with pytest.raises(TypeError, match="integer token ids"):
        prediction_accuracy(predicted.astype(float), targets)


def test_annotations_stay_readable_on_dark_cells():
    """White numbers on dark cells, black on light ones, for any colour map."""
    weights = np.array([[0.02, 0.98], [0.5, 0.5]])
    for cmap in ("Reds", "viridis"):
        fig = show_heatmaps(weights, annotate=True, cmap=cmap, vmax=1.0)
        ax = fig.axes[0]
        image = ax.images[0]
        texts = {
            (round(t.get_position()[1]), round(t.get_position()[0])): t
            for t in ax.texts
        }
        assert len(texts) == 4
        for (i, j), text in texts.items():
            r, g, b = image.cmap(image.norm(weights[i, j]))[:3]
            dark = 0.299 * r + 0.587 * g + 0.114 * b <= 0.5
            assert to_rgb(text.get_color()) == to_rgb("white" if dark else "black")
        matplotlib.pyplot.close(fig)
    # The dark end of Reds gets white text, the light end black.
    fig = show_heatmaps(weights, annotate=True, vmax=1.0)
    colours = {t.get_text(): to_rgb(t.get_color()) for t in fig.axes[0].texts}
    assert colours["0.98"] == (1.0, 1.0, 1.0) and colours["0.02"] == (0, 0, 0)
    matplotlib.pyplot.close(fig)
