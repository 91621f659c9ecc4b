"""A slave copies its master's metadata every ``slave_sync_interval`` (RocketMQ's
SlaveSynchronize): topics (``GET_ALL_TOPIC_CONFIG``), consumer offsets
(``GET_ALL_CONSUMER_OFFSET``) and subscription groups (``GET_ALL_SUBSCRIPTIONGROUP_CONFIG``), so a
consumer that moves to the slave while its master is down resumes where it was.

The master's address is the one the NameServer names in its registration answer. A master that
cannot be reached leaves the slave's copy as it was (the last synchronised state is what
consumers get while the master is down).
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

import attrs
import trio

from kernel.errors import RemotingError
from kernel.persist import JsonStateFile, lenient_json_keys, read_json_with_backup
from plugins.remoting.handlers.admin import DELAY_OFFSET_FILE
from plugins.remoting.subscriptions import SubscriptionGroupConfig
from plugins.remoting.topics import TopicConfig
from wire.remoting import RemotingClient, RemotingCommand, RequestCode, ResponseCode

if TYPE_CHECKING:
    from plugins.remoting.service import BrokerNetwork

log = logging.getLogger(__name__)
REQUEST_TIMEOUT = 3.0


@attrs.define(eq=False)
class SlaveSynchronizer:
    net: BrokerNetwork
    last_error: str = ""

    async def run(self) -> None:
        async with self.net.outgoing.open() as client:
            while True:
                master = self.net.registration.master_addr if self.net.registration else ""
                if master and self.net.is_slave:
                    try:
                        await self.sync_once(client, master)
                    except (RemotingError, ValueError, KeyError, TypeError) as error:
                        self._failed(f"{master}: {error}")
                await trio.sleep(self.net.config.slave_sync_interval)

    def _failed(self, reason: str) -> None:
        if reason != self.last_error:
            log.warning("slave metadata sync from master %s failed (keeping the last copy)", reason)
        self.last_error = reason

    async def _fetch(self, client: RemotingClient, master: str, code: int) -> Any:
        response = await client.invoke(master, RemotingCommand.request(code), REQUEST_TIMEOUT)
        if response.code != ResponseCode.SUCCESS:
            raise ValueError(f"request {code} answered {response.code}: {response.remark}")
        # A Java master's files carry fastjson's unquoted integer keys.
        return json.loads(lenient_json_keys(response.body.decode()))

    async def sync_once(self, client: RemotingClient, master: str) -> None:
        net = self.net
        topics = await self._fetch(client, master, RequestCode.GET_ALL_TOPIC_CONFIG)
        offsets = await self._fetch(client, master, RequestCode.GET_ALL_CONSUMER_OFFSET)
        groups = await self._fetch(client, master, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
        copied_topics = {
            name: TopicConfig.from_json({"topicName": name, **item})
            for name, item in (topics.get("topicConfigTable") or {}).items()
        }
        if copied_topics != net.topics.topics:
            for name in set(net.topics.topics) - set(copied_topics):
                net.topics.delete(name)
            for config in copied_topics.values():
                if net.topics.get(config.topic_name) != config:
                    net.topics.update(config)
            await net.topics.persist()
        table = {
            key: {int(q): int(o) for q, o in queues.items()}
            for key, queues in (offsets.get("offsetTable") or {}).items()
        }
        if table != net.offsets.table:
            net.offsets.table = table
            net.offsets.dirty = True
            await net.offsets.persist()
        copied_groups = {
            name: SubscriptionGroupConfig.from_json({"groupName": name, **item})
            for name, item in (groups.get("subscriptionGroupTable") or {}).items()
        }
        if copied_groups != net.groups.groups:
            net.groups.groups = copied_groups
            net.groups.version.bump()
            await net.groups.persist()
        delays = await self._fetch(client, master, RequestCode.GET_ALL_DELAY_OFFSET)
        path = net.runtime.ctx.data_dir / "config" / DELAY_OFFSET_FILE
        if delays.get("offsetTable") and read_json_with_backup(path, preprocess=lenient_json_keys) != delays:
            await JsonStateFile(path).write(delays)
        if self.last_error:
            log.info("slave metadata sync from master %s works again", master)
            self.last_error = ""
