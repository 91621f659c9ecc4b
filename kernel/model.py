"""Value types shared by the kernel and every plugin.

Hot-path records (:class:`Message`, :class:`QueueEntry`, :class:`DispatchRecord`) are plain
``attrs.define`` classes without validators, because the put path creates one per message.
Results, reports and statistics are ``attrs.frozen``.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from kernel.java_hash import java_string_hash

if TYPE_CHECKING:
    from kernel.config.property_aliases import PropertyAlias
    from kernel.context import BrokerContext, BrokerRuntime
    from kernel.protocols import AllocateStrategyFn, FlushPolicy, MessageStore, Replicator, Service
    from kernel.wire_batch import WireBatch

# Reserved message property keys (RocketMQ's MessageConst).
PROPERTY_KEYS = "KEYS"
PROPERTY_TAGS = "TAGS"
PROPERTY_WAIT_STORE_MSG_OK = "WAIT"
PROPERTY_DELAY_TIME_LEVEL = "DELAY"
PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX = "UNIQ_KEY"
PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_REAL_QUEUE_ID = "REAL_QID"
PROPERTY_RETRY_TOPIC = "RETRY_TOPIC"
PROPERTY_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
PROPERTY_RECONSUME_TIME = "RECONSUME_TIME"
PROPERTY_MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
PROPERTY_TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
PROPERTY_TIMER_DELAY_MS = "TIMER_DELAY_MS"
PROPERTY_TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
TIMER_PROPERTIES = (PROPERTY_TIMER_DELIVER_MS, PROPERTY_TIMER_DELAY_MS, PROPERTY_TIMER_DELAY_SEC)
"""RocketMQ 5's ways to ask for an arbitrary delivery time: absolute ms, or a delay in ms or s."""
PROPERTY_TIMER_OUT_MS = "TIMER_OUT_MS"
"""The absolute delivery time (ms) a delay plugin computed for a parked message."""
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
"""Where a delay plugin parks messages with a delay level until they are due (RocketMQ's name)."""
TIMER_TOPIC = "rmq_sys_wheel_timer"
"""Where a delay plugin parks messages with an arbitrary delivery time (RocketMQ 5's name)."""
TRANSACTION_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
"""Where a transaction plugin keeps prepared (half) messages until they are committed."""
PROPERTY_TRANSACTION_PREPARED = "TRAN_MSG"

# sysFlag bits (RocketMQ's MessageSysFlag).
SYSFLAG_COMPRESSED = 0x1
SYSFLAG_MULTI_TAGS = 0x2
SYSFLAG_TRANSACTION_PREPARED = 0x4
SYSFLAG_TRANSACTION_COMMIT = 0x8
SYSFLAG_TRANSACTION_ROLLBACK = 0xC
SYSFLAG_BORNHOST_V6 = 0x10
SYSFLAG_STOREHOST_V6 = 0x20

MAX_PROPERTIES_SIZE = 32767
"""The stored properties length is a signed short."""


def encode_properties(properties: Mapping[str, str]) -> bytes:
    """Encode properties as ``key\\x01value\\x02`` pairs (RocketMQ's wire and disk form)."""
    if not properties:
        return b""
    return "".join(f"{k}\x01{v}\x02" for k, v in properties.items()).encode()


def decode_properties(data: bytes | memoryview) -> dict[str, str]:
    """Decode ``key\\x01value\\x02`` pairs; empty parts and parts without ``\\x01`` are ignored."""
    result: dict[str, str] = {}
    for part in bytes(data).decode("utf-8", "replace").split("\x02"):
        key, sep, value = part.partition("\x01")
        if sep:
            result[key] = value
    return result


def tags_code(tags: str | None) -> int:
    """The consume-queue tag field for a message's ``TAGS`` (0 when it has none)."""
    return java_string_hash(tags) if tags else 0


class MessagePropertiesView:
    """Typed access to the reserved properties, shared by messages to store and stored ones."""

    __slots__ = ()
    properties: dict[str, str]

    @property
    def tags(self) -> str | None:
        return self.properties.get(PROPERTY_TAGS)

    @property
    def keys(self) -> list[str]:
        """``KEYS`` split on spaces (RocketMQ's separator)."""
        return self.properties.get(PROPERTY_KEYS, "").split()

    @property
    def unique_key(self) -> str | None:
        """The client's ``UNIQ_KEY``: what users call the message id."""
        return self.properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)


