"""A proxy running beside a slave sends and pops through its broker name's master over
remoting: the slave beside it shares the name but refuses puts and pops, so nothing of that
broker name is answered in process there."""

from __future__ import annotations

import trio

from kernel.model import BrokerRole
from plugins.proxy import PROXY
from tests.network.conftest import free_port, pulled
from tests.plugins.proxy.conftest import GrpcCaller
from tests.plugins.proxy.test_bad_calls import create_topic, message
from tests.plugins.proxy.test_in_process import receive_request
from wire.grpc_v2 import definition_pb2 as pb
from wire.grpc_v2 import service_pb2 as spb

PLUGINS = ["ha", "pop", "retry_dlq"]


async def test_a_proxy_beside_a_slave_sends_and_receives_through_the_master(cluster_factory, tmp_path):
    ha_port = free_port()
    async with cluster_factory(
        store="mmap",
        plugins=PLUGINS,
        data_dir=tmp_path / "master",
        broker={"broker_role": "ASYNC_MASTER", "replicator": "ha"},
        ha={"listen_port": ha_port, "heartbeat_interval": "200ms"},
    ) as master:
        async with cluster_factory(
            store="mmap",
            plugins=[*PLUGINS, "proxy"],
            data_dir=tmp_path / "slave",
            broker={
                "roles": ["broker", "proxy"],
                "broker_role": "SLAVE",
                "broker_id": 1,
                "replicator": "ha",
                "namesrv_addr": [master.namesrv_addr],
            },
            ha={"master_address": f"127.0.0.1:{ha_port}", "reconnect_interval": "100ms"},
            proxy={"grpc_port": 0, "min_invisible_time": "1s"},
        ) as slave:
            assert slave.broker.role is BrokerRole.SLAVE
            assert slave.broker.ctx.broker.broker_name == master.broker.ctx.broker.broker_name
            service = slave.broker.ctx.stash[PROXY]
            caller = GrpcCaller(f"127.0.0.1:{service.port}")
            await create_topic(master, "BesideSlave")
            sent = await caller.call(
                "SendMessage", spb.SendMessageRequest(messages=[message("BesideSlave", b"via master", "ID1")])
            )
            assert sent.status.code == pb.OK, sent.status
            assert service.core.local_puts.puts == 0  # nothing put into the slave beside
            stored = [m.body for q in range(4) for m in await pulled(master, "BesideSlave", q)]
            assert stored == [b"via master"]

            received: list[pb.Message] = []
            for _ in range(8):
                answers = await caller.receive(receive_request("BesideSlave", group="CG_beside"))
                received += [a.message for a in answers if a.HasField("message")]
                if received:
                    break
                await trio.sleep(0.2)
            assert [m.body for m in received] == [b"via master"]
            assert service.core.served_in_process == 0  # the POP went to the master
