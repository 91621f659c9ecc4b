"""A replica's side of controller mode: register with a controller, heartbeat, and take the
role the controller gives (RocketMQ 5's ReplicasManager).

- **Register** (``CONTROLLER_REGISTER_BROKER``) at start, and again whenever a heartbeat is
  told the lease expired. The answer names the master and the lease.
- **Heartbeat** (``BROKER_HEARTBEAT``) every ``controller_heartbeat_interval`` (at most half
  of lease TTL minus ``fence_margin``) with this
  replica's epoch and offsets (the controller elects the most up-to-date). The answer carries
  the set as it stands, so a new master is learned within one interval.
- **Fence**: a master's lease deadline is the send time of the last answered heartbeat plus
  the lease TTL minus ``fence_margin``. etcd renews the lease after the controller received
  that heartbeat, so it expires later than this deadline: the master stops acknowledging
  before any other replica can be elected. Only a renewal moves the deadline: a controller
  that answers that it cannot reach etcd renews nothing (another controller may reach etcd and
  elect), so the next heartbeat goes to the next controller.
- **Become master**: drop a half-received record, let dispatch reach the log end, append the
  new epoch to the epoch file, serve slaves, register with the NameServers as brokerId 0.
- **Become slave**: ask the master for its epoch history (``GET_BROKER_EPOCH_CACHE``),
  truncate this log to the last offset both histories share, copy the master's history, then
  replicate from the master.
"""

from __future__ import annotations

import logging
from typing import Any

import attrs
import orjson
import trio

from kernel.errors import RemotingError
from kernel.model import BrokerRole
from kernel.tls_config import client_tls, inner_credentials
from plugins.ha.auto_switch import AutoSwitchReplicator
from plugins.ha.epoch_file import EpochEntry, EpochFile, consistent_point
from wire.remoting import RemotingClient, RemotingCommand, RequestCode, ResponseCode

log = logging.getLogger(__name__)

REQUEST_TIMEOUT = 3.0


@attrs.frozen
class MasterView:
    """The controller's answer: who is master, of which epoch, with which SyncStateSet."""

    master_id: int | None
    master_address: str
    master_ha_address: str
    master_epoch: int
    sync_state_set: frozenset[int]
    sync_state_set_epoch: int

    @classmethod
    def parse(cls, response: RemotingCommand) -> MasterView:
        ext = response.ext
        body = orjson.loads(response.body) if response.body else {}
        master = ext.get("masterBrokerId", "")
        return cls(
            int(master) if master not in ("", "null") else None,
            ext.get("masterAddress", ""),
            ext.get("masterHaAddress", ""),
            int(ext.get("masterEpoch", 0) or 0),
            frozenset(int(i) for i in body.get("syncStateSet", ())),
            int(body.get("syncStateSetEpoch", ext.get("syncStateSetEpoch", 0)) or 0),
        )


