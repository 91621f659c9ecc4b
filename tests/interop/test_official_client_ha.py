"""The official C++ client (``rocketmq==0.4.4``) against a SYNC_MASTER and its slave: every
send is acknowledged by the pair, the master is SIGKILLed, and the client's push consumer
receives everything from the slave (issue 16)."""

from __future__ import annotations

from tests.interop.conftest import run_client
from tests.plugins.ha.processes import ha_cluster
from tests.plugins.ha.test_replication import wait_caught_up, wait_connected

TOPIC = "InteropHa"
COUNT = 30


def test_official_client_consumes_from_the_slave_after_the_master_dies(tmp_path):
    with ha_cluster(tmp_path) as cluster:
        master = cluster.start_broker("master", "SYNC_MASTER", 0)
        slave = cluster.start_broker("slave", "SLAVE", 1)
        wait_connected(cluster, master)
        sent = run_client("produce", cluster.namesrv_addr, TOPIC, str(COUNT))
        syncs = [r for r in sent if r["kind"] == "sync"]
        assert len(syncs) == COUNT and all(r["status"] == 0 for r in syncs), "SEND_OK from the pair"
        wait_caught_up(cluster, master, slave)
        master.kill()

        expected = COUNT + 1 + 4  # sync + oneway + orderly
        received = run_client("consume", cluster.namesrv_addr, TOPIC, "CG_ha", "*", str(expected), "90")
        bodies = {r["body"] for r in received if r["kind"] == "received"}
        assert len(bodies) == expected, f"{len(bodies)} of {expected} from the slave"
        assert {f"sync-{i}" for i in range(1, COUNT) if i % 10} <= bodies
        assert "oneway" in bodies and {f"orderly-{i}" for i in range(4)} <= bodies
