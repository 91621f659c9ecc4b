"""A lab's power cut copies the disk only once the replica's threads have all stopped, and the
replica never runs again after it."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from trocket.chaos import cluster
from trocket.chaos.cluster import ClusterError, LabProcess, threads_stopped

BUSY_THREADS = """
import threading
def spin():
    while True:
        pass
for _ in range(3):
    threading.Thread(target=spin, daemon=True).start()
spin()
"""


def test_pause_and_wait_returns_with_every_thread_stopped(tmp_path: Path):
    process = LabProcess("busy", "host", [sys.executable, "-c", BUSY_THREADS], tmp_path / "busy.log")
    process.popen = subprocess.Popen(process.argv)
    try:
        time.sleep(0.3)  # the threads are running
        assert not threads_stopped(process.popen.pid, 0.05)
        process.pause_and_wait()
        states = [
            path.read_text().rpartition(")")[2].split()[0]
            for path in Path(f"/proc/{process.popen.pid}/task").glob("*/stat")
        ]
        assert len(states) == 4 and set(states) <= {"T", "t"}
    finally:
        process.kill()


def test_pause_and_wait_refuses_to_go_on_while_a_thread_still_runs(tmp_path: Path, monkeypatch):
    """The copy must not start before the threads stopped: a replica whose threads never show
    as stopped is an error, not a cut (SIGSTOP itself lands too fast to catch it late here)."""
    process = LabProcess("busy", "host", [sys.executable, "-c", BUSY_THREADS], tmp_path / "busy.log")
    process.popen = subprocess.Popen(process.argv)
    asked = []
    monkeypatch.setattr(cluster, "threads_stopped", lambda pid, timeout: asked.append(pid) or False)
    try:
        with pytest.raises(ClusterError, match="did not stop"):
            process.pause_and_wait(timeout=0.1)
        assert asked == [process.popen.pid]
    finally:
        process.kill()


def test_a_paused_process_is_killed_without_running_again(tmp_path: Path):
    """A power cut kills the paused replica: SIGKILL first, while it is stopped. A SIGCONT
    before it let a broker answer the puts whose sync completed after the copy of its disk
    (acknowledged, and not on the disk the replica restarts from). The process is still
    reaped, and the SIGCONT after the SIGKILL (for a frozen process) changes nothing."""
    process = LabProcess("busy", "host", [sys.executable, "-c", BUSY_THREADS], tmp_path / "busy.log")
    popen = process.popen = subprocess.Popen(process.argv)
    sent: list[int] = []
    send_signal = popen.send_signal

    def recorded(number: int) -> None:
        sent.append(number)
        send_signal(number)

    popen.send_signal = recorded  # type: ignore[method-assign]
    try:
        time.sleep(0.3)
        process.pause_and_wait()
        sent.clear()
        process.kill()
        assert sent[0] == signal.SIGKILL, f"signals after the pause: {sent}"
        assert popen.returncode == -signal.SIGKILL
    finally:
        if popen.poll() is None:
            popen.kill()
