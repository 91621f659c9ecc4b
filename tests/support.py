"""Small helpers shared by test modules."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import trio

REPO = Path(__file__).resolve().parents[1]


def write(directory: Path, name: str, text: str) -> Path:
    """Write a dedented config file and return its path."""
    path = directory / name
    path.write_text(textwrap.dedent(text))
    return path


def start_trocket(*args: str, cwd: Path | None = None) -> tuple[subprocess.Popen[str], list[str]]:
    """``python -m trocket ARGS`` with its output piped; returns once it printed ``ready`` (or
    ended, or printed 500 lines), with the lines read so far."""
    process = subprocess.Popen(
        [sys.executable, "-m", "trocket", *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert process.stdout is not None
    lines: list[str] = []
    for line in process.stdout:
        lines.append(line)
        if line.startswith("ready") or len(lines) > 500:
            break
    return process, lines


def start_logged(
    name: str,
    args: list[str],
    log: Path,
    *,
    fresh: bool = True,
    open_files: tuple[int, int] | None = None,
) -> subprocess.Popen[str]:
    """``python -m trocket ARGS`` writing to ``log`` (emptied first when ``fresh``, appended to
    for a restart); returns once the new process printed its ready line. ``open_files``: the
    (soft, hard) ``RLIMIT_NOFILE`` it starts with, as ``ulimit -n`` would set.

    :raises AssertionError: with the log, when it exits or is not ready within 60 s.
    """
    if fresh:
        log.unlink(missing_ok=True)
    before = _readies(log)
    command = [sys.executable, "-m", "trocket", *args]
    if open_files:
        command = [*_with_open_files_limit(*open_files), *command]
    with log.open("a") as out:
        process = subprocess.Popen(
            command,
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if _readies(log) > before:
            return process
        if process.poll() is not None:
            break
        time.sleep(0.05)
    process.kill()
    raise AssertionError(f"{name} did not start:\n{log.read_text()}")


def _with_open_files_limit(soft: int, hard: int) -> list[str]:
    """A command prefix that sets ``RLIMIT_NOFILE`` and then execs the rest, as ``ulimit -n``
    before a command does. Not ``Popen(preexec_fn=...)``: that forces a plain ``fork`` of the
    test process, whose gRPC threads (earlier tests' clients) then run fork handlers in a child
    that has not yet exec'd; one CI run's broker hung there, its log holding only gRPC's
    ``epoll_wait error: Bad file descriptor``."""
    program = (
        "import os, resource, sys; "
        "resource.setrlimit(resource.RLIMIT_NOFILE, (int(sys.argv[1]), int(sys.argv[2]))); "
        "os.execv(sys.argv[3], sys.argv[3:])"
    )
    return [sys.executable, "-c", program, str(soft), str(hard)]


def _readies(log: Path) -> int:
    return log.read_text().count("ready (Ctrl-C") if log.exists() else 0


async def consume_bodies(
    namesrv: str, group: str, topic: str, wanted: set[bytes], seconds: float
) -> set[bytes]:
    """Every body a LitePullConsumer of ``group`` reads from ``topic``'s first offset, until
    ``wanted`` is among them or ``seconds`` pass (the caller asserts on what was seen)."""
    import trio

    from trocket import ConsumeFromWhere, LitePullConsumer

    seen: set[bytes] = set()
    consumer = LitePullConsumer(group, namesrv, consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
    async with consumer:
        consumer.subscribe(topic)
        with trio.move_on_after(seconds):
            while not wanted <= seen:
                for message in await consumer.poll(timeout=1.0):
                    seen.add(message.body)
    return seen


async def until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    """Wait for a counter of the broker to get somewhere (the broker works on its own time)."""
    with trio.fail_after(timeout):
        while not condition():  # noqa: ASYNC110 - polling a plain counter, nothing to wait on
            await trio.sleep(0.02)
