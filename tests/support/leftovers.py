"""Processes a test module leaves running (a pytest plugin).

A server, kernel, CPU hog or grading worker that outlives its test slows every
test after it on a two-core machine, and the durations table then blames the
wrong tests. After each test module this plugin lists the processes started
by the test session that are still alive: descendants of pytest, and orphans
whose environment carries this session's marker (``ATTN_TEST_SESSION``,
inherited by everything the tests start unless a sandbox clears it). Each is
reported once, under the module after which it was first seen, with the CPU
time it has used so far; the table is printed at the end of the run and
written to ``_build/leftovers.md`` (``make durations`` prints it too).

It only reports: a test that must stop its processes asserts that itself.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import psutil
import pytest

MARKER = "ATTN_TEST_SESSION"
REPORT = Path(__file__).resolve().parents[2] / "_build" / "leftovers.md"


class Leftovers:
    def __init__(self) -> None:
        self.token = uuid.uuid4().hex
        os.environ[MARKER] = self.token
        self.me = psutil.Process()
        self.started = self.me.create_time()  # the same clock as the others
        self.seen: dict[int, float] = {}  # pid -> create_time, reported already
        self.rows: list[tuple[str, int, str, float, str]] = []
        self.module: str | None = None

    def ours(self) -> list[psutil.Process]:
        found = {p.pid: p for p in self.me.children(recursive=True)}
        for p in psutil.process_iter(["pid", "create_time"]):
            if p.pid in found or p.pid == self.me.pid:
                continue
            try:
                if p.info["create_time"] < self.started:
                    continue
                if p.environ().get(MARKER) == self.token:
                    found[p.pid] = p
            except (psutil.Error, OSError):
                continue
        return list(found.values())

    def check(self, module: str) -> None:
        for p in self.ours():
            try:
                with p.oneshot():
                    key = p.create_time()
                    if (
                        self.seen.get(p.pid) == key
                        or p.status() == psutil.STATUS_ZOMBIE
                    ):
                        continue
                    cpu = sum(p.cpu_times()[:2])
                    cmd = " ".join(p.cmdline())[:100] or p.name()
            except (psutil.Error, OSError):
                continue
            self.seen[p.pid] = key
            self.rows.append((module, p.pid, p.name(), cpu, cmd))

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_teardown(self, item, nextitem):
        yield
        module = item.nodeid.split("::")[0]
        if nextitem is None or nextitem.nodeid.split("::")[0] != module:
            self.check(module)

    def pytest_terminal_summary(self, terminalreporter):
        lines = [
            "| left running after | pid | name | CPU s so far | command |",
            "|---|---|---|---|---|",
        ]
        for module, pid, name, cpu, cmd in self.rows:
            cmd = cmd.replace("|", "\\|")
            lines.append(f"| {module} | {pid} | {name} | {cpu:.1f} | `{cmd}` |")
        if not self.rows:
            lines = ["No test module left a process running."]
        try:
            REPORT.parent.mkdir(exist_ok=True)
            REPORT.write_text(
                "# Processes left running by test modules\n\n" + "\n".join(lines) + "\n"
            )
        except OSError:
            pass
        if self.rows:
            terminalreporter.section("processes left running by test modules")
            for line in lines:
                terminalreporter.write_line(line)


def pytest_configure(config):
    config.pluginmanager.register(Leftovers(), "attn-leftovers")
