"""Revive-log records written together: acks (and checkpoints) that arrive together, or while a
put runs, go into one put, one store append for many of them, as sends read together are.

The first caller of :meth:`GroupedWrites.write` with nothing in progress becomes the writer: it
lets one scheduler pass go by (the requests that arrived with its own reach their write
meanwhile: under an asynchronous flush a put never yields, so without that pass nothing would
ever queue behind it), then keeps writing what queued up until the queue is empty; every caller
waits for the put that carried its records and gets its result with where its records start in
it. A put that raises is every waiting caller's exception.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

import attrs
import trio

from kernel.model import Message, PutResult


@attrs.define(eq=False)
class _Waiting:
    messages: Sequence[Message]
    done: trio.Event = attrs.field(factory=trio.Event)
    result: PutResult | None = None
    start: int = 0
    error: BaseException | None = None


@attrs.define(eq=False)
class GroupedWrites:
    put: Callable[[list[Message]], Awaitable[PutResult]]
    _queued: list[_Waiting] = attrs.field(factory=list)
    _writing: bool = False
    puts: int = 0
    records: int = 0

    async def write(self, messages: Sequence[Message]) -> tuple[PutResult, int]:
        """Put ``messages`` (with whatever else is queued); the put's result and the index of
        the first of ``messages`` in it."""
        waiting = _Waiting(messages)
        self._queued.append(waiting)
        if not self._writing:
            self._writing = True
            try:
                # One pass first: the calls that arrived with this one reach here meanwhile.
                await trio.lowlevel.cancel_shielded_checkpoint()
                while self._queued:
                    batch, self._queued = self._queued, []
                    await self._write_batch(batch)
            finally:
                self._writing = False
        await waiting.done.wait()
        if waiting.error is not None:
            raise waiting.error
        assert waiting.result is not None
        return waiting.result, waiting.start

    async def _write_batch(self, batch: list[_Waiting]) -> None:
        records: list[Message] = []
        for waiting in batch:
            waiting.start = len(records)
            records.extend(waiting.messages)
        try:
            with trio.CancelScope(shield=True):  # the others wait on this put: it must finish
                result = await self.put(records)
        except Exception as error:  # noqa: BLE001 - handed to every caller of the batch
            for waiting in batch:
                waiting.error = error
                waiting.done.set()
            return
        self.puts += 1
        self.records += len(records)
        for waiting in batch:
            waiting.result = result
            waiting.done.set()
