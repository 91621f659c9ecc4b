"""Subscription groups (``config/subscriptionGroup.json``): per-group consume settings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs

from kernel.persist import JsonStateFile, read_json_with_backup
from plugins.remoting.topics import DataVersion


@attrs.define
class SubscriptionGroupConfig:
    group_name: str
    consume_enable: bool = True
    consume_from_min_enable: bool = True
    consume_broadcast_enable: bool = True
    retry_queue_nums: int = 1
    retry_max_times: int = 16
    broker_id: int = 0
    which_broker_when_consume_slowly: int = 1
    notify_consumer_ids_changed_enable: bool = True
    consume_message_orderly: bool = False
    """RocketMQ 5: the group consumes FIFO (its POP receives are orderly: a message group's next
    message waits until the previous one is acked or its invisible time passes)."""

    _FIELDS = {
        "groupName": "group_name",
        "consumeEnable": "consume_enable",
        "consumeFromMinEnable": "consume_from_min_enable",
        "consumeBroadcastEnable": "consume_broadcast_enable",
        "retryQueueNums": "retry_queue_nums",
        "retryMaxTimes": "retry_max_times",
        "brokerId": "broker_id",
        "whichBrokerWhenConsumeSlowly": "which_broker_when_consume_slowly",
        "notifyConsumerIdsChangedEnable": "notify_consumer_ids_changed_enable",
        "consumeMessageOrderly": "consume_message_orderly",
    }

    def to_json(self) -> dict[str, Any]:
        return {key: getattr(self, attr) for key, attr in self._FIELDS.items()}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SubscriptionGroupConfig:
        config = cls(str(data["groupName"]))
        for key, attr in cls._FIELDS.items():
            if key in data and key != "groupName":
                default = getattr(config, attr)
                value = data[key]
                if isinstance(default, bool):
                    value = value if isinstance(value, bool) else str(value).lower() in ("true", "1")
                else:
                    value = int(value)
                setattr(config, attr, value)
        return config


@attrs.define(eq=False)
class SubscriptionGroupManager:
    path: Path
    groups: dict[str, SubscriptionGroupConfig] = attrs.field(factory=dict)
    version: DataVersion = attrs.field(factory=DataVersion)
    _file: JsonStateFile = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self._file = JsonStateFile(self.path)

    @classmethod
    def load(cls, path: Path) -> SubscriptionGroupManager:
        data = read_json_with_backup(path) or {}
        manager = cls(path)
        for name, item in (data.get("subscriptionGroupTable") or {}).items():
            manager.groups[name] = SubscriptionGroupConfig.from_json({"groupName": name, **item})
        return manager

    def get(self, group: str) -> SubscriptionGroupConfig | None:
        return self.groups.get(group)

    def find_or_create(self, group: str, *, auto_create: bool) -> SubscriptionGroupConfig | None:
        config = self.groups.get(group)
        if config is None and auto_create:
            config = SubscriptionGroupConfig(group)
            self.update(config)
        return config

    def update(self, config: SubscriptionGroupConfig) -> None:
        self.groups[config.group_name] = config
        self.version.bump()

    def delete(self, group: str) -> bool:
        if self.groups.pop(group, None) is None:
            return False
        self.version.bump()
        return True

    def snapshot(self) -> dict[str, Any]:
        return {
            "dataVersion": self.version.to_json(),
            "subscriptionGroupTable": {name: g.to_json() for name, g in sorted(self.groups.items())},
        }

    async def persist(self) -> None:
        await self._file.write_latest(self.snapshot)
