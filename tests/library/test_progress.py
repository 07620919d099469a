"""attncourse.progress: bars print in JupyterLab, not into the built site.

The book build sets ATTNCOURSE_PROGRESS=0 (book/_ext/execute_parallel.py); the
bar must then print nothing yet still iterate and accept what the trainers call
on it (set_postfix, update). Unset, it prints the tqdm bar with its totals.
"""

import re

import pytest

from attncourse.progress import ENV_VAR, progress, progress_enabled

BAR = re.compile(r"\d+%\|.*\| *\d+/\d+ \[")  # tqdm's "100%|####| 5/5 [" part


def run_bar(**kwargs) -> list[int]:
    seen = []
    bar = progress(range(5), desc="train", **kwargs)
    for i in bar:
        seen.append(i)
        bar.set_postfix(loss=f"{1 / (i + 1):.3f}", refresh=False)
    bar.close()
    manual = progress(total=3, desc="manual")
    manual.update(3)
    manual.close()
    return seen


def test_bar_prints_when_unset(monkeypatch, capsys):
    monkeypatch.delenv(ENV_VAR, raising=False)
    assert progress_enabled()
    assert run_bar() == [0, 1, 2, 3, 4]
    out, err = capsys.readouterr()
    assert BAR.search(out) and "5/5" in out and "3/3" in out, out
    assert "train" in out and "loss=" in out, out
    assert err == ""


@pytest.mark.parametrize("value", ["0", "false", "OFF", " no "])
def test_bar_prints_nothing_when_disabled(monkeypatch, capsys, value):
    monkeypatch.setenv(ENV_VAR, value)
    assert not progress_enabled()
    assert run_bar() == [0, 1, 2, 3, 4]
    out, err = capsys.readouterr()
    assert out == "" and err == "", (out, err)


@pytest.mark.parametrize("value", ["1", "true", ""])
def test_bar_prints_when_enabled(monkeypatch, capsys, value):
    monkeypatch.setenv(ENV_VAR, value)
    run_bar()
    assert BAR.search(capsys.readouterr().out)


def test_explicit_disable_wins(monkeypatch, capsys):
    monkeypatch.delenv(ENV_VAR, raising=False)
    list(progress(range(3), disable=True))
    assert capsys.readouterr().out == ""


def test_bad_value_names_the_variable(monkeypatch):
    monkeypatch.setenv(ENV_VAR, "maybe")
    with pytest.raises(ValueError, match=rf"{ENV_VAR}='maybe'.*0 to hide"):
        progress(range(3))
