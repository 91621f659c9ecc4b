"""Well-known names of RocketMQ's formats: reserved message properties, system topics, sysFlag
bits, broker roles. The wire and disk formats use them; every floor imports them from here."""

from __future__ import annotations

import enum

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
