"""Topic configurations of one broker (``config/topics.json``) and auto-creation rules."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import attrs
import trio

from kernel.model import SCHEDULE_TOPIC as SCHEDULE_TOPIC  # re-exported: one name everywhere
from kernel.model import TIMER_TOPIC
from kernel.persist import JsonStateFile, read_json_with_backup
from wire.names import DLQ_PREFIX as DLQ_PREFIX  # re-exported, as the names below
from wire.names import RETRY_PREFIX as RETRY_PREFIX
from wire.names import topic_problem as topic_problem

PERM_PRIORITY, PERM_READ, PERM_WRITE, PERM_INHERIT = 8, 4, 2, 1
DEFAULT_TOPIC = "TBW102"


def perm_to_string(perm: int) -> str:
    return (
        ("R" if perm & PERM_READ else "-")
        + ("W" if perm & PERM_WRITE else "-")
        + ("X" if perm & PERM_INHERIT else "-")
    )


@attrs.define
class TopicConfig:
    topic_name: str
    read_queue_nums: int = 4
    write_queue_nums: int = 4
    perm: int = PERM_READ | PERM_WRITE
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int = 0
    order: bool = False
    attributes: dict[str, str] = attrs.field(factory=dict)
    """RocketMQ 5's topic attributes (``message.type``: which message types the topic takes)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "attributes": dict(sorted(self.attributes.items())),
            "order": self.order,
            "perm": self.perm,
            "readQueueNums": self.read_queue_nums,
            "topicFilterType": self.topic_filter_type,
            "topicName": self.topic_name,
            "topicSysFlag": self.topic_sys_flag,
            "writeQueueNums": self.write_queue_nums,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TopicConfig:
        return cls(
            str(data["topicName"]),
            int(data.get("readQueueNums", 4)),
            int(data.get("writeQueueNums", 4)),
            int(data.get("perm", 6)),
            str(data.get("topicFilterType", "SINGLE_TAG")),
            int(data.get("topicSysFlag", 0)),
            bool(data.get("order", False)),
            {str(k): str(v) for k, v in (data.get("attributes") or {}).items()},
        )


TOPIC_ATTRIBUTES = {"message.type": frozenset({"NORMAL", "FIFO", "DELAY", "TRANSACTION", "MIXED"})}
"""The attributes a topic may carry and their values (RocketMQ 5's ``TopicAttributes``)."""


def apply_attributes(current: dict[str, str], text: str) -> dict[str, str]:
    """RocketMQ's attribute text (``+key=value,-key``) applied to ``current``.

    :raises ValueError: an unknown key or value, or text that is not in that form.
    """
    out = dict(current)
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        if item.startswith("-"):
            out.pop(item[1:], None)
            continue
        key, sep, value = item[1:].partition("=") if item.startswith("+") else ("", "", "")
        if not sep:
            raise ValueError(f"attribute {item!r} is neither +key=value nor -key")
        allowed = TOPIC_ATTRIBUTES.get(key)
        if allowed is None:
            raise ValueError(f"unknown topic attribute {key!r}; known: {sorted(TOPIC_ATTRIBUTES)}")
        if value.upper() not in allowed:
            raise ValueError(f"attribute {key} takes one of {sorted(allowed)}, not {value!r}")
        out[key] = value.upper()
    return out


@attrs.define
class DataVersion:
    """Bumped on every change; the NameServer re-reads topics only when it moves.

    ``state_version`` is the controller's master epoch of a controller-mode master (RocketMQ's
    ``stateVersion``): a NameServer keeps the master registration of the highest one, so a
    deposed master that still reaches it cannot take the route back."""

    counter: int = 0
    timestamp: int = attrs.field(factory=lambda: int(time.time() * 1000))
    state_version: int = 0

    def bump(self) -> None:
        self.counter += 1
        self.timestamp = int(time.time() * 1000)

    def next_state(self, state_version: int) -> None:
        """A new master epoch: bumped, so the NameServer re-reads this broker's topics too."""
        self.state_version = state_version
        self.bump()

    def to_json(self) -> dict[str, int]:
        return {"counter": self.counter, "stateVersion": self.state_version, "timestamp": self.timestamp}


