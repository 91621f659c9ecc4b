"""The slave side: connects to the master's HA port, reports the end of its commit log and
appends what the master streams, verbatim (RocketMQ's HAClient).

The master's address is ``[ha] master_address`` or, by default, the one the NameServer names
in its answer to this broker's registration. A report goes out on connecting, after every read
that appended bytes, and every ``heartbeat_interval``; a master silent for
``housekeeping_interval`` is dropped and connected to again.
"""

from __future__ import annotations

import logging
import ssl
from typing import Any

import attrs
import trio

from kernel.errors import ReplicaMismatch, StoreNotWritable
from kernel.protocols import ReplicableStore
from plugins.ha.config import HaConfig
from plugins.ha.wire import HaFrameError, TransferDecoder, encode_hello, encode_report
from wire.remoting.tls import open_client_stream

log = logging.getLogger(__name__)

RECEIVE_CHUNK = 4 * 1024 * 1024
MAX_FRAME_BODY = 64 * 1024 * 1024
"""Largest frame body accepted from a master (RocketMQ masters send 32 KiB)."""
CONNECT_TIMEOUT = 3.0


class _Dropped(Exception):
    """The connection to the master ended; the text says why."""


@attrs.frozen
class SlaveSideStatistics:
    master_address: str
    connected: bool
    received_end: int
    """End of the bytes this slave holds (what it reports)."""
    received_bytes: int
    connects: int
    last_error: str


@attrs.define(eq=False)
class HaClient:
    """See the module docstring."""

    store: ReplicableStore
    config: HaConfig
    master_address: str = ""
    connected: bool = False
    received_bytes: int = 0
    connects: int = 0
    last_error: str = ""
    tls: ssl.SSLContext | None = None
    """TLS to the master's HA port (``tls.enable``)."""
    hello_id: int | None = None
    """Controller mode: this replica's broker id, sent first (see :mod:`plugins.ha.wire`)."""
    learner: bool = False
    """Controller mode: say so in the hello (``asyncLearner``)."""
    _address_changed: trio.Event = attrs.field(factory=trio.Event, init=False)
    _send_lock: trio.Lock = attrs.field(factory=trio.Lock, init=False)

    def __attrs_post_init__(self) -> None:
        if self.config.master_address:
            self.master_address = self.config.master_address

    def follow(self, ha_address: str) -> None:
        """Replicate from ``ha_address`` from now on (controller mode: the controller named it)."""
        if ha_address != self.master_address:
            log.info("HA: following master %s", ha_address)
            self.master_address = ha_address
            self._address_changed.set()

    def set_master(self, ha_address: str) -> None:
        """The master's HA address, as the NameServer named it (ignored when configured)."""
        if self.config.master_address or not ha_address or ha_address == self.master_address:
            return
        log.info("HA: master HA address is %s", ha_address)
        self.master_address = ha_address
        self._address_changed.set()

    async def run(self, *, task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED) -> None:
        """Replicate until cancelled, reconnecting after every failure."""
        task_status.started()
        while True:
            if not self.master_address:
                self._address_changed = trio.Event()
                await self._address_changed.wait()
                continue
            address = self.master_address
            try:
                await self._session(address)
            except _Dropped as reason:
                self._note(f"{address}: {reason}")
            finally:
                self.connected = False
            self._address_changed = trio.Event()
            with trio.move_on_after(self.config.reconnect_interval):
                await self._address_changed.wait()

    def _note(self, error: str) -> None:
        if error != self.last_error:
            log.error("HA: connection to master %s", error)
        self.last_error = error

    async def _session(self, address: str) -> None:
        host, _, port = address.rpartition(":")
        try:
            with trio.fail_after(CONNECT_TIMEOUT):
                stream, _ = await open_client_stream(host, int(port), self.tls)
        except (OSError, trio.TooSlowError) as error:
            raise _Dropped(f"cannot connect: {error or 'timed out'}") from None
        except trio.BrokenResourceError as error:
            raise _Dropped(f"TLS handshake failed: {error.__cause__ or error}") from None
        self.connects += 1
        self.connected = True
        log.info("HA: connected to master %s; this log ends at %d", address, self.store.received_end())
        async with stream:
            reason = "closed"
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._heartbeats, stream)
                try:
                    if self.hello_id is not None:
                        await stream.send_all(encode_hello(self.hello_id, learner=self.learner))
                    await self._report(stream)
                    await self._receive(stream)
                except _Dropped as dropped:
                    reason = str(dropped)
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as error:
                    reason = f"connection lost: {error}"
                nursery.cancel_scope.cancel()
            raise _Dropped(reason)

    async def _heartbeats(self, stream: trio.abc.Stream) -> None:
        """Report every ``heartbeat_interval``; a failed send ends only this task (the receive
        loop sees the broken connection)."""
        while True:
            await trio.sleep(self.config.heartbeat_interval)
            try:
                await self._report(stream)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                return

    async def _report(self, stream: trio.abc.Stream) -> None:
        """Send the end of this log (two tasks report: one send at a time)."""
        async with self._send_lock:
            await stream.send_all(encode_report(self.store.received_end()))

    async def _receive(self, stream: trio.abc.Stream) -> None:
        decoder = TransferDecoder(MAX_FRAME_BODY)
        silence = self.config.housekeeping_interval
        while True:
            with trio.move_on_after(silence) as waited:
                data = await stream.receive_some(RECEIVE_CHUNK)
            if waited.cancelled_caught:
                raise _Dropped(f"nothing from the master for {silence:g}s (haHousekeepingInterval)")
            if not data:
                raise _Dropped("closed by the master")
            try:
                frames = decoder.feed(data)
            except HaFrameError as error:
                raise _Dropped(f"malformed frame: {error}") from None
            if not frames:
                continue
            # Frames of one read are contiguous: they are appended with one write.
            held = expected = self.store.received_end()
            start: int | None = None
            chunks = []
            for frame in frames:
                fresh_store = held == 0 and start is None  # an empty slave starts where the master does
                if frame.offset != expected and not fresh_store:
                    raise _Dropped(self._mismatch(frame.offset, expected))
                if frame.data:
                    start = frame.offset if start is None else start
                    chunks.append(frame.data)
                expected = frame.offset + len(frame.data)
            if start is None:
                continue  # heartbeats only
            data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
            try:
                await self.store.append_raw(start, data)
            except (ReplicaMismatch, StoreNotWritable) as error:
                raise _Dropped(str(error)) from None
            self.received_bytes += len(data)
            await self._report(stream)

    @staticmethod
    def _mismatch(master_offset: int, held: int) -> str:
        if master_offset < held:
            return (
                f"the master's log ends at {master_offset}, before this slave's {held}: this slave is "
                "ahead of its master; it keeps its data and receives nothing"
            )
        return (
            f"the master continues at {master_offset}, after this slave's end {held}: the master deleted "
            "the files in between; empty this slave's store to copy from the master's oldest file"
        )

    def statistics(self) -> SlaveSideStatistics:
        return SlaveSideStatistics(
            self.master_address,
            self.connected,
            self.store.received_end(),
            self.received_bytes,
            self.connects,
            self.last_error,
        )
