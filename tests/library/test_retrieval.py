"""The marked-item retrieval task (attncourse.retrieval) of soft-hard-attention."""

import numpy as np
import pytest

from attncourse.retrieval import item_losses, marked_items, read_metrics


def test_batch_shapes_dtypes_and_the_mark():
    feats, values, target, marked = marked_items(np.random.default_rng(0), 5, 7, 3, 4)
    assert feats.shape == (5, 7, 3) and feats.dtype == np.float32
    assert values.shape == (5, 7, 4) and values.dtype == np.float32
    assert target.shape == (5, 4) and marked.shape == (5,)
    assert np.array_equal(values.sum(-1), np.ones((5, 7)))  # one-hot labels
    assert np.array_equal(target, values[np.arange(5), marked])


def test_the_mark_shifts_feature_0_of_the_marked_item_only():
    rng_a, rng_b = np.random.default_rng(3), np.random.default_rng(3)
    marked_feats, _, _, marked = marked_items(rng_a, 400, mark=50.0)
    plain_feats, _, _, _ = marked_items(rng_b, 400, mark=0.0)
    shift = marked_feats - plain_feats  # same draws, only the mark differs
    expected = np.zeros_like(shift)
    expected[np.arange(400), marked, 0] = 50.0
    np.testing.assert_allclose(shift, expected, atol=1e-4)


def test_same_generator_state_same_batch():
    a = marked_items(np.random.default_rng(7), 3)
    b = marked_items(np.random.default_rng(7), 3)
    for x, y in zip(a, b, strict=True):
        assert np.array_equal(x, y)


def test_item_losses_are_zero_exactly_on_the_target_label():
    _, values, target, marked = marked_items(np.random.default_rng(1), 6)
    losses = item_losses(values, target)
    assert losses.shape == (6, 16)
    assert np.all(losses[np.arange(6), marked] == 0)
    same_label = (values == target[:, None]).all(-1)
    assert np.array_equal(losses == 0, same_label)
    assert set(np.unique(losses)) <= {0.0, 2.0}  # one-hot vs one-hot


def test_read_metrics_on_known_weights():
    losses = np.array([[0.0, 2.0, 2.0], [2.0, 2.0, 0.0]])
    on_first = np.array([[1.0, 0.0, 0.0], [1.0, 0.0, 0.0]])
    accuracy, expected = read_metrics(on_first, losses)
    assert accuracy == 0.5 and expected == 1.0
    uniform = np.full((2, 3), 1 / 3)
    assert read_metrics(uniform, losses)[1] == pytest.approx(4 / 3)


@pytest.mark.parametrize(
    "call, error, words",
    [
        (lambda: marked_items(np.random.RandomState(0), 2), TypeError, "Generator"),
        (lambda: marked_items(np.random.default_rng(0), 0), ValueError, "batch"),
        (lambda: marked_items(np.random.default_rng(0), 2.0), TypeError, "batch"),
        (
            lambda: item_losses(np.zeros((2, 3, 4)), np.zeros((2, 5))),
            ValueError,
            "target",
        ),
        (
            lambda: read_metrics(np.zeros((2, 3)), np.zeros((2, 4))),
            ValueError,
            "weights and losses",
        ),
    ],
)
def test_bad_input_names_the_problem(call, error, words):
    with pytest.raises(error, match=words):
        call()
