"""The client's side of grading on Dask (``grader.cluster`` has the design).

``dispatch.run`` sends the staged submissions of one grading run to a cluster
-- an embedded ``LocalCluster`` or the one at ``--scheduler`` -- one task per
submission, takes each result as it comes (a dynamic queue: a slow notebook
holds up one worker, not a part of the batch; each worker holds one task at a
time, the rest wait in the client), writes it into the course
folder (``autograded/``, the grading log) and prints the progress. It returns
one ``Outcome`` per submission; the ones that no worker would grade carry
the reason, for the ``grader-error`` flag.
"""

import logging
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from grader import cluster, fresh
from grader import events as _events

MAX_REFUSALS = 3  # times one task may be refused before it is given up


@dataclass
class Outcome:
    """How one submission's task ended."""

    worker: str = ""
    error: str = ""  # why it has no grade (grader-error); "" if graded
    seconds: float = 0.0
    lost: list = field(default_factory=list)  # workers lost while grading it
    peak_rss_mib: int = 0


@dataclass
class Summary:
    """What the run's cluster was and did (for the report)."""

    scheduler: str = ""
    workers: list = field(default_factory=list)
    refused: dict = field(default_factory=dict)  # worker -> reason
    dashboard: str = ""
    seconds: float = 0.0
    peak_rss_mib: int = 0  # the largest grading process (workers, not kernels)


def make_task(state, item, settings, config, sandboxed, version):
    folder = Path(state) / "staged" / item.student / item.assignment
    key = fresh.secret(state)
    return cluster.Task(
        student=item.student,
        assignment=item.assignment,
        notebook=item.notebook.stem,
        files=cluster.read_tree(folder),
        seed=fresh.seed_for(key, item.assignment, item.student),
        version=version,
        db_url=settings["db_url"],
        course_id=settings["course_id"],
        config=config,
        sandboxed=sandboxed,
    )


def open_cluster(scheduler: str | None, workers: int, root: Path, dashboard=False):
    """(client, cluster or None): a client of ``scheduler``, or of a new
    local cluster of ``workers`` single-threaded worker processes."""
    import dask
    from distributed import Client, LocalCluster

    if scheduler:  # TLS and its certificates from Dask's config (solutions/README)
        return Client(scheduler, timeout="30s"), None
    os.environ[cluster.ROOT_ENV] = str(root)  # the local workers' course
    # Dask's HTTP pages (status, call stacks, logs, task keys: the roster) are
    # plain HTTP that anyone on the machine can read: none unless asked for
    quiet = {} if dashboard else PAGES_OFF
    with dask.config.set(quiet):
        local = LocalCluster(
            # TLS with a throw-away certificate: the workers run code that any
            # client of theirs sends, and on a shared machine (JupyterHub) the
            # students' own servers can reach 127.0.0.1; without the key they
            # cannot connect
            security=True,
            n_workers=workers,
            threads_per_worker=1,
            processes=True,
            memory_limit=0,  # the sandbox limits the kernels; never pause a worker
            host="127.0.0.1",
            dashboard_address="127.0.0.1:0" if dashboard and has_dashboard() else None,
            silence_logs=logging.ERROR,
        )
    return Client(local), local


PAGES_OFF = {
    "distributed.scheduler.http.routes": [],
    "distributed.worker.http.routes": [],
}


def has_dashboard() -> bool:
    """Whether Dask's dashboard can run here (its optional dependency)."""
    import importlib.util

    return importlib.util.find_spec("bokeh") is not None


def _good_workers(client, refused) -> list[str]:
    return [w for w in client.scheduler_info()["workers"] if w not in refused]


def check_workers(client, version, sandboxed, db_url, summary) -> list[str]:
    """Ask every worker to check itself; the ones that can grade."""
    answers = client.run(cluster.worker_problem, version, sandboxed, db_url)
    for worker, problem in sorted(answers.items()):
        if problem:
            summary.refused[worker] = problem
            print(f"worker {worker} refused: {problem}", flush=True)
    return _good_workers(client, summary.refused)


