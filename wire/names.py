"""Well-known names of RocketMQ's formats: reserved message properties, system topics, sysFlag
bits, broker roles. The wire and disk formats use them; every floor imports them from here."""

from __future__ import annotations

import enum
import functools
import re

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


class BrokerRole(enum.Enum):
    """RocketMQ's ``brokerRole``."""

    ASYNC_MASTER = "ASYNC_MASTER"
    SYNC_MASTER = "SYNC_MASTER"
    SLAVE = "SLAVE"


# Topic and group names (RocketMQ's ``TopicValidator`` and ``Validators.checkGroup``).
RETRY_PREFIX = "%RETRY%"
"""A consumer group's retry topic is ``%RETRY%<group>``."""
DLQ_PREFIX = "%DLQ%"
"""A consumer group's dead-letter topic is ``%DLQ%<group>``."""
TOPIC_MAX_LENGTH = 127
"""RocketMQ's topic limit, which is also what the v1 record's one-byte topic length holds."""
GROUP_MAX_LENGTH = TOPIC_MAX_LENGTH - len(RETRY_PREFIX)
"""120: RocketMQ allows 255, but a group's ``%RETRY%`` and ``%DLQ%`` topics must still be
topics, and a longer group would make a retry topic no record can carry."""
_VALID_NAME = re.compile(r"[%|a-zA-Z0-9_-]+")
"""RocketMQ's allowed characters. Names become directory names (``consumequeue/<topic>/``) and
keys of JSON files: with no ``/`` and no ``.`` a valid name can never leave the store's root."""
_SHOWN_NAME_CHARS = 48
"""An invalid name is quoted in an error up to this many characters (a client may send 64 KiB)."""


def shown_name(name: str) -> str:
    """``name`` quoted for an error message or a log line (repr: control characters shown, not
    written), cut to a readable length."""
    if len(name) <= _SHOWN_NAME_CHARS:
        return repr(name)
    return f"{name[:_SHOWN_NAME_CHARS]!r}... ({len(name)} characters)"


def topic_problem(topic: object) -> str | None:
    """Why ``topic`` is not a valid topic name (RocketMQ's ``Validators.checkTopic``), or ``None``."""
    return _name_problem("topic", topic, TOPIC_MAX_LENGTH)


def group_problem(group: object) -> str | None:
    """Why ``group`` is not a valid producer or consumer group name (RocketMQ's
    ``Validators.checkGroup``, with :data:`GROUP_MAX_LENGTH`), or ``None``."""
    return _name_problem("group", group, GROUP_MAX_LENGTH)


def _name_problem(kind: str, name: object, max_length: int) -> str | None:
    if not isinstance(name, str):
        return f"the {kind} must be a string, got {type(name).__name__}"
    return _string_name_problem(kind, name, max_length)


@functools.lru_cache(maxsize=8192)
def _string_name_problem(kind: str, name: str, max_length: int) -> str | None:
    """Cached: the put path checks each batch's topic and the remoting ingress each request's
    group, for the same few names."""
    if not name:
        return f"the {kind} is empty"
    if len(name) > max_length:
        return f"the {kind} {shown_name(name)} is longer than {max_length} characters"
    if _VALID_NAME.fullmatch(name) is None:
        return f"the {kind} {shown_name(name)} contains characters outside [%|a-zA-Z0-9_-]"
    return None


BROKER_NAME_MAX_LENGTH = 127
_VALID_BROKER_NAME = re.compile(r"[a-zA-Z0-9_.-]+")
"""Letters, digits, ``_``, ``-`` and ``.`` (host names): a broker name is a key segment of the
controller's state in etcd, where a ``/`` would make it a prefix of another set's keys."""


def broker_name_problem(name: object) -> str | None:
    """Why ``name`` is not a valid broker (set) name, or ``None``."""
    if not isinstance(name, str):
        return f"the broker name must be a string, got {type(name).__name__}"
    if not name:
        return "the broker name is empty"
    if len(name) > BROKER_NAME_MAX_LENGTH:
        return f"the broker name {shown_name(name)} is longer than {BROKER_NAME_MAX_LENGTH} characters"
    if _VALID_BROKER_NAME.fullmatch(name) is None:
        return f"the broker name {shown_name(name)} contains characters outside [a-zA-Z0-9_.-]"
    return None


SEND_FORBIDDEN_TOPICS = frozenset(
    {
        "TBW102",
        SCHEDULE_TOPIC,
        TIMER_TOPIC,
        TRANSACTION_HALF_TOPIC,
        "RMQ_SYS_TRANS_OP_HALF_TOPIC",
        "TRANS_CHECK_MAX_TIME_TOPIC",
        "SELF_TEST_TOPIC",
        "OFFSET_MOVED_EVENT",
        "CHECKPOINT_TOPIC",
    }
)
"""Topics only the broker writes (RocketMQ's ``TopicValidator`` system and not-allowed-send sets):
a client message there would be taken for a parked, half or bookkeeping record."""
_SEND_FORBIDDEN_PREFIXES = ("rmq_sys_", "RMQ_SYS_", DLQ_PREFIX)
_SEND_ALLOWED_SYSTEM_TOPICS = frozenset({"RMQ_SYS_TRACE_TOPIC"})
"""Message traces are written by clients (RocketMQ's trace dispatcher), system name or not."""


def send_forbidden_topic(topic: str) -> str | None:
    """Why a client may not send to ``topic`` (a system topic), or ``None``.

    Retry topics stay writable: a consumer whose send-back failed republishes there itself.
    """
    if topic in _SEND_ALLOWED_SYSTEM_TOPICS:
        return None
    if topic in SEND_FORBIDDEN_TOPICS or topic.startswith(_SEND_FORBIDDEN_PREFIXES):
        return f"sending message to topic[{topic}] is forbidden: it is a system topic only the broker writes"
    return None
