"""What the data path answers: put and get outcomes, where records landed, what views learn,
what recovery found, and redelivery decisions. Results and reports are ``attrs.frozen``; the
per-record ones (:class:`QueueEntry`, :class:`DispatchRecord`) plain ``attrs.define``."""

from __future__ import annotations

import enum
from collections.abc import Sequence

import attrs

from wire.dispatch_record import DispatchRecord as DispatchRecord  # re-exported
from wire.record import offset_msg_ids
from wire.remoting.codes import ResponseCode
from wire.stored_records import StoredRecords


class PutStatus(enum.Enum):
    """RocketMQ's ``PutMessageStatus``: the outcome of one put, as a value."""

    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    CREATE_MAPPED_FILE_FAILED = "CREATE_MAPPED_FILE_FAILED"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    OS_PAGE_CACHE_BUSY = "OS_PAGE_CACHE_BUSY"
    IN_SYNC_REPLICAS_NOT_ENOUGH = "IN_SYNC_REPLICAS_NOT_ENOUGH"
    """Controller mode: fewer SyncStateSet members than ``minInSyncReplicas`` (not stored)."""
    UNKNOWN_ERROR = "UNKNOWN_ERROR"

    @property
    def stored(self) -> bool:
        """Whether the message is in the commit log (possibly not yet durable)."""
        return self in _STORED_STATUSES


_STORED_STATUSES = frozenset(
    {
        PutStatus.PUT_OK,
        PutStatus.FLUSH_DISK_TIMEOUT,
        PutStatus.FLUSH_SLAVE_TIMEOUT,
        PutStatus.SLAVE_NOT_AVAILABLE,
    }
)


class Durability(enum.Enum):
    """What a flush policy's wait found."""

    FLUSHED = "FLUSHED"
    """The bytes were fsynced before the wait returned."""
    IN_PAGE_CACHE = "IN_PAGE_CACHE"
    """Not waited for: the bytes are in the page cache and will be flushed by policy."""
    TIMEOUT = "TIMEOUT"
    """The flush did not complete within the policy's timeout."""
    FAILED = "FAILED"
    """The flush failed (I/O error); the store stopped accepting writes."""


class Replication(enum.Enum):
    """What a replicator's wait found."""

    NOT_REQUIRED = "NOT_REQUIRED"
    REPLICATED = "REPLICATED"
    TIMEOUT = "TIMEOUT"
    NO_REPLICA = "NO_REPLICA"


@attrs.define
class AppendResult:
    """Where a batch landed in the commit log.

    Lists are parallel, one element per message. ``end_offset`` is the log position just past
    the last record: the target of flush and replication waits.
    """

    physical_offsets: list[int]
    sizes: list[int]
    queue_offsets: list[int]
    store_timestamp: int
    end_offset: int
    store_host: tuple[str, int] = ("127.0.0.1", 10911)

    @property
    def msg_ids(self) -> list[str]:
        """RocketMQ offset message ids (store host + physical offset), computed on demand."""
        return offset_msg_ids(self.store_host, self.physical_offsets)

    @property
    def first_offset(self) -> int:
        return self.physical_offsets[0]

    @property
    def wrote_bytes(self) -> int:
        return sum(self.sizes)

    def part(self, start: int, stop: int) -> AppendResult:
        """Where messages ``start:stop`` of the appended run landed (a group of batches
        appended at once is answered batch by batch)."""
        return AppendResult(
            self.physical_offsets[start:stop],
            self.sizes[start:stop],
            self.queue_offsets[start:stop],
            self.store_timestamp,
            self.physical_offsets[stop - 1] + self.sizes[stop - 1],
            self.store_host,
        )


@attrs.frozen
class PutResult:
    """The outcome of the put pipeline for one batch."""

    status: PutStatus
    append: AppendResult | None = None
    remark: str = ""

    @property
    def ok(self) -> bool:
        return self.status is PutStatus.PUT_OK


PUT_STATUS_CODES: dict[PutStatus, int] = {
    PutStatus.PUT_OK: ResponseCode.SUCCESS,
    PutStatus.FLUSH_DISK_TIMEOUT: ResponseCode.FLUSH_DISK_TIMEOUT,
    PutStatus.FLUSH_SLAVE_TIMEOUT: ResponseCode.FLUSH_SLAVE_TIMEOUT,
    PutStatus.SLAVE_NOT_AVAILABLE: ResponseCode.SLAVE_NOT_AVAILABLE,
    PutStatus.SERVICE_NOT_AVAILABLE: ResponseCode.SERVICE_NOT_AVAILABLE,
    PutStatus.CREATE_MAPPED_FILE_FAILED: ResponseCode.SYSTEM_ERROR,
    PutStatus.MESSAGE_ILLEGAL: ResponseCode.MESSAGE_ILLEGAL,
    PutStatus.PROPERTIES_SIZE_EXCEEDED: ResponseCode.MESSAGE_ILLEGAL,
    PutStatus.OS_PAGE_CACHE_BUSY: ResponseCode.SYSTEM_BUSY,
    PutStatus.IN_SYNC_REPLICAS_NOT_ENOUGH: ResponseCode.SYSTEM_ERROR,
    PutStatus.UNKNOWN_ERROR: ResponseCode.SYSTEM_ERROR,
}
"""The remoting response code answering a put's status (RocketMQ's ``SendMessageProcessor``)."""


@attrs.frozen
class Rejection:
    """Returned by ``trocket_before_append`` to refuse a batch."""

    status: PutStatus = PutStatus.MESSAGE_ILLEGAL
    remark: str = ""


class GetStatus(enum.Enum):
    """RocketMQ's ``GetMessageStatus``."""

    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"


@attrs.define
class QueueEntry:
    """One consume-queue entry: where queue offset *n* of a (topic, queue) lives in the log."""

    queue_offset: int
    physical_offset: int
    size: int
    tags_code: int


@attrs.frozen
class GetResult:
    """The outcome of one pull: stored records as they are on disk, plus offsets.

    ``records`` are complete stored units (RocketMQ v1 layout), so a network layer can send
    them back to back (:func:`wire.stored_records.joined`) as a PULL_MESSAGE body without
    re-encoding.
    """

    status: GetStatus
    records: Sequence[bytes]
    next_begin_offset: int
    min_offset: int
    max_offset: int
    queue_offsets: list[int] = attrs.field(factory=list)

    @property
    def total_size(self) -> int:
        if isinstance(self.records, StoredRecords):
            return len(self.records.data)
        return sum(len(r) for r in self.records)


@attrs.frozen
class RecoveryReport:
    """What recovery found and did; logged, shown by the CLI, given to ``trocket_store_recovered``."""

    clean_shutdown: bool
    log_min_offset: int
    log_max_offset: int
    records_scanned: int = 0
    truncated_bytes: int = 0
    redispatch_from: int = 0
    notes: tuple[str, ...] = ()


@attrs.frozen
class Watermarks:
    """The commit log's positions: ``flushed <= committed <= wrote``."""

    min_offset: int
    wrote: int
    committed: int
    flushed: int


class RedeliveryAction(enum.Enum):
    RETRY = "RETRY"
    DEAD_LETTER = "DEAD_LETTER"


@attrs.frozen
class Redelivery:
    """The decision for a message a consumer sent back."""

    action: RedeliveryAction
    delay_level: int = 0

    @classmethod
    def retry(cls, delay_level: int) -> Redelivery:
        return cls(RedeliveryAction.RETRY, delay_level)

    @classmethod
    def dead_letter(cls) -> Redelivery:
        return cls(RedeliveryAction.DEAD_LETTER)
