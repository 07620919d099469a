"""The generated tasks: deterministic arrays and round-tripping vocabularies."""

import numpy as np
import pytest

from attncourse import data


def test_date_pairs_are_deterministic_and_normalised():
    assert data.date_pairs(50, seed=3) == data.date_pairs(50, seed=3)
    assert data.date_pairs(50, seed=3) != data.date_pairs(50, seed=4)
    for source, target in data.date_pairs(200, seed=0):
        year, month, day = target.split("-")
        assert len(target) == 10 and year in source and str(int(day)) in source
        assert 1950 <= int(year) <= 2049


def test_each_date_format_appears():
    sources = [s for s, _ in data.date_pairs(600, seed=0)]
    assert any("/" in s for s in sources) and any("." in s for s in sources)
    assert any(s[0].isupper() for s in sources)  # "Nov 29, 2026"
    assert any("," in s and s[0].islower() for s in sources)  # "november 29, 2026"


def test_known_dates_in_every_format():
    import datetime

    date = datetime.date(2026, 11, 29)
    got = {data._format_date(date, f) for f in data.DATE_FORMATS}
    assert got == {
        "29 Nov 2026",
        "29 november 2026",
        "november 29, 2026",
        "Nov 29, 2026",
        "29/11/2026",
        "29.11.2026",
    }


def test_dates_task_is_deterministic_with_disjoint_dates():
    a, b = data.make_dates_task(), data.make_dates_task()
    for split in ("train", "test"):
        for field in ("src", "src_lens", "tgt_in", "tgt_out", "tgt_lens"):
            np.testing.assert_array_equal(
                getattr(a.split(split), field), getattr(b.split(split), field)
            )
    train_dates = {"".join(t) for _, t in a.train.pairs}
    test_dates = {"".join(t) for _, t in a.test.pairs}
    assert len(a.train) == 2000 and len(a.test) == 500
    assert not train_dates & test_dates


@pytest.mark.parametrize("make", [data.make_dates_task, data.make_zh_en_task])
def test_arrays_match_the_pairs(make):
    task = make()
    for split in (task.train, task.test):
        n = len(split)
        assert split.src.shape == (n, task.max_src_len)
        assert split.tgt_in.shape == split.tgt_out.shape == (n, task.max_tgt_len)
        for i, (source, target) in enumerate(split.pairs):
            assert split.src_lens[i] == len(source)
            assert split.tgt_lens[i] == len(target) + 1  # + <eos>
            assert task.src_vocab.decode(split.src[i]) == source
            assert task.tgt_vocab.decode(split.tgt_out[i]) == target
            assert split.tgt_in[i, 0] == task.tgt_vocab.bos_id
            # teacher forcing: the input is the output shifted right by one
            k = len(target)
            np.testing.assert_array_equal(
                split.tgt_in[i, 1 : k + 1], split.tgt_out[i, :k]
            )
            assert split.tgt_out[i, k] == task.tgt_vocab.eos_id
            assert not split.src[i, len(source) :].any()  # <pad> = 0


def test_vocab_round_trips_and_marks_unknowns():
    vocab = data.Vocab("hello world")
    assert vocab.itos[:4] == ["<pad>", "<bos>", "<eos>", "<unk>"]
    assert (vocab.pad_id, vocab.bos_id, vocab.eos_id, vocab.unk_id) == (0, 1, 2, 3)
    ids = vocab.encode(list("hello"), add_eos=True)
    assert ids[-1] == vocab.eos_id
    assert vocab.decode(ids) == list("hello")
    assert vocab.decode([vocab.bos_id] + ids + [7, 7]) == list("hello")  # stops at eos
    assert vocab.encode(["z"]) == [vocab.unk_id]
    assert data.Vocab("ba").itos == data.Vocab("ab").itos  # order-independent


def test_zh_en_corpus_contains_the_seed_sentence():
    corpus = data.zh_en_pairs()
    pairs = [(zh, en) for zh, en, *_ in corpus]
    assert ("欢迎 来 北京", "welcome to beijing") in pairs
    assert 300 <= len(pairs) <= 500 and len(set(pairs)) == len(pairs)
    task = data.make_zh_en_task()
    assert (["欢迎", "来", "北京"], ["welcome", "to", "beijing"]) in task.test.pairs
    assert len(task.train) + len(task.test) == len(corpus)