@attrs.define(eq=False)
class ControllerAgent:
    """See the module docstring; a service of every controller-mode broker."""

    runtime: Any
    """The broker (``kernel.broker.Broker``): role changes, truncation, take-over."""
    replicator: AutoSwitchReplicator
    epochs: EpochFile
    controllers: tuple[str, ...]
    lease: int = 0
    lease_ttl: float = 0.0
    view: MasterView | None = None
    following: tuple[str, int] | None = None
    """(master address, epoch) this slave last truncated against and follows."""
    registrations: int = 0
    last_error: str = ""
    etcd_down: bool = False
    _client: RemotingClient | None = attrs.field(default=None, init=False)
    _preferred: int = attrs.field(default=0, init=False)
    _apply_lock: trio.Lock = attrs.field(factory=trio.Lock, init=False)
    _warned_no_room: bool = attrs.field(default=False, init=False)

    @property
    def cfg(self) -> Any:
        return self.runtime.ctx.broker

    @property
    def broker_id(self) -> int:
        return int(self.cfg.broker_id)

    def broker_addr(self) -> str:
        return f"{self.cfg.listen_host}:{self.cfg.listen_port}"

    async def run(self, *, task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED) -> None:
        self.runtime.change_role(BrokerRole.SLAVE)  # until the controller says otherwise
        self.replicator.alter = self._alter
        config = self.runtime.ctx.config
        # Signed with the broker's ACL account and over TLS when configured, as its NameServer
        # registration is: a controller with the acl plugin checks every request.
        async with RemotingClient.open(
            credentials=inner_credentials(config), tls=client_tls(config)
        ) as client:
            self._client = client
            task_status.started()
            while True:
                try:
                    if not self.lease:
                        await self._register()
                    else:
                        await self._heartbeat()
                except RemotingError as error:
                    self._note(str(error))
                fenced = await self._fence_check()
                # A heartbeat slower than the lease (etcd electing a leader) leaves a master
                # fenced although its lease was renewed: the next heartbeat goes out at once.
                interval = self.heartbeat_interval()
                await trio.sleep(min(interval, 0.1) if fenced else interval)

    def heartbeat_interval(self) -> float:
        """``controller_heartbeat_interval``, shortened to half the room the lease leaves
        (TTL minus ``fence_margin``) when that is smaller: a master whose next heartbeat is due
        only after its deadline would refuse writes for a moment in every round."""
        configured = float(self.replicator.config.controller_heartbeat_interval)
        if not self.lease_ttl:
            return configured
        room = self.lease_ttl - self.replicator.config.fence_margin
        if room <= 0:
            if not self._warned_no_room:
                self._warned_no_room = True
                log.error(
                    "controller: the lease (%gs) is not longer than fence_margin (%gs): this replica "
                    "is fenced whenever it is master; lower fence_margin or raise the controller's "
                    "heartbeat_timeout",
                    self.lease_ttl,
                    self.replicator.config.fence_margin,
                )
            return configured
        return min(configured, room / 2)

    def _note(self, error: str) -> None:
        if error != self.last_error:
            log.warning("controller: %s", error)
        self.last_error = error

    # --- talking to controllers -------------------------------------------------------------

    async def _ask(self, code: int, ext: dict[str, object], body: bytes = b"") -> RemotingCommand:
        """Ask the controllers in turn, starting with the last that answered."""
        assert self._client is not None
        errors = []
        count = len(self.controllers)
        first = self._preferred  # read once: the heartbeat and SyncStateSet changes ask concurrently
        for step in range(count):
            index = (first + step) % count
            try:
                response = await self._client.invoke(
                    self.controllers[index], RemotingCommand.request(code, ext, body), REQUEST_TIMEOUT
                )
            except RemotingError as error:
                errors.append(f"{self.controllers[index]}: {error}")
                continue
            self._preferred = index
            return response
        raise RemotingError("no controller answered: " + "; ".join(errors))

    def _offsets(self) -> dict[str, object]:
        return {
            "epoch": self.epochs.last_epoch,
            "maxOffset": self.replicator.store.positions.wrote.value,
            "confirmOffset": self.replicator.confirmed.value,
            "electionPriority": self.replicator.config.election_priority,
            "asyncLearner": self.replicator.config.async_learner,
        }

    async def _register(self) -> None:
        sent = trio.current_time()
        response = await self._ask(
            RequestCode.CONTROLLER_REGISTER_BROKER,
            {
                "clusterName": self.cfg.cluster_name,
                "brokerName": self.cfg.broker_name,
                "brokerId": self.broker_id,
                "brokerAddress": self.broker_addr(),
                "haAddress": self.replicator.ha_address(),
                **self._offsets(),
            },
        )
        if response.code != ResponseCode.SUCCESS:
            self._note(f"registering: code {response.code}: {response.remark}")
            return
        self.lease = int(response.ext["leaseId"])
        self.lease_ttl = int(response.ext.get("heartbeatTimeoutMills", 5000)) / 1000
        self.registrations += 1
        log.info("controller: registered %s/%d (lease %x)", self.cfg.broker_name, self.broker_id, self.lease)
        await self._answered(sent, response)

    async def _heartbeat(self) -> None:
        sent = trio.current_time()
        response = await self._ask(
            RequestCode.BROKER_HEARTBEAT,
            {
                "clusterName": self.cfg.cluster_name,
                "brokerName": self.cfg.broker_name,
                "brokerId": self.broker_id,
                "brokerAddr": self.broker_addr(),
                "leaseId": self.lease,
                **self._offsets(),
            },
        )
        if response.code == ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED:
            log.warning("controller: lease expired; registering again")
            self.lease = 0
            await self._register()
            return
        if response.code == ResponseCode.SYSTEM_ERROR and "etcd" in (response.remark or ""):
            # This controller cannot reach etcd. That does not mean no controller can: another
            # one may reach etcd, see this lease expire and elect (fault scenario S5b). So the
            # deadline is not extended, and the next heartbeat asks the next controller.
            if not self.etcd_down:
                log.error(
                    "controller %s reports etcd down (%s): asking the others; without a renewal "
                    "this replica fences itself at its lease deadline",
                    self.controllers[self._preferred],
                    response.remark,
                )
            self.etcd_down = True
            self._preferred = (self._preferred + 1) % len(self.controllers)
            return
        if response.code != ResponseCode.SUCCESS:
            self._note(f"heartbeat: code {response.code}: {response.remark}")
            return
        if self.etcd_down:
            log.warning("controller reaches etcd again")
            self.etcd_down = False
        ttl = int(response.ext.get("leaseTtlMills", 0)) / 1000 or self.lease_ttl
        self.lease_ttl = min(self.lease_ttl or ttl, ttl)
        await self._answered(sent, response)

    def _deadline(self, sent: float) -> float:
        return sent + self.lease_ttl - self.replicator.config.fence_margin

    async def _answered(self, sent: float, response: RemotingCommand) -> None:
        self.last_error = ""
        self.replicator.lease_deadline = self._deadline(sent)
        await self.apply(MasterView.parse(response))

    async def _fence_check(self) -> bool:
        """Refuse writes past the lease deadline, accept them again before it; whether this
        replica is a fenced master."""
        if self.runtime.role is BrokerRole.SLAVE:
            return False
        if trio.current_time() > self.replicator.lease_deadline:
            self.runtime.refuse_writes(
                f"broker {self.cfg.broker_name} id {self.broker_id} lost its controller lease (fenced): "
                "a new master may be elected; retry"
            )
            return True
        if self.runtime.writes_refused:
            self.runtime.refuse_writes("")
        return False

    async def _alter(self, members: frozenset[int], set_epoch: int) -> tuple[frozenset[int], int] | None:
        view = self.view
        if view is None:
            return None
        try:
            response = await self._ask(
                RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET,
                {
                    "brokerName": self.cfg.broker_name,
                    "masterBrokerId": self.broker_id,
                    "masterEpoch": view.master_epoch,
                },
                orjson.dumps({"syncStateSet": sorted(members), "syncStateSetEpoch": set_epoch}),
            )
        except RemotingError as error:
            self._note(f"altering the SyncStateSet: {error}")
            return None
        if response.code != ResponseCode.SUCCESS:
            self._note(f"altering the SyncStateSet: code {response.code}: {response.remark}")
            return None
        body = orjson.loads(response.body)
        return frozenset(int(i) for i in body["syncStateSet"]), int(body["syncStateSetEpoch"])

    # --- taking roles ---------------------------------------------------------------------

    async def apply(self, view: MasterView) -> None:
        async with self._apply_lock:
            self.view = view
            if view.master_id == self.broker_id:
                if not self.replicator.is_master or self.replicator.master_epoch != view.master_epoch:
                    await self._become_master(view)
                else:
                    self.replicator.set_sync_state_set(view.sync_state_set, view.sync_state_set_epoch)
            elif view.master_id is not None and view.master_address:
                if self.replicator.is_master or self.following != (view.master_address, view.master_epoch):
                    await self._become_slave(view)

    async def _become_master(self, view: MasterView) -> None:
        runtime = self.runtime
        store = self.replicator.store
        if runtime.role is not BrokerRole.SLAVE:
            runtime.change_role(BrokerRole.SLAVE)
        # Stop following the old master before anything else: a record it still sends after
        # the queue offsets are taken over would share a queue offset with this master's own
        # puts (fault scenario S5b answered two sends with each other's offsets).
        await self.replicator.stop_following()
        wrote = store.positions.wrote.value
        if store.received_end() > wrote:
            await runtime.truncate_log(wrote)  # half a record from the old master
        await runtime.take_over()
        end = store.positions.wrote.value
        if self.epochs.last_epoch != view.master_epoch:  # not a restart within its own epoch
            await trio.to_thread.run_sync(self.epochs.append, view.master_epoch, end)
        self.following = None
        self.replicator.become_master(view.master_epoch, view.sync_state_set, view.sync_state_set_epoch)
        runtime.refuse_writes("")
        runtime.change_role(self.replicator.ack_role)
        log.warning(
            "controller: %s/%d is MASTER of epoch %d from offset %d",
            self.cfg.broker_name,
            self.broker_id,
            view.master_epoch,
            end,
        )

    async def _become_slave(self, view: MasterView) -> None:
        runtime = self.runtime
        if runtime.role is not BrokerRole.SLAVE:
            runtime.change_role(BrokerRole.SLAVE)
            log.warning(
                "controller: %s/%d steps down; the master is %d (epoch %d)",
                self.cfg.broker_name,
                self.broker_id,
                view.master_id,
                view.master_epoch,
            )
        self.replicator.become_slave("")  # stop serving and stop following while truncating
        remote = await self._master_epochs(view.master_address)
        if remote is None:
            return  # the next heartbeat tries again
        store = self.replicator.store
        end = store.received_end()
        local = self.epochs.entries(end)
        point = consistent_point(local, remote) if local else end
        if point < 0:
            point = store.watermarks().min_offset if end else 0
        if point < end:
            log.warning(
                "controller: this log diverges from master %d's at %d: dropping %d bytes",
                view.master_id,
                point,
                end - point,
            )
            await runtime.truncate_log(point)
            self.replicator.truncated(point)
        await trio.to_thread.run_sync(self.epochs.copy_from, remote, point)
        self.following = (view.master_address, view.master_epoch)
        self.replicator.become_slave(view.master_ha_address)

    async def _master_epochs(self, master_address: str) -> list[EpochEntry] | None:
        assert self._client is not None
        try:
            response = await self._client.invoke(
                master_address, RemotingCommand.request(RequestCode.GET_BROKER_EPOCH_CACHE), REQUEST_TIMEOUT
            )
        except RemotingError as error:
            self._note(f"asking master {master_address} for its epochs: {error}")
            return None
        if response.code != ResponseCode.SUCCESS:
            self._note(f"asking master {master_address} for its epochs: {response.code} {response.remark}")
            return None
        body = orjson.loads(response.body)
        return [EpochEntry.from_json(entry) for entry in body["epochList"]]
