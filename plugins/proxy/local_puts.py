"""Sends to the broker beside the proxy, appended together when they arrive together.

Why: every gRPC SendMessage is its own call, so a proxy serving many producers puts one message
at a time: one store append (one ``pwrite``, one record run, one dispatch batch) per message,
where a remoting connection hands the put pipeline every send it read at once
(``Broker.put_group``). The completion-queue host starts the calls that arrived together in
one scheduler pass of trio; their sends meet here, the first one waits one pass for the others,
and all are put with one ``put_group``: each is still checked and answered on its own, as
``Broker.put`` would (measured: docs/performance.md, "sends that arrive together").

A put handed over is made whatever happens to its caller afterwards (the first caller shields
the group's put, bounded by the put pipeline's own flush and replica timeouts): a caller
cancelled meanwhile (its deadline) leaves a stored message behind, as a remoting client that
gives up after its request was sent does; the client's retry may duplicate it, never lose it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

import attrs
import trio

from kernel.model import MessageBatch, PutResult

PutGroup = Callable[[Sequence[MessageBatch]], Awaitable[list[PutResult]]]


@attrs.define(eq=False)
class _Group:
    batches: list[MessageBatch] = attrs.field(factory=list)
    done: trio.Event = attrs.field(factory=trio.Event)
    results: list[PutResult] = attrs.field(factory=list)
    error: BaseException | None = None


@attrs.define(eq=False)
class LocalPuts:
    """Puts through ``put_group`` (``BrokerRuntime.put_group``), gathering the puts of one
    scheduler pass into one call."""

    put_group: PutGroup
    groups: int = 0
    """Groups put (``puts / groups`` is the mean group size)."""
    puts: int = 0
    _open: _Group | None = attrs.field(default=None, init=False)

    async def put(self, batch: MessageBatch) -> PutResult:
        """The batch's result, as ``Broker.put`` gives it.

        :raises RuntimeError: the broker is not running (as ``Broker.put``).
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
        # One pass: the calls started with this one reach their put meanwhile and join.
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
