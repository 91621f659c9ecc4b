"""The controller service: RocketMQ 5's controller requests on its own port, turned into etcd
operations by :class:`~plugins.controller.controller.Controller`, and the leader's scan.

Every controller answers every request (their state is etcd's); one of them, the holder of the
``leader`` key, also scans for broker sets whose master's lease is gone and elects a new one.
A controller that cannot reach etcd answers ``SYSTEM_ERROR`` with the reason and elects nothing:
brokers keep the master they have.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

import attrs
import orjson
import trio

from kernel.context import BrokerRuntime
from kernel.model import flatten
from kernel.tls_config import server_tls
from plugins.controller.config import ControllerConfig
from plugins.controller.controller import Controller, Refusal
from plugins.controller.etcd import Compare, EtcdClient, EtcdError, EtcdUnavailable, Put
from plugins.controller.state import BrokerLive, ReplicaSet
from wire.names import broker_name_problem, shown_name
from wire.remoting import (
    Connection,
    RemotingCommand,
    RemotingServer,
    RequestCode,
    ResponseCode,
    Router,
    TransportLimits,
    parse_bool,
)
from wire.remoting.connection import Guard

log = logging.getLogger(__name__)


def replica_info_ext(replicas: ReplicaSet) -> dict[str, object]:
    """The header fields RocketMQ's register, heartbeat and replica-info answers carry."""
    return {
        "masterBrokerId": replicas.master_id if replicas.master_id is not None else "",
        "masterAddress": replicas.master_address,
        "masterEpoch": replicas.master_epoch,
        "syncStateSetEpoch": replicas.sync_state_set_epoch,
        "masterHaAddress": (
            replicas.replicas[replicas.master_id].ha_address
            if replicas.master_id in replicas.replicas
            else ""
        ),
    }


def sync_state_set_body(replicas: ReplicaSet) -> bytes:
    return orjson.dumps(
        {"syncStateSet": sorted(replicas.sync_state_set), "syncStateSetEpoch": replicas.sync_state_set_epoch}
    )


LONG_MIN, LONG_MAX = -(1 << 63), (1 << 63) - 1
"""Ids, epochs and offsets are Java longs in RocketMQ's headers."""


def _int(ext: dict[str, str], key: str, default: int | None = None) -> int:
    value = ext.get(key, "")
    if value in ("", "null"):
        if default is None:
            raise Refusal(ResponseCode.CONTROLLER_INVALID_REQUEST, f"header field {key} is missing")
        return default
    try:
        number = int(value)
    except ValueError:
        raise Refusal(
            ResponseCode.CONTROLLER_INVALID_REQUEST, f"header field {key}={shown_name(value)} is not a number"
        ) from None
    if not LONG_MIN <= number <= LONG_MAX:
        raise Refusal(
            ResponseCode.CONTROLLER_INVALID_REQUEST, f"header field {key}={shown_name(value)} is not a long"
        )
    return number


def _broker_name(ext: dict[str, str]) -> str:
    name = _text(ext, "brokerName")
    problem = broker_name_problem(name)
    if problem:
        raise Refusal(ResponseCode.CONTROLLER_INVALID_REQUEST, problem)
    return name


def _text(ext: dict[str, str], key: str) -> str:
    value = ext.get(key, "")
    if not value:
        raise Refusal(ResponseCode.CONTROLLER_INVALID_REQUEST, f"header field {key} is missing")
    return value


