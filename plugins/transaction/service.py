"""The transaction service: ends transactions and checks back on the ones nobody ended.

**State.** Half messages wait in ``RMQ_SYS_TRANS_HALF_TOPIC`` queue 0; an op record in
``RMQ_SYS_TRANS_OP_HALF_TOPIC`` queue 0 ends them (its body lists their half-queue offsets).
In memory the service keeps ``ended``, the open window's ended offsets (at or above the durable
``halfOffset``, see :mod:`plugins.transaction.progress`), rebuilt at start from the op records.

**End.** A commit appends the rebuilt message *and* its op record in one store append, the
message first (commits that arrive while an append runs are grouped into the next one): a
torn append can lose the op record (the message is then checked again, and a second commit
of it is recognised and not stored twice while the broker runs) but never keeps an op record
whose message is gone. A rollback's op record waits up to ``op_batch_interval`` (or
``op_msg_max_size`` bytes) to be written with others: losing it in a crash costs one more
check-back, never a message. An end for a message already ended is answered SUCCESS and changes
nothing (RocketMQ would store a commit twice).

**Check-back.** Every ``check_interval`` the open window is walked in queue order. A message
not ended, older than its immunity (``timeout`` or its ``CHECK_IMMUNITY_TIME_IN_SECONDS``) and
not checked within the interval is sent to a producer of its group as
``CHECK_TRANSACTION_STATE``; after ``check_max`` checks it is moved to
``TRANS_CHECK_MAX_TIME_TOPIC`` and ended. A check no producer could receive (none online) is not
counted. Counts and times are in the progress file, so a restart checks nothing early and
forgets nothing. Unlike RocketMQ, a checked message is not appended to the half queue again:
the window's start only moves past resolved messages.
"""

from __future__ import annotations

import collections
import logging
import time
from pathlib import Path
from typing import Any

import attrs
import trio

from kernel.clients import CLIENT_DIRECTORY
from kernel.context import BrokerRuntime, StashKey
from kernel.errors import CorruptRecord, OffsetOutOfRange
from kernel.model import BrokerRole, MessageBatch, PutResult
from kernel.topics import TOPIC_DIRECTORY
from plugins.transaction import half as halves
from plugins.transaction.config import TransactionConfig
from plugins.transaction.progress import CheckState, Progress, ProgressFile
from wire.record import StoredMessage, decode_record, encode_record
from wire.remoting import RemotingCommand, RequestCode, ResponseCode

log = logging.getLogger(__name__)

TRANSACTIONS = StashKey["TransactionService"]("transaction.service")
READ_BATCH = 256
"""Queue entries read per store lookup while scanning the half or op queue."""
COMMIT, ROLLBACK, NOT_TYPE = 0x8, 0xC, 0x0
"""``commitOrRollback`` values of END_TRANSACTION (sysFlag transaction types)."""


@attrs.frozen
class EndRequest:
    """An END_TRANSACTION header, parsed."""

    producer_group: str
    tran_state_table_offset: int
    commit_log_offset: int
    commit_or_rollback: int
    from_transaction_check: bool
    msg_id: str = ""
    transaction_id: str = ""


@attrs.frozen
class EndOutcome:
    code: int
    remark: str = ""


@attrs.define(eq=False)
class _PendingCommit:
    found: StoredMessage
    offset: int
    done: trio.Event = attrs.field(factory=trio.Event)
    outcome: EndOutcome = EndOutcome(ResponseCode.SYSTEM_ERROR, "the broker stopped before the commit")


@attrs.define
class TransactionStatistics:
    """Counters since start, and the open window (``brokerStatus`` shows them)."""

    committed: int = 0
    rolled_back: int = 0
    repeated_ends: int = 0
    """Ends for a message already ended (answered, nothing changed)."""
    refused_ends: int = 0
    checks_sent: int = 0
    checks_unsent: int = 0
    """Checks due for which no producer of the group was online."""
    given_up: int = 0
    """Moved to TRANS_CHECK_MAX_TIME_TOPIC after ``check_max`` checks."""
    scans: int = 0
    op_records: int = 0


@attrs.frozen
class PendingTransaction:
    """An open half message, for admin queries."""

    half_offset: int
    commit_log_offset: int
    producer_group: str
    topic: str
    transaction_id: str
    born_timestamp: int
    check_times: int


def _now_ms() -> int:
    return int(time.time() * 1000)


