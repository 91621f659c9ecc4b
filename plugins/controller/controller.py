"""The controller's decisions, each one etcd operation or a compare-and-swap loop.

The controller holds no state of its own: every broker set is one etcd key changed only by a
transaction that compares its ``mod_revision``, so any number of controllers may answer
requests at once and the loser of a race reads again and decides again. A replica is alive
while its key under ``alive/`` exists: the key is written with the replica's lease, which the
replica's heartbeats keep alive (through whichever controller it reaches) and etcd expires.

Keys, under ``[controller] etcd_prefix`` (default ``/trocket/controller``):

- ``replicas/<brokerName>``: the :class:`~plugins.controller.state.ReplicaSet` (JSON);
- ``alive/<brokerName>/<brokerId>``: the replica's :class:`~plugins.controller.state.BrokerLive`,
  under its lease (read by exact key shape: a set named ``a/b`` could otherwise pass for a
  replica of ``a``; names are also checked, :func:`wire.names.broker_name_problem`);
- ``leader``: the controller that scans for dead masters, under that controller's lease;
- ``members/<controllerId>``: every running controller, under its own lease.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

import attrs

from plugins.controller.etcd import Compare, EtcdClient, KeyValue, Put
from plugins.controller.state import BrokerLive, Replica, ReplicaSet, choose_master
from wire.remoting import ResponseCode

log = logging.getLogger(__name__)

CAS_ATTEMPTS = 16


class Refusal(Exception):
    """A request the controller refuses: a RocketMQ response code and a remark."""

    def __init__(self, code: int, remark: str) -> None:
        super().__init__(remark)
        self.code = code
        self.remark = remark


@attrs.define(eq=False)
class Controller:
    """See the module docstring."""

    etcd: EtcdClient
    prefix: str
    heartbeat_timeout: float
    """TTL of a replica's lease (``controllerHeartBeatTimeoutMills``)."""
    allow_unclean: bool = False
    """``enableElectUncleanMaster``."""
    max_broker_sets: int = 1024
    """Broker sets this controller registers at most (anyone who reaches the port may register)."""
    max_replicas: int = 16
    """Replicas one set holds at most."""
    elections: int = 0
    unclean_elections: int = 0
    """Elections that picked a replica outside the SyncStateSet (each may have lost messages)."""
    _leaderless: dict[str, str] = attrs.field(factory=dict, init=False)
    """Broker sets whose master is dead and that no replica may take over, with the reason
    last logged."""

    # --- keys -----------------------------------------------------------------------------

    def replicas_key(self, broker_name: str) -> str:
        return f"{self.prefix}/replicas/{broker_name}"

    def alive_prefix(self, broker_name: str) -> str:
        return f"{self.prefix}/alive/{broker_name}/"

    # --- reads ----------------------------------------------------------------------------

    async def replica_set(self, broker_name: str) -> tuple[ReplicaSet | None, int]:
        """The broker set and its etcd revision (0: none registered)."""
        found = await self.etcd.get(self.replicas_key(broker_name))
        if found is None:
            return None, 0
        return ReplicaSet.from_json(found.value), found.mod_revision

    async def all_replica_sets(self) -> list[ReplicaSet]:
        return [
            ReplicaSet.from_json(kv.value) for kv in await self.etcd.get_prefix(f"{self.prefix}/replicas/")
        ]

    async def alive(self, broker_name: str) -> dict[int, BrokerLive]:
        """The set's replicas whose lease holds, by id."""
        return self.all_alive(await self.etcd.get_prefix(self.alive_prefix(broker_name))).get(broker_name, {})

    def all_alive(self, found: Iterable[KeyValue]) -> dict[str, dict[int, BrokerLive]]:
        """Alive keys as broker name → id → live, taking only keys of the exact shape
        ``alive/<name>/<id>`` whose id matches the value's."""
        start = len(f"{self.prefix}/alive/")
        out: dict[str, dict[int, BrokerLive]] = {}
        for kv in found:
            name, slash, broker_id = kv.key[start:].partition("/")
            if not slash or not broker_id.isdigit() or "/" in broker_id:
                continue
            live = BrokerLive.from_json(kv.value)
            if live.broker_id == int(broker_id):
                out.setdefault(name, {})[live.broker_id] = live
        return out

    async def require(self, broker_name: str) -> ReplicaSet:
        replicas, _ = await self.replica_set(broker_name)
        if replicas is None:
            raise Refusal(
                ResponseCode.CONTROLLER_BROKER_METADATA_NOT_EXIST,
                f"broker set {broker_name!r} has never registered with a controller",
            )
        return replicas

    # --- changes --------------------------------------------------------------------------

    async def _change(
        self, broker_name: str, change: Callable[[ReplicaSet | None], ReplicaSet | None]
    ) -> ReplicaSet | None:
        """Apply ``change`` (None: leave it) to the stored set by compare-and-swap, reading again
        after every lost race. ``change`` may raise :class:`Refusal`."""
        key = self.replicas_key(broker_name)
        for _ in range(CAS_ATTEMPTS):
            current, revision = await self.replica_set(broker_name)
            changed = change(current)
            if changed is None or changed == current:
                return current
            if await self.etcd.txn([Compare(key, revision)], [Put(key, changed.to_json())]):
                return changed
        raise Refusal(ResponseCode.SYSTEM_ERROR, f"broker set {broker_name!r} kept changing; try again")

    async def register(
        self, cluster: str, broker_name: str, broker_id: int, address: str, ha_address: str, live: BrokerLive
    ) -> tuple[ReplicaSet, int]:
        """A replica starts (or its lease expired): a new lease, its alive key, its address in
        the set. A set without a live master elects one at once (the first replica of a new set
        becomes its master); its master registering again starts a new master epoch, keeping
        the SyncStateSet. Returns the set and the replica's lease."""
        if broker_id <= 0:
            raise Refusal(
                ResponseCode.CONTROLLER_INVALID_REQUEST,
                f"brokerId {broker_id}: replicas in controller mode have ids > 0 (0 is whichever is master)",
            )
        existing, _ = await self.replica_set(broker_name)
        if (
            existing is None
            and len(await self.etcd.get_prefix(f"{self.prefix}/replicas/")) >= self.max_broker_sets
        ):
            raise Refusal(
                ResponseCode.CONTROLLER_INVALID_REQUEST,
                f"this controller holds {self.max_broker_sets} broker sets already (max_broker_sets); "
                f"remove unused ones with cleanBrokerMetadata",
            )
        if (
            existing is not None
            and broker_id not in existing.replicas
            and len(existing.replicas) >= self.max_replicas
        ):
            raise Refusal(
                ResponseCode.CONTROLLER_INVALID_REQUEST,
                f"broker set {broker_name!r} holds {self.max_replicas} replicas already "
                "(max_replicas_per_set)",
            )
        lease = await self.etcd.grant(self.heartbeat_timeout)
        await self.etcd.put(f"{self.alive_prefix(broker_name)}{broker_id}", live.to_json(), lease=lease)
        replica = Replica(address, ha_address)

        def add(current: ReplicaSet | None) -> ReplicaSet:
            if current is None:
                current = ReplicaSet(cluster, broker_name)
            if current.master_id == broker_id:
                # The master registers again: a restarted process, or one whose lease ran out.
                # Its log may have lost a tail (a power cut) that a slave still holds, and only
                # a new epoch makes the slave compare histories and cut it (fault scenario S8:
                # a slave kept bytes the restarted master rewrote with other messages).
                current = attrs.evolve(current, master_epoch=current.master_epoch + 1)
            if current.replicas.get(broker_id) == replica:
                return current
            return attrs.evolve(current, replicas={**current.replicas, broker_id: replica})

        replicas = await self._change(broker_name, add)
        assert replicas is not None
        log.info("replica %r/%d registered from %r (lease %x)", broker_name, broker_id, address, lease)
        if replicas.master_id is None or replicas.master_id == broker_id:
            replicas = await self.elect_if_master_dead(broker_name)
        return replicas, lease

    async def heartbeat(self, broker_name: str, lease: int, live: BrokerLive) -> tuple[ReplicaSet, float]:
        """Renew a replica's lease and record its offsets; the set as it stands and the TTL the
        lease now has (from when etcd renewed it, after the replica sent the heartbeat).

        :raises Refusal: ``CONTROLLER_BROKER_NEED_TO_BE_REGISTERED`` when the lease expired.
        """
        ttl = await self.etcd.keep_alive(lease) if lease else 0
        if ttl <= 0:
            raise Refusal(
                ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
                f"replica {broker_name}/{live.broker_id}: its lease expired; register again",
            )
        await self.etcd.put(f"{self.alive_prefix(broker_name)}{live.broker_id}", live.to_json(), lease=lease)
        return await self.require(broker_name), float(ttl)

    async def alter_sync_state_set(
        self, broker_name: str, master_id: int, master_epoch: int, members: Iterable[int], set_epoch: int
    ) -> ReplicaSet:
        """The master's request to shrink or grow its SyncStateSet; refused unless it comes from
        the current master of the current epoch, on the current set's epoch, and names only
        registered replicas (the master among them)."""
        wanted = frozenset(members)
        alive = await self.alive(broker_name)

        def alter(current: ReplicaSet | None) -> ReplicaSet:
            if current is None:
                raise Refusal(
                    ResponseCode.CONTROLLER_BROKER_METADATA_NOT_EXIST, f"no broker set {broker_name!r}"
                )
            if master_epoch != current.master_epoch:
                raise Refusal(
                    ResponseCode.CONTROLLER_FENCED_MASTER_EPOCH,
                    f"master epoch {master_epoch} is not the current {current.master_epoch}",
                )
            if master_id != current.master_id:
                raise Refusal(
                    ResponseCode.CONTROLLER_INVALID_MASTER,
                    f"broker {master_id} is not the master of {broker_name} ({current.master_id})",
                )
            if set_epoch != current.sync_state_set_epoch:
                raise Refusal(
                    ResponseCode.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH,
                    f"SyncStateSet epoch {set_epoch} is not the current {current.sync_state_set_epoch}",
                )
            unknown = sorted(wanted - set(current.replicas))
            if master_id not in wanted or unknown:
                raise Refusal(
                    ResponseCode.CONTROLLER_INVALID_REPLICAS,
                    f"SyncStateSet {sorted(wanted)} must hold the master and only registered replicas"
                    + (f" (unknown: {unknown})" if unknown else ""),
                )
            added_dead = sorted(i for i in wanted - current.sync_state_set if i not in alive)
            if added_dead:
                raise Refusal(
                    ResponseCode.CONTROLLER_INVALID_REPLICAS, f"replicas {added_dead} are not alive"
                )
            if wanted == current.sync_state_set:
                return current
            return attrs.evolve(current, sync_state_set=wanted, sync_state_set_epoch=set_epoch + 1)

        replicas = await self._change(broker_name, alter)
        assert replicas is not None
        log.info(
            "%s: SyncStateSet %s (epoch %d)",
            broker_name,
            sorted(replicas.sync_state_set),
            replicas.sync_state_set_epoch,
        )
        return replicas

    async def elect_if_master_dead(self, broker_name: str) -> ReplicaSet:
        """Elect a master when the set has none alive; the set unchanged otherwise (or when no
        replica may be elected: the caller sees ``master_id`` None or dead)."""
        try:
            replicas = await self.elect(broker_name, only_if_dead=True)
        except Refusal as refusal:
            if refusal.code != ResponseCode.CONTROLLER_MASTER_NOT_AVAILABLE:
                raise
            if self._leaderless.get(broker_name) != refusal.remark:  # once per situation, not per scan
                log.error("no live master: %s", refusal.remark)
            self._leaderless[broker_name] = refusal.remark
            return await self.require(broker_name)
        if self._leaderless.pop(broker_name, None) is not None:
            log.warning("%s has a master again: %s", broker_name, replicas.master_id)
        return replicas

    async def elect(
        self, broker_name: str, *, designated: int | None = None, only_if_dead: bool = False
    ) -> ReplicaSet:
        """RocketMQ's ``ELECT_MASTER``: a new master, a new master epoch, and a SyncStateSet of
        the new master alone (the others rejoin as they catch up).

        :raises Refusal: ``CONTROLLER_MASTER_STILL_EXIST`` (the master is alive and no replica was
            designated), ``CONTROLLER_MASTER_NOT_AVAILABLE`` (no replica may be elected).
        """
        alive = await self.alive(broker_name)
        outcome: dict[str, object] = {}

        def elect(current: ReplicaSet | None) -> ReplicaSet | None:
            if current is None:
                raise Refusal(
                    ResponseCode.CONTROLLER_BROKER_METADATA_NOT_EXIST, f"no broker set {broker_name!r}"
                )
            master_alive = current.master_id is not None and current.master_id in alive
            if master_alive and designated is None:
                if only_if_dead:
                    return None
                raise Refusal(
                    ResponseCode.CONTROLLER_MASTER_STILL_EXIST,
                    f"{broker_name}'s master {current.master_id} is alive; name a broker to move it",
                )
            if designated is not None and designated == current.master_id:
                return None
            choice = choose_master(current, alive, allow_unclean=self.allow_unclean, designated=designated)
            if choice is None:
                in_set = sorted(current.sync_state_set) or sorted(current.replicas)
                raise Refusal(
                    ResponseCode.CONTROLLER_MASTER_NOT_AVAILABLE,
                    f"{broker_name}: no replica can be master (SyncStateSet {in_set}, alive {sorted(alive)}"
                    + (f", designated {designated}" if designated is not None else "")
                    + ("; enableElectUncleanMaster is false" if not self.allow_unclean else "")
                    + ")",
                )
            outcome["choice"] = choice
            return attrs.evolve(
                current,
                master_id=choice.broker_id,
                master_epoch=current.master_epoch + 1,
                sync_state_set=frozenset({choice.broker_id}),
                sync_state_set_epoch=current.sync_state_set_epoch + 1,
            )

        replicas = await self._change(broker_name, elect)
        assert replicas is not None
        choice = outcome.get("choice")
        if choice is not None and replicas.master_id == choice.broker_id:  # type: ignore[attr-defined]
            self.elections += 1
            if choice.unclean:  # type: ignore[attr-defined]
                self.unclean_elections += 1
                log.warning(
                    "UNCLEAN election: %s's new master %d was not in the SyncStateSet; messages it "
                    "lacks are lost (enableElectUncleanMaster)",
                    broker_name,
                    replicas.master_id,
                )
            log.info(
                "%s: elected master %s at %s, epoch %d",
                broker_name,
                replicas.master_id,
                replicas.master_address,
                replicas.master_epoch,
            )
        return replicas

    async def scan(self) -> None:
        """Elect a master for every set whose master is gone (the leader's periodic job).

        Two range reads whatever the number of sets; only a set whose master is dead and that
        has a live replica costs more (a set with nobody alive has nobody to elect: it is
        logged once, by :meth:`elect_if_master_dead`, when it first goes so)."""
        alive = self.all_alive(await self.etcd.get_prefix(f"{self.prefix}/alive/"))
        for replicas in await self.all_replica_sets():
            living = alive.get(replicas.broker_name, {})
            if replicas.master_id is not None and replicas.master_id in living:
                continue
            if not living and replicas.broker_name in self._leaderless:
                continue
            try:
                await self.elect_if_master_dead(replicas.broker_name)
            except Refusal as refusal:
                log.warning("%r: %s", replicas.broker_name, refusal.remark)

    async def clean(
        self, broker_name: str, broker_ids: frozenset[int], *, clean_living: bool
    ) -> ReplicaSet | None:
        """RocketMQ 5's ``CLEAN_BROKER_DATA`` (mqadmin ``cleanBrokerMetadata``): forget replicas of
        a set, or the whole set when ``broker_ids`` is empty. Replicas whose lease still holds
        are kept unless ``clean_living``. Returns the set as it remains (None: removed).

        :raises Refusal: the set does not exist, or a replica to clean is alive.
        """
        alive = await self.alive(broker_name)
        outcome: dict[str, bool] = {}

        def forget(current: ReplicaSet | None) -> ReplicaSet | None:
            if current is None:
                raise Refusal(
                    ResponseCode.CONTROLLER_BROKER_METADATA_NOT_EXIST, f"no broker set {broker_name!r}"
                )
            doomed = broker_ids or frozenset(current.replicas)
            living = sorted(doomed & set(alive))
            if living and not clean_living:
                raise Refusal(
                    ResponseCode.CONTROLLER_INVALID_REQUEST,
                    f"replicas {living} of {broker_name!r} are alive; stop them first or pass "
                    "--cleanLivingBroker",
                )
            outcome["whole"] = doomed >= set(current.replicas)
            return attrs.evolve(
                current,
                replicas={i: r for i, r in current.replicas.items() if i not in doomed},
                master_id=None if current.master_id in doomed else current.master_id,
                sync_state_set=current.sync_state_set - doomed,
            )

        remaining = await self._change(broker_name, forget)
        doomed_ids = broker_ids or frozenset(alive)
        for broker_id in doomed_ids:
            await self.etcd.delete(f"{self.alive_prefix(broker_name)}{broker_id}")
        if outcome.get("whole"):
            await self.etcd.delete(self.replicas_key(broker_name))
            self._leaderless.pop(broker_name, None)
            log.warning("broker set %r removed (cleanBrokerMetadata)", broker_name)
            return None
        log.warning(
            "replicas %s of broker set %r removed (cleanBrokerMetadata)", sorted(broker_ids), broker_name
        )
        return remaining
