"""store_mmap passes the kernel's store conformance suite, with every write path."""

from contextlib import asynccontextmanager

import pytest

from kernel.testing.contracts import check_message_store
from plugins.store_mmap.store import open_mmap_store

from .helpers import store_context


@pytest.mark.parametrize("write_path", ["pwrite", "mmap", "buffered"])
@pytest.mark.parametrize("file_size", [4096, 1 << 20])
async def test_conformance(tmp_path, write_path, file_size):
    counter = iter(range(1000))

    @asynccontextmanager
    async def open_store():
        ctx = store_context(
            tmp_path / f"s{next(counter)}", write_path=write_path, commit_log_file_size=file_size
        )
        async with open_mmap_store(ctx) as store:
            await store.recover(clean_shutdown=True)
            yield store

    await check_message_store(open_store)
