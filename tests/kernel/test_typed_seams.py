"""The plugin contracts are typed (issue 22, item 3): the kernel's Protocols and provider
records, and the built-in plugins' registrations against them, pass mypy. A store whose
methods drift from ``MessageStore`` (a settable attribute where the protocol reads, a return
type that does not fit) fails here, as it would in a plugin author's editor."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONTRACTS = [
    "kernel/model.py",
    "wire/names.py",
    "wire/message.py",
    "kernel/outcomes.py",
    "kernel/providers.py",
    "kernel/protocols.py",
    "kernel/host.py",
    "kernel/context.py",
    "kernel/broker.py",
    "kernel/testing/memory_store.py",
    "plugins/store_mmap/__init__.py",
    "plugins/flush_sync/__init__.py",
    "plugins/flush_async/__init__.py",
    "plugins/ha/__init__.py",
    "plugins/retry_dlq/__init__.py",
    "plugins/allocate/__init__.py",
    "kernel/topics.py",
    "kernel/consumer_progress.py",
    "kernel/access.py",
    "plugins/pop/__init__.py",
    "plugins/pop/service.py",
    "plugins/proxy/__init__.py",
    "plugins/proxy/service.py",
    "wire/pop_receipt.py",
    "tests/example_plugin/trocket_topic_guard/__init__.py",
]
MYPY = ["--follow-imports=silent", "--ignore-missing-imports", "--no-error-summary", "--cache-dir"]


def _mypy(tmp_path: Path, *paths: str) -> subprocess.CompletedProcess[str]:
    pytest.importorskip("mypy", reason="mypy is in the dev extra")
    command = [sys.executable, "-m", "mypy", *MYPY, str(tmp_path / "cache"), *paths]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_the_contracts_and_the_built_in_registrations_type_check(tmp_path):
    done = _mypy(tmp_path, *CONTRACTS)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_store_that_breaks_the_contract_is_caught(tmp_path):
    """The check can fail: a provider whose store returns the wrong type is reported."""
    bad = tmp_path / "bad_store.py"
    bad.write_text(
        "from collections.abc import AsyncIterator\n"
        "from contextlib import asynccontextmanager\n"
        "from kernel.context import BrokerContext\n"
        "from kernel.model import StoreProvider\n"
        "class NotAStore:\n"
        "    positions = 0\n"
        "@asynccontextmanager\n"
        "async def open_store(ctx: BrokerContext) -> AsyncIterator[NotAStore]:\n"
        "    yield NotAStore()\n"
        "def provider(ctx: object) -> StoreProvider:\n"
        "    return StoreProvider('bad', open_store)\n"
    )
    done = _mypy(tmp_path, str(bad))
    assert done.returncode == 1 and "StoreProvider" in done.stdout, done.stdout + done.stderr
