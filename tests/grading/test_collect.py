"""Collecting from the exchange (``grader.collect``) through the real commands:
``python -m grader collect``, plain ``nbgrader collect`` and
``nbgrader release_feedback`` (both routed through grader.collect by the
course's nbgrader_config.py), on an exchange built in a temporary folder.

Students write the inbound folder: links to the solution, to a classmate's
notebook and to the grader's secret (symbolic and hard), a FIFO, a folder
that is itself a link, and a folder in a classmate's name. None is followed,
none reaches ``submitted/``, a foreign-named folder never replaces the named
student's submission, every submission is kept, and the honest students are
collected unflagged. Owners differ by ``os.chown`` (root; elsewhere the
tests that need it skip, and fail under CI=true).
"""

import json
import os
import secrets
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.ci import skip_or_fail
from support.grading import ROOT, environment

from grader import collect as collect_mod
from grader import events

A = "addressing"
COURSE = "attention-course"
UIDS = {"alice": 40101, "bob": 40102, "mallory": 40103, "eve": 40104}
SOLUTION = ROOT / "solutions" / A / f"{A}.ipynb"


def stamp(minute: int) -> str:
    return f"2026-12-04 10:{minute:02d}:00.000000 UTC"


def needs_root():
    if os.geteuid() != 0:
        skip_or_fail("collect: owner checks need root (os.chown to other uids)")


@pytest.fixture
def course(tmp_path):
    """A course folder (the real nbgrader_config.py, a secret, a solution)
    and an exchange with an empty inbound, as release_assignment leaves it."""
    root = tmp_path / "course"
    (root / "solutions" / A).mkdir(parents=True)
    shutil.copy(ROOT / "nbgrader_config.py", root)
    shutil.copy(SOLUTION, root / "solutions" / A)
    (root / ".grading").mkdir(mode=0o700)
    (root / ".grading" / "secret").write_bytes(b"the course secret\n")
    inbound = tmp_path / "exchange" / COURSE / "inbound"
    inbound.mkdir(parents=True)
    inbound.chmod(0o2733)
    (tmp_path / "exchange").chmod(0o1777)
    uid_map = tmp_path / "uids.json"
    uid_map.write_text(json.dumps(UIDS))
    return root, inbound, uid_map


def submit(inbound: Path, student: str, minute: int, owner=None, **files) -> Path:
    """An inbound folder as ``nbgrader submit`` makes it (owned by ``owner``,
    default: ``student``'s uid in UIDS)."""
    folder = inbound / f"{student}+{A}+{stamp(minute)}+{secrets.token_urlsafe(9)}"
    folder.mkdir()
    files.setdefault(f"{A}.ipynb", f'{{"by": "{student}", "minute": {minute}}}')
    for name, text in files.items():
        (folder / name).write_text(text)
    (folder / "timestamp.txt").write_text(stamp(minute))
    (folder / "submission_secret.txt").write_text(secrets.token_hex(16))
    chown(folder, UIDS[owner or student])
    return folder


def chown(path: Path, uid: int) -> None:
    for p in [path, *path.rglob("*")]:
        os.chown(p, uid, uid, follow_symlinks=False)


def run(args, cwd, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        args,
        cwd=cwd,
        env=environment(ROOT),
        capture_output=True,
        text=True,
        timeout=kw.pop("timeout", 120),
    )


