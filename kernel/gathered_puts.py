"""Puts that arrive together, appended together: one ``put_group`` for the puts of one
scheduler pass.

Why: a request served on its own puts its own batch: one store append (one ``pwrite``, one
record run, one dispatch batch) per request. A remoting connection hands ``Broker.put_group``
every send it read at once, but requests that reach the broker another way do not come in
groups: gRPC calls (each its own call, started together when they arrived together) and the
POP service's revive-log records (an ack per request). Under an asynchronous flush a put never
yields, so nothing queues behind one in flight either. Here the first put of a pass waits one
pass, the others of that pass join it, and all go out with one ``put_group``: each batch is
still checked and answered on its own, as ``Broker.put`` would, and its records stay together
and in order. Puts arriving while a group waits for its flush form the next group at once
(appended meanwhile, covered by the next flush of the group commit). Measured:
docs/performance.md, "sends that arrive together".

A put handed over is made whatever happens to its caller afterwards (the group's put is
shielded, bounded by the put pipeline's own flush and replica timeouts): a caller cancelled
meanwhile leaves its records stored, as a remoting client that gives up after its request was
sent does; a retry may duplicate them, never lose them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

import attrs
import trio

from kernel.model import MessageBatch, PutResult

PutGroup = Callable[[Sequence[MessageBatch]], Awaitable[list[PutResult]]]
"""``BrokerRuntime.put_group``: one result per batch, in order."""


@attrs.define(eq=False)
class _Group:
    batches: list[MessageBatch] = attrs.field(factory=list)
    done: trio.Event = attrs.field(factory=trio.Event)
    results: list[PutResult] = attrs.field(factory=list)
    error: BaseException | None = None


@attrs.define(eq=False)
class GatheredPuts:
    """Puts through ``put_group``, gathering the puts of one scheduler pass into one call."""

    put_group: PutGroup
    groups: int = 0
    """Groups put (``puts / groups`` is the mean group size)."""
    puts: int = 0
    _open: _Group | None = attrs.field(default=None, init=False)

    @property
    def gathering(self) -> bool:
        """A group waits for its pass to end: a put now joins it."""
        return self._open is not None

    async def put(self, batch: MessageBatch) -> PutResult:
        """The batch's result, as ``Broker.put`` gives it.

        :raises Exception: what ``put_group`` raised (``RuntimeError`` when the broker is not
            running), to every caller of the group.
        """
        self.puts += 1
        group = self._open
        if group is not None:
            index = len(group.batches)
            group.batches.append(batch)
            await group.done.wait()
            if group.error is not None:
                raise group.error
            return group.results[index]
        group = self._open = _Group([batch])
        # One pass: the requests started with this one reach their put meanwhile and join.
        await trio.lowlevel.cancel_shielded_checkpoint()
        self._open = None
        self.groups += 1
        try:
            with trio.CancelScope(shield=True):
                group.results = await self.put_group(group.batches)
        except Exception as error:  # noqa: BLE001 - every caller of the group gets it
            group.error = error
            raise
        finally:
            group.done.set()
        return group.results[0]
