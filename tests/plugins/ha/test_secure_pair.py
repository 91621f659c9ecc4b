"""A master and slave deployed securely, as separate processes: every port (NameServer,
broker, HA) in TLS ``enforcing`` mode and the master with ACL on. The slave reaches its master
only over TLS and signs its metadata sync with its own account (``inner_access_key``), so
replication and the copy of topics work with nothing left open."""

from __future__ import annotations

import functools
import json
import sys

import trio

from tests.interop.conftest import subprocess_env
from tests.network.wire import send_request
from tests.plugins.ha.processes import ha_cluster
from tests.plugins.ha.test_replication import wait_caught_up
from trocket import SessionCredentials, tls_context
from wire.remoting import RemotingClient, RemotingCommand, RequestCode, ResponseCode

ACL = """
accounts:
  - accessKey: replica-key
    secretKey: replica-secret
    defaultTopicPerm: SUB
    defaultGroupPerm: SUB
  - accessKey: app-key
    secretKey: app-secret
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: PUB|SUB
"""


async def test_a_slave_replicates_and_copies_metadata_from_a_master_with_tls_and_acl_on(
    tmp_path, pki, monkeypatch
):
    tls = f"""
tls_server_mode = "enforcing"
tls_server_cert_path = "{pki["server"]}"
tls_server_key_path = "{pki["server"]}"
tls_enable = true
tls_client_auth_server = true
tls_client_trust_cert_path = "{pki["ca"]}"
"""
    (tmp_path / "plain_acl.yml").write_text(ACL)  # beside master.toml
    with ha_cluster(tmp_path, namesrv=tls) as cluster:
        master = cluster.start_broker("master", "ASYNC_MASTER", 0, plugins=("acl",), extra=tls)
        slave = cluster.start_broker(
            "slave",
            "SLAVE",
            1,
            extra=tls + 'inner_access_key = "replica-key"\ninner_secret_key = "replica-secret"\n',
        )
        async with RemotingClient.open(
            credentials=SessionCredentials("app-key", "app-secret"), tls=tls_context(pki["ca"])
        ) as client:
            for i in range(50):
                answer = await client.invoke(master.addr, send_request("SecureTopic", f"m{i}".encode()), 10)
                assert answer.code == ResponseCode.SUCCESS, answer.remark
        # brokerStatus through trocket admin, over TLS and signed (the env is what admin reads).
        monkeypatch.setenv("TROCKET_TLS_CA_FILE", str(pki["ca"]))
        monkeypatch.setenv("TROCKET_ACCESS_KEY", "app-key")
        monkeypatch.setenv("TROCKET_SECRET_KEY", "app-secret")
        end = await trio.to_thread.run_sync(wait_caught_up, cluster, master, slave)
        assert end > 0
        async with RemotingClient.open(tls=tls_context(pki["ca"])) as client:
            with trio.fail_after(30):
                while "SecureTopic" not in await _topics(client, slave.addr):  # noqa: ASYNC110
                    await trio.sleep(0.2)  # the slave's metadata sync runs every second
        # trocket produce over TLS with --tlsCaFile and --authKey; in plain text it is refused.
        cli = [sys.executable, "-m", "trocket", "produce", "-n", cluster.namesrv_addr, "-t", "SecureTopic"]
        auth = ["--authKey", "app-key", "--authSecret", "app-secret"]
        for name in ("TROCKET_TLS_CA_FILE", "TROCKET_ACCESS_KEY", "TROCKET_SECRET_KEY"):
            monkeypatch.delenv(name)
        env = subprocess_env()
        run = functools.partial(
            trio.run_process, capture_stdout=True, capture_stderr=True, check=False, env=env
        )
        secure = await run([*cli, "-b", "cli", "--tlsCaFile", str(pki["ca"]), *auth])
        assert secure.returncode == 0 and b"SEND_OK" in secure.stdout, secure.stderr
        plain = await run([*cli, "-b", "cli", *auth])
        assert plain.returncode != 0 and b"NameServer" in plain.stderr, plain.stderr
        assert "refused" not in master.text(), master.text()[-3000:]
        assert "TLS handshake" not in slave.text()  # (the master's log has the plain client's)
        assert "sync from master" not in slave.text()  # no failed metadata sync was logged


async def _topics(client: RemotingClient, address: str) -> set[str]:
    answer = await client.invoke(address, RemotingCommand.request(RequestCode.GET_ALL_TOPIC_CONFIG), 10)
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    return set(json.loads(answer.body)["topicConfigTable"])
