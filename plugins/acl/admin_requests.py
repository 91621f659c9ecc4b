"""The ACL admin requests on the broker's port, as RocketMQ 4.x answers them: edits of
``plain_acl.yml`` (admin accounts only: the guard checks that first) and the file's version.

- ``UPDATE_AND_CREATE_ACL_CONFIG`` (50): ext ``accessKey`` (the account edited), and any of
  ``secretKey``, ``whiteRemoteAddress``, ``admin``, ``defaultTopicPerm``, ``defaultGroupPerm``,
  ``topicPerms``/``groupPerms`` (comma-separated ``name=PERM``);
- ``DELETE_ACL_CONFIG`` (51): ext ``accessKey``;
- ``UPDATE_GLOBAL_WHITE_ADDRS_CONFIG`` (53): ext ``globalWhiteAddrs`` (comma-separated);
- ``GET_BROKER_CLUSTER_ACL_INFO`` (52): answers ``version`` (the file's dataVersion as JSON),
  ``allAclFileVersion``, ``brokerName``, ``brokerAddr`` and ``clusterName``.

A refused edit is answered with RocketMQ's ``*_FAILED`` code and a remark saying why.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable

from kernel.context import BrokerRuntime, StashKey
from plugins.acl.editing import ACCOUNT_FIELDS, AclEditError, AclFileEditor
from plugins.acl.plain_acl import DataVersion
from wire.remoting import Connection, RemotingCommand, ResponseCode

ACL_EDITOR = StashKey[AclFileEditor]("acl.editor")


def _editor(runtime: BrokerRuntime) -> AclFileEditor | None:
    return runtime.ctx.stash.get(ACL_EDITOR, None)


def _not_running(request: RemotingCommand) -> RemotingCommand:
    return request.response(ResponseCode.SERVICE_NOT_AVAILABLE, remark="the ACL plugin is not running")


async def _edit(
    runtime: BrokerRuntime,
    request: RemotingCommand,
    failed: ResponseCode,
    what: str,
    edit: Callable[[AclFileEditor], Awaitable[str | None]],
) -> RemotingCommand:
    """Run one edit; a refusal is answered ``failed`` with "``what`` was not ...: why"."""
    editor = _editor(runtime)
    if editor is None:
        return _not_running(request)
    try:
        remark = await edit(editor)
    except AclEditError as error:
        return request.response(failed, remark=f"{what}: {error}")
    return request.response(ResponseCode.SUCCESS, remark=remark)


async def handle_update_account(
    runtime: BrokerRuntime, connection: Connection, request: RemotingCommand
) -> RemotingCommand:
    ext = request.ext
    fields = {key: str(ext[key]) for key in ("accessKey", *ACCOUNT_FIELDS) if ext.get(key) is not None}

    async def update(editor: AclFileEditor) -> str:
        return "created" if await editor.update_account(fields) else "updated"

    what = f"The accessKey {fields.get('accessKey', '')!r} was not updated"
    return await _edit(runtime, request, ResponseCode.UPDATE_AND_CREATE_ACL_CONFIG_FAILED, what, update)


async def handle_delete_account(
    runtime: BrokerRuntime, connection: Connection, request: RemotingCommand
) -> RemotingCommand:
    access_key = str(request.ext.get("accessKey") or "")

    async def delete(editor: AclFileEditor) -> None:
        await editor.delete_account(access_key)

    what = f"The accessKey {access_key!r} was not deleted"
    return await _edit(runtime, request, ResponseCode.DELETE_ACL_CONFIG_FAILED, what, delete)


async def handle_update_global_white(
    runtime: BrokerRuntime, connection: Connection, request: RemotingCommand
) -> RemotingCommand:
    raw = str(request.ext.get("globalWhiteAddrs") or "")
    addresses = [a.strip() for a in raw.split(",") if a.strip()]

    async def replace(editor: AclFileEditor) -> None:
        await editor.update_global_white(addresses)

    what = f"The globalWhiteAddresses {raw!r} were not updated"
    return await _edit(runtime, request, ResponseCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG_FAILED, what, replace)


async def handle_acl_info(
    runtime: BrokerRuntime, connection: Connection, request: RemotingCommand
) -> RemotingCommand:
    editor = _editor(runtime)
    if editor is None:
        return _not_running(request)
    version = _version_json(editor.guard.acl.version)
    broker = runtime.ctx.broker
    return request.response(
        ResponseCode.SUCCESS,
        ext={
            "version": version,
            "allAclFileVersion": json.dumps({str(editor.path): json.loads(version)}),
            "brokerName": broker.broker_name,
            "brokerAddr": connection.local,
            "clusterName": broker.cluster_name,
        },
    )


def _version_json(version: DataVersion) -> str:
    return json.dumps({"counter": version.counter, "stateVersion": 0, "timestamp": version.timestamp})
