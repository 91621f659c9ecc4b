"""The NameServer's routing state (RocketMQ's ``RouteInfoManager``), free of I/O.

Brokers register their topic configuration; clients ask for a topic's route. Topic queue data
is taken only from masters (broker id 0), and only when the registration's data version
changed, so a ``wipeWritePerm`` stays in force until the broker's topics really change.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

MASTER_ID = 0
PERM_WRITE = 2


@attrs.define
class QueueData:
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = 0

    def to_json(self, broker_name: str) -> dict[str, Any]:
        return {
            "brokerName": broker_name,
            "perm": self.perm,
            "readQueueNums": self.read_queue_nums,
            "topicSysFlag": self.topic_sys_flag,
            "writeQueueNums": self.write_queue_nums,
        }


@attrs.define
class BrokerData:
    cluster: str
    broker_name: str
    addrs: dict[int, str] = attrs.field(factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "brokerAddrs": {str(k): v for k, v in sorted(self.addrs.items())},
            "brokerName": self.broker_name,
            "cluster": self.cluster,
        }


@attrs.define
class LiveBroker:
    last_update: float
    data_version: Mapping[str, Any]
    ha_server_addr: str
    channel: object | None


@attrs.frozen
class Registration:
    cluster: str
    broker_addr: str
    broker_name: str
    broker_id: int
    ha_server_addr: str
    data_version: Mapping[str, Any]
    topic_configs: Mapping[str, Mapping[str, Any]]
    channel: object | None = None


def _state_version(version: Mapping[str, Any]) -> int:
    try:
        return int(version.get("stateVersion", 0) or 0)
    except (TypeError, ValueError):
        return 0


@attrs.define
class RouteTable:
    clusters: dict[str, set[str]] = attrs.field(factory=dict)
    brokers: dict[str, BrokerData] = attrs.field(factory=dict)
    topics: dict[str, dict[str, QueueData]] = attrs.field(factory=dict)
    live: dict[str, LiveBroker] = attrs.field(factory=dict)

    def stale_master(self, reg: Registration) -> str:
        """The live master address that outranks ``reg`` as brokerId 0 ("" when none does): a
        different address whose ``stateVersion`` (its controller master epoch) is higher. A
        deposed master still reaching this NameServer would otherwise take the route back at
        every registration, and clients would flap between two masters (RocketMQ refuses it
        the same way)."""
        if reg.broker_id != MASTER_ID:
            return ""
        data = self.brokers.get(reg.broker_name)
        current = data.addrs.get(MASTER_ID, "") if data is not None else ""
        live = self.live.get(current) if current and current != reg.broker_addr else None
        if live is None:
            return ""
        if _state_version(live.data_version) > _state_version(reg.data_version):
            return current
        return ""

    def register(self, reg: Registration, now: float) -> tuple[str, str]:
        """Record a registration; returns (master address, master HA address) for slaves.
        A master registration that :meth:`stale_master` outranks changes nothing and drops the
        address from the live table."""
        if self.stale_master(reg):
            self.live.pop(reg.broker_addr, None)
            return "", ""
        self.clusters.setdefault(reg.cluster, set()).add(reg.broker_name)
        data = self.brokers.setdefault(reg.broker_name, BrokerData(reg.cluster, reg.broker_name))
        # One address per id: a broker that moved its id removes the old mapping.
        for broker_id, addr in list(data.addrs.items()):
            if addr == reg.broker_addr and broker_id != reg.broker_id:
                del data.addrs[broker_id]
        first = data.addrs.get(reg.broker_id) != reg.broker_addr
        data.addrs[reg.broker_id] = reg.broker_addr
        previous = self.live.get(reg.broker_addr)
        changed = previous is None or first or previous.data_version != reg.data_version
        if reg.broker_id == MASTER_ID and changed:
            self._replace_topics(reg.broker_name, reg.topic_configs)
        self.live[reg.broker_addr] = LiveBroker(now, dict(reg.data_version), reg.ha_server_addr, reg.channel)
        if reg.broker_id == MASTER_ID:
            return "", ""
        master = data.addrs.get(MASTER_ID, "")
        master_live = self.live.get(master)
        return master, master_live.ha_server_addr if master_live else ""

    def _replace_topics(self, broker_name: str, configs: Mapping[str, Mapping[str, Any]]) -> None:
        for topic in list(self.topics):
            if topic not in configs:
                self._remove_queue(topic, broker_name)
        for topic, config in configs.items():
            self.topics.setdefault(topic, {})[broker_name] = QueueData(
                int(config.get("readQueueNums", 0)),
                int(config.get("writeQueueNums", 0)),
                int(config.get("perm", 6)),
                int(config.get("topicSysFlag", 0)),
            )

    def _remove_queue(self, topic: str, broker_name: str) -> None:
        queues = self.topics.get(topic)
        if queues is not None:
            queues.pop(broker_name, None)
            if not queues:
                del self.topics[topic]

    def data_version_changed(self, broker_addr: str, version: Mapping[str, Any], now: float) -> bool:
        """QUERY_DATA_VERSION: refreshes the broker's liveness, says whether it must re-register."""
        live = self.live.get(broker_addr)
        if live is None:
            return True
        live.last_update = now
        return dict(live.data_version) != dict(version)

    def unregister(self, cluster: str, broker_addr: str, broker_name: str, broker_id: int) -> None:
        self.live.pop(broker_addr, None)
        data = self.brokers.get(broker_name)
        if data is not None and data.addrs.get(broker_id) == broker_addr:
            del data.addrs[broker_id]
            if not data.addrs:
                del self.brokers[broker_name]
                names = self.clusters.get(cluster)
                if names is not None:
                    names.discard(broker_name)
                    if not names:
                        del self.clusters[cluster]
                for topic in list(self.topics):
                    self._remove_queue(topic, broker_name)

    def _unregister_addr(self, broker_addr: str) -> None:
        for data in list(self.brokers.values()):
            for broker_id, addr in list(data.addrs.items()):
                if addr == broker_addr:
                    self.unregister(data.cluster, addr, data.broker_name, broker_id)
        self.live.pop(broker_addr, None)

    def expire(self, now: float, expiry: float) -> list[str]:
        """Drop brokers silent for longer than ``expiry``; returns their addresses."""
        gone = [addr for addr, live in self.live.items() if now - live.last_update > expiry]
        for addr in gone:
            self._unregister_addr(addr)
        return gone

    def channel_closed(self, channel: object) -> list[str]:
        """Drop brokers whose registering connection closed."""
        gone = [addr for addr, live in self.live.items() if live.channel is channel]
        for addr in gone:
            self._unregister_addr(addr)
        return gone

    def route(self, topic: str) -> dict[str, Any] | None:
        """TopicRouteData, or ``None`` when no live broker serves the topic."""
        queues = self.topics.get(topic)
        if not queues:
            return None
        broker_datas = [self.brokers[name].to_json() for name in sorted(queues) if name in self.brokers]
        if not broker_datas:
            return None
        return {
            "brokerDatas": broker_datas,
            "filterServerTable": {},
            "queueDatas": [queues[name].to_json(name) for name in sorted(queues)],
        }

    def cluster_info(self) -> dict[str, Any]:
        return {
            "brokerAddrTable": {name: data.to_json() for name, data in sorted(self.brokers.items())},
            "clusterAddrTable": {cluster: sorted(names) for cluster, names in sorted(self.clusters.items())},
        }

    def topic_list(self) -> list[str]:
        return sorted(self.topics)

    def delete_topic(self, topic: str) -> bool:
        return self.topics.pop(topic, None) is not None

    def set_write_perm(self, broker_name: str, writable: bool) -> int:
        """Wipe or add the WRITE bit on every topic of ``broker_name``; returns topics touched."""
        count = 0
        for queues in self.topics.values():
            queue = queues.get(broker_name)
            if queue is not None:
                queue.perm = queue.perm | PERM_WRITE if writable else queue.perm & ~PERM_WRITE
                count += 1
        return count
