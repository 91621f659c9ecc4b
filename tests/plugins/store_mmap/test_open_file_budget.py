"""Open queue files are bounded whatever the number of queues (issue 39, item 3): the least
recently used are parked (closed) and reopened on their next read, write or flush, with their
positions, data and durability intact."""

from __future__ import annotations

import os

from kernel import pull
from kernel.model import GetStatus
from kernel.testing import dispatch_all
from wire import record

from .helpers import clean_close, messages, opened

QUEUES = 120
BOUND = 10


def _open_queue_descriptors(root) -> int:
    """Descriptors of this process on files under ``root/consumequeue``."""
    queues = str(root / "consumequeue")
    targets = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            targets.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            continue  # closed while listing
    return sum(target.startswith(queues) for target in targets)


async def test_many_queues_stay_within_the_bound_and_read_back_after_a_restart(tmp_path):
    root = tmp_path / "store"
    async with opened(
        root, max_open_queue_files=BOUND, commit_log_file_size="1MiB", pooled_queue_entries=0
    ) as (store, _):
        for round_ in range(3):  # each queue written three times, parked in between
            for queue_id in range(QUEUES):
                await store.append(messages("Many", queue_id, 1, start=round_))
            await dispatch_all(store)
        budget = store.queues.budget
        assert budget is not None and budget.open_files <= BOUND
        assert budget.parked > QUEUES
        assert _open_queue_descriptors(root) <= BOUND  # one each: queue files are never mapped
        for queue_id in range(QUEUES):  # cold reads reopen
            got = await pull.get_messages(store, "Many", queue_id, 0)
            assert got.status is GetStatus.FOUND
            assert got.queue_offsets == [0, 1, 2]
        assert _open_queue_descriptors(root) <= BOUND  # reads (pread) take no second one
        await clean_close(store)  # flushes every dirty queue file, parked or not
        assert all(f.flushed == f.wrote for q in store.queues.queues.values() for f in q.files.files)
    async with opened(
        root, max_open_queue_files=BOUND, commit_log_file_size="1MiB", pooled_queue_entries=0
    ) as (store, report):
        assert report.clean_shutdown
        assert all(store.max_queue_offset("Many", q) == 3 for q in range(QUEUES))
        got = await pull.get_messages(store, "Many", QUEUES - 1, 2)
        assert got.status is GetStatus.FOUND and record.decode_record(got.records[0]).body.startswith(
            b"Many-"
        )


def test_the_default_bound_is_1024_queue_files_or_a_quarter_of_the_limit_if_smaller(monkeypatch):
    from plugins.store_mmap import store as store_module

    monkeypatch.setattr(store_module.resource, "getrlimit", lambda _: (1 << 20, 1 << 20))
    assert store_module.queue_file_bound(0) == store_module.DEFAULT_QUEUE_FILE_BOUND == 1024
    monkeypatch.setattr(store_module.resource, "getrlimit", lambda _: (256, 1 << 20))
    assert store_module.queue_file_bound(0) == 64
    assert store_module.queue_file_bound(5000) == 5000  # configured: as given
