"""TLS on the broker's and NameServer's ports, with certificates from a throwaway CA
(``trustme``), real TCP and the SDK as users run it: enforcing refuses plain clients,
permissive serves both, a client verifies the server, a server can demand client
certificates, and a bad setting stops the broker with the key and file named."""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

import pytest
import trio

from kernel.errors import ConfigError, RemotingError
from tests.network.conftest import pulled
from trocket import (
    BlockingProducer,
    ClientError,
    ConsumeFromWhere,
    LitePullConsumer,
    Message,
    Producer,
    tls_context,
)
from trocket.admin import AdminClient
from wire.remoting import RemotingClient, RemotingCommand, RequestCode, ResponseCode


def tls_broker(pki: dict[str, Path], mode: str, **more: Any) -> dict[str, Any]:
    """``[broker]`` keys for a TLS server whose own outgoing connections use TLS too."""
    return {
        "tls_server_mode": mode,
        "tls_server_cert_path": str(pki["server"]),
        "tls_server_key_path": str(pki["server"]),
        "tls_enable": True,
        **more,
    }


async def route_of(client: RemotingClient, namesrv: str, topic: str) -> RemotingCommand:
    return await client.invoke(
        namesrv, RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}), 5
    )


async def test_the_sdk_produces_and_consumes_over_tls_end_to_end(cluster_factory, pki):
    secure = tls_context(pki["ca"])
    async with cluster_factory(broker=tls_broker(pki, "enforcing"), client_tls=secure) as cluster:
        async with Producer("PG", cluster.namesrv_addr, tls=secure) as producer:
            results = [await producer.send(Message("Secure", f"s{i}".encode())) for i in range(20)]
        assert {r.status.value for r in results} == {"SEND_OK"}
        consumer = LitePullConsumer(
            "CG_secure", cluster.namesrv_addr, tls=secure, consume_from_where=ConsumeFromWhere.FIRST_OFFSET
        )
        got: list[bytes] = []
        async with consumer:
            consumer.subscribe("Secure")
            with trio.fail_after(20):
                while len(got) < 20:
                    got += [m.body for m in await consumer.poll(timeout=1.0)]
        assert sorted(got) == sorted(f"s{i}".encode() for i in range(20))
        # The broker registered with the NameServer over TLS too (the route came from there).
        async with AdminClient.open([cluster.namesrv_addr], tls=secure) as admin:
            assert "Secure" in await admin.topic_list()


async def test_a_plain_text_client_is_refused_by_enforcing_and_the_port_keeps_serving(cluster_factory, pki):
    secure = tls_context(pki["ca"])
    async with cluster_factory(broker=tls_broker(pki, "enforcing"), client_tls=secure) as cluster:
        for address in (cluster.broker_addr, cluster.namesrv_addr):
            async with RemotingClient.open() as plain:
                with pytest.raises(RemotingError):
                    await route_of(plain, address, "T")
        assert cluster.network.server is not None and cluster.network.server.refused >= 1
        answer = await route_of(cluster.client, cluster.namesrv_addr, "TBW102")
        assert answer.code == ResponseCode.SUCCESS


async def test_a_blocking_producer_sends_over_tls_and_verifies_the_server(cluster_factory, pki):
    """The BlockingProducer's sockets (run on worker threads here) speak TLS to the NameServer
    and broker, and refuse a server whose certificate its CA did not sign."""

    def send(tls: ssl.SSLContext, body: bytes) -> str:
        with BlockingProducer("PG", cluster.namesrv_addr, tls=tls, send_timeout=5) as producer:
            status = producer.send(Message("SecureBlocking", body)).status.value
            pool = producer._pool
            assert pool is not None
            # busy_poll is "auto", but an ssl socket is never polled with MSG_DONTWAIT.
            assert all(c.spin is None for idle in pool._idle.values() for c in idle)
            return status

    secure = tls_context(pki["ca"])
    async with cluster_factory(broker=tls_broker(pki, "enforcing"), client_tls=secure) as cluster:
        assert await trio.to_thread.run_sync(send, secure, b"over tls") == "SEND_OK"
        with pytest.raises(ClientError, match="TLS handshake with .* failed.*certificate verify failed"):
            await trio.to_thread.run_sync(send, tls_context(pki["stranger"]), b"never")
        bodies = [m.body for q in range(4) for m in await pulled(cluster, "SecureBlocking", q)]
        assert bodies == [b"over tls"]


async def test_permissive_serves_tls_and_plain_clients_on_one_port(cluster_factory, pki):
    async with cluster_factory(broker=tls_broker(pki, "permissive", tls_enable=False)) as cluster:
        for tls in (None, tls_context(pki["ca"])):
            async with Producer("PG", cluster.namesrv_addr, tls=tls or False) as producer:
                result = await producer.send(Message("Both", b"either way"))
            assert result.status.value == "SEND_OK"
        bodies = [m.body for q in range(4) for m in await pulled(cluster, "Both", q)]
        assert bodies == [b"either way", b"either way"]


async def test_a_client_verifies_the_server_certificate(cluster_factory, pki):
    async with cluster_factory(
        broker=tls_broker(pki, "enforcing"), client_tls=tls_context(pki["ca"])
    ) as cluster:
        async with RemotingClient.open(tls=tls_context(pki["stranger"])) as wary:
            with pytest.raises(RemotingError, match="TLS handshake failed.*certificate verify failed"):
                await route_of(wary, cluster.namesrv_addr, "T")
        async with RemotingClient.open(tls=tls_context(verify_server=False)) as trusting:
            assert (await route_of(trusting, cluster.namesrv_addr, "TBW102")).code == ResponseCode.SUCCESS


async def test_a_server_that_requires_client_certificates_refuses_clients_without_one(cluster_factory, pki):
    broker = tls_broker(
        pki,
        "enforcing",
        tls_server_need_client_auth="require",
        tls_server_trust_cert_path=str(pki["ca"]),
        tls_client_cert_path=str(pki["client"]),
    )
    with_cert = tls_context(pki["ca"], cert_file=pki["client"])
    async with cluster_factory(broker=broker, client_tls=with_cert) as cluster:
        assert (await route_of(cluster.client, cluster.namesrv_addr, "TBW102")).code == ResponseCode.SUCCESS
        async with RemotingClient.open(tls=tls_context(pki["ca"])) as anonymous:
            with pytest.raises(RemotingError):
                await route_of(anonymous, cluster.broker_addr, "T")


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"tls_server_mode": "enforcing"}, "[broker] tls_server_cert_path: required when tls_server_mode"),
        (
            {
                "tls_server_mode": "permissive",
                "tls_server_cert_path": "missing.pem",
                "tls_server_key_path": "k",
            },
            "missing.pem does not exist",
        ),
        ({"tls_server_mode": "sometimes"}, "expected one of 'disabled', 'permissive', 'enforcing'"),
    ],
)
async def test_a_bad_tls_setting_stops_the_broker_naming_the_key_or_file(cluster_factory, settings, named):
    with pytest.raises((ConfigError, BaseExceptionGroup)) as raised:
        async with cluster_factory(broker=settings):
            pass
    assert named in _flat(raised.value)


def test_a_certificate_file_that_is_not_one_is_named(tmp_path):
    bogus = tmp_path / "bogus.pem"
    bogus.write_text("not a certificate")
    from trocket.client.errors import ClientError

    with pytest.raises(ClientError, match="bogus.pem"):
        tls_context(bogus)


def _flat(error: BaseException) -> str:
    if isinstance(error, BaseExceptionGroup):
        return " | ".join(_flat(e) for e in error.exceptions)
    return str(error)
