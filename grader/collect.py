"""Collect submissions from the nbgrader exchange without trusting it.

``python -m grader collect [ASSIGNMENT...]`` replaces ``nbgrader collect``
(which this course's ``nbgrader_config.py`` routes here too, as it does the
formgrader's *Collect* button: ``GuardedCollect``). The exchange's
``<root>/<course>/inbound/`` is world-writable and its folder names
(``<student>+<assignment>+<timestamp>+<random>``) are a public format, so
everything in it is written by students. nbgrader's own collect copies each
folder with links followed and takes the student's name from the folder's
name (its owner check only logs a warning). Here, per inbound folder:

* **Links are never followed.** Every folder and file is opened relative to
  its parent's descriptor with ``O_NOFOLLOW``, after an ``lstat`` said it is a
  folder or a regular file. A symbolic link, a hard link to another account's
  file, a FIFO, socket or device, a mount point: never opened, never copied
  (flag ``link``); a folder that is itself a link is refused whole. A
  student's own file with a second name is copied: its bytes are theirs, and
  a classmate who adds a name to it (nothing stops that where
  ``fs.protected_hardlinks`` is off) must not cost them their submission.
  Anything else that another account made inside a student's folder (nbgrader
  leaves submission folders mode 0777) is not copied and is flagged
  ``impersonation`` on the account that made it, not on the student.
* **The owner is the student.** The folder's owning uid must be the uid of
  the student it names: ``pwd.getpwnam(student).pw_uid`` (on JupyterHub with
  system users the hub user name is the Unix user), or a JSON map
  ``{"student": uid}`` given with ``--uid-map`` / ``GuardedCollect.uid_map``
  (accounts whose names differ from the student ids, LDAP, one uid per pod).
  A folder made by another account is refused: it never touches the named
  student's submission, and it is flagged ``impersonation`` on the account
  that made it (when that account is a student).
* **Every genuine submission is kept, within bounds.** Each folder whose
  owner is the student is copied, regular files only, to
  ``<state>/collected/<assignment>/<folder>/``; the latest one (by the
  timestamp in its name) that could be copied becomes
  ``submitted/<student>/<assignment>/`` with nbgrader's ``timestamp.txt``
  (written by the grader: a ``timestamp.txt`` of the student's is not
  copied there); a submitted folder that came from elsewhere (put there by
  hand) is moved to ``<state>/collected/<assignment>/replaced/`` first. A
  refused folder is recorded, never copied. What was collected, kept or
  refused and why is in ``<state>/collected/<assignment>/collect.json`` and
  in each student's grading log (phase ``collect``), which the grading report
  shows. One folder or student that cannot be collected (a name that is not
  UTF-8, an error while copying) is refused with its reason; the rest of the
  class is collected.
* **Timestamps are nbgrader's.** The timestamp in a folder's name must be in
  nbgrader's ``Exchange.timestamp_format`` (``%Y-%m-%d %H:%M:%S.%f %Z``,
  e.g. ``2026-12-05 10:00:00.000000 UTC``); anything else is refused. What
  the instructor sees (``describe``) is escaped: a name cannot move the
  cursor, ring the bell or forge a line.

**Limits** (what collecting one run may cost the grader's disk; an honest
student, whose notebook is under 1 MB and who submits a few dozen times, never
reaches them; the files a student makes in the exchange are on their own
quota, so the copies are bounded by what they cost there):

* ``MAX_FILE_BYTES`` (32 MiB) per file, ``MAX_FOLDER_BYTES`` (128 MiB) per
  folder, ``staging.MAX_ENTRIES`` (2 000) files and folders per folder,
  ``staging.MAX_TREE_DEPTH`` (12) levels: the rest not copied, ``too-large``.
* A sparse file (a hole: fewer bytes allocated than its size, which
  ``truncate -s`` makes for free) is not copied, ``too-large``; a second name
  of a file already copied for the same account in this run is not copied
  again (nbgrader's submit copies, so honest folders never share a file).
* ``MAX_SUBMISSIONS`` (100) folders per student and assignment: the latest
  100 by their timestamps are copied, the others refused as "too many
  submissions", recorded and not copied.
* ``MAX_OWNER_BYTES`` (1 GiB) and ``MAX_OWNER_ENTRIES`` (20 000) per account
  and run, over all its folders, latest first: what is past them is not
  copied (``too-large``; a folder reached when they are spent is refused).
  ``submitted/`` holds one more copy of one folder per student and
  assignment. Every run copies again, replacing the archived copies of
  folders still in the exchange.

``submitted/`` then goes to staging (``grader.staging``) unchanged.

``GuardedReleaseFeedback`` (``nbgrader release_feedback``, the formgrader's
*Release feedback*) copies to the exchange only feedback pages the grader
wrote: ``feedback/<student>/<assignment>/*.html`` reached without a link,
regular files with one name, owned by the account that releases them;
anything else is named in the error and not released.
"""

import argparse
import errno
import json
import os
import pwd
import re
import secrets
import shutil
import stat
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from nbgrader.exchange.default import ExchangeCollect, ExchangeReleaseFeedback
from nbgrader.utils import notebook_hash, parse_utc
from traitlets import Unicode

