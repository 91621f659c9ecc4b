"""A plugin answers request codes on the broker's port, and finds connected producers, without
importing the plugin that serves the port (``trocket_register_request_handlers`` and
``kernel.clients.CLIENT_DIRECTORY``)."""

from __future__ import annotations

import json

import pytest

from kernel import PluginError, RequestHandlerSpec, hookimpl
from kernel.clients import CLIENT_DIRECTORY
from wire.remoting import RemotingCommand, RequestCode, ResponseCode

ECHO = 40_001
BROKEN = 40_002


class Echo:
    """Answers ECHO with the producers of the group named in the request."""

    @hookimpl
    def trocket_register_request_handlers(self, ctx):
        async def echo(runtime, connection, request):
            directory = runtime.ctx.stash[CLIENT_DIRECTORY]
            peers = [c.peer for c in directory.producer_connections(request.ext["group"])]
            return request.response(ResponseCode.SUCCESS, body=json.dumps(peers).encode())

        async def broken(runtime, connection, request):
            raise RuntimeError("plugin bug")

        return [RequestHandlerSpec(ECHO, "echo", echo), RequestHandlerSpec(BROKEN, "echo", broken)]


async def test_hook_trocket_register_request_handlers(cluster_factory):
    async with cluster_factory(plugin_objects=[("echo", Echo())]) as cluster:
        nobody = await cluster.call(ECHO, {"group": "PG"})
        assert (nobody.code, json.loads(nobody.body)) == (0, [])
        heartbeat = {"clientID": "c1", "producerDataSet": [{"groupName": "PG"}], "consumerDataSet": []}
        assert (await cluster.call(RequestCode.HEART_BEAT, body=json.dumps(heartbeat).encode())).code == 0
        known = await cluster.call(ECHO, {"group": "PG"})
        connection = await cluster.client.connection(cluster.broker_addr)
        assert json.loads(known.body) == [connection.local]
        failed = await cluster.call(BROKEN)
        assert failed.code == ResponseCode.SYSTEM_ERROR and "plugin bug" in failed.remark
        assert (await cluster.call(ECHO, {"group": "other"})).code == 0  # the connection lives on
        unknown = await cluster.call_raw(RemotingCommand.request(40_003))
        assert unknown.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED


async def test_a_plugin_cannot_take_over_a_code_the_broker_answers(cluster_factory):
    class Thief:
        @hookimpl
        def trocket_register_request_handlers(self, ctx):
            async def steal(runtime, connection, request):
                return None

            return [RequestHandlerSpec(RequestCode.SEND_MESSAGE, "thief", steal)]

    with pytest.raises(BaseException) as raised:  # noqa: PT011 - a group wraps the PluginError
        async with cluster_factory(plugin_objects=[("thief", Thief())]):
            pass
    errors = raised.value.exceptions if isinstance(raised.value, BaseExceptionGroup) else [raised.value]
    while any(isinstance(e, BaseExceptionGroup) for e in errors):
        errors = [x for e in errors for x in (e.exceptions if isinstance(e, BaseExceptionGroup) else [e])]
    (error,) = errors
    assert isinstance(error, PluginError)
    assert "plugin thief registers a handler for SEND_MESSAGE" in str(error)