@attrs.define(eq=False)
class TopicConfigManager:
    path: Path
    topics: dict[str, TopicConfig] = attrs.field(factory=dict)
    version: DataVersion = attrs.field(factory=DataVersion)
    changed: trio.Event = attrs.field(factory=trio.Event)
    """Set when topics change, so the registration loop re-registers at once."""
    _file: JsonStateFile = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self._file = JsonStateFile(self.path)

    @classmethod
    def load(
        cls, path: Path, *, cluster: str, broker_name: str, auto_create: bool, trace_topic: str | None = None
    ) -> TopicConfigManager:
        """The topics of ``path`` plus the broker's own: the system topics, ``TBW102`` with
        ``auto_create``, and ``trace_topic`` (``traceTopicEnable``: one queue, as RocketMQ)."""
        data = read_json_with_backup(path) or {}
        manager = cls(path)
        for name, item in (data.get("topicConfigTable") or {}).items():
            manager.topics[name] = TopicConfig.from_json({"topicName": name, **item})
        version = data.get("dataVersion") or {}
        manager.version = DataVersion(
            int(version.get("counter", 0)),
            int(version.get("timestamp", 0)),
            int(version.get("stateVersion", 0)),
        )
        system = [
            TopicConfig(SCHEDULE_TOPIC, 18, 18, PERM_READ | PERM_WRITE),
            TopicConfig(TIMER_TOPIC, 1, 1, PERM_READ | PERM_WRITE),
            TopicConfig(cluster, 16, 16, PERM_READ | PERM_WRITE),
            TopicConfig(broker_name, 1, 1, PERM_READ | PERM_WRITE | PERM_INHERIT),
            TopicConfig("OFFSET_MOVED_EVENT", 1, 1, PERM_READ | PERM_WRITE),
        ]
        if trace_topic:
            system.append(TopicConfig(trace_topic, 1, 1, PERM_READ | PERM_WRITE))
        if auto_create:
            system.append(TopicConfig(DEFAULT_TOPIC, 8, 8, PERM_READ | PERM_WRITE | PERM_INHERIT))
        else:
            manager.topics.pop(DEFAULT_TOPIC, None)
        for config in system:
            manager.topics.setdefault(config.topic_name, config)
        return manager

    def get(self, topic: str) -> TopicConfig | None:
        return self.topics.get(topic)

    def update(self, config: TopicConfig) -> None:
        self.topics[config.topic_name] = config
        self._changed()

    def delete(self, topic: str) -> bool:
        if self.topics.pop(topic, None) is None:
            return False
        self._changed()
        return True

    def create_from_default(self, topic: str, default_topic: str, queue_nums: int) -> TopicConfig | None:
        """Auto-create ``topic`` for a send naming ``default_topic`` (RocketMQ's
        ``createTopicInSendMessageMethod``): only if the default topic exists and inherits."""
        template = self.topics.get(default_topic)
        if template is None or not template.perm & PERM_INHERIT:
            return None
        queues = max(1, min(queue_nums, template.write_queue_nums))
        config = TopicConfig(topic, queues, queues, template.perm & ~PERM_INHERIT)
        self.update(config)
        return config

    def create_system_topic(
        self, topic: str, queue_nums: int, perm: int = PERM_READ | PERM_WRITE
    ) -> TopicConfig:
        """Retry and dead-letter topics, created on demand."""
        config = self.topics.get(topic)
        if config is None:
            config = TopicConfig(topic, queue_nums, queue_nums, perm)
            self.update(config)
        return config

    def _changed(self) -> None:
        self.version.bump()
        self.changed.set()
        self.changed = trio.Event()

    def snapshot(self) -> dict[str, Any]:
        return {
            "dataVersion": self.version.to_json(),
            "topicConfigTable": {name: config.to_json() for name, config in sorted(self.topics.items())},
        }

    async def persist(self) -> None:
        await self._file.write_latest(self.snapshot)