from grader import events as _events
from grader import staging

COMMAND = "python -m grader collect"
COURSE = "attention-course"
ARCHIVE = "collected"  # under the state folder
RECORD = "collect.json"
TIMESTAMP = staging.TIMESTAMP
MAX_FILE_BYTES = staging.MAX_NOTEBOOK_BYTES  # one file
MAX_FOLDER_BYTES = 128 * 1024 * 1024  # one submission folder
MAX_FEEDBACK_BYTES = 64 * 1024 * 1024  # one feedback page
MAX_SUBMISSIONS = 100  # folders collected per student and assignment, latest
MAX_OWNER_BYTES = 1024 * 1024 * 1024  # copied per account and run
MAX_OWNER_ENTRIES = 20_000  # files and folders copied per account and run
_NOFOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC
_DIR = os.O_RDONLY | os.O_DIRECTORY | _NOFOLLOW
# a student id or assignment name usable as one path component
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._@+-]{0,127}$")
# nbgrader's Exchange.timestamp_format, "%Y-%m-%d %H:%M:%S.%f %Z": %Z is a
# zone's abbreviation ("UTC", "CET") or, for zones without one, "+03"/"-0330"
_STAMP = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6} "
    r"(?:[A-Za-z]{1,6}|[+-][0-9]{2}(?:[0-9]{2})?)"
)


class CollectError(RuntimeError):
    """The exchange cannot be collected at all (no inbound folder, ...)."""


@dataclass
class Budget:
    """What one account's folders have cost so far in this run."""

    bytes: int = 0
    entries: int = 0
    seen: set = field(default_factory=set)  # (st_dev, st_ino) of linked files

    def spent(self) -> bool:
        return self.bytes >= MAX_OWNER_BYTES or self.entries >= MAX_OWNER_ENTRIES


@dataclass
class Submission:
    """One folder in the exchange's inbound and what became of it."""

    name: str  # its name in inbound/
    folder: str = ""  # the same, as logs show it (escaped)
    student: str = ""  # the name it claims
    assignment: str = ""
    timestamp: str = ""
    owner: int | None = None  # uid owning the folder
    owner_name: str = ""
    status: str = ""  # submitted | earlier | refused | ignored
    reason: str = ""  # why refused
    files: list = field(default_factory=list)  # copied, relative paths
    flags: dict = field(default_factory=dict)  # flag -> notes
    notes: list = field(default_factory=list)  # for the record, not flags
    foreign: list = field(default_factory=list)  # [uid, what]: made by others

    def flag(self, name: str, note: str) -> None:
        notes = self.flags.setdefault(name, [])
        if note not in notes:
            notes.append(note)


# ------------------------------------------------------------------ owners
def uid_from_passwd(student: str) -> int | None:
    """The uid of the Unix account named ``student`` (None: no such account)."""
    try:
        return pwd.getpwnam(student).pw_uid
    except (KeyError, UnicodeEncodeError, ValueError):
        return None


