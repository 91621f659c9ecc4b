"""Lifecycle: abort marker semantics, graceful stop by signal, SIGKILL, several brokers per process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import trio

from kernel import Broker, Message, MessageBatch
from kernel.testing import make_config

from ..conftest import MEMORY_STORE

REPO = Path(__file__).resolve().parents[2]


async def test_graceful_stop_removes_the_abort_marker(broker_factory, tmp_path):
    async with broker_factory() as broker:
        assert (tmp_path / "data" / "abort").exists(), "written once the store recovered"
        await broker.put(MessageBatch([Message("T", b"x")]))
    assert broker.clean_stop
    assert not (tmp_path / "data" / "abort").exists()


async def test_final_flush_runs_at_shutdown(broker_factory):
    async with broker_factory(flush="async", flush_async={"interval": "1h", "least_pages": 0}) as broker:
        result = await broker.put(MessageBatch([Message("T", b"x")]))
        assert broker.store.positions.flushed.value < result.append.end_offset
    assert broker.store.positions.flushed.value >= result.append.end_offset


async def test_a_crashing_service_keeps_the_abort_marker(tmp_path):
    from kernel import Phase, ServiceSpec, hookimpl

    class Crasher:
        @hookimpl
        def trocket_register_services(self, ctx):
            class Service:
                async def run(self, *, task_status=trio.TASK_STATUS_IGNORED):
                    task_status.started()
                    await trio.sleep(0.01)
                    raise RuntimeError("boom")

            return [ServiceSpec("crasher", Phase.EXPORT, lambda runtime: Service())]

    config = make_config(broker={"plugins": [MEMORY_STORE, "flush_async"], "data_dir": str(tmp_path)})
    config = config.with_broker(store="memory")
    broker = Broker.assemble(config, plugin_objects=[("crasher", Crasher())])
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(broker.run)
    except BaseExceptionGroup as group:
        assert group.subgroup(RuntimeError) is not None
    else:
        raise AssertionError("the crash must propagate")
    assert (tmp_path / "abort").exists()
    assert not broker.clean_stop


async def test_two_brokers_in_one_process_share_nothing(tmp_path):
    brokers = []
    for name in ("a", "b"):
        config = make_config(
            broker={
                "plugins": [MEMORY_STORE, "flush_sync"],
                "store": "memory",
                "flush": "sync",
                "broker_name": name,
                "data_dir": str(tmp_path / name),
            }
        )
        brokers.append(Broker.assemble(config))
    async with trio.open_nursery() as nursery:
        for broker in brokers:
            await nursery.start(broker.run)
        await brokers[0].put(MessageBatch([Message("T", b"only-in-a")]))
        assert brokers[0].store.positions.wrote.value > 0
        assert brokers[1].store.positions.wrote.value == 0
        for broker in brokers:
            broker.request_stop()
    assert all(b.clean_stop for b in brokers)


def _start_broker_process(tmp_path: Path, *extra_plugins: str) -> tuple[subprocess.Popen[str], Path]:
    data = tmp_path / "data"
    config = tmp_path / "broker.toml"
    plugins = ", ".join(f'"{p}"' for p in (MEMORY_STORE, "flush_async", *extra_plugins))
    config.write_text(
        textwrap.dedent(
            f"""
            [broker]
            plugins = [{plugins}]
            store = "memory"
            data_dir = "{data}"
            graceful_timeout = "60s"
            """
        )
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "trocket.cli", "broker", "-c", str(config)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": f"{REPO}:{REPO / 'tests' / 'example_plugin'}"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert process.stdout is not None
    deadline = time.monotonic() + 30
    lines = []
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        lines.append(line)
        if "ready" in line:
            process.startup_output = "".join(lines)  # type: ignore[attr-defined]
            return process, data
        if not line and process.poll() is not None:
            break
    process.kill()
    raise AssertionError("broker did not become ready:\n" + "".join(lines))


def test_sigterm_stops_a_broker_process_gracefully(tmp_path):
    process, data = _start_broker_process(tmp_path)
    assert (data / "abort").exists()
    assert "recovery: normal" in process.startup_output
    process.send_signal(signal.SIGTERM)
    output, _ = process.communicate(timeout=30)
    assert process.returncode == 0, output
    assert "stopped cleanly" in output
    assert not (data / "abort").exists()


def test_sigkill_leaves_the_abort_marker(tmp_path):
    process, data = _start_broker_process(tmp_path)
    os.kill(process.pid, signal.SIGKILL)
    process.communicate(timeout=30)
    assert process.returncode == -signal.SIGKILL
    assert (data / "abort").exists()
    # The next start sees the marker: abnormal recovery, then a clean stop removes it.
    process, data = _start_broker_process(tmp_path)
    assert "recovery: abnormal" in process.startup_output
    process.send_signal(signal.SIGINT)
    output, _ = process.communicate(timeout=30)
    assert process.returncode == 0, output
    assert not (data / "abort").exists()


def test_a_second_signal_forces_exit_and_keeps_the_abort_marker(tmp_path):
    process, data = _start_broker_process(tmp_path, "slow_drain")
    process.send_signal(signal.SIGTERM)
    assert process.stdout is not None
    for line in process.stdout:
        if "draining" in line:
            break
    process.send_signal(signal.SIGTERM)
    output, _ = process.communicate(timeout=30)
    assert process.returncode == 128 + signal.SIGTERM, output
    assert (data / "abort").exists(), "a forced exit is not a clean stop"