@attrs.define(eq=False)
class ControllerService:
    """See the module docstring; one per process that hosts a controller."""

    config: ControllerConfig
    etcd: EtcdClient
    controller: Controller
    controller_id: str = attrs.field(factory=lambda: uuid.uuid4().hex[:12])
    server: RemotingServer | None = None
    is_leader: bool = False
    lease: int = 0
    etcd_reachable: bool = True
    tls: Any = None
    guards: list[Guard] = attrs.field(factory=list)
    """Request guards of this process's plugins (the acl plugin: every request signed and, for
    elections and cleanups, by an admin account), as on the broker's port."""

    @classmethod
    def make(cls, runtime: BrokerRuntime) -> ControllerService:
        config = runtime.ctx.plugin_config(ControllerConfig)
        etcd = EtcdClient(list(config.etcd_endpoints), timeout=config.etcd_timeout)
        controller = Controller(
            etcd,
            config.etcd_prefix.rstrip("/"),
            config.heartbeat_timeout,
            config.enable_elect_unclean_master,
            max_broker_sets=config.max_broker_sets,
            max_replicas=config.max_replicas_per_set,
        )
        ctx = runtime.ctx
        guards = [spec.check for spec in flatten(ctx.hook.trocket_register_request_guards(ctx=ctx))]
        return cls(config, etcd, controller, tls=server_tls(ctx.config), guards=guards)

    @property
    def address(self) -> str:
        assert self.server is not None, "not started"
        return self.server.address

    def router(self) -> Router:
        router = Router(name="controller")
        for code, handler in {
            RequestCode.CONTROLLER_REGISTER_BROKER: self.register_broker,
            RequestCode.BROKER_HEARTBEAT: self.broker_heartbeat,
            RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET: self.alter_sync_state_set,
            RequestCode.CONTROLLER_ELECT_MASTER: self.elect_master,
            RequestCode.CONTROLLER_GET_REPLICA_INFO: self.get_replica_info,
            RequestCode.CONTROLLER_GET_SYNC_STATE_DATA: self.get_sync_state_data,
            RequestCode.CONTROLLER_GET_METADATA_INFO: self.get_metadata_info,
            RequestCode.CLEAN_BROKER_DATA: self.clean_broker_data,
        }.items():
            router.register(code, self._answering(handler))
        router.guards.extend(self.guards)
        return router

    @staticmethod
    def _answering(handler: Any) -> Any:
        """Turn refusals and etcd failures into RocketMQ responses with a remark."""

        async def answer(connection: Connection, request: RemotingCommand) -> RemotingCommand:
            try:
                response: RemotingCommand = await handler(request)
                return response
            except Refusal as refusal:
                return request.response(refusal.code, remark=refusal.remark)
            except (EtcdUnavailable, EtcdError) as error:
                return request.response(
                    ResponseCode.SYSTEM_ERROR, remark=f"controller cannot use etcd: {error}"
                )

        return answer

    async def run(
        self, *, task_status: trio.TaskStatus[ControllerService] = trio.TASK_STATUS_IGNORED
    ) -> None:
        self.server = RemotingServer(
            "controller",
            self.config.listen_host,
            self.config.listen_port,
            self.router(),
            TransportLimits(idle_timeout=120.0, frame_timeout=30.0),
            tls=self.tls,
        )
        async with self.etcd, trio.open_nursery() as nursery:
            await nursery.start(self.server.run)
            nursery.start_soon(self._lead)
            log.info(
                "controller %s listening on %s (etcd %s)",
                self.controller_id,
                self.address,
                self.etcd.endpoints,
            )
            task_status.started(self)

    # --- leadership and the scan ------------------------------------------------------------

    async def _lead(self) -> None:
        """Keep this controller's lease and membership key, take the leader key when it is
        free, and scan while holding it. etcd out of reach: no scan, logged once."""
        prefix = self.controller.prefix
        member = orjson.dumps({"id": self.controller_id, "address": self.address})
        renew_at = 0.0
        while True:
            try:
                now = trio.current_time()
                if not self.lease or now >= renew_at:
                    ttl = await self.etcd.keep_alive(self.lease) if self.lease else 0
                    if ttl <= 0:
                        self.lease = await self.etcd.grant(self.config.lease_ttl)
                        self.is_leader = False
                        await self.etcd.put(
                            f"{prefix}/members/{self.controller_id}", member, lease=self.lease
                        )
                    renew_at = now + self.config.lease_ttl / 3
                if not self.is_leader:
                    self.is_leader = await self._take_leader_key(member)
                    if self.is_leader:
                        log.info("controller %s leads (scans for dead masters)", self.controller_id)
                if self.is_leader:
                    await self.controller.scan()
                if not self.etcd_reachable:
                    log.warning("controller %s reaches etcd again", self.controller_id)
                    self.etcd_reachable = True
            except (EtcdUnavailable, EtcdError) as error:
                if self.etcd_reachable:
                    log.error(
                        "controller %s cannot reach etcd (%s): no elections until it can; brokers keep "
                        "their masters",
                        self.controller_id,
                        error,
                    )
                self.etcd_reachable = False
                self.is_leader = False
            await trio.sleep(self.config.scan_interval)

    async def _take_leader_key(self, member: bytes) -> bool:
        """Whether this controller holds the ``leader`` key: it takes the key when free, and
        recognises it as its own when it still carries this controller's lease (after etcd was
        out of reach for less than the lease, the key is still ours and nobody else can take it)."""
        leader_key = f"{self.controller.prefix}/leader"
        if await self.etcd.txn([Compare(leader_key, 0)], [Put(leader_key, member, self.lease)]):
            return True
        holder = await self.etcd.get(leader_key)
        return holder is not None and holder.lease == self.lease

    # --- handlers ---------------------------------------------------------------------------

    async def register_broker(self, request: RemotingCommand) -> RemotingCommand:
        ext = request.ext
        broker_name = _broker_name(ext)
        broker_id = _int(ext, "brokerId")
        address = _text(ext, "brokerAddress")
        live = BrokerLive(
            broker_id,
            address,
            _int(ext, "epoch", 0),
            _int(ext, "maxOffset", 0),
            _int(ext, "confirmOffset", 0),
            _int(ext, "electionPriority", 0),
            parse_bool(ext.get("asyncLearner")),
        )
        replicas, lease = await self.controller.register(
            ext.get("clusterName", ""), broker_name, broker_id, address, ext.get("haAddress", ""), live
        )
        return request.response(
            ResponseCode.SUCCESS,
            {
                "clusterName": replicas.cluster,
                "brokerName": broker_name,
                **replica_info_ext(replicas),
                "leaseId": lease,
                "heartbeatTimeoutMills": int(self.config.heartbeat_timeout * 1000),
            },
            sync_state_set_body(replicas),
        )

    async def broker_heartbeat(self, request: RemotingCommand) -> RemotingCommand:
        ext = request.ext
        broker_name = _broker_name(ext)
        live = BrokerLive(
            _int(ext, "brokerId"),
            _text(ext, "brokerAddr"),
            _int(ext, "epoch", 0),
            _int(ext, "maxOffset", 0),
            _int(ext, "confirmOffset", 0),
            _int(ext, "electionPriority", 0),
            parse_bool(ext.get("asyncLearner")),
        )
        replicas, ttl = await self.controller.heartbeat(broker_name, _int(ext, "leaseId", 0), live)
        return request.response(
            ResponseCode.SUCCESS,
            {**replica_info_ext(replicas), "leaseTtlMills": int(ttl * 1000)},
            sync_state_set_body(replicas),
        )

    async def alter_sync_state_set(self, request: RemotingCommand) -> RemotingCommand:
        ext = request.ext
        try:
            body = orjson.loads(request.body)
            members = [int(i) for i in body["syncStateSet"]]
            set_epoch = int(body["syncStateSetEpoch"])
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as error:
            raise Refusal(
                ResponseCode.CONTROLLER_INVALID_REQUEST, f"body is not a SyncStateSet: {error}"
            ) from None
        replicas = await self.controller.alter_sync_state_set(
            _broker_name(ext),
            _int(ext, "masterBrokerId"),
            _int(ext, "masterEpoch"),
            members,
            set_epoch,
        )
        return request.response(
            ResponseCode.SUCCESS,
            {"newSyncStateSetEpoch": replicas.sync_state_set_epoch},
            sync_state_set_body(replicas),
        )

    async def elect_master(self, request: RemotingCommand) -> RemotingCommand:
        ext = request.ext
        broker_name = _broker_name(ext)
        designate = parse_bool(ext.get("designateElect"))
        designated = _int(ext, "brokerId", -1) if designate else None
        if designate and (designated is None or designated <= 0):
            raise Refusal(ResponseCode.CONTROLLER_INVALID_REQUEST, "designateElect needs a brokerId > 0")
        replicas = await self.controller.elect(broker_name, designated=designated)
        return request.response(
            ResponseCode.SUCCESS,
            replica_info_ext(replicas),
            orjson.dumps(
                {
                    "brokerMemberGroup": {
                        "cluster": replicas.cluster,
                        "brokerName": broker_name,
                        "brokerAddrs": {str(i): r.address for i, r in replicas.replicas.items()},
                    },
                    "syncStateSet": sorted(replicas.sync_state_set),
                }
            ),
        )

    async def get_replica_info(self, request: RemotingCommand) -> RemotingCommand:
        replicas = await self.controller.require(_broker_name(request.ext))
        return request.response(
            ResponseCode.SUCCESS, replica_info_ext(replicas), sync_state_set_body(replicas)
        )

    async def get_sync_state_data(self, request: RemotingCommand) -> RemotingCommand:
        """``BrokerReplicasInfo`` for the named sets (a JSON list body; empty: every set)."""
        try:
            names = orjson.loads(request.body) if request.body else []
        except orjson.JSONDecodeError as error:
            raise Refusal(
                ResponseCode.CONTROLLER_INVALID_REQUEST, f"body is not a JSON list: {error}"
            ) from None
        if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
            raise Refusal(ResponseCode.CONTROLLER_INVALID_REQUEST, "body must be a JSON list of broker names")
        sets = await self.controller.all_replica_sets()
        table = {}
        for replicas in sets:
            if names and replicas.broker_name not in names:
                continue
            alive = await self.controller.alive(replicas.broker_name)

            def identity(broker_id: int, rs: ReplicaSet = replicas, living: Any = alive) -> dict[str, Any]:
                return {
                    "brokerName": rs.broker_name,
                    "brokerId": broker_id,
                    "brokerAddress": rs.replicas[broker_id].address,
                    "alive": broker_id in living,
                }

            table[replicas.broker_name] = {
                "masterBrokerId": replicas.master_id,
                "masterAddress": replicas.master_address,
                "masterEpoch": replicas.master_epoch,
                "syncStateSetEpoch": replicas.sync_state_set_epoch,
                "inSyncReplicas": [
                    identity(i) for i in sorted(replicas.replicas) if i in replicas.sync_state_set
                ],
                "notInSyncReplicas": [
                    identity(i) for i in sorted(replicas.replicas) if i not in replicas.sync_state_set
                ],
            }
        return request.response(ResponseCode.SUCCESS, body=orjson.dumps({"replicasInfoTable": table}))

    async def clean_broker_data(self, request: RemotingCommand) -> RemotingCommand:
        """``CLEAN_BROKER_DATA``: ``brokerControllerIdsToClean`` is ``;``-separated ids (none:
        the whole set); ``isCleanLivingBroker`` also removes replicas whose lease holds."""
        ext = request.ext
        listed = ext.get("brokerControllerIdsToClean") or ""
        try:
            ids = frozenset(int(part) for part in listed.split(";") if part.strip())
        except ValueError:
            raise Refusal(
                ResponseCode.CONTROLLER_INVALID_REQUEST,
                f"brokerControllerIdsToClean={shown_name(listed)} is not a ';'-separated list of ids",
            ) from None
        await self.controller.clean(
            _broker_name(ext), ids, clean_living=parse_bool(ext.get("isCleanLivingBroker"))
        )
        return request.response(ResponseCode.SUCCESS)

    async def get_metadata_info(self, request: RemotingCommand) -> RemotingCommand:
        prefix = self.controller.prefix
        leader = await self.etcd.get(f"{prefix}/leader")
        members = await self.etcd.get_prefix(f"{prefix}/members/")
        peers = [orjson.loads(kv.value) for kv in members]
        leader_info = orjson.loads(leader.value) if leader is not None else {}
        status = await self.etcd.status()
        return request.response(
            ResponseCode.SUCCESS,
            {
                "group": prefix,
                "controllerLeaderId": leader_info.get("id", ""),
                "controllerLeaderAddress": leader_info.get("address", ""),
                "isLeader": self.is_leader,
                "peers": ";".join(f"{p['id']}-{p['address']}" for p in peers),
                "etcdVersion": status.get("version", ""),
            },
        )
