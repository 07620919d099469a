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
    assert len(kept) == 5  # a1, a2, b1, m, the forged one (eve: a link)
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
