"""A plugin checks every request before its handler (``trocket_register_request_guards``):
a refused request is answered with the guard's response and never reaches the store, alone or
in a group of sends read together."""

from __future__ import annotations

import trio

from kernel import RequestGuardSpec, hookimpl
from tests.network.conftest import pulled
from tests.network.wire import send_request
from wire.remoting import RemotingCommand, RequestCode, ResponseCode
from wire.remoting.command import FrameDecoder


class BlockTopic:
    """Refuses sends to the topic ``Blocked``; lets everything else through."""

    def __init__(self) -> None:
        self.seen: list[int] = []

    @hookimpl
    def trocket_register_request_guards(self, ctx):
        def check(connection, request: RemotingCommand) -> RemotingCommand | None:
            self.seen.append(request.code)
            if request.ext.get("topic") == "Blocked":
                return request.response(ResponseCode.NO_PERMISSION, remark="Blocked is blocked")
            return None

        return [RequestGuardSpec("block", check)]


async def test_hook_trocket_register_request_guards(cluster_factory):
    guard = BlockTopic()
    async with cluster_factory(plugin_objects=[("block", guard)]) as cluster:
        refused = await cluster.call_raw(send_request("Blocked", b"no"))
        assert (refused.code, refused.remark) == (ResponseCode.NO_PERMISSION, "Blocked is blocked")
        assert (await cluster.call_raw(send_request("Open", b"yes"))).code == ResponseCode.SUCCESS
        # Six sends in one write: the broker reads them together and hands them to the group
        # handler, less the refused ones.
        stream = await trio.open_tcp_stream("127.0.0.1", int(cluster.broker_addr.rsplit(":", 1)[1]))
        frames = []
        for i in range(6):
            request = send_request("Blocked" if i % 2 else "Open", f"m{i}".encode())
            request.opaque = i
            frames.append(request.encode())
        await stream.send_all(b"".join(frames))
        decoder, codes = FrameDecoder(), {}
        with trio.fail_after(10):
            while len(codes) < 6:
                codes.update({c.opaque: c.code for c in decoder.feed(await stream.receive_some(65536))})
        await stream.aclose()
        assert codes == {i: ResponseCode.NO_PERMISSION if i % 2 else ResponseCode.SUCCESS for i in range(6)}
        assert [m.body for m in await pulled(cluster, "Open", 0)] == [b"yes", b"m0", b"m2", b"m4"]
        assert await pulled(cluster, "Blocked", 0) == []
        unknown = await cluster.call_raw(RemotingCommand.request(40_003))
        assert unknown.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
        assert 40_003 not in guard.seen and RequestCode.PULL_MESSAGE in guard.seen
