"""What the controller keeps per broker set, as stored in etcd, and how it picks a master.

One :class:`ReplicaSet` per ``brokerName`` (RocketMQ's ``SyncStateInfo`` and
``BrokerReplicaInfo`` in one JSON value), changed only by compare-and-swap on its etcd
revision; one :class:`BrokerLive` per replica, under the replica's etcd lease, so it vanishes
when the replica stops heartbeating.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import attrs
import orjson


@attrs.frozen
class Replica:
    """A replica the controller has seen register."""

    address: str
    """Its broker address (``host:listenPort``)."""
    ha_address: str
    """Where it listens for slaves when it is master (``haServerAddr``)."""


@attrs.frozen
class ReplicaSet:
    """One broker set (one ``brokerName``): its replicas, master, epochs and SyncStateSet."""

    cluster: str
    broker_name: str
    replicas: Mapping[int, Replica] = attrs.field(factory=dict)
    master_id: int | None = None
    master_epoch: int = 0
    """Raised by one at every election; a replica's epoch file records where each began."""
    sync_state_set: frozenset[int] = frozenset()
    """Replicas holding every confirmed message: only they may be elected (unless unclean)."""
    sync_state_set_epoch: int = 0

    @property
    def master_address(self) -> str:
        replica = self.replicas.get(self.master_id) if self.master_id is not None else None
        return replica.address if replica is not None else ""

    def to_json(self) -> bytes:
        return orjson.dumps(
            {
                "clusterName": self.cluster,
                "brokerName": self.broker_name,
                "replicas": {
                    str(i): {"address": r.address, "haAddress": r.ha_address}
                    for i, r in self.replicas.items()
                },
                "masterBrokerId": self.master_id,
                "masterEpoch": self.master_epoch,
                "syncStateSet": sorted(self.sync_state_set),
                "syncStateSetEpoch": self.sync_state_set_epoch,
            }
        )

    @classmethod
    def from_json(cls, data: bytes) -> ReplicaSet:
        raw: dict[str, Any] = orjson.loads(data)
        return cls(
            raw["clusterName"],
            raw["brokerName"],
            {int(i): Replica(r["address"], r.get("haAddress", "")) for i, r in raw["replicas"].items()},
            raw.get("masterBrokerId"),
            int(raw.get("masterEpoch", 0)),
            frozenset(int(i) for i in raw.get("syncStateSet", ())),
            int(raw.get("syncStateSetEpoch", 0)),
        )


@attrs.frozen
class BrokerLive:
    """A replica's last heartbeat (RocketMQ's ``BrokerLiveInfo``), kept under its lease."""

    broker_id: int
    address: str
    epoch: int = 0
    """The last master epoch in its epoch file."""
    max_offset: int = 0
    confirm_offset: int = 0
    election_priority: int = 0
    """Lower is preferred among equally up-to-date candidates (``electionPriority``)."""
    async_learner: bool = False
    """An async learner is never elected (``asyncLearner``)."""

    def to_json(self) -> bytes:
        return orjson.dumps(attrs.asdict(self))

    @classmethod
    def from_json(cls, data: bytes) -> BrokerLive:
        raw = orjson.loads(data)
        return cls(**{f.name: raw[f.name] for f in attrs.fields(cls) if f.name in raw})


@attrs.frozen
class Election:
    """A candidate, and whether it comes from outside the SyncStateSet (an unclean election)."""

    broker_id: int
    unclean: bool


def choose_master(
    replicas: ReplicaSet,
    alive: Mapping[int, BrokerLive],
    *,
    allow_unclean: bool,
    designated: int | None = None,
    exclude: Iterable[int] = (),
) -> Election | None:
    """The replica to elect, or None when no alive replica may be.

    Candidates are alive members of the SyncStateSet (every one of them holds every confirmed
    message); among them the most up to date by (epoch, max offset) wins, then the lowest
    ``electionPriority``, then the lowest id. A set that was never formed (a new broker set)
    admits every alive replica. Async learners are never candidates. Outside the set only with
    ``allow_unclean`` (``enableElectUncleanMaster``): that replica may lack confirmed messages.
    """
    excluded = set(exclude)
    living = {
        i: live
        for i, live in alive.items()
        if i in replicas.replicas and i not in excluded and not live.async_learner
    }
    in_set = replicas.sync_state_set or frozenset(replicas.replicas)
    if designated is not None:
        if designated not in living:
            return None
        if designated in in_set:
            return Election(designated, False)
        return Election(designated, True) if allow_unclean else None

    def rank(broker_id: int) -> tuple[int, int, int, int]:
        live = living[broker_id]
        return (-live.epoch, -live.max_offset, live.election_priority, broker_id)

    clean = sorted((i for i in living if i in in_set), key=rank)
    if clean:
        return Election(clean[0], False)
    if allow_unclean and living:
        return Election(sorted(living, key=rank)[0], True)
    return None
