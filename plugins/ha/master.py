"""The master side: accepts slaves on ``haListenPort`` and streams the commit log to each
(RocketMQ's HAService, AcceptSocketService and HAConnection).

Per slave, a reader takes its reports (the offset it holds) and a writer sends
``[offset][length][bytes]`` frames from where the slave stands, as soon as the log grows;
frames ready together go out in one write.

A report is a claim, not a proof: it counts only on a connection the master accepted (its
first report named an offset this log can continue from), and never beyond the bytes that
connection was sent. What a SYNC_MASTER's puts wait on, :attr:`HaServer.acked`, is the
highest such *confirmed* offset among the slaves connected now: it goes back when the slave
that held it leaves, so one bogus report, an old master reconnecting with a longer log, or a
slave that went away can never acknowledge a put that no connected slave holds.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

import attrs
import trio

from kernel.errors import OffsetOutOfRange
from kernel.protocols import MessageStore, ReplicableStore
from kernel.sync import Watermark
from plugins.ha.config import HaConfig
from plugins.ha.wire import HaFrameError, ReportDecoder, encode_header
from wire.remoting.server import format_address, open_listeners
from wire.remoting.tls import ServerTls

log = logging.getLogger(__name__)

RECEIVE_CHUNK = 64 * 1024
COALESCE_BYTES = 4 * 1024 * 1024
"""Frames written in one ``send_all`` at most (each frame stays within the batch size)."""


@attrs.frozen
class SlaveStatistics:
    """One connected slave, as ``haStatus`` shows it."""

    address: str
    ack_offset: int
    """What the slave last reported it holds (``slaveAckOffset``)."""
    behind_bytes: int
    """The master's log end minus ``ack_offset``."""
    in_sync: bool
    """Within ``max_gap_not_in_sync`` of the master."""
    transferred_bytes: int
    connected_seconds: float