@attrs.define(eq=False)
class TransactionService:
    """See the module docstring."""

    runtime: BrokerRuntime
    config: TransactionConfig
    path: Path
    stats: TransactionStatistics = attrs.field(factory=TransactionStatistics)
    progress: Progress = attrs.field(factory=Progress)
    ended: set[int] = attrs.field(factory=set)
    _file: ProgressFile = attrs.field(init=False)
    _loaded: bool = attrs.field(default=False, init=False)
    _op_read_to: int = attrs.field(default=0, init=False)
    _op_spans: collections.deque[tuple[int, int]] = attrs.field(factory=collections.deque, init=False)
    """(op-queue offset, highest half offset it ends) of op records read at or after ``opOffset``."""
    _pending_ops: list[int] = attrs.field(factory=list, init=False)
    _pending_bytes: int = attrs.field(default=0, init=False)
    _ops_due: trio.Event = attrs.field(factory=trio.Event, init=False)
    _commits: list[_PendingCommit] = attrs.field(factory=list, init=False)
    _commits_due: trio.Event = attrs.field(factory=trio.Event, init=False)
    _unsent_groups: set[str] = attrs.field(factory=set, init=False)

    def __attrs_post_init__(self) -> None:
        self._file = ProgressFile(self.path)

    # --- lifecycle --------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED) -> None:
        """Rebuild the open window, then write op batches and check back until cancelled; at
        the end (shielded) the waiting op records and the position are written."""
        if self.runtime.role is not BrokerRole.SLAVE:
            await self.load()
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._write_ops_periodically)
                nursery.start_soon(self._commit_queued)
                nursery.start_soon(self._check_periodically)
                nursery.start_soon(self._persist_periodically)
                task_status.started()
        finally:
            with trio.CancelScope(shield=True):
                if self._loaded:
                    await self.flush_ops()
                    await self._file.save(self.progress)

    async def load(self) -> None:
        """Read the progress file and the op records after it (also on a slave just promoted)."""
        store = self.runtime.store
        progress = self._file.load()
        low = store.min_queue_offset(halves.HALF_TOPIC, halves.HALF_QUEUE)
        high = store.max_queue_offset(halves.HALF_TOPIC, halves.HALF_QUEUE)
        if not low <= progress.half_offset <= high:
            log.warning(
                "%s: halfOffset %d is outside the half queue [%d, %d]; using %d",
                self.path,
                progress.half_offset,
                low,
                high,
                min(max(progress.half_offset, low), high),
            )
            progress.half_offset = min(max(progress.half_offset, low), high)
        progress.op_offset = max(
            progress.op_offset, store.min_queue_offset(halves.OP_TOPIC, halves.HALF_QUEUE)
        )
        self.progress = progress
        self.ended.clear()
        self._op_spans.clear()
        self._op_read_to = progress.op_offset
        self._loaded = True
        await self._read_ops()
        log.info(
            "transactions: half queue open from %d (%d ended there, %d with checks), ops read from %d",
            progress.half_offset,
            len(self.ended),
            len(progress.checks),
            progress.op_offset,
        )

    # --- ending -----------------------------------------------------------------------------

    async def end(self, request: EndRequest) -> EndOutcome | None:
        """Commit or roll back one half message (END_TRANSACTION); ``None`` for a "not known
        yet" answer or an unknown type, which RocketMQ leaves unanswered."""
        if self.runtime.role is BrokerRole.SLAVE:
            return EndOutcome(ResponseCode.SLAVE_NOT_AVAILABLE, "a slave does not end transactions")
        kind = request.commit_or_rollback
        if kind not in (COMMIT, ROLLBACK):
            source = "a check-back answer" if request.from_transaction_check else "the producer"
            if kind == NOT_TYPE:
                log.info("transaction %s: %s does not know its state yet", request.transaction_id, source)
            else:
                log.warning(
                    "transaction %s: %s sent the invalid type %r; ignored",
                    request.transaction_id,
                    source,
                    kind,
                )
            return None
        if not self._loaded:
            await self.load()
        found = await self._half_at(request.commit_log_offset)
        if isinstance(found, EndOutcome):
            return found
        problem = self._mismatch(found, request)
        if problem is not None:
            self.stats.refused_ends += 1
            return problem
        offset = found.queue_offset
        if offset < self.progress.half_offset or offset in self.ended:
            self.stats.repeated_ends += 1
            return EndOutcome(ResponseCode.SUCCESS, f"transaction of half offset {offset} was already ended")
        self.ended.add(offset)
        if kind == ROLLBACK:
            self.stats.rolled_back += 1
            self._queue_op(offset)
            return EndOutcome(ResponseCode.SUCCESS)
        return await self._commit(found, offset)

    async def _half_at(self, commit_log_offset: int) -> StoredMessage | EndOutcome:
        try:
            raw = await self.runtime.store.read_record_at(commit_log_offset)  # type: ignore[attr-defined]
            found = decode_record(raw)
            halves.real_destination(found)
        except (OffsetOutOfRange, CorruptRecord, halves.HalfMessageError) as error:
            return EndOutcome(ResponseCode.SYSTEM_ERROR, f"Find prepared transaction message failed: {error}")
        return found

    def _mismatch(self, found: StoredMessage, request: EndRequest) -> EndOutcome | None:
        group = found.properties.get(halves.PROPERTY_PRODUCER_GROUP, "")
        if group != request.producer_group:
            return EndOutcome(
                ResponseCode.SYSTEM_ERROR,
                f"The producer group wrong: the half message was sent by {group!r}, "
                f"the end names {request.producer_group!r}",
            )
        if found.queue_offset != request.tran_state_table_offset:
            return EndOutcome(
                ResponseCode.SYSTEM_ERROR,
                f"The transaction state table offset wrong: {request.tran_state_table_offset}, "
                f"the half message is at {found.queue_offset}",
            )
        if not request.from_transaction_check and halves.PROPERTY_CHECK_IMMUNITY in found.properties:
            immunity = halves.immunity_ms(found, int(self.config.timeout * 1000))
            if _now_ms() - found.born_timestamp > immunity:
                return EndOutcome(
                    ResponseCode.ILLEGAL_OPERATION,
                    f"the end came {(_now_ms() - found.born_timestamp) / 1000:.1f}s after the send, later "
                    f"than its {halves.PROPERTY_CHECK_IMMUNITY}; the check-back decides it",
                )
        return None

    async def _commit(self, found: StoredMessage, offset: int) -> EndOutcome:
        """Queue the commit for the committer and wait for its append."""
        pending = _PendingCommit(found, offset)
        self._commits.append(pending)
        self._commits_due.set()
        await pending.done.wait()
        return pending.outcome

    async def _commit_queued(self) -> None:
        """Group commit: every commit queued meanwhile, with every waiting op record (theirs
        included), in one store append. While one append runs the next group gathers, so
        concurrent ends cost one append per round instead of one each."""
        while True:
            await self._commits_due.wait()
            self._commits_due = trio.Event()
            commits, self._commits = self._commits, []
            if commits:
                await self._append_commits(commits)

    async def _append_commits(self, commits: list[_PendingCommit]) -> None:
        waiting, self._pending_ops, self._pending_bytes = self._pending_ops, [], 0
        offsets = [*waiting, *(c.offset for c in commits)]
        batches = [
            MessageBatch(
                [halves.committed(c.found)], c.found.properties.get(halves.PROPERTY_PRODUCER_GROUP, "")
            )
            for c in commits
        ]
        ops = MessageBatch(halves.op_records(offsets, self.config.op_msg_max_size, self._host()))
        results = await self.runtime.put_group([*batches, ops])
        op = results[-1]
        if op.status.stored:
            self.stats.op_records += len(ops)
        else:
            for offset in waiting:
                self._queue_op(offset)
        for pending, done in zip(commits, results, strict=False):
            if done.status.stored:
                self.stats.committed += 1
                if not op.status.stored:
                    self._queue_op(pending.offset)
                pending.outcome = EndOutcome(ResponseCode.SUCCESS)
            else:
                self.ended.discard(pending.offset)
                pending.outcome = EndOutcome(
                    ResponseCode.SYSTEM_ERROR, f"the committed message was not stored: {_why(done)}"
                )
            pending.done.set()

    def _queue_op(self, offset: int) -> None:
        self._pending_ops.append(offset)
        self._pending_bytes += len(str(offset)) + 1
        if self._pending_bytes >= self.config.op_msg_max_size:
            self._ops_due.set()

    async def flush_ops(self) -> None:
        """Write the waiting op records now (a failed write keeps them waiting)."""
        if not self._pending_ops:
            return
        waiting, self._pending_ops, self._pending_bytes = self._pending_ops, [], 0
        records = halves.op_records(waiting, self.config.op_msg_max_size, self._host())
        (result,) = await self.runtime.put_group([MessageBatch(records)])
        if result.status.stored:
            self.stats.op_records += len(records)
            return
        log.warning(
            "op records for %d ended transactions not written (%s); retrying", len(waiting), _why(result)
        )
        for offset in waiting:
            self._queue_op(offset)

    def _host(self) -> tuple[str, int]:
        broker = self.runtime.ctx.broker
        return (broker.listen_host, broker.listen_port)

    # --- the open window --------------------------------------------------------------------

    async def _read_ops(self) -> None:
        """Op records not read yet → ``ended`` (offsets in the open window only)."""
        store = self.runtime.store
        end = store.max_queue_offset(halves.OP_TOPIC, halves.HALF_QUEUE)
        floor = self.progress.half_offset
        while self._op_read_to < end:
            entries = store.lookup(halves.OP_TOPIC, halves.HALF_QUEUE, self._op_read_to, READ_BATCH)
            if not entries:
                break
            for entry, raw in zip(entries, await store.read_records(entries), strict=True):
                offsets = halves.op_offsets(decode_record(raw))
                self.ended.update(o for o in offsets if o >= floor)
                self._op_spans.append((entry.queue_offset, max(offsets, default=-1)))
            self._op_read_to = entries[-1].queue_offset + 1

    def _advance(self, new_half_offset: int) -> None:
        progress = self.progress
        self.ended = {o for o in self.ended if o >= new_half_offset}
        progress.checks = {o: c for o, c in progress.checks.items() if o >= new_half_offset}
        progress.half_offset = new_half_offset
        spans = self._op_spans
        while spans and spans[0][1] < new_half_offset:
            spans.popleft()
        progress.op_offset = spans[0][0] if spans else self._op_read_to

    async def open_window(self) -> tuple[list[tuple[int, StoredMessage]], int]:
        """The half messages not ended yet, in queue order (admin queries, the scan), and the
        queue offset the walk ended at."""
        store = self.runtime.store
        offset = max(self.progress.half_offset, store.min_queue_offset(halves.HALF_TOPIC, halves.HALF_QUEUE))
        end = store.max_queue_offset(halves.HALF_TOPIC, halves.HALF_QUEUE)
        out = []
        while offset < end:
            entries = store.lookup(halves.HALF_TOPIC, halves.HALF_QUEUE, offset, READ_BATCH)
            if not entries:
                break
            records = await store.read_records(entries)
            for entry, raw in zip(entries, records, strict=True):
                if entry.queue_offset not in self.ended:
                    out.append((entry.queue_offset, decode_record(raw)))
            offset = entries[-1].queue_offset + 1
        return out, offset

    # --- check-back -------------------------------------------------------------------------

    async def check_once(self) -> None:
        """One scan of the open window (see the module docstring)."""
        if self.runtime.role is BrokerRole.SLAVE:
            return
        if not self._loaded:
            await self.load()
        await self.flush_ops()
        await self._read_ops()
        self.stats.scans += 1
        started = _now_ms()
        store = self.runtime.store
        low = store.min_queue_offset(halves.HALF_TOPIC, halves.HALF_QUEUE)
        if low > self.progress.half_offset:
            log.warning(
                "half messages %d..%d were deleted by retention before they were resolved",
                self.progress.half_offset,
                low - 1,
            )
            self._advance(low)
        first_open: int | None = None
        self._unsent_groups.clear()
        window, end = await self.open_window()
        for offset, found in window:
            if offset in self.ended:  # ended while this scan was waiting
                continue
            if found.store_timestamp >= started:
                first_open = offset if first_open is None else first_open
                break  # stored during this scan: everything after it is newer
            if not await self._check_or_give_up(offset, found, started):
                first_open = offset if first_open is None else first_open
        self._advance(end if first_open is None else first_open)
        await self._file.save(self.progress)

    async def _check_or_give_up(self, offset: int, found: StoredMessage, now: int) -> bool:
        """Check ``found`` if due; True when it is resolved by this (given up)."""
        state = self.progress.checks.get(offset)
        times = state.times if state is not None else 0
        age = now - found.born_timestamp
        if 0 <= age <= halves.immunity_ms(found, int(self.config.timeout * 1000)):
            return False
        if state is not None and now - state.last_ms < self.config.check_interval * 1000 * 0.9:
            return False
        if times >= self.config.check_max:
            return await self._give_up(offset, found, times)
        if self._send_check(offset, found, times + 1):
            self.progress.checks[offset] = CheckState(times + 1, now)
        return False

    def _send_check(self, offset: int, found: StoredMessage, times: int) -> bool:
        group = found.properties.get(halves.PROPERTY_PRODUCER_GROUP, "")
        directory = self.runtime.ctx.stash.get(CLIENT_DIRECTORY, None)
        connections = directory.producer_connections(group) if directory is not None else ()
        if not connections:
            self.stats.checks_unsent += 1
            if group not in self._unsent_groups:
                self._unsent_groups.add(group)
                log.warning(
                    "cannot check transactions of producer group %r: no producer of it is online", group
                )
            return False
        transaction = halves.transaction_id(found)
        header = {
            "topic": found.topic,
            "tranStateTableOffset": offset,
            "commitLogOffset": found.physical_offset,
            "msgId": transaction,
            "transactionId": transaction,
            "offsetMsgId": found.offset_msg_id,
            "brokerName": self.runtime.ctx.broker.broker_name,
        }
        body = encode_record(
            halves.for_check(found, times),
            queue_offset=offset,
            physical_offset=found.physical_offset,
            store_timestamp=found.store_timestamp,
            store_host=found.store_host,
        )
        connections[0].send_oneway(RemotingCommand.request(RequestCode.CHECK_TRANSACTION_STATE, header, body))
        self.stats.checks_sent += 1
        return True

    async def _give_up(self, offset: int, found: StoredMessage, times: int) -> bool:
        await self._create_check_max_topic()
        self.ended.add(offset)
        kept, op = await self.runtime.put_group(
            [
                MessageBatch([halves.given_up(found, times)]),
                MessageBatch(halves.op_records([offset], self.config.op_msg_max_size, self._host())),
            ]
        )
        if not kept.status.stored:
            self.ended.discard(offset)
            log.warning("half message %d not moved to %s: %s", offset, halves.CHECK_MAX_TOPIC, _why(kept))
            return False
        if not op.status.stored:
            self._queue_op(offset)
        self.stats.given_up += 1
        log.warning(
            "transaction %s (producer group %r, topic %r) unresolved after %d checks: moved to %s",
            halves.transaction_id(found),
            found.properties.get(halves.PROPERTY_PRODUCER_GROUP, ""),
            found.properties.get("REAL_TOPIC", ""),
            times,
            halves.CHECK_MAX_TOPIC,
        )
        return True

    async def _create_check_max_topic(self) -> None:
        """Give ``TRANS_CHECK_MAX_TIME_TOPIC`` a topic config and a route, as RocketMQ does on
        the first give-up, so an operator reads what was given up with the usual tools
        (``queryMsgByKey``, a consumer of the topic)."""
        directory = self.runtime.ctx.stash.get(TOPIC_DIRECTORY, None)
        if directory is not None:
            await directory.create_system_topic(halves.CHECK_MAX_TOPIC, 1)

    async def pending(self, group: str | None = None) -> list[PendingTransaction]:
        """Open transactions (of ``group`` when given), oldest first."""
        if not self._loaded and self.runtime.role is not BrokerRole.SLAVE:
            await self.load()
        out = []
        window, _ = await self.open_window()
        for offset, found in window:
            owner = found.properties.get(halves.PROPERTY_PRODUCER_GROUP, "")
            if group is not None and owner != group:
                continue
            state = self.progress.checks.get(offset)
            out.append(
                PendingTransaction(
                    offset,
                    found.physical_offset,
                    owner,
                    found.properties.get("REAL_TOPIC", ""),
                    halves.transaction_id(found),
                    found.born_timestamp,
                    state.times if state is not None else 0,
                )
            )
        return out

    def figures(self) -> dict[str, str]:
        """``brokerStatus`` lines: the half and op queues, and the counters."""
        store = self.runtime.store
        half_max = store.max_queue_offset(halves.HALF_TOPIC, halves.HALF_QUEUE)
        open_count = max(0, half_max - self.progress.half_offset - len(self.ended))
        stats = self.stats
        return {
            "transactionHalfMaxOffset": str(half_max),
            "transactionHalfOffset": str(self.progress.half_offset),
            "transactionHalfOpen": str(open_count),
            "transactionOpMaxOffset": str(store.max_queue_offset(halves.OP_TOPIC, halves.HALF_QUEUE)),
            "transactionOpOffset": str(self.progress.op_offset),
            "transactionOpPending": str(len(self._pending_ops)),
            "transactionCommitted": str(stats.committed),
            "transactionRolledBack": str(stats.rolled_back),
            "transactionChecksSent": str(stats.checks_sent),
            "transactionGivenUp": str(stats.given_up),
        }

    # --- periodic work ----------------------------------------------------------------------

    async def _write_ops_periodically(self) -> None:
        while True:
            with trio.move_on_after(self.config.op_batch_interval):
                await self._ops_due.wait()
            self._ops_due = trio.Event()
            if self._loaded:
                await self.flush_ops()

    async def _check_periodically(self) -> None:
        while True:
            await trio.sleep(self.config.check_interval)
            await self.check_once()

    async def _persist_periodically(self) -> None:
        writes = self.runtime.ctx.background_writes
        await writes.every(self.config.progress_persist_interval, str(self.path), self._save_if_loaded)

    async def _save_if_loaded(self) -> None:
        if self._loaded:
            await self._file.save(self.progress)


def _why(result: PutResult) -> str:
    return f"{result.status.name}{': ' + result.remark if result.remark else ''}"
