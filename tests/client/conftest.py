from collections.abc import Iterator

import pytest

from tests.interop.conftest import RunningBroker, start_broker
from tests.network.conftest import cluster_factory  # noqa: F401  (a NameServer + broker over TCP)

RETRY_LEVELS = 'message_delay_level = "1s 1s 1s 1s 1s 1s"'
"""Retries at level 3 + attempts: one second each, so retry tests take seconds."""


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    """One real `trocket up` process (NameServer + broker) shared by a test module; tests use
    their own topics and groups."""
    running = start_broker(tmp_path_factory.mktemp("broker"), RETRY_LEVELS)
    try:
        yield running
    finally:
        running.stop()