def name_from_passwd(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return ""


def uid_map(path) -> tuple:
    """(uid_of, name_of) from a JSON file ``{"student id": uid, ...}``."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise CollectError(f"cannot read the uid map {path}: {exc}") from None
    if not isinstance(data, dict) or not all(
        isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool)
        for k, v in data.items()
    ):
        raise CollectError(
            f"the uid map {path} must be a JSON object of student id -> uid "
            '(an integer), e.g. {"alice": 1001}'
        )
    names = {}
    for student, uid in data.items():
        names.setdefault(uid, student)
    return data.get, lambda uid: names.get(uid, "")


# --------------------------------------------------------- names, timestamps
def parse_folder(name: str):
    """(student, assignment, timestamp) of an inbound folder name, or None."""
    parts = name.rsplit("+", 3)
    if len(parts) != 4:
        return None
    student, assignment, timestamp, _random = parts
    return student, assignment, timestamp


def parse_time(text: str):
    """The UTC time of an nbgrader timestamp, in nbgrader's exact format
    (``_STAMP``); None if it is not one."""
    if not isinstance(text, str) or not _STAMP.fullmatch(text):
        return None
    try:
        return parse_utc(text)
    except Exception:  # noqa: BLE001  (dateutil raises many kinds)
        return None


def _safe(name: str) -> bool:
    return bool(_NAME.match(name)) and name not in (".", "..")


# ---------------------------------------------------- copying, never following
def _what(st) -> str:
    mode = st.st_mode
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISREG(mode):
        return "a file"
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def _refusal(st, owner: int, device: int) -> tuple[str, str] | None:
    """(flag, why) when the entry ``st`` (from lstat) must not be copied; flag
    "foreign": another account made it (it is not the submitter's doing)."""
    hard = stat.S_ISREG(st.st_mode) and st.st_nlink > 1
    if st.st_uid != owner and not hard:
        return "foreign", f"{_what(st)} made by uid {st.st_uid}"
    if stat.S_ISLNK(st.st_mode):
        return "link", "a symbolic link"
    if st.st_dev != device:
        return "link", "a mount point"
    if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
        return "link", _what(st)
    if st.st_uid != owner:  # a second name of someone else's file
        return "link", f"a hard link to a file of uid {st.st_uid}"
    return None


class Sparse(OSError):
    """A file with holes: its size is not what it costs in the exchange."""


def _sparse(fd: int, st) -> bool:
    """Whether the open file ``fd`` (fstat ``st``) has a hole: SEEK_HOLE
    finds one before its end, or (a file system without SEEK_HOLE) far fewer
    bytes are allocated than its size. Allocated blocks alone would refuse
    honest files on compressing file systems (ZFS, btrfs), holes never."""
    if st.st_size == 0:
        return False
    try:
        return os.lseek(fd, 0, os.SEEK_HOLE) < st.st_size
    except OSError:
        return st.st_size > (1 << 20) and st.st_blocks * 512 < st.st_size // 2
    finally:
        os.lseek(fd, 0, os.SEEK_SET)


def _copy_file(fd: int, name: str, lst, dest: Path, limit: int) -> int:
    """Copy the regular file ``name`` under ``fd`` (lstat ``lst``) to ``dest``;
    returns its size. Raises OSError when it changed since the lstat, Sparse
    when it has holes, staging.TooLarge past ``limit`` bytes."""
    src = os.open(name, os.O_RDONLY | os.O_NONBLOCK | _NOFOLLOW, dir_fd=fd)
    try:
        st = os.fstat(src)
        if (
            not stat.S_ISREG(st.st_mode)
            or (st.st_dev, st.st_ino) != (lst.st_dev, lst.st_ino)
            or st.st_uid != lst.st_uid
        ):
            raise OSError(errno.EAGAIN, "it was replaced while it was read")
        if _sparse(src, st):
            raise Sparse(
                errno.EFBIG,
                f"a sparse file: {st.st_size} bytes, {st.st_blocks * 512} "
                "of them on disk",
            )
        out = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o600)
        size = 0
        try:
            while chunk := os.read(src, 1 << 20):
                size += len(chunk)
                if size > limit:
                    raise staging.TooLarge(errno.EFBIG, f"more than {limit} bytes")
                os.write(out, chunk)
        finally:
            os.close(out)
        return size
    finally:
        os.close(src)


def copy_folder(
    fd: int, owner: int, dest: Path, sub: Submission, budget: Budget | None = None
) -> None:
    """Copy the regular files under the folder open as ``fd`` (owned by
    ``owner``) to ``dest`` (created); what is refused goes into ``sub.flags``.
    ``budget``: what the account's folders copied so far in this run cost
    (``MAX_OWNER_BYTES``, ``MAX_OWNER_ENTRIES``; counted on)."""
    budget = budget if budget is not None else Budget()
    device = os.fstat(fd).st_dev
    dest.mkdir(mode=0o700)
    total, entries = 0, 0
    todo = [((), os.dup(fd), dest)]
    while todo:
        parts, dir_fd, out = todo.pop()
        try:
            try:
                with os.scandir(dir_fd) as it:
                    names = sorted(e.name for e in it)
            except OSError as exc:
                where = staging.shown(parts) + "/" if parts else "the folder"
                sub.notes.append(f"{where} could not be listed ({exc.strerror})")
                continue
            for name in names:
                rel = (*parts, name)
                shown = staging.shown(rel)
                entries += 1
                if entries > staging.MAX_ENTRIES:
                    sub.flag(
                        "too-large",
                        f"more than {staging.MAX_ENTRIES} files; the rest "
                        "was not collected",
                    )
                    break
                if budget.entries >= MAX_OWNER_ENTRIES:
                    sub.flag(
                        "too-large",
                        f"this account's submissions hold more than "
                        f"{MAX_OWNER_ENTRIES} files together; the rest was "
                        "not collected",
                    )
                    break
                try:
                    st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                except OSError:
                    continue  # removed since it was listed
                refused = _refusal(st, owner, device)
                if refused and refused[0] == "foreign":
                    sub.foreign.append([st.st_uid, f"{shown} ({refused[1]})"])
                    sub.notes.append(f"{shown} is {refused[1]}; not collected")
                    continue
                if refused:
                    flag, why = refused
                    sub.flag(flag, f"{shown} is {why}; never opened or copied")
                    continue
                if stat.S_ISDIR(st.st_mode):
                    if len(rel) >= staging.MAX_TREE_DEPTH:
                        sub.flag(
                            "too-large",
                            f"{shown}/ is more than {staging.MAX_TREE_DEPTH} "
                            "folders deep; not collected",
                        )
                        continue
                    try:
                        child = os.open(name, _DIR, dir_fd=dir_fd)
                    except OSError:
                        sub.flag("link", f"{shown}/ became a link; not followed")
                        continue
                    (out / name).mkdir(mode=0o700)
                    budget.entries += 1
                    todo.append((rel, child, out / name))
                    continue
                if st.st_nlink > 1 and (st.st_dev, st.st_ino) in budget.seen:
                    sub.notes.append(
                        f"{shown} is a second name of a file already collected "
                        "from this account; not copied again"
                    )
                    continue
                if st.st_size > MAX_FILE_BYTES:
                    sub.flag(
                        "too-large",
                        f"{shown} has {st.st_size} bytes, more than the "
                        f"{MAX_FILE_BYTES} collected per file; not collected",
                    )
                    continue
                if total + st.st_size > MAX_FOLDER_BYTES:
                    sub.flag(
                        "too-large",
                        f"{shown}: the submission holds more than "
                        f"{MAX_FOLDER_BYTES} bytes; not collected",
                    )
                    continue
                if budget.bytes + st.st_size > MAX_OWNER_BYTES:
                    sub.flag(
                        "too-large",
                        f"{shown}: this account's submissions hold more than "
                        f"{MAX_OWNER_BYTES} bytes together; not collected",
                    )
                    continue
                limit = min(
                    MAX_FILE_BYTES,
                    MAX_FOLDER_BYTES - total,
                    MAX_OWNER_BYTES - budget.bytes,
                )
                try:
                    size = _copy_file(dir_fd, name, st, out / name, limit)
                except Sparse as exc:
                    (out / name).unlink(missing_ok=True)
                    sub.flag("too-large", f"{shown} is {exc.strerror}; not collected")
                    continue
                except OSError as exc:
                    (out / name).unlink(missing_ok=True)
                    why = f"{shown} could not be copied ({exc.strerror or exc})"
                    if exc.errno in (errno.ELOOP, errno.EAGAIN, errno.ENOTDIR):
                        sub.flag("link", f"{why}: it changed into something else")
                    elif isinstance(exc, staging.TooLarge):
                        sub.flag("too-large", f"{why}; not collected")
                    else:
                        sub.notes.append(f"{why}; not collected")
                    continue
                total += size
                budget.bytes += size
                budget.entries += 1
                if st.st_nlink > 1:
                    budget.seen.add((st.st_dev, st.st_ino))
                sub.files.append("/".join(rel))
        finally:
            os.close(dir_fd)
    for _, dir_fd, _ in todo:
        os.close(dir_fd)


# ------------------------------------------------------------------ collect
def _replace(src: Path, final: Path, aside: Path | None) -> None:
    """Put the folder ``src`` at ``final``; what was there goes to ``aside``
    (or is deleted when ``aside`` is None: it is a copy kept elsewhere)."""
    if os.path.lexists(final):
        if aside is not None:
            aside.parent.mkdir(parents=True, exist_ok=True)
            os.replace(final, aside)
        elif final.is_symlink() or not final.is_dir():
            final.unlink()
        else:
            shutil.rmtree(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    os.replace(src, final)


def _read_small(path: Path) -> str:
    try:
        return staging.read_file(path.parent, (path.name,)).decode()
    except (OSError, UnicodeDecodeError):
        return ""


def collect(
    root,
    inbound,
    assignments=None,
    *,
    state_dir=None,
    submitted: str = "submitted",
    uid_of=uid_from_passwd,
    name_of=name_from_passwd,
    students=None,
    log=None,
) -> list[Submission]:
    """Collect ``inbound`` (the exchange's ``<root>/<course>/inbound``) into
    ``<root>/<submitted>/``; see the module docstring. ``assignments``: the
    names to collect (None: every assignment of the course, i.e. with a folder
    in ``solutions/`` or ``exercises/``); ``students``: only these (None: all).
    Returns one ``Submission`` per inbound folder looked at."""
    root = Path(root)
    state = Path(state_dir) if state_dir else root / ".grading"
    inbound = Path(inbound)
    say = log or (lambda text: None)
    if assignments:
        wanted = set(assignments)
    else:
        wanted = {
            p.name
            for d in ("solutions", "exercises")
            if (root / d).is_dir()
            for p in (root / d).iterdir()
            if p.is_dir() and not p.is_symlink() and _safe(p.name)
        }
    for a in sorted(wanted):
        if not _safe(a):
            raise CollectError(f"{staging.shown(a)!s} is not an assignment name")
    try:
        in_fd = os.open(inbound, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise CollectError(
            f"cannot open the exchange's inbound folder {inbound} "
            f"({exc.strerror}): is Exchange.root right, and is this the "
            "account that released the assignments?"
        ) from None
    found: list[Submission] = []
    try:
        with os.scandir(in_fd) as it:
            names = sorted(e.name for e in it)
        for name in names:
            try:
                sub = _look(in_fd, name, wanted, students, uid_of, name_of)
            except Exception as exc:  # noqa: BLE001  (one folder never stops all)
                sub = _failed(name, wanted, students, exc)
            if sub is not None:
                found.append(sub)
        by_assignment: dict[str, list[Submission]] = {}
        for sub in found:
            if sub.status != "ignored":
                by_assignment.setdefault(sub.assignment, []).append(sub)
        budgets: dict[int, Budget] = {}  # per account, over the assignments
        for assignment, subs in sorted(by_assignment.items()):
            _collect_assignment(
                in_fd, root / submitted, state, assignment, subs, name_of, say, budgets
            )
    finally:
        os.close(in_fd)
    return [s for s in found if s.status != "ignored"]


def _why(exc: BaseException) -> str:
    """An exception as a reason, escaped."""
    text = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
    return staging.shown(f"{type(exc).__name__}: {text}", 300)


def _failed(name, wanted, students, exc) -> Submission | None:
    """The record of an inbound entry that could not even be looked at."""
    parsed = parse_folder(name)
    if parsed is None or parsed[1] not in wanted:
        return None
    if students is not None and parsed[0] not in students:
        return None
    sub = Submission(name, staging.shown(name), *parsed)
    sub.status = "refused"
    sub.reason = f"the grader could not look at it ({_why(exc)})"
    return sub


def _look(in_fd, name, wanted, students, uid_of, name_of) -> Submission | None:
    """What the inbound entry ``name`` is, before anything is copied."""
    shown = staging.shown(name)
    parsed = parse_folder(name)
    if parsed is None or parsed[1] not in wanted:
        return None  # another assignment or not a submission (left alone)
    student, assignment, stamp = parsed
    if students is not None and student not in students:
        return None
    sub = Submission(name, shown, student, assignment, stamp)
    try:
        st = os.stat(name, dir_fd=in_fd, follow_symlinks=False)
    except OSError:
        sub.status = "ignored"
        return sub
    sub.owner = st.st_uid
    sub.owner_name = name_of(st.st_uid)
    sub.status = "refused"
    try:
        name.encode()
    except UnicodeEncodeError:  # undecodable bytes (os.fsdecode's surrogates)
        sub.reason = "the folder's name is not valid UTF-8 (nbgrader never makes one)"
        return sub
    if not _safe(student):
        sub.reason = f"{staging.shown(student)!s} is not a student id"
    elif parse_time(stamp) is None:
        sub.reason = (
            f"{staging.shown(stamp)} is not an nbgrader timestamp (its format "
            "is %Y-%m-%d %H:%M:%S.%f %Z, e.g. 2026-12-05 10:00:00.000000 UTC)"
        )
    elif stat.S_ISLNK(st.st_mode):
        sub.reason = "the submission folder is a symbolic link"
        sub.flag("link", f"{shown} is a symbolic link; never followed")
    elif not stat.S_ISDIR(st.st_mode):
        sub.reason = f"the submission is {_what(st)}, not a folder"
        sub.flag("link", f"{shown} is {_what(st)}; never opened")
    else:
        expected = uid_of(student)
        if expected is None:
            sub.reason = (
                f"there is no account for the student {staging.shown(student)} "
                "to check the folder's owner against (a uid map gives one: "
                "--uid-map / GuardedCollect.uid_map)"
            )
        elif expected != st.st_uid:
            made_by = sub.owner_name or f"uid {st.st_uid}"
            sub.reason = (
                f"made by {staging.shown(made_by)}, not by "
                f"{staging.shown(student)} (uid {expected}) whose name it "
                "carries; the named student's submission is untouched"
            )
        else:
            sub.status = "genuine"
    return sub


def _collect_assignment(
    in_fd, submitted, state, assignment, subs, name_of, say, budgets
) -> None:
    archive = state / ARCHIVE / assignment
    archive.mkdir(parents=True, exist_ok=True)
    os.chmod(state, 0o700)
    for old in archive.glob(".collecting-*"):  # left by a run that was killed
        shutil.rmtree(old, ignore_errors=True)
    genuine: dict[str, list[Submission]] = {}
    for sub in subs:  # refused folders are recorded, never copied
        if sub.status == "genuine":
            genuine.setdefault(sub.student, []).append(sub)
    for _student, mine in sorted(genuine.items(), key=lambda kv: kv[0]):
        try:
            _collect_student(in_fd, submitted, archive, assignment, mine, budgets)
        except Exception as exc:  # noqa: BLE001  (one student never stops all)
            for sub in mine:
                if sub.status in ("genuine", "submitted"):
                    sub.status = "refused"
                    sub.reason = f"the grader could not collect it ({_why(exc)})"
                    sub.flag("grader-error", sub.reason)
    _record(state, archive, assignment, subs, name_of, say)


def _collect_student(in_fd, submitted, archive, assignment, mine, budgets) -> None:
    """One student's genuine folders of ``assignment``, latest first: the
    latest ``MAX_SUBMISSIONS`` archived within the account's budget, the
    latest archived one submitted."""
    mine.sort(key=lambda s: (parse_time(s.timestamp), s.folder), reverse=True)
    budget = budgets.setdefault(mine[0].owner, Budget())
    for n, sub in enumerate(mine):
        if n >= MAX_SUBMISSIONS:
            sub.status = "refused"
            sub.reason = (
                f"too many submissions: only the latest {MAX_SUBMISSIONS} of "
                "an assignment are collected; recorded, not copied"
            )
        elif budget.spent():
            sub.status = "refused"
            sub.reason = (
                f"this account's submissions already hold {MAX_OWNER_BYTES} "
                f"bytes or {MAX_OWNER_ENTRIES} files in this run; recorded, "
                "not copied"
            )
        else:
            try:
                _archive(in_fd, archive, sub, budget)
            except Exception as exc:  # noqa: BLE001  (one folder never stops all)
                sub.status = "refused"
                sub.reason = f"the grader could not copy it ({_why(exc)})"
                sub.flag("grader-error", sub.reason)
    chosen = None
    for sub in mine:
        if sub.status != "genuine":
            continue
        if chosen is not None:
            sub.status = "earlier"
            continue
        try:
            _submit(submitted, archive, sub.student, assignment, sub, mine)
        except Exception as exc:  # noqa: BLE001
            sub.status = "refused"
            sub.reason = f"the grader could not submit it ({_why(exc)})"
            sub.flag("grader-error", sub.reason)
            continue
        sub.status = "submitted"
        chosen = sub


def _archive(in_fd, archive, sub, budget) -> None:
    """Copy the genuine folder ``sub`` to ``archive``; refuses it (status,
    reason) when it cannot be opened or changed owner."""
    try:
        fd = os.open(sub.name, _DIR, dir_fd=in_fd)
    except OSError as exc:
        sub.status, sub.reason = "refused", f"cannot open it ({exc.strerror})"
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            sub.flag("link", f"{sub.folder} became a link; never followed")
        return
    tmp = archive / f".collecting-{secrets.token_hex(6)}"
    try:
        if os.fstat(fd).st_uid != sub.owner:
            sub.status, sub.reason = "refused", "replaced while it was read"
            return
        copy_folder(fd, sub.owner, tmp, sub, budget)
        _replace(tmp, archive / _events._file_name(sub.name), None)
    finally:
        os.close(fd)
        if os.path.lexists(tmp):
            shutil.rmtree(tmp, ignore_errors=True)


def _submit(submitted, archive, student, assignment, latest, mine) -> None:
    """``submitted/<student>/<assignment>/`` := the archived copy of ``latest``,
    with the grader's ``timestamp.txt`` (not the student's)."""
    final = submitted / student / assignment
    stamps = {s.timestamp for s in mine}
    aside = None
    if os.path.lexists(final):
        old = _read_small(final / TIMESTAMP).strip()
        if old not in stamps:  # not from the exchange: keep it
            aside = archive / "replaced" / f"{student}+{secrets.token_hex(4)}"
    final.parent.mkdir(parents=True, exist_ok=True)
    for old in final.parent.glob(f".{assignment}.collecting-*"):  # a killed run's
        shutil.rmtree(old, ignore_errors=True)
    tmp = final.parent / f".{assignment}.collecting-{secrets.token_hex(6)}"
    source = archive / _events._file_name(latest.name)
    try:
        shutil.copytree(
            source,
            tmp,
            symlinks=True,
            ignore=lambda where, names: (
                [TIMESTAMP] if Path(where) == source and TIMESTAMP in names else []
            ),
        )
        out = os.open(
            tmp / TIMESTAMP, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o600
        )
        try:
            os.write(out, latest.timestamp.encode())
        finally:
            os.close(out)
        _replace(tmp, final, aside)
    finally:
        if os.path.lexists(tmp):
            shutil.rmtree(tmp, ignore_errors=True)


def _record(state, archive, assignment, subs, name_of, say) -> None:
    """collect.json, the students' grading logs, one line per folder."""
    rows = []
    for sub in subs:
        row = asdict(sub)
        rows.append(row)
        say(describe(sub))
    (archive / RECORD).write_text(json.dumps(rows, indent=1))
    logs: dict[str, dict] = {}
    for sub in subs:
        if sub.status in ("submitted", "earlier"):
            ev = logs.setdefault(sub.student, {})
            for flag, notes in sub.flags.items():
                prefix = (
                    ""
                    if sub.status == "submitted"
                    else (f"an earlier submission ({_plain(sub.timestamp)}): ")
                )
                ev.setdefault(flag, []).extend(prefix + n for n in notes)
        for uid, what in sub.foreign:
            who = name_of(uid)
            if who and _safe(who) and who != sub.student:
                logs.setdefault(who, {}).setdefault("impersonation", []).append(
                    f"put {what} into {sub.folder}; not collected"
                )
        if sub.status == "refused" and sub.owner is not None:
            who = sub.owner_name
            if who and who != sub.student and _safe(who):
                logs.setdefault(who, {}).setdefault("impersonation", []).append(
                    f"{sub.folder}: {sub.reason}"
                )
            elif who == sub.student and sub.flags:
                ev = logs.setdefault(who, {})
                for flag, notes in sub.flags.items():
                    ev.setdefault(flag, []).extend(notes)
    for student, flags in sorted(logs.items()):
        ev = _events.Events(state, assignment, student, "collect")
        for flag, notes in flags.items():
            for note in notes:
                ev.flag(flag, note)
        ev.save()
    for sub in subs:  # genuine students without flags: clear an old section
        if sub.status == "submitted" and sub.student not in logs:
            _events.Events(state, assignment, sub.student, "collect").save()


def _plain(text, limit: int = 2000) -> str:
    """``text`` for a terminal: control characters (ESC, BEL, CR, newline)
    and undecodable bytes escaped (``staging.shown``)."""
    return staging.shown(str(text), limit)


def describe(sub: Submission) -> str:
    """One line for the instructor: what became of an inbound folder (each
    part escaped; only the line breaks between notes are the grader's)."""
    head = f"{sub.status:9} {_plain(sub.student)}/{_plain(sub.assignment)}"
    owner = _plain(sub.owner_name or sub.owner)
    text = f"{head} ({_plain(sub.timestamp)}, owner {owner})"
    if sub.reason:
        text += f": refused, {_plain(sub.reason)}"
    for flag, notes in sub.flags.items():
        text += f"\n          [{_plain(flag)}] " + "; ".join(map(_plain, notes))
    for note in sub.notes:
        text += f"\n          {_plain(note)}"
    return text


# ------------------------------------------------------------ configuration
def nbgrader_settings(root) -> dict:
    """Exchange.root, the course id, the state folder: nbgrader's own
    configuration as ``nbgrader collect`` run in ``root`` would read it (the
    Jupyter config path, e.g. the classroom's, and ``root/nbgrader_config.py``)."""
    from nbgrader.apps.baseapp import NbGrader
    from nbgrader.coursedir import CourseDirectory
    from nbgrader.exchange.default import Exchange

    here = os.getcwd()
    os.chdir(root)
    try:
        app = NbGrader()
        app.load_config_file()
        config = app.config
    finally:
        os.chdir(here)
    coursedir = CourseDirectory(config=config)
    exchange = Exchange(config=config, coursedir=coursedir)
    state = config.get("GuardedExecute", {}).get("state_dir")
    return {
        "exchange": exchange.root,
        "course_id": coursedir.course_id or COURSE,
        "submitted": coursedir.submitted_directory,
        "state_dir": state if isinstance(state, str) and state else None,
        "uid_map": config.get("GuardedCollect", {}).get("uid_map") or "",
    }


def _owners(path: str) -> tuple:
    return uid_map(path) if path else (uid_from_passwd, name_from_passwd)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog=COMMAND,
        description="Collect submissions from the nbgrader exchange: links "
        "never followed, each folder's owner checked against the student it "
        "names, every submission kept (grader.collect).",
    )
    parser.add_argument(
        "assignments", nargs="*", help="assignments to collect (default: all)"
    )
    parser.add_argument("--root", default=".", help="the course folder (default: .)")
    parser.add_argument(
        "--exchange", help="the exchange's root (default: Exchange.root of the config)"
    )
    parser.add_argument("--course", help="the course id (default: from the config)")
    parser.add_argument("--student", action="append", help="only this student")
    parser.add_argument(
        "--uid-map",
        help='JSON file {"student id": uid} for owner checks (default: the '
        "Unix account named like the student, pwd.getpwnam)",
    )
    args = parser.parse_args(argv)
    root = Path(args.root).resolve()
    try:
        settings = nbgrader_settings(root)
        exchange = Path(args.exchange or settings["exchange"])
        course = args.course or settings["course_id"]
        uid_of, name_of = _owners(args.uid_map or settings["uid_map"])
        subs = collect(
            root,
            exchange / course / "inbound",
            args.assignments or None,
            state_dir=settings["state_dir"],
            submitted=settings["submitted"],
            uid_of=uid_of,
            name_of=name_of,
            students=set(args.student) if args.student else None,
            log=print,
        )
    except CollectError as exc:
        print(f"{COMMAND}: {exc}", file=sys.stderr)
        return 1
    done = sum(s.status == "submitted" for s in subs)
    refused = sum(s.status == "refused" for s in subs)
    print(
        f"collected {done} submission(s), kept {len(subs) - done - refused} "
        f"earlier one(s), refused {refused}; grade with `python -m grader grade`"
    )
    return 0


# ------------------------------------------------------- nbgrader's exchange
class GuardedCollect(ExchangeCollect):
    """``nbgrader collect`` and the formgrader's *Collect* button, through
    ``collect`` (nbgrader_config.py: ``ExchangeFactory.collect``)."""

    uid_map = Unicode(
        "",
        help='JSON file {"student id": uid}: the account that must own each '
        "student's inbound folder (default: the Unix account of that name)",
    ).tag(config=True)

    def start(self):
        if sys.platform == "win32":
            self.fail("Sorry, the exchange is not available on Windows.")
        if self.before_duedate:
            self.fail(
                "--before-duedate is not supported here: this course collects "
                f"with `{COMMAND}`, which keeps every submission (see "
                "<state>/collected/) and submits the latest genuine one"
            )
        course = self.coursedir.course_id
        if not course:
            self.fail("No course id specified. Re-run with --course flag.")
        student = self.coursedir.student_id
        self.log.info(
            "collecting with the course's grader.collect (the same as "
            f"`{COMMAND} {self.coursedir.assignment_id}`): links are not "
            "followed, owners are checked, every submission is kept"
        )
        state = self.config.get("GuardedExecute", {}).get("state_dir")
        try:
            uid_of, name_of = _owners(self.uid_map)
            subs = collect(
                self.coursedir.root,
                Path(self.root) / course / "inbound",
                [self.coursedir.assignment_id],
                state_dir=state if isinstance(state, str) and state else None,
                submitted=self.coursedir.submitted_directory,
                uid_of=uid_of,
                name_of=name_of,
                students=None if student in ("", "*") else {student},
            )
        except CollectError as exc:
            self.fail(str(exc))
        if not subs:
            self.log.warning(
                "No submissions of '%s' for course '%s' to collect",
                self.coursedir.assignment_id,
                course,
            )
        for sub in subs:
            (self.log.warning if sub.reason or sub.flags else self.log.info)(
                "%s", describe(sub)
            )


def _checked_read(dir_fd: int, name: str, limit: int) -> bytes:
    """A file the grader wrote: regular, one name, owned by this account,
    opened without following a link; else OSError naming the problem."""
    lst = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    if not stat.S_ISREG(lst.st_mode):
        raise OSError(errno.EPERM, f"it is {_what(lst)}")
    if lst.st_nlink > 1:
        raise OSError(errno.EPERM, f"it is a hard link ({lst.st_nlink} names)")
    if lst.st_uid != os.geteuid():
        raise OSError(errno.EPERM, f"it belongs to uid {lst.st_uid}, not the grader")
    raw = staging.read_at(dir_fd, (name,), limit)
    return raw


class GuardedReleaseFeedback(ExchangeReleaseFeedback):
    """``nbgrader release_feedback`` and the formgrader's *Release feedback*:
    only pages the grader wrote (see the module docstring) reach the
    exchange (nbgrader_config.py: ``ExchangeFactory.release_feedback``)."""

    def copy_files(self):
        base = Path(self.coursedir.root) / self.coursedir.feedback_directory
        assignment = self.coursedir.assignment_id
        only = self.coursedir.student_id
        exclude = set(filter(None, self.coursedir.student_id_exclude.split(",")))
        refused = []
        try:
            base_fd = os.open(base, _DIR)
        except OSError as exc:
            self.fail(f"cannot open {base} ({exc.strerror})")
        try:
            with os.scandir(base_fd) as it:
                students = sorted(e.name for e in it)
            for student in students:
                if only not in ("", "*") and student != only or student in exclude:
                    continue
                where = f"{self.coursedir.feedback_directory}/{student}/{assignment}"
                try:
                    fds = staging._open_dirs(base_fd, (student, assignment))
                except OSError as exc:
                    if exc.errno != errno.ENOENT:
                        refused.append(
                            f"{staging.shown(where)}/ (a link or unreadable)"
                        )
                    continue
                try:
                    self._release_one(fds[-1], student, where, notebook_hash, refused)
                finally:
                    for fd in fds:
                        os.close(fd)
        finally:
            os.close(base_fd)
        if refused:
            self.fail(
                "not released (the grader did not write these, or they are "
                "links): " + "; ".join(refused)
            )

    def _release_one(self, fd, student, where, notebook_hash, refused) -> None:
        with os.scandir(fd) as it:
            pages = sorted(e.name for e in it if e.name.endswith(".html"))
        if not pages:
            return
        try:
            secret = _checked_read(fd, staging.SECRET, staging.MAX_SMALL_BYTES)
            secret = secret.decode()
        except FileNotFoundError:
            self.log.warning(
                "%s has no %s (not a submission from the exchange): nothing to release",
                staging.shown(where),
                staging.SECRET,
            )
            return
        except (OSError, UnicodeDecodeError) as exc:
            why = getattr(exc, "strerror", None) or str(exc)
            refused.append(f"{staging.shown(where)}/{staging.SECRET}: {why}")
            return
        try:
            timestamp = _checked_read(fd, TIMESTAMP, staging.MAX_SMALL_BYTES)
            timestamp = timestamp.decode(errors="replace").strip()
        except FileNotFoundError:
            timestamp = "no timestamp"
        except OSError as exc:
            refused.append(f"{staging.shown(where)}/{TIMESTAMP}: {exc.strerror}")
            return
        for page in pages:
            try:
                raw = _checked_read(fd, page, MAX_FEEDBACK_BYTES)
            except OSError as exc:
                refused.append(f"{staging.shown(where + '/' + page)}: {exc.strerror}")
                continue
            notebook = page[: -len(".html")]
            checksum = notebook_hash(secret=secret, notebook_id=notebook)
            tmp = os.path.join(self.dest_path, f"{checksum}-tmp.html")
            if os.path.lexists(tmp):
                os.unlink(tmp)
            out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o644)
            try:
                os.write(out, raw)
            finally:
                os.close(out)
            os.chmod(tmp, 0o644)
            os.replace(tmp, os.path.join(self.dest_path, f"{checksum}.html"))
            self.log.info(
                "Released feedback for student '%s' on '%s/%s' (%s)",
                student,
                self.coursedir.assignment_id,
                notebook,
                timestamp,
            )


if __name__ == "__main__":
    sys.exit(main())
