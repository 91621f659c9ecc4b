"""The ACL admin requests through the admin client, as ``trocket admin updateAclConfig`` and
friends send them: edits land in ``plain_acl.yml`` (atomically, with a bumped dataVersion) and
apply to the next request; only admin accounts may edit; a bad edit is refused with the file
untouched."""

from __future__ import annotations

import json
import socket
import struct

import pytest
import trio
import yaml

from plugins.acl.plain_acl import read_plain_acl
from tests.network.wire import send_request
from trocket import SessionCredentials
from trocket.admin import AdminClient, AdminError
from wire.remoting import ResponseCode

ADMIN = SessionCredentials("admin-key", "admin-secret")
WRITER = SessionCredentials("writer-key", "writer-secret")
NEWCOMER = SessionCredentials("newcomer", "newcomer-secret")


async def send_as(cluster, credentials: SessionCredentials | None, topic: str = "Orders") -> ResponseCode:
    cluster.client.credentials = credentials
    try:
        return ResponseCode((await cluster.call_raw(send_request(topic, b"x"))).code)
    finally:
        cluster.client.credentials = None


async def test_an_account_created_changed_and_deleted_by_an_admin_applies_at_once_and_persists(
    acl_cluster, acl_file
):
    async with acl_cluster(reload_interval="1h") as cluster:  # no help from the file watcher
        assert await send_as(cluster, NEWCOMER) == ResponseCode.NO_PERMISSION
        async with AdminClient.open([cluster.namesrv_addr], credentials=ADMIN) as admin:
            before = await admin.acl_config_version(cluster.broker_addr)
            created = await admin.update_acl_config(
                cluster.broker_addr,
                {
                    "accessKey": "newcomer",
                    "secretKey": "newcomer-secret",
                    "topicPerms": "Orders=PUB,Audit=SUB",
                },
            )
            assert created == "created"
            assert await send_as(cluster, NEWCOMER) == ResponseCode.SUCCESS
            assert await send_as(cluster, NEWCOMER, "Audit") == ResponseCode.NO_PERMISSION

            assert (
                await admin.update_acl_config(
                    cluster.broker_addr, {"accessKey": "newcomer", "topicPerms": "Orders=SUB"}
                )
                == "updated"
            )
            assert await send_as(cluster, NEWCOMER) == ResponseCode.NO_PERMISSION

            after = await admin.acl_config_version(cluster.broker_addr)
            assert after["version"]["counter"] == before["version"]["counter"] + 2
            assert after["brokerAddr"] == cluster.broker_addr and after["brokerName"] == "broker-a"

            await admin.delete_acl_config(cluster.broker_addr, "newcomer")
            assert await send_as(cluster, NEWCOMER) == ResponseCode.NO_PERMISSION
            with pytest.raises(
                AdminError, match="DELETE_ACL_CONFIG_FAILED.*no account with accessKey 'newcomer'"
            ):
                await admin.delete_acl_config(cluster.broker_addr, "newcomer")

            await admin.update_acl_config(
                cluster.broker_addr, {"accessKey": "keeper1", "secretKey": "keeper-secret"}
            )
    # What the broker answered is what the file says, in RocketMQ's format.
    document = yaml.safe_load(acl_file.read_text())
    keys = [account["accessKey"] for account in document["accounts"]]
    assert keys == ["writer-key", "reader-key", "admin-key", "keeper1"]
    assert document["dataVersion"][0]["counter"] == 4
    assert read_plain_acl(acl_file).accounts["keeper1"].secret_key == "keeper-secret"


async def test_only_admins_edit_and_a_bad_edit_leaves_the_file_as_it_was(acl_cluster, acl_file):
    async with acl_cluster() as cluster:
        original = acl_file.read_bytes()
        async with AdminClient.open([cluster.namesrv_addr], credentials=WRITER) as writer:
            with pytest.raises(AdminError, match="NO_PERMISSION.*Need admin permission"):
                await writer.update_acl_config(
                    cluster.broker_addr, {"accessKey": "writer-key", "admin": "true"}
                )
        async with AdminClient.open([cluster.namesrv_addr], credentials=ADMIN) as admin:
            bad = [
                (
                    {"accessKey": "newcomer", "secretKey": "s3cret-enough", "topicPerms": "Orders=WRITE"},
                    "is not DENY",
                ),
                ({"accessKey": "short", "secretKey": "long-enough"}, "at least 6 characters"),
                ({"accessKey": "newcomer"}, "a new account needs a secretKey"),
                ({"accessKey": "writer-key", "admin": "maybe"}, "admin must be true or false"),
                ({"accessKey": "writer-key", "whiteRemoteAddress": "10.0.0.999"}, "whiteRemoteAddress"),
            ]
            for fields, reason in bad:
                with pytest.raises(AdminError, match=f"UPDATE_AND_CREATE_ACL_CONFIG_FAILED.*{reason}"):
                    await admin.update_acl_config(cluster.broker_addr, fields)
            with pytest.raises(AdminError, match="UPDATE_GLOBAL_WHITE_ADDRS_CONFIG_FAILED"):
                await admin.update_global_white_addrs(cluster.broker_addr, ["not-an-address"])
        assert acl_file.read_bytes() == original
        assert await send_as(cluster, WRITER) == ResponseCode.SUCCESS


async def test_the_global_white_list_lets_unsigned_local_clients_in_until_it_is_emptied(acl_cluster):
    async with acl_cluster() as cluster:
        assert await send_as(cluster, None) == ResponseCode.NO_PERMISSION
        async with AdminClient.open([cluster.namesrv_addr], credentials=ADMIN) as admin:
            await admin.update_global_white_addrs(cluster.broker_addr, ["127.0.0.*", "10.1.1.1"])
            assert await send_as(cluster, None) == ResponseCode.SUCCESS
            await admin.update_global_white_addrs(cluster.broker_addr, [])
        assert await send_as(cluster, None) == ResponseCode.NO_PERMISSION


async def test_a_duplicated_auth_field_cannot_smuggle_a_second_identity(acl_cluster):
    """A header whose JSON names ``AccessKey`` twice (the writer's, signed, then the admin's):
    whichever one the decoder keeps, the signature does not match it and the request is
    refused; the connection and broker live on."""
    async with acl_cluster() as cluster:
        request = send_request("Orders", b"x")
        WRITER.sign(request)
        frame = request.encode()
        header = json.loads(frame[8 : 8 + (struct.unpack(">I", frame[4:8])[0] & 0xFFFFFF)])
        fields = ", ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in request.ext.items())
        header_text = json.dumps({k: v for k, v in header.items() if k != "extFields"})[:-1]
        forged = header_text + f', "extFields": {{{fields}, "AccessKey": "admin-key"}}}}'
        assert forged.count('"AccessKey"') == 2
        answer = await trio.to_thread.run_sync(_exchange, cluster.broker_addr, forged.encode(), request.body)
        assert answer["code"] == ResponseCode.NO_PERMISSION, answer
        assert await send_as(cluster, WRITER) == ResponseCode.SUCCESS


def _exchange(address: str, header: bytes, body: bytes) -> dict:
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(struct.pack(">II", 4 + len(header) + len(body), len(header)) + header + body)
        length = struct.unpack(">I", _read(sock, 4))[0]
        frame = _read(sock, length)
        header_length = struct.unpack(">I", frame[:4])[0] & 0xFFFFFF
        return json.loads(frame[4 : 4 + header_length])


def _read(sock: socket.socket, count: int) -> bytes:
    data = b""
    while len(data) < count:
        chunk = sock.recv(count - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data
