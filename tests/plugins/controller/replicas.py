"""Controller-mode broker sets as separate processes: etcd, controllers, a NameServer and
replicas on free loopback ports, each killable with SIGKILL (or SIGSTOP)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import attrs
import orjson
import trio

from tests.plugins.controller.etcd_cluster import EtcdCluster, etcd_cluster
from tests.plugins.controller.test_controller import TEST_TIMINGS, start_controller
from tests.plugins.ha.processes import HaCluster, Process
from wire.remoting import RemotingClient, RemotingCommand, RequestCode, ResponseCode

BROKER_NAME = "broker-a"


@attrs.define
class ReplicaCluster:
    ha: HaCluster
    etcd: EtcdCluster
    controllers: list[Process] = attrs.field(factory=list)
    replicas: dict[int, Process] = attrs.field(factory=dict)

    @property
    def controller_addrs(self) -> list[str]:
        return [c.addr for c in self.controllers]

    def start_replica(
        self,
        broker_id: int,
        role: str = "SYNC_MASTER",
        ha: str = "",
        catchup: str = "3s",
        plugins: tuple[str, ...] = (),
        tables: str = "",
    ) -> Process:
        process = self.ha.start_broker(
            f"replica{broker_id}",
            role,
            broker_id,
            plugins=plugins,
            extra=f'broker_name = "{BROKER_NAME}"',
            ha=f"controller_mode = true\ncontroller_addr = {orjson.dumps(self.controller_addrs).decode()}\n"
            f'max_time_slave_not_catchup = "{catchup}"\n{ha}',
            tables=tables,
        )
        self.replicas[broker_id] = process
        return process

    def restart(self, broker_id: int) -> Process:
        process = self.ha.restart(self.replicas[broker_id])
        self.replicas[broker_id] = process
        return process

    async def replica_info(self) -> dict[str, object]:
        async with RemotingClient.open() as client:
            for addr in self.controller_addrs:
                try:
                    response = await client.invoke(
                        addr,
                        RemotingCommand.request(
                            RequestCode.CONTROLLER_GET_REPLICA_INFO, {"brokerName": BROKER_NAME}
                        ),
                        3,
                    )
                except Exception:  # noqa: BLE001 - a dead controller: ask the next
                    continue
                if response.code == ResponseCode.SUCCESS:
                    return {**response.ext, **orjson.loads(response.body)}
        return {}

    async def sync_state_set(self) -> list[int]:
        """The controller's SyncStateSet of the set, sorted ([] when no controller answers)."""
        return sorted(int(i) for i in (await self.replica_info()).get("syncStateSet", ()))

    async def wait_master(self, *, not_id: int | None = None, in_set: int = 1, timeout: float = 60) -> int:
        """The master's broker id once it serves as master (its brokerStatus says so) with at
        least ``in_set`` members in its SyncStateSet. A timeout fails with what the
        controllers last answered and the tail of every replica's and controller's log (a rare
        CI timeout printed nothing to go on)."""
        try:
            with trio.fail_after(timeout):
                return await self._wait_master(not_id, in_set)
        except trio.TooSlowError:
            info = await self.replica_info()
            raise AssertionError(
                f"no master (not {not_id}, SyncStateSet >= {in_set}) in {timeout}s; controllers say "
                f"{info}\n{self.log_tails()}"
            ) from None

    def log_tails(self, lines: int = 40) -> str:
        """The last lines of each replica's and controller's log, headed by its name."""
        parts = []
        for process in [*self.controllers, *self.replicas.values()]:
            tail = process.text().splitlines()[-lines:] if process.log.exists() else []
            parts.append(f"--- {process.name} ---\n" + "\n".join(tail))
        return "\n".join(parts)

    async def _wait_master(self, not_id: int | None, in_set: int) -> int:
        while True:
            info = await self.replica_info()
            master = info.get("masterBrokerId")
            if (
                master not in (None, "")
                and int(master) != not_id
                and len(info.get("syncStateSet", ())) >= in_set
            ):
                process = self.replicas[int(master)]
                figures = await trio.to_thread.run_sync(self.ha.figures, process)
                if figures.get("brokerRole") != "SLAVE" and figures.get("haMasterEpoch") == info.get(
                    "masterEpoch"
                ):
                    return int(master)
            await trio.sleep(0.2)


@contextmanager
def replica_cluster(
    root: Path, *, etcd_members: int = 1, controllers: int = 1, timings: str = TEST_TIMINGS
) -> Iterator[ReplicaCluster]:
    with etcd_cluster(root, etcd_members) as etcd:
        ha = HaCluster(root)
        cluster = ReplicaCluster(ha, etcd)
        try:
            for i in range(controllers):
                cluster.controllers.append(start_controller(root, f"controller{i}", etcd, timings))
            ha.processes.extend(cluster.controllers)
            ha.start_namesrv()
            yield cluster
        finally:
            ha.stop_all()