def run(
    root,
    state,
    gradable,
    settings,
    options,
    sandboxed,
    workers,
    scheduler,
    dashboard=False,
):
    """Grade ``gradable`` (staged submissions) on a cluster; write each result;
    return ({(assignment, student): Outcome}, Summary)."""
    from distributed import as_completed

    root, state = Path(root), Path(state)
    began = time.monotonic()
    version = cluster.course_version(root)
    config = cluster.parse_overrides(options)
    tasks = {
        (s.assignment, s.student): make_task(
            state, s, settings, config, sandboxed, version
        )
        for s in gradable
    }
    outcomes = {key: Outcome() for key in tasks}
    client, local = open_cluster(scheduler, workers, root, dashboard)
    summary = Summary(scheduler=client.scheduler.address)
    try:
        if dashboard and has_dashboard():
            summary.dashboard = getattr(client, "dashboard_link", "") or ""
        if local is None:
            client.wait_for_workers(1, timeout=600)
        good = check_workers(client, version, sandboxed, settings["db_url"], summary)
        summary.workers = sorted(client.scheduler_info()["workers"])
        print(
            f"autograde: {len(tasks)} submissions on {len(good)} of "
            f"{len(summary.workers)} Dask workers at {summary.scheduler}"
            + (f" (dashboard {summary.dashboard})" if summary.dashboard else ""),
            flush=True,
        )
        _queue(client, tasks, outcomes, summary, state, root, as_completed)
        _note_lost_workers(client, tasks, outcomes)
    finally:
        client.close()
        if local is not None:
            local.close()
    summary.seconds = round(time.monotonic() - began, 2)
    summary.peak_rss_mib = max((o.peak_rss_mib for o in outcomes.values()), default=0)
    return outcomes, summary


def _submit(client, task, refused):
    allowed = _good_workers(client, refused) if refused else None
    return client.submit(
        cluster.grade_task,
        task,
        key=f"grade-{task.assignment}-{task.student}-{os.urandom(4).hex()}",
        pure=False,
        workers=allowed,
        allow_other_workers=False,
    )


def _queue(client, tasks, outcomes, summary, state, root, as_completed):
    """Run every task, one at a time per worker that can grade (the rest wait
    here, not on a worker: Dask counts a lost worker against every task it
    held, so a task queued behind a crashing one would be blamed with it);
    take the results as they come; send refused tasks to the others."""
    starts = {}  # task key -> workers that started it (live, Dask events)

    def started(event) -> None:
        _, message = event
        if isinstance(message, dict):
            starts.setdefault(message.get("key"), []).append(message.get("worker"))

    client.subscribe_topic(cluster.EVENTS, started)
    waiting, futures = list(tasks), {}
    refusals = dict.fromkeys(tasks, 0)
    done = failed = 0
    queue = as_completed()

    def fill() -> None:
        good = len(_good_workers(client, summary.refused))
        if not good and summary.refused and not futures:  # every worker refused
            for key in waiting:
                outcomes[key].error = "no worker would grade it: " + "; ".join(
                    f"{w}: {why}" for w, why in sorted(summary.refused.items())
                )
                print(f"{tasks[key].key}: FAILED ({outcomes[key].error})", flush=True)
            waiting.clear()
        room = max(1, good) - len(futures)
        while waiting and room > 0:
            key = waiting.pop(0)
            future = _submit(client, tasks[key], summary.refused)
            futures[future] = key
            queue.add(future)
            room -= 1

    fill()
    for future in queue:
        key = futures.pop(future)
        task, outcome = tasks[key], outcomes[key]
        if _take(future, task, outcome, summary, refusals, root, state):
            waiting.insert(0, key)  # refused: to another worker, first
            fill()
            continue
        fill()
        done += 1
        failed += bool(outcome.error)
        print(
            f"[{done}/{len(tasks)}] {task.key}: "
            + (f"FAILED ({outcome.error})" if outcome.error else "graded")
            + (
                f" on {outcome.worker} in {outcome.seconds:.0f} s"
                if outcome.worker
                else ""
            )
            + progress(done, len(tasks), failed, starts),
            flush=True,
        )
    client.unsubscribe_topic(cluster.EVENTS)


