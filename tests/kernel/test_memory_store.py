"""The in-memory reference store passes the conformance suite store plugins must pass."""

from contextlib import asynccontextmanager

from kernel.testing.contracts import check_message_store
from kernel.testing.memory_store import MemoryStore


async def test_memory_store_conformance():
    @asynccontextmanager
    async def open_store():
        store = MemoryStore()
        await store.recover(clean_shutdown=True)
        yield store

    await check_message_store(open_store)