@attrs.define
class Message(MessagePropertiesView):
    """One message as the put path sees it, before it is stored.

    Mutable and validator-free on purpose: it is created per message and ``trocket_before_append``
    implementations may rewrite it (for example a delayed message moved to the schedule topic).
    ``body`` is stored as given; when ``sys_flag`` has :data:`SYSFLAG_COMPRESSED` it is already
    compressed by the client.
    """

    topic: str
    body: bytes
    queue_id: int = 0
    flag: int = 0
    properties: dict[str, str] = attrs.field(factory=dict)
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: tuple[str, int] = ("127.0.0.1", 0)
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0

    @property
    def wait_store_ok(self) -> bool:
        """RocketMQ's ``WAIT`` property: whether the send waits for flush/replication."""
        return self.properties.get(PROPERTY_WAIT_STORE_MSG_OK, "true") != "false"

    @property
    def delay_level(self) -> int:
        try:
            return int(self.properties.get(PROPERTY_DELAY_TIME_LEVEL, "0"))
        except ValueError:
            return 0

    @property
    def is_prepared(self) -> bool:
        """A transactional half message (prepared sysFlag or ``TRAN_MSG=true``): it must not be
        visible until the producer commits it."""
        prepared = self.sys_flag & SYSFLAG_TRANSACTION_ROLLBACK == SYSFLAG_TRANSACTION_PREPARED
        return prepared or self.properties.get(PROPERTY_TRANSACTION_PREPARED) == "true"

    @property
    def wants_delay(self) -> bool:
        """Whether the message asks for delayed delivery (a delay level, or one of RocketMQ 5's
        :data:`TIMER_PROPERTIES`)."""
        props = self.properties
        return self.delay_level > 0 or any(name in props for name in TIMER_PROPERTIES)


@attrs.define
class MessageBatch:
    """The unit of the put pipeline: one producer request, one or many messages.

    Hooks on the data path run once per batch. ``wait_store_ok`` is false only if every
    message asked not to wait (``WAIT=false``).
    """

    _messages: Sequence[Message] = attrs.field(alias="messages")
    producer_group: str = ""

    @property
    def messages(self) -> list[Message]:
        """The messages as objects, which hooks may rewrite. A batch that arrived encoded
        (:attr:`encoded`) builds them on first access and keeps them from then on."""
        if not isinstance(self._messages, list):
            self._messages = list(self._messages)
        return self._messages

    @property
    def encoded(self) -> WireBatch | None:
        """The batch as the client encoded it (:class:`kernel.wire_batch.WireBatch`), as long
        as nothing asked for message objects: the put path then works on columns."""
        return None if isinstance(self._messages, list) else self._messages  # type: ignore[return-value]

    def __len__(self) -> int:
        return len(self._messages)

    @property
    def payload(self) -> Sequence[Message]:
        """What the store appends: the encoded batch while there is one, else the objects."""
        return self._messages

    @property
    def wait_store_ok(self) -> bool:
        encoded = self.encoded
        if encoded is not None:
            return encoded.wait_store_ok()
        return any(m.wait_store_ok for m in self.messages)


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


class BrokerRole(enum.Enum):
    """RocketMQ's ``brokerRole``."""

    ASYNC_MASTER = "ASYNC_MASTER"
    SYNC_MASTER = "SYNC_MASTER"
    SLAVE = "SLAVE"


