"""Helpers the chapters import instead of defining them twice (max_diff,
tilt_key_labels, show_source) and the shared training helpers."""

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402
import torch  # noqa: E402

from attncourse import data, training  # noqa: E402
from attncourse.notebook import max_diff, show_source, to_numpy  # noqa: E402
from attncourse.plotting import show_heatmaps, tilt_key_labels  # noqa: E402


def test_max_diff_reads_every_framework_and_counts_nan_as_far():
    a = np.array([[0.0, 1.0], [2.0, 3.0]])
    b = a + np.array([[0.0, 0.5], [0.0, -0.25]])
    for conv in (
        np.asarray,
        tf.constant,
        lambda x: torch.tensor(x, requires_grad=True),
    ):
        assert max_diff(conv(a), conv(b)) == pytest.approx(0.5)
    assert max_diff(a, np.where(a > 2, np.nan, a)) == np.inf
    assert to_numpy(torch.ones(2, requires_grad=True)).dtype == np.float64


def test_tilt_key_labels_tilts_the_panels_not_the_colour_bar():
    fig = show_heatmaps(np.eye(3)[None].repeat(2, 0), xlabels=list("abc"))
    tilt_key_labels(fig)
    panels, colour_bar = fig.axes[:-1], fig.axes[-1]
    assert len(panels) == 2
    for ax in panels:
        assert all(t.get_rotation() == 45 for t in ax.get_xticklabels())
    assert all(t.get_rotation() == 0 for t in colour_bar.get_xticklabels())
    matplotlib.pyplot.close(fig)


def test_show_heatmaps_still_rejects_bad_labels():
    with pytest.raises(ValueError, match="xlabels has 2 labels for 3 positions"):
        show_heatmaps(np.eye(3), xlabels=["a", "b"])
    with pytest.raises(ValueError, match="titles has 1 entries for 2 matrices"):
        show_heatmaps(np.zeros((2, 3, 3)), titles=["x"])


def test_show_source_shows_the_library_code():
    import attncourse.tf as atf

    assert "def project" in show_source(atf.SelfAttention.project).data


def test_minibatches_are_seeded_and_never_repeat_an_example():
    task = data.make_zh_en_task()
    one = list(training.minibatches(task.train, 3, 16, seed=5))
    two = list(training.minibatches(task.train, 3, 16, seed=5))
    assert len(one) == 3
    for a, b in zip(one, two, strict=True):
        for x, y in zip(a, b, strict=True):
            np.testing.assert_array_equal(x, y)
    src = one[0][0]
    assert src.shape == (16, task.max_src_len)
    rows = {tuple(r) for r in np.concatenate([src, one[0][2]], 1)}
    assert len(rows) == 16  # drawn without replacement (the pairs are distinct)


def test_exact_match_and_the_location_decoder_size():
    task = data.make_zh_en_task()
    perfect = task.test.tgt_out  # targets + <eos>, as greedy decoding gives
    assert training.exact_match(task, perfect) == 1.0
    assert training.exact_match(task, np.zeros_like(perfect)) == 0.0
    assert training.decoder_max_src_len(task, "location") == task.max_src_len
    assert training.decoder_max_src_len(task, "bahdanau") is None