def collect_cli(root: Path, uid_map: Path) -> subprocess.CompletedProcess:
    done = run(
        [
            sys.executable,
            "-m",
            "grader",
            "collect",
            A,
            "--exchange",
            str(root.parent / "exchange"),
            "--uid-map",
            str(uid_map),
        ],
        cwd=root,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def submitted(root: Path, student: str) -> Path:
    return root / "submitted" / student / A


def collect_flags(root: Path, student: str) -> dict:
    data = events.read_file(events.path(root / ".grading", A, student))
    return (data.get("collect") or {}).get("flags", {})


def record(root: Path) -> list[dict]:
    return json.loads(
        (root / ".grading" / "collected" / A / "collect.json").read_text()
    )


def test_links_fifos_and_foreign_names_are_refused_honest_students_kept(course):
    needs_root()
    root, inbound, uid_map = course
    # honest: alice submits twice, bob once
    a1 = submit(inbound, "alice", 1)
    a2 = submit(inbound, "alice", 5)
    b1 = submit(inbound, "bob", 2)
    alice_nb = a2 / f"{A}.ipynb"
    # mallory: the notebook links to the solution, other files to the secret,
    # to alice's notebook (symbolic and hard), a FIFO, a folder link
    m = submit(inbound, "mallory", 3)
    (m / f"{A}.ipynb").unlink()
    (m / f"{A}.ipynb").symlink_to(root / "solutions" / A / f"{A}.ipynb")
    (m / "secret.txt").symlink_to(root / ".grading" / "secret")
    os.link(root / ".grading" / "secret", m / "secret-hard.txt")
    (m / "peer.ipynb").symlink_to(alice_nb)
    os.link(alice_nb, m / "peer-hard.ipynb")
    os.mkfifo(m / "pipe")
    (m / "solutions").symlink_to(root / "solutions")
    for p in ("secret.txt", f"{A}.ipynb", "peer.ipynb", "pipe", "solutions"):
        os.chown(m / p, UIDS["mallory"], UIDS["mallory"], follow_symlinks=False)
    # ... and, knowing their names, things inside bob's and alice's folders
    (b1 / "planted.ipynb").symlink_to(SOLUTION)
    os.chown(b1 / "planted.ipynb", UIDS["mallory"], 0, follow_symlinks=False)
    (a2 / "helper.py").write_text("import os")
    os.chown(a2 / "helper.py", UIDS["mallory"], 0)
    # mallory in bob's name, later than bob's own submission
    forged = submit(inbound, "bob", 9, owner="mallory")
    # eve: the submission folder itself is a link to the solutions
    eve = inbound / f"eve+{A}+{stamp(4)}+{secrets.token_urlsafe(9)}"
    eve.symlink_to(root / "solutions" / A)
    os.chown(eve, UIDS["eve"], UIDS["eve"], follow_symlinks=False)

    done = collect_cli(root, uid_map)
    out = done.stdout

    # honest students: the latest genuine submission, with nbgrader's timestamp
    assert (submitted(root, "alice") / f"{A}.ipynb").read_text() == alice_nb.read_text()
    assert (submitted(root, "alice") / "timestamp.txt").read_text() == stamp(5)
    assert (submitted(root, "alice") / "submission_secret.txt").exists()
    assert (submitted(root, "bob") / f"{A}.ipynb").read_bytes() == (
        b1 / f"{A}.ipynb"
    ).read_bytes()
    assert (submitted(root, "bob") / "timestamp.txt").read_text() == stamp(2)
    assert collect_flags(root, "alice") == {} and collect_flags(root, "bob") == {}
    # (a second name that mallory gave alice's file does not cost alice it)

    # mallory: nothing linked was read or copied; flagged `link`
    got = submitted(root, "mallory")
    assert sorted(p.name for p in got.iterdir()) == [
        "submission_secret.txt",
        "timestamp.txt",
    ]
    assert not any(p.is_symlink() for p in got.rglob("*"))
    flags = collect_flags(root, "mallory")
    notes = " ".join(flags["link"])
    for name in (f"{A}.ipynb", "secret.txt", "secret-hard.txt", "peer.ipynb"):
        assert name in notes, (name, notes)
    assert "peer-hard.ipynb is a hard link" in notes and "pipe is a FIFO" in notes
    assert "solutions is a symbolic link" in notes
    # ... and `impersonation` for the folder in bob's name, which was refused,
    # and for what was put into the others' folders (not collected)
    assert "not by bob" in " ".join(flags["impersonation"])
    for planted in ("planted.ipynb (a symbolic link", "helper.py (a file"):
        assert planted in " ".join(flags["impersonation"]), flags
    assert not (submitted(root, "bob") / "planted.ipynb").exists()
    assert not (submitted(root, "alice") / "helper.py").exists()
    assert "BEGIN SOLUTION" not in "".join(
        p.read_text(errors="replace")
        for p in (root / "submitted").rglob("*")
        if p.is_file()
    )
    assert "the course secret" not in "".join(
        p.read_text(errors="replace")
        for p in (root / ".grading" / "collected").rglob("*")
        if p.is_file()
    )
    # eve: the folder link was never followed, nothing submitted
    assert not submitted(root, "eve").exists()
    assert "symbolic link" in " ".join(collect_flags(root, "eve")["link"])

    # every folder is in the record; earlier ones and the forged one are kept
    rows = {r["name"]: r for r in record(root)}
    assert rows[a1.name]["status"] == "earlier"
    assert rows[a2.name]["status"] == "submitted"
    assert rows[b1.name]["status"] == "submitted"
    assert rows[forged.name]["status"] == "refused"
    assert rows[forged.name]["owner"] == UIDS["mallory"]
    assert rows[eve.name]["status"] == "refused"
    archive = root / ".grading" / "collected" / A
    kept = {p.name for p in archive.iterdir() if p.is_dir()}
    assert len(kept) == 4  # a1, a2, b1, m (refused ones are recorded only)
    assert (archive / events._file_name(a1.name) / f"{A}.ipynb").read_text() == (
        a1 / f"{A}.ipynb"
    ).read_text()
    assert "refused" in out and "not by bob" in out, out
    assert "collected 3 submission(s), kept 1 earlier one(s), refused 2" in out
    # the inbound folders are untouched
    assert (m / f"{A}.ipynb").is_symlink() and forged.is_dir()


def test_a_later_submission_replaces_and_a_hand_placed_one_is_kept(course):
    needs_root()
    root, inbound, uid_map = course
    hand = submitted(root, "alice")
    hand.mkdir(parents=True)
    (hand / f"{A}.ipynb").write_text("placed by the instructor")
    submit(inbound, "alice", 1)
    collect_cli(root, uid_map)
    assert '"minute": 1' in (hand / f"{A}.ipynb").read_text()
    aside = list((root / ".grading" / "collected" / A / "replaced").iterdir())
    assert [(p / f"{A}.ipynb").read_text() for p in aside] == [
        "placed by the instructor"
    ]
    submit(inbound, "alice", 7)
    collect_cli(root, uid_map)  # again, after a new submission
    assert '"minute": 7' in (hand / f"{A}.ipynb").read_text()
    assert len(list((root / ".grading" / "collected" / A).glob("alice+*"))) == 2
    assert len(list((root / ".grading" / "collected" / A / "replaced").iterdir())) == 1


def test_default_owner_is_the_unix_account_named_like_the_student(course):
    """No uid map: pwd.getpwnam(student) must own the folder."""
    needs_root()
    import pwd

    root, inbound, _ = course
    nobody = pwd.getpwnam("nobody").pw_uid
    for who in ("nobody", "daemon"):  # "daemon" made by nobody: refused
        folder = inbound / f"{who}+{A}+{stamp(1)}+{secrets.token_urlsafe(9)}"
        folder.mkdir()
        (folder / f"{A}.ipynb").write_text("{}")
        chown(folder, nobody)
    done = run(
        [sys.executable, "-m", "grader", "collect", "--exchange"]
        + [str(root.parent / "exchange")],
        cwd=root,
    )
    assert done.returncode == 0, done.stderr
    assert (submitted(root, "nobody") / f"{A}.ipynb").exists()
    assert not submitted(root, "daemon").exists()
    assert "impersonation" in collect_flags(root, "nobody")


def test_plain_nbgrader_collect_goes_through_grader_collect(course):
    needs_root()
    root, inbound, uid_map = course
    submit(inbound, "bob", 1)
    forged = submit(inbound, "bob", 8, owner="mallory")
    done = run(
        [
            sys.executable,
            "-m",
            "nbgrader",
            "collect",
            A,
            f"--Exchange.root={root.parent / 'exchange'}",
            f"--GuardedCollect.uid_map={uid_map}",
        ],
        cwd=root,
    )
    assert done.returncode == 0, done.stderr
    assert "python -m grader collect" in done.stderr, done.stderr
    assert "not by bob" in done.stderr
    assert '"minute": 1' in (submitted(root, "bob") / f"{A}.ipynb").read_text()
    assert {r["name"]: r["status"] for r in record(root)}[forged.name] == "refused"
    # --before-duedate (nbgrader's other rule) is refused, naming the command
    done = run(
        [sys.executable, "-m", "nbgrader", "collect", A, "--before-duedate"]
        + [f"--Exchange.root={root.parent / 'exchange'}"],
        cwd=root,
    )
    assert done.returncode != 0 and "python -m grader collect" in done.stderr


def test_collect_without_an_inbound_folder_names_the_problem(course, tmp_path):
    root, _, uid_map = course
    done = run(
        [sys.executable, "-m", "grader", "collect", A, "--exchange"]
        + [str(tmp_path / "nowhere"), "--uid-map", str(uid_map)],
        cwd=root,
    )
    assert done.returncode == 1
    assert "cannot open the exchange's inbound folder" in done.stderr
    assert "Exchange.root" in done.stderr


def test_release_feedback_releases_only_what_the_grader_wrote(course):
    root, _, _ = course
    exchange = root.parent / "exchange"
    pages = {}
    for student in ("alice", "bob"):
        folder = root / "feedback" / student / A
        folder.mkdir(parents=True)
        (folder / f"{A}.html").write_text(f"<p>feedback for {student}</p>")
        (folder / "timestamp.txt").write_text(stamp(1))
        (folder / "submission_secret.txt").write_text(secrets.token_hex(16))
        pages[student] = folder
    # planted: links in bob's feedback folder, a student folder that is a link
    (pages["bob"] / "secret.html").symlink_to(root / ".grading" / "secret")
    os.link(root / ".grading" / "secret", pages["bob"] / "hard.html")
    elsewhere = root.parent / "elsewhere" / A
    elsewhere.mkdir(parents=True)
    shutil.copy(pages["alice"] / "timestamp.txt", elsewhere)
    shutil.copy(pages["alice"] / "submission_secret.txt", elsewhere)
    (elsewhere / f"{A}.html").symlink_to(SOLUTION)
    (root / "feedback" / "eve").symlink_to(elsewhere.parent)
    # a page for a submission that came without a secret: nothing to release
    (root / "feedback" / "carol" / A).mkdir(parents=True)
    (root / "feedback" / "carol" / A / f"{A}.html").write_text("<p>carol</p>")
    done = run(
        [sys.executable, "-m", "nbgrader", "release_feedback", A]
        + [f"--Exchange.root={exchange}"],
        cwd=root,
    )
    assert done.returncode != 0  # it says what it refused
    assert "not released" in done.stderr, done.stderr
    for planted in ("bob/addressing/secret.html", "bob/addressing/hard.html", "eve"):
        assert planted in done.stderr, (planted, done.stderr[-3000:])
    assert "carol/addressing has no submission_secret.txt" in done.stderr
    assert "carol/addressing/" not in done.stderr.split("not released")[1]
    released = sorted((exchange / COURSE / "feedback").iterdir())
    texts = sorted(p.read_text() for p in released)
    assert texts == ["<p>feedback for alice</p>", "<p>feedback for bob</p>"]
    assert not any(p.is_symlink() for p in released)
    from nbgrader.utils import notebook_hash

    secret = (pages["alice"] / "submission_secret.txt").read_text()
    name = f"{notebook_hash(secret=secret, notebook_id=A)}.html"
    assert (exchange / COURSE / "feedback" / name).read_text().endswith("alice</p>")


# ------------------------------------------------ hostile folders (review)
def collect_here(root: Path, inbound: Path) -> tuple[list, list[str]]:
    """grader.collect in this process (monkeypatched limits apply), with
    UIDS as the uid map; (the submissions, the lines shown)."""
    names = {uid: who for who, uid in UIDS.items()}
    lines: list[str] = []
    subs = collect_mod.collect(
        root,
        inbound,
        [A],
        uid_of=UIDS.get,
        name_of=lambda uid: names.get(uid, ""),
        log=lines.append,
    )
    return subs, lines


def archived(root: Path) -> set[str]:
    archive = root / ".grading" / "collected" / A
    return {p.name for p in archive.iterdir() if p.is_dir()} - {"replaced"}


def used_bytes(path: Path) -> int:
    """Bytes allocated on disk under ``path``."""
    return sum(p.lstat().st_blocks * 512 for p in [path, *path.rglob("*")])


def test_a_folder_name_that_is_not_utf8_is_refused_and_the_class_collected(course):
    """B1: an undecodable byte in a folder's name crashed the whole collect
    (UnicodeEncodeError hashing it for the archive): nobody collected."""
    needs_root()
    root, inbound, _ = course
    submit(inbound, "alice", 1)
    bad = []
    for who in ("ghost", "bob"):  # no account; a genuine owner
        raw = os.fsencode(inbound) + (f"/{who}+{A}+{stamp(3)}+".encode() + b"\xff\xfe")
        os.mkdir(raw)
        with open(raw + b"/" + f"{A}.ipynb".encode(), "w") as fh:
            fh.write("{}")
        os.chown(raw, UIDS["bob"], UIDS["bob"])
        bad.append(os.fsdecode(raw).rsplit("/", 1)[1])
    submit(inbound, "mallory", 2)
    subs, lines = collect_here(root, inbound)
    assert (submitted(root, "alice") / f"{A}.ipynb").exists()
    assert (submitted(root, "mallory") / f"{A}.ipynb").exists()
    assert not submitted(root, "bob").exists() and not submitted(root, "ghost").exists()
    rows = {r["name"]: r for r in record(root)}  # collect.json was written
    assert rows[bad[1]]["status"] == "refused"
    assert "not valid UTF-8" in rows[bad[1]]["reason"]
    assert rows[bad[0]]["status"] == "refused"
    assert rows[bad[1]]["owner"] == UIDS["bob"]
    assert len(archived(root)) == 2  # alice's and mallory's only
    assert all(part.isprintable() for line in lines for part in line.split("\n"))
    # the log file name of such a text no longer raises
    assert events._file_name(bad[1]).startswith(f"bob+{A}+")


def test_a_timestamp_folder_in_a_submission_does_not_stop_the_class(course):
    """B2: a folder named timestamp.txt in a genuine submission raised
    IsADirectoryError in _submit; the students after it were not collected
    and a temporary folder was left in submitted/."""
    needs_root()
    root, inbound, _ = course
    submit(inbound, "alice", 1)
    b = submit(inbound, "bob", 2)
    (b / "timestamp.txt").unlink()
    (b / "timestamp.txt").mkdir()
    (b / "timestamp.txt" / "inside").write_text("x")
    chown(b, UIDS["bob"])
    submit(inbound, "eve", 3)
    submit(inbound, "mallory", 4)
    collect_here(root, inbound)
    for who, minute in (("alice", 1), ("bob", 2), ("eve", 3), ("mallory", 4)):
        got = submitted(root, who)
        assert (got / "timestamp.txt").read_text() == stamp(minute), who
        assert (got / f"{A}.ipynb").exists(), who
    assert not list((root / "submitted" / "bob").glob(".*"))
    statuses = sorted(r["status"] for r in record(root))
    assert statuses == ["submitted"] * 4


def test_an_error_submitting_one_student_is_recorded_and_cleaned_up(
    course, monkeypatch
):
    """Per student: an error while one student's folder is put in place
    refuses that one (grader-error, in collect.json), leaves no temporary
    folder, and the others are collected."""
    needs_root()
    root, inbound, _ = course
    submit(inbound, "alice", 1)
    b = submit(inbound, "bob", 2)
    submit(inbound, "eve", 3)
    real = collect_mod._replace

    def failing(src, final, aside):
        if "bob" in final.parts and "submitted" in final.parts:
            raise OSError(5, "disk on fire")
        return real(src, final, aside)

    monkeypatch.setattr(collect_mod, "_replace", failing)
    collect_here(root, inbound)
    assert (submitted(root, "alice") / f"{A}.ipynb").exists()
    assert (submitted(root, "eve") / f"{A}.ipynb").exists()
    assert not list((root / "submitted" / "bob").iterdir())
    row = {r["name"]: r for r in record(root)}[b.name]
    assert row["status"] == "refused" and "disk on fire" in row["reason"]
    assert "grader-error" in collect_flags(root, "bob")


def test_sparse_files_are_not_copied_and_refused_folders_not_archived(course):
    """B3: sparse files cost nothing in the exchange and their full size in
    the archive and submitted/, once per folder; refused folders were
    archived too."""
    needs_root()
    root, inbound, _ = course
    for minute in (1, 2, 3):
        folder = submit(inbound, "mallory", minute)
        for i in range(2):
            with open(folder / f"big{i}.bin", "wb") as fh:
                fh.truncate(8 * 1024 * 1024)
        chown(folder, UIDS["mallory"])
    forged = submit(inbound, "bob", 5, owner="mallory")
    (forged / "data.bin").write_bytes(b"x" * 100_000)
    ghost = inbound / f"ghost+{A}+{stamp(6)}+{secrets.token_urlsafe(9)}"
    ghost.mkdir()
    (ghost / "data.bin").write_bytes(b"x" * 100_000)
    chown(ghost, UIDS["mallory"])
    collect_here(root, inbound)
    got = submitted(root, "mallory")
    assert (got / f"{A}.ipynb").exists() and not (got / "big0.bin").exists()
    notes = " ".join(collect_flags(root, "mallory")["too-large"])
    assert "big0.bin is a sparse file" in notes, notes
    spent = used_bytes(root / ".grading" / "collected") + used_bytes(root / "submitted")
    assert spent < 1024 * 1024, spent
    assert all(not n.startswith(("bob+", "ghost+")) for n in archived(root))
    rows = {r["name"]: r for r in record(root)}
    assert rows[forged.name]["status"] == rows[ghost.name]["status"] == "refused"


def test_submissions_and_bytes_per_account_are_capped(course, monkeypatch):
    """B3: at most MAX_SUBMISSIONS folders per student and assignment (the
    latest), MAX_OWNER_BYTES per account and run, a file's second name in
    the same account's folders copied once."""
    needs_root()
    root, inbound, _ = course
    monkeypatch.setattr(collect_mod, "MAX_SUBMISSIONS", 3)
    monkeypatch.setattr(collect_mod, "MAX_OWNER_BYTES", 250_000)
    folders = [submit(inbound, "alice", m) for m in range(1, 6)]
    big = folders[-1] / "a0.bin"
    big.write_bytes(b"y" * 100_000)
    for i in range(4):  # second names, in this folder and an earlier one
        os.link(big, folders[-1] / f"again{i}.bin")
    os.link(big, folders[-2] / "again.bin")
    folders[-2].joinpath("other.bin").write_bytes(b"z" * 100_000)
    folders[-3].joinpath("more.bin").write_bytes(b"w" * 100_000)
    for f in folders:
        chown(f, UIDS["alice"])
    collect_here(root, inbound)
    rows = {r["name"]: r for r in record(root)}
    status = [rows[f.name]["status"] for f in folders]
    assert status[:2] == ["refused", "refused"], status
    assert "too many submissions" in rows[folders[0].name]["reason"]
    assert status[4] == "submitted" and status[3] == "earlier"
    kept = archived(root)
    assert events._file_name(folders[0].name) not in kept
    assert events._file_name(folders[1].name) not in kept
    latest = root / ".grading" / "collected" / A / events._file_name(folders[4].name)
    assert sorted(p.name for p in latest.iterdir()) == [
        "a0.bin",
        f"{A}.ipynb",
        "submission_secret.txt",
        "timestamp.txt",
    ]
    assert "not copied again" in " ".join(rows[folders[4].name]["notes"])
    # 100 000 (latest) + 100 000 (other.bin): more.bin is past the budget
    assert "more than 250000 bytes" in " ".join(
        rows[folders[2].name]["flags"]["too-large"]
    )
    assert (submitted(root, "alice") / "a0.bin").stat().st_size == 100_000


def test_timestamps_must_be_nbgraders_and_what_is_shown_is_escaped(course):
    """B6: a folder's timestamp with terminal control characters was
    accepted (dateutil is lenient) and printed raw to the instructor."""
    needs_root()
    root, inbound, _ = course
    evil = "2026-12-05 10:00:00 \x1b]0;x\x07"
    f = inbound / f"alice+{A}+{evil}+{secrets.token_urlsafe(9)}"
    f.mkdir()
    (f / f"{A}.ipynb").write_text("{}")
    chown(f, UIDS["alice"])
    g = inbound / f"bob+{A}+{stamp(1)}\r\nsubmitted alice ok+{secrets.token_urlsafe(9)}"
    g.mkdir()
    chown(g, UIDS["bob"])
    subs, lines = collect_here(root, inbound)
    rows = {r["name"]: r for r in record(root)}
    assert rows[f.name]["status"] == "refused"
    assert "not an nbgrader timestamp" in rows[f.name]["reason"]
    assert "%Y-%m-%d %H:%M:%S.%f %Z" in rows[f.name]["reason"]
    assert rows[g.name]["status"] == "refused"
    assert not submitted(root, "alice").exists()
    text = "\n".join(lines)
    for c in "\x1b\x07\r":
        assert c not in text, repr(text)
    assert all(not line.startswith("submitted") for line in text.split("\n"))
    # describe escapes every part, whatever a Submission holds
    sub = collect_mod.Submission(
        "x", "x", "al\nice", A, "t\x1b[2J", 1, "own\rer", "refused", "why\x07"
    )
    sub.flag("link", "a\nb")
    sub.notes.append("c\x1bd")
    shown = collect_mod.describe(sub)
    assert all(line.isprintable() for line in shown.split("\n")), repr(shown)
    assert len(shown.split("\n")) == 3


def test_parse_time_takes_nbgraders_format_only():
    ok = ("2026-12-05 10:00:00.000000 UTC", "2026-12-05 10:00:00.123456 CET")
    for text in ok:
        assert collect_mod.parse_time(text) is not None, text
    for text in (
        "2026-12-05 10:00:00 \x1b]0;x\x07",
        "2026-12-05 10:00:00 UTC",
        "2026-12-05 10:00:00.000000 UTC\n",
        "tomorrow",
        "2026-12-05 10:00:00.000000 UTC extra",
        "\uff12026-12-05 10:00:00.000000 UTC",
    ):
        assert collect_mod.parse_time(text) is None, repr(text)