class Phase(enum.IntEnum):
    """Lifecycle phases, outermost first; a phase's services start after the ones before it
    and stop after the ones after it."""

    DURABILITY = 1
    DERIVED = 2
    SCHEDULING = 3
    EXPORT = 4
    INGRESS = 5


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
        from kernel.record import offset_msg_ids  # here: kernel.record imports this module

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
    ``b"".join(records)`` as a PULL_MESSAGE body without re-encoding.
    """

    status: GetStatus
    records: list[bytes]
    next_begin_offset: int
    min_offset: int
    max_offset: int
    queue_offsets: list[int] = attrs.field(factory=list)

    @property
    def total_size(self) -> int:
        return sum(len(r) for r in self.records)


@attrs.define
class DispatchRecord:
    """What derived views learn about one stored record, decoded once per dispatch batch."""

    topic: str
    queue_id: int
    queue_offset: int
    physical_offset: int
    size: int
    tags_code: int
    store_timestamp: int
    sys_flag: int
    keys: str
    unique_key: str | None
    properties: dict[str, str]
    prepared_transaction_offset: int = 0


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


@attrs.frozen
class MessageQueue:
    """A (topic, broker, queue) triple, as clients and allocation strategies see queues."""

    topic: str
    broker_name: str
    queue_id: int


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


@attrs.frozen
class ConfigSection:
    """A plugin's configuration table: ``[name]`` in TOML, validated into ``type``.

    ``properties`` are the RocketMQ ``broker.properties`` keys the table takes, by RocketMQ
    name (see :mod:`kernel.config.property_aliases`): a RocketMQ config sets them."""

    name: str
    type: type
    properties: Mapping[str, PropertyAlias] = attrs.field(factory=dict)


# --- Providers: what the registration hooks return -------------------------------------------


@attrs.frozen
class StoreProvider:
    """A message store implementation, chosen by ``[broker] store = name``.

    ``open`` is an async context manager factory: ``async with provider.open(ctx) as store``.
    """

    name: str
    open: Callable[[BrokerContext], Any]
    description: str = ""
    settings: Callable[[BrokerContext], Mapping[str, object]] | None = None
    """Optional: the effective settings worth showing at start (file sizes, what is reserved
    on disk), shown by ``trocket up`` and ``trocket plugins``."""


@attrs.frozen
class FlushPolicyProvider:
    """A flush policy, chosen by ``[broker] flush = name``."""

    name: str
    make: Callable[[BrokerContext, MessageStore], FlushPolicy]
    description: str = ""
    settings: Callable[[BrokerContext], Mapping[str, object]] | None = None
    """Optional: the effective settings, shown by ``trocket plugins``."""


@attrs.frozen
class ReplicatorProvider:
    """A replication role implementation, chosen by ``[broker] replicator = name``."""

    name: str
    make: Callable[[BrokerContext, MessageStore], Replicator]
    description: str = ""


@attrs.frozen
class AllocateStrategy:
    """A consumer queue-allocation strategy: a pure function selected by name.

    Every client of a consumer group must compute the same assignment from the same sorted
    inputs, so strategies are deterministic; a client only keeps the queues it is given.
    """

    name: str
    allocate: AllocateStrategyFn
    """The strategy with its default options."""
    description: str = ""
    configure: Callable[[Mapping[str, str]], AllocateStrategyFn] | None = None
    """Builds the strategy from a consumer's options (e.g. ``virtual_nodes``), checking them
    (required ones included); None when it takes none."""

    def bind(self, options: Mapping[str, str]) -> AllocateStrategyFn:
        """The function to call for a consumer configured with ``options``.

        :raises ValueError: for options this strategy does not take, naming them.
        """
        if self.configure is not None:
            return self.configure(options)
        if options:
            raise ValueError(f"allocate strategy {self.name!r} takes no options, got {sorted(options)}")
        return self.allocate


@attrs.frozen
class ServiceSpec:
    """A long-running task a plugin contributes, started in ``phase``.

    ``make(runtime)`` returns an object with ``async run(*, task_status)``; it may also have
    ``async drain()``, awaited (with the graceful deadline) before the phase is cancelled.
    ``roles`` limits the service to processes hosting those roles (``"broker"``, ``"namesrv"``).
    """

    name: str
    phase: Phase
    make: Callable[[BrokerRuntime], Service]
    roles: frozenset[str] = frozenset({"broker"})


def flatten(results: Iterable[Iterable[Any] | None]) -> list[Any]:
    """Flatten the per-plugin lists a ``register_*`` hook returns (``None`` entries skipped)."""
    out: list[Any] = []
    for result in results:
        if result is not None:
            out.extend(result)
    return out