def test_zh_en_corpus_is_seeded():
    a, b = data.make_zh_en_task(seed=0), data.make_zh_en_task(seed=0)
    assert a.train.pairs == b.train.pairs and a.test.pairs == b.test.pairs
    np.testing.assert_array_equal(a.train.src, b.train.src)
    assert data.make_zh_en_task(seed=1).train.pairs != a.train.pairs


def test_zh_en_positions_and_content_vary():
    """The place is not tied to one source position, not even within one
    template (the subject has one or three words), and the English order
    differs from the Chinese one (the time word moves to the end)."""
    places = {zh for zh, _ in data.ZH_EN_PLACES}
    by_template: dict = {}
    for zh, _, t, *_ in data.zh_en_pairs():
        words = zh.split()
        j = next(i for i, w in enumerate(words) if w in places)
        by_template.setdefault(t, set()).add(j)
    assert len(set().union(*by_template.values())) >= 5
    assert sum(len(js) > 1 for js in by_template.values()) >= 8
    task = data.make_zh_en_task()
    moved = [
        (s, t)
        for s, t in task.train.pairs
        if s[0] in {"今天", "明天", "晚上"}
        and t[-1] in {"today", "tomorrow", "tonight"}
    ]
    assert moved  # time word first in Chinese, last in English
    assert sum(len(s) == task.max_src_len for s, _ in task.train.pairs) > 0


def test_zh_en_held_out_combinations_use_only_known_words():
    task = data.make_zh_en_task()
    train_src = {w for s, _ in task.train.pairs for w in s}
    train_tgt = {w for _, t in task.train.pairs for w in t}
    assert len(task.test) >= 60
    assert not {tuple(s) for s, _ in task.test.pairs} & {
        tuple(s) for s, _ in task.train.pairs
    }
    for source, target in task.test.pairs:
        assert set(source) <= train_src and set(target) <= train_tgt
    assert task.src_vocab.unk_id not in task.test.src
    # an unseen-place sentence's template x place never occurs in training,
    # nor an unseen-position sentence's template x subject length
    corpus = data.zh_en_pairs()
    assert {held for *_, held in corpus} == {"", "place", "position"}
    seen = {(t, f["p"]) for *_, t, f, held in corpus if not held}
    unseen = {(t, f["p"]) for *_, t, f, held in corpus if held == "place"}
    assert unseen and not seen & unseen

    def long_subject(t, f):
        return (t, len(data.ZH_EN_SUBJECTS[f["s"]][0].split()) if "s" in f else 0)

    seen = {long_subject(t, f) for *_, t, f, held in corpus if not held}
    moved = {long_subject(t, f) for *_, t, f, held in corpus if held == "position"}
    assert {t for t, _ in moved} == set(data.ZH_EN_POSITION_TEMPLATES)
    assert all(n == 3 for _, n in moved) and not seen & moved
    # ... but every template and every place name occurs in training
    assert {t for t, _ in seen} == set(range(len(data.ZH_EN_TEMPLATES)))
    for place, _ in data.ZH_EN_PLACES:
        assert place in train_src


def test_zh_en_held_out_rule():
    held = [
        [
            data.zh_en_held_out(t, {"s": 0, "p": p}) == "place"
            for p in range(len(data.ZH_EN_PLACES))
        ]
        for t in range(len(data.ZH_EN_TEMPLATES))
    ]
    assert all(sum(row) == 2 for row in held)  # two places per template
    assert all(sum(col) == 2 for col in zip(*held, strict=True))  # each place twice
    assert held[0][0]  # 欢迎 来 北京 is held out
    assert data.zh_en_held_out(3, {"s": 4, "p": 1}) == "position"  # 我 的 朋友 ...
    assert data.zh_en_held_out(1, {"s": 4, "p": 1}) == ""  # not a moved template


def test_task_split_names():
    task = data.make_zh_en_task()
    assert task.split("train") is task.train
    with pytest.raises(ValueError, match="'train' or 'test'"):
        task.split("valid")


def test_every_trained_configuration_has_a_floor():
    for task, _, framework in data.EXPECTED_ACCURACY:
        assert task in data.TRAIN_CONFIGS and framework in ("tf", "torch")
    assert all(0 < v <= 1 for v in data.EXPECTED_ACCURACY.values())