@attrs.define(eq=False)
class SlaveConnection:
    """One slave's connection: reports in, frames out."""

    server: HaServer
    stream: trio.abc.Stream
    address: str
    ack_offset: int = -1
    """What the slave last reported it holds (a claim: see :attr:`confirmed_offset`)."""
    sent_end: int = -1
    """The end of what this connection was sent: the offset it was accepted at, then the end
    of each frame handed to the socket (-1: not accepted, nothing counts)."""
    transferred: int = 0
    connected_at: float = attrs.field(factory=trio.current_time)
    broker_id: int | None = None
    """The slave's broker id (controller mode: from its hello)."""
    learner: bool = False
    """An async learner (controller mode): never a SyncStateSet member."""
    _last_report: float = attrs.field(factory=trio.current_time, init=False)
    _reported: trio.Event = attrs.field(factory=trio.Event, init=False)
    close_reason: str = ""
    _scope: trio.CancelScope | None = attrs.field(default=None, init=False)

    @property
    def confirmed_offset(self) -> int:
        """What this slave holds as far as the master can tell: its report, capped at what this
        connection was sent; -1 before the master accepted the connection."""
        if self.sent_end < 0:
            return -1
        return min(self.ack_offset, self.sent_end)

    def drop(self, reason: str) -> None:
        """Close this connection (the master stepped down)."""
        if self._scope is not None:
            self._close(self._scope, reason)

    async def serve(self) -> None:
        async with trio.open_nursery() as nursery:
            self._scope = nursery.cancel_scope
            nursery.start_soon(self._read_reports, nursery.cancel_scope)
            nursery.start_soon(self._write_frames, nursery.cancel_scope)
            nursery.start_soon(self._housekeep, nursery.cancel_scope)

    def _close(self, scope: trio.CancelScope, reason: str, *, error: bool = False) -> None:
        self._record_close(reason, error=error)
        scope.cancel()

    def _record_close(self, reason: str, *, error: bool = False) -> None:
        """The first reason wins and is logged once; recorded before a last frame is sent, so the
        slave closing on that frame cannot replace the reason with "closed by the slave"."""
        if not self.close_reason:
            self.close_reason = reason
            (log.error if error else log.info)("HA connection from slave %s closed: %s", self.address, reason)

    async def _read_reports(self, scope: trio.CancelScope) -> None:
        decoder = ReportDecoder(expect_hello=self.server.expect_hello)
        while True:
            try:
                data = await self.stream.receive_some(RECEIVE_CHUNK)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as error:
                self._close(scope, f"receive failed: {error}")
                return
            if not data:
                self._close(scope, "closed by the slave")
                return
            try:
                offset = decoder.feed(data)
            except HaFrameError as error:
                self._close(scope, f"malformed report: {error}", error=True)
                return
            self._last_report = trio.current_time()
            self.broker_id, self.learner = decoder.broker_id, decoder.learner
            if offset is None:
                continue
            if 0 <= self.sent_end < offset:
                self._close(
                    scope,
                    f"the slave reported {offset} bytes but was sent only up to {self.sent_end}: "
                    "a report beyond what this connection carried acknowledges nothing",
                    error=True,
                )
                return
            first = self.ack_offset < 0
            self.ack_offset = offset
            if first:
                self._reported.set()
            if self.sent_end >= 0:
                self.server.slave_confirmed(self)

    async def _housekeep(self, scope: trio.CancelScope) -> None:
        interval = self.server.config.housekeeping_interval
        while True:
            deadline = self._last_report + interval
            if trio.current_time() >= deadline:
                self._close(scope, f"no report for {interval:g}s (haHousekeepingInterval)", error=True)
                return
            await trio.sleep_until(deadline)

    async def _write_frames(self, scope: trio.CancelScope) -> None:
        await self._reported.wait()
        if not self.server.serving:
            self._close(scope, "this broker is not the master now", error=True)
            return
        start, refusal = self.server.start_offset(self.ack_offset)
        if refusal:
            # No data for this slave: tell it where the master's log is (the slave logs the
            # mismatch on its side), then close.
            self._record_close(refusal, error=True)
            await self._send_quietly(encode_header(start, 0))
            scope.cancel()
            return
        log.info(
            "HA: slave %s reported offset %d; transferring from %d", self.address, self.ack_offset, start
        )
        self.sent_end = start
        self.server.slave_confirmed(self)
        await self._transfer_from(start, scope)

    async def _send_quietly(self, data: bytes) -> None:
        with trio.move_on_after(1):
            try:
                await self.stream.send_all(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                pass

    async def _transfer_from(self, offset: int, scope: trio.CancelScope) -> None:
        server = self.server
        store = server.store
        wrote = store.positions.wrote
        batch = server.config.transfer_batch_size
        heartbeat = server.config.heartbeat_interval
        last_write = trio.current_time()
        while True:
            frames: list[bytes] = []
            size = 0
            try:
                while size < COALESCE_BYTES and offset < wrote.value:
                    data = server.replicable.read_raw(offset, batch)
                    if not data:
                        break
                    frames += (encode_header(offset, len(data)), data)
                    offset += len(data)
                    size += len(data)
            except OffsetOutOfRange as error:
                self._close(
                    scope, f"the slave's next offset {offset} is gone from this log: {error}", error=True
                )
                return
            if not frames:
                if trio.current_time() - last_write >= heartbeat:
                    frames.append(encode_header(offset, 0))
                elif offset < wrote.value:
                    await trio.sleep(0.001)  # visible but not yet readable (a commit in flight)
                    continue
                else:
                    with trio.move_on_at(last_write + heartbeat):
                        await wrote.wait_reached(offset + 1)
                    continue
            self.sent_end = offset  # before the write: a fast slave may report before it returns
            try:
                await self.stream.send_all(b"".join(frames))
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as error:
                self._close(scope, f"send failed: {error}")
                return
            self.transferred += size
            last_write = trio.current_time()

    def statistics(self) -> SlaveStatistics:
        end = self.server.store.positions.wrote.value
        confirmed = self.confirmed_offset
        return SlaveStatistics(
            self.address,
            self.ack_offset,
            max(0, end - max(confirmed, 0)),
            confirmed >= 0 and end - confirmed <= self.server.config.max_gap_not_in_sync,
            self.transferred,
            trio.current_time() - self.connected_at,
        )


@attrs.define(eq=False)
class HaServer:
    """Listens for slaves and tracks what they acknowledged."""

    store: MessageStore
    replicable: ReplicableStore
    config: HaConfig
    host: str
    port: int
    tls: ServerTls | None = None
    """TLS as ``tls.server.mode`` says (``None``: plain TCP)."""
    acked: Watermark = attrs.field(factory=Watermark, init=False)
    """The highest confirmed offset among the slaves connected now (``push2SlaveMaxOffset``);
    it goes back when the slave that held it leaves."""
    connections: list[SlaveConnection] = attrs.field(factory=list, init=False)
    expect_hello: bool = False
    """Controller mode: slaves name themselves first (see :mod:`plugins.ha.wire`)."""
    serving: bool = True
    """Whether slaves are served (controller mode: only while this broker is master)."""
    on_ack: Callable[[SlaveConnection], None] | None = None
    """Called after every report (controller mode: the SyncStateSet's confirm offset)."""

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    async def run(self, *, task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED) -> None:
        """Accept slaves until cancelled; ``started`` once listening (the bound port is known)."""
        listeners, self.port = await open_listeners("ha (haListenPort)", self.host, self.port)
        log.info("HA service listening on %s", self.address)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.acked.expire_overdue_waiters)
            task_status.started()
            await trio.serve_listeners(self._serve, listeners, handler_nursery=nursery)

    async def _serve(self, socket_stream: trio.SocketStream) -> None:
        peer = format_address(socket_stream.socket.getpeername())
        stream: trio.abc.Stream | None = socket_stream
        if self.tls is not None:
            stream = await self.tls.accept(socket_stream, "ha", peer)
            if stream is None:
                return
        connection = SlaveConnection(self, stream, peer)
        self.connections.append(connection)
        log.info("HA: slave connected from %s", connection.address)
        try:
            await connection.serve()
        finally:
            self.connections.remove(connection)
            self._recompute_acked()
            with trio.CancelScope(shield=True):
                await trio.aclose_forcefully(stream)

    def start_offset(self, reported: int) -> tuple[int, str]:
        """Where a slave that holds ``reported`` bytes continues, with "" as the reason; or, when it cannot,
        where this log is (its end for a slave ahead of it, its oldest offset for one behind
        it: the offset the refusal's empty frame carries) and why.

        A new slave (0) copies from this log's oldest file, so it ends byte-identical to the
        master (RocketMQ 4.x would start at the last file and leave the slave without history).
        """
        wrote = self.store.positions.wrote.value
        oldest = self.store.watermarks().min_offset if wrote else 0
        if reported > wrote:
            return wrote, (
                f"the slave holds {reported} bytes, more than this master's {wrote}: it is ahead of its "
                "master (a former master of another log, or a master that lost data); no data sent"
            )
        if reported == 0:
            return oldest, ""
        if reported < oldest:
            return oldest, (
                f"the slave holds {reported} bytes but this master's oldest file starts at {oldest}: "
                "the bytes in between were deleted; empty the slave's store to copy from the oldest file"
            )
        return reported, ""

    def slave_confirmed(self, connection: SlaveConnection) -> None:
        """A connection's confirmed offset moved: wake the puts it covers."""
        self.acked.advance(connection.confirmed_offset)
        if self.on_ack is not None:
            self.on_ack(connection)

    def _recompute_acked(self) -> None:
        """A slave left: the acknowledged position is what the remaining slaves hold."""
        held = max((c.confirmed_offset for c in self.connections), default=0)
        if held < self.acked.value:
            self.acked.reset(max(held, 0))

    def slave_in_sync(self, end: int) -> bool:
        """RocketMQ's ``isSlaveOK``: an accepted slave is connected and within
        ``max_gap_not_in_sync``."""
        gap = self.config.max_gap_not_in_sync
        return any((held := c.confirmed_offset) >= 0 and end - held <= gap for c in self.connections)

    async def wait_acked(self, end: int, timeout: float) -> bool:
        if math.isinf(timeout):
            await self.acked.wait_reached(end)
            return True
        return await self.acked.wait_reached_by(end, trio.current_time() + timeout)

    def statistics(self) -> list[SlaveStatistics]:
        return [c.statistics() for c in self.connections]