def _take(future, task, outcome, summary, refusals, root, state) -> bool:
    """Store one finished task's result, or its failure in ``outcome.error``;
    True if a worker refused it and it should go to another."""
    from distributed import KilledWorker

    key = (task.assignment, task.student)
    try:
        result = future.result()  # waits again if a finished result was lost
    except cluster.WorkerRefused as exc:
        summary.refused.setdefault(exc.worker, exc.reason)
        if refusals[key] < MAX_REFUSALS:
            refusals[key] += 1
            print(f"{exc}; sent to another worker", flush=True)
            return True
        outcome.error = f"no worker would grade it: {exc}"
    except KilledWorker:
        outcome.error = (
            "grading failed on the cluster: the Dask workers grading it were "
            "lost more often than distributed.scheduler.allowed-failures allows "
            "(killed, out of memory, or their machine went away); regrade it"
        )
    except Exception as exc:  # noqa: BLE001  (one submission, not the run)
        outcome.error = (
            f"grading failed on the cluster: {type(exc).__name__}: {exc}; regrade it"
        )
    else:
        try:
            _store(root, state, task, result, outcome)
        except Exception as exc:  # noqa: BLE001  (one submission, not the run)
            outcome.error = (
                f"its result could not be stored: {type(exc).__name__}: {exc}"
            )
    return False


def progress(done: int, total: int, failed: int, starts: dict, width: int = 20) -> str:
    """``  [#########...........] 45%  1 failed, 2 retried`` (a log line's end)."""
    filled = round(width * done / max(total, 1))
    retried = sum(len(workers) > 1 for workers in starts.values())
    counts = [
        f"{n} {what}" for n, what in ((failed, "failed"), (retried, "retried")) if n
    ]
    return (
        f"  [{'#' * filled}{'.' * (width - filled)}] {100 * done // max(total, 1)}%"
        + (f"  {', '.join(counts)}" if counts else "")
    )


def _store(root, state, task, result, outcome) -> None:
    """Write what a worker returned into the course folder."""
    outcome.worker = result.get("worker", "")
    outcome.seconds = float(result.get("seconds") or 0)
    outcome.peak_rss_mib = int(result.get("peak_rss_mib") or 0)
    for line in cluster.log_lines(result.get("log"), f"[{task.key}] "):
        print(line, flush=True)
    if result.get("events"):
        _events.merge(state, task.assignment, task.student, result["events"])
    if result.get("success") and result.get("files"):
        cluster.write_tree(
            root / "autograded" / task.student / task.assignment, result["files"]
        )
        page = root / "feedback" / task.student / task.assignment
        if result.get("feedback"):
            cluster.write_tree(page, result["feedback"])
        else:  # generate_feedback on the client makes it (grade_all)
            shutil.rmtree(page, ignore_errors=True)
            print(
                f"[{task.key}] no feedback from {outcome.worker}: "
                f"{(result.get('feedback_error') or '?').strip().splitlines()[-1:]}",
                flush=True,
            )
        return
    outcome.error = (
        f"nbgrader could not grade it on {outcome.worker}: "
        f"{(result.get('error') or 'no autograded notebook').strip().splitlines()[-1]}"
    )


def _note_lost_workers(client, tasks, outcomes) -> None:
    """Workers that started a task but did not finish it were lost with it."""
    try:
        started = client.get_events(cluster.EVENTS)
    except Exception:  # noqa: BLE001  (an old scheduler: no retries to report)
        return
    by_key = {}
    for _, message in started:
        if isinstance(message, dict):
            by_key.setdefault(message.get("key"), []).append(message.get("worker"))
    for key, outcome in outcomes.items():
        seen = by_key.get(tasks[key].key, [])
        outcome.lost = [w for w in seen if w and w != outcome.worker]


def record(state, outcomes, summary) -> None:
    """The ``cluster`` section of each submission's grading log."""
    for (assignment, student), outcome in outcomes.items():
        ev = _events.Events(state, assignment, student, "cluster")
        for worker in outcome.lost:
            ev.note(
                f"the Dask worker {worker} was lost while grading this "
                f"submission; it was graded again"
                + (f" on {outcome.worker}" if outcome.worker else "")
            )
        if outcome.error:
            ev.flag("grader-error", outcome.error)
        elif outcome.worker:
            ev.time("task", outcome.seconds)
        ev.save()


def default_workers() -> int:
    """One single-threaded worker per core this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)
