"""AdminClient: what ``trocket admin`` (RocketMQ's mqadmin) does, as an async Python API.

Everything goes through the NameServers for routes and then to the brokers, exactly as a
RocketMQ admin tool does, so it works against Trocket and RocketMQ brokers alike.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

import attrs

from kernel.errors import RemotingError, TrocketError
from trocket.client.credentials import resolve_credentials
from trocket.client.errors import ClientError
from trocket.client.tls import resolve_tls
from wire import record
from wire.record import StoredMessage
from wire.remoting import RemotingClient, RemotingCommand, RequestCode, ResponseCode, code_name
from wire.remoting.admin_json import loads as loads_admin_json
from wire.remoting.admin_json import split_queue_key
from wire.remoting.signature import SessionCredentials

TIMEOUT = 5.0
TOOLS_CONSUMER = "TOOLS_CONSUMER"
"""The group mqadmin uses for its one-off pulls (no offsets are committed)."""
_PULL_ANSWERS = (
    0,
    ResponseCode.PULL_NOT_FOUND,
    ResponseCode.PULL_RETRY_IMMEDIATELY,
    ResponseCode.PULL_OFFSET_MOVED,
)
TOOLS_PRODUCER = "TOOLS_PRODUCER"
"""The producer group of messages the tools send (a resent dead letter)."""


class AdminError(TrocketError):
    """A request was answered with an error code, or no server could be reached."""

    def __init__(self, message: str, *, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code
        """The response code that refused the request (None: no answer, or not a refusal)."""


@attrs.define(eq=False)
class AdminClient:
    namesrv_addrs: tuple[str, ...]
    remoting: RemotingClient
    timeout: float = TIMEOUT

    @classmethod
    @asynccontextmanager
    async def open(
        cls,
        namesrv_addrs: Sequence[str],
        *,
        timeout: float = TIMEOUT,
        credentials: SessionCredentials | None = None,
        tls: ssl.SSLContext | bool | None = None,
    ) -> AsyncIterator[AdminClient]:
        """``credentials`` (default: ``TROCKET_ACCESS_KEY``/``TROCKET_SECRET_KEY`` when set)
        sign every request, for brokers with ACL on; ``tls`` as the SDK's (default:
        ``TROCKET_TLS``/``TROCKET_TLS_CA_FILE``)."""
        if not namesrv_addrs:
            raise AdminError("no NameServer address given (use -n host:port)")
        try:
            signing = resolve_credentials(credentials)
            secure = resolve_tls(tls)
        except ClientError as error:
            raise AdminError(str(error)) from None
        async with RemotingClient.open(credentials=signing, tls=secure) as remoting:
            yield cls(tuple(namesrv_addrs), remoting, timeout)

    # --- plumbing ---------------------------------------------------------------------------

    async def call(
        self,
        address: str,
        code: int,
        ext: Mapping[str, object] | None = None,
        body: bytes = b"",
        *,
        ok: Sequence[int] = (0,),
    ) -> RemotingCommand:
        try:
            response = await self.remoting.invoke(
                address, RemotingCommand.request(code, ext, body), self.timeout
            )
        except RemotingError as error:
            raise AdminError(str(error)) from None
        if response.code not in ok:
            answer = code_name(response.code, response=True)
            remark = f" {response.remark}" if response.remark else ""
            raise AdminError(f"{code_name(code)} to {address} failed: {answer}{remark}", code=response.code)
        return response

    async def call_namesrv(
        self, code: int, ext: Mapping[str, object] | None = None, *, ok: Sequence[int] = (0,)
    ) -> RemotingCommand:
        """Ask the NameServers in turn; the first one that answers wins. When none does, the
        error carries the response code they all refused with (None when one did not answer
        or they refused differently)."""
        errors: list[AdminError] = []
        for address in self.namesrv_addrs:
            try:
                return await self.call(address, code, ext, ok=ok)
            except AdminError as error:
                errors.append(error)
        codes = {error.code for error in errors}
        raise AdminError("; ".join(map(str, errors)), code=codes.pop() if len(codes) == 1 else None)

    # --- NameServer -------------------------------------------------------------------------

    async def route(self, topic: str) -> dict[str, Any]:
        response = await self.call_namesrv(
            RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}, ok=(0, ResponseCode.TOPIC_NOT_EXIST)
        )
        if response.code == ResponseCode.TOPIC_NOT_EXIST:
            raise AdminError(
                f"topic {topic!r} has no route (no live broker serves it)", code=ResponseCode.TOPIC_NOT_EXIST
            )
        return json.loads(response.body)

    async def cluster_info(self) -> dict[str, Any]:
        return json.loads((await self.call_namesrv(RequestCode.GET_BROKER_CLUSTER_INFO)).body)

    async def topic_list(self) -> list[str]:
        return list(
            json.loads((await self.call_namesrv(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)).body)[
                "topicList"
            ]
        )

    async def master_addrs(self, cluster: str | None = None) -> dict[str, str]:
        """brokerName → master address, for one cluster or all."""
        info = await self.cluster_info()
        names = set(info["clusterAddrTable"].get(cluster, [])) if cluster else set(info["brokerAddrTable"])
        if cluster and not names:
            raise AdminError(f"cluster {cluster!r} is unknown to the NameServer")
        out = {}
        for name in sorted(names):
            addrs = info["brokerAddrTable"][name]["brokerAddrs"]
            if "0" in addrs:
                out[name] = addrs["0"]
        return out

    async def broker_addrs(self, cluster: str) -> list[str]:
        """Every broker address of a cluster, masters and slaves (ACL files live on each)."""
        info = await self.cluster_info()
        names = info["clusterAddrTable"].get(cluster, [])
        if not names:
            raise AdminError(f"cluster {cluster!r} is unknown to the NameServer")
        return [
            address
            for name in sorted(names)
            for _, address in sorted(
                info["brokerAddrTable"][name]["brokerAddrs"].items(), key=lambda i: int(i[0])
            )
        ]

    # --- ACL (plain_acl.yml on each broker) ----------------------------------------------------

    async def update_acl_config(self, broker_addr: str, account: Mapping[str, object]) -> str:
        """Create or change an account (``accessKey`` and the fields to set); "created" or
        "updated"."""
        response = await self.call(broker_addr, RequestCode.UPDATE_AND_CREATE_ACL_CONFIG, account)
        return response.remark or "updated"

    async def delete_acl_config(self, broker_addr: str, access_key: str) -> None:
        await self.call(broker_addr, RequestCode.DELETE_ACL_CONFIG, {"accessKey": access_key})

    async def update_global_white_addrs(self, broker_addr: str, addresses: Sequence[str]) -> None:
        await self.call(
            broker_addr,
            RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG,
            {"globalWhiteAddrs": ",".join(addresses)},
        )

    async def acl_config_version(self, broker_addr: str) -> dict[str, Any]:
        """``clusterName``, ``brokerName``, ``brokerAddr`` and the file's ``version``
        (``counter``, ``timestamp``)."""
        ext = (await self.call(broker_addr, RequestCode.GET_BROKER_CLUSTER_ACL_INFO)).ext
        return {
            "clusterName": ext.get("clusterName", ""),
            "brokerName": ext.get("brokerName", ""),
            "brokerAddr": ext.get("brokerAddr", broker_addr),
            "version": json.loads(ext.get("version") or "{}"),
        }

    async def set_write_perm(self, broker_name: str, writable: bool) -> dict[str, int]:
        """Wipe or add write permission on every NameServer; returns topics touched per server."""
        code = RequestCode.ADD_WRITE_PERM_OF_BROKER if writable else RequestCode.WIPE_WRITE_PERM_OF_BROKER
        field = "addTopicCount" if writable else "wipeTopicCount"
        out = {}
        for address in self.namesrv_addrs:
            response = await self.call(address, code, {"brokerName": broker_name})
            out[address] = int(response.ext.get(field, "0"))
        return out

    # --- topics -----------------------------------------------------------------------------

    async def update_topic(
        self,
        broker_addr: str,
        topic: str,
        *,
        read: int,
        write: int,
        perm: int,
        order: bool,
        attributes: str = "",
    ) -> None:
        """``attributes``: RocketMQ 5's ``+key=value,-key`` text (``+message.type=FIFO``)."""
        await self.call(
            broker_addr,
            RequestCode.UPDATE_AND_CREATE_TOPIC,
            {
                "topic": topic,
                "defaultTopic": "TBW102",
                "readQueueNums": read,
                "writeQueueNums": write,
                "perm": perm,
                "topicFilterType": "SINGLE_TAG",
                "topicSysFlag": 0,
                "order": order,
                **({"attributes": attributes} if attributes else {}),
            },
        )

    async def delete_topic(self, topic: str, cluster: str | None) -> list[str]:
        brokers = await self.master_addrs(cluster)
        for address in brokers.values():
            await self.call(address, RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": topic})
        for address in self.namesrv_addrs:
            await self.call(address, RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": topic})
        return sorted(brokers)

    async def topic_status(self, topic: str) -> list[dict[str, Any]]:
        route = await self.route(topic)
        rows = []
        for broker in route["brokerDatas"]:
            address = broker["brokerAddrs"].get("0")
            if address is not None:
                rows += await self.broker_topic_stats(address, topic)
        return sorted(rows, key=lambda r: (r["brokerName"], r["queueId"]))

    async def broker_topic_stats(
        self, address: str, topic: str, *, missing_ok: bool = False
    ) -> list[dict[str, Any]]:
        """One broker's queues of ``topic``: brokerName, queueId, minOffset, maxOffset,
        lastUpdateTimestamp (GET_TOPIC_STATS_INFO); empty if the broker lacks the topic and
        ``missing_ok``."""
        ok = (0, ResponseCode.TOPIC_NOT_EXIST) if missing_ok else (0,)
        response = await self.call(address, RequestCode.GET_TOPIC_STATS_INFO, {"topic": topic}, ok=ok)
        if response.code != 0:
            return []
        rows = []
        for key, value in loads_admin_json(response.body)["offsetTable"].items():
            _, broker_name, queue_id = split_queue_key(key)
            rows.append({"brokerName": broker_name, "queueId": queue_id, **value})
        return rows

    # --- brokers ----------------------------------------------------------------------------

    async def ha_status(self, broker_addr: str) -> dict[str, Any]:
        """RocketMQ 5's ``HARuntimeInfo`` of a broker (``GET_BROKER_HA_STATUS``)."""
        return dict(json.loads((await self.call(broker_addr, RequestCode.GET_BROKER_HA_STATUS)).body))

    # --- controller mode ---------------------------------------------------------------------

    async def controller_metadata(self, controller_addr: str) -> dict[str, str]:
        """``CONTROLLER_GET_METADATA_INFO``: the leading controller, the peers, this one's role."""
        return dict((await self.call(controller_addr, RequestCode.CONTROLLER_GET_METADATA_INFO)).ext)

    async def sync_state_data(self, controller_addr: str, broker_names: Sequence[str] = ()) -> dict[str, Any]:
        """``CONTROLLER_GET_SYNC_STATE_DATA``: each broker set's master, epochs and replicas in and
        out of its SyncStateSet (every set when ``broker_names`` is empty)."""
        body = json.dumps(list(broker_names)).encode()
        response = await self.call(controller_addr, RequestCode.CONTROLLER_GET_SYNC_STATE_DATA, body=body)
        return dict(json.loads(response.body)["replicasInfoTable"])

    async def broker_epochs(self, broker_addr: str) -> dict[str, Any]:
        """``GET_BROKER_EPOCH_CACHE``: a replica's epoch history and log end."""
        return dict(json.loads((await self.call(broker_addr, RequestCode.GET_BROKER_EPOCH_CACHE)).body))

    async def elect_master(
        self, controller_addr: str, cluster: str, broker_name: str, broker_id: int | None
    ) -> dict[str, str]:
        """``CONTROLLER_ELECT_MASTER``: move the master to ``broker_id`` (or elect one when the
        master is dead and no id is given)."""
        ext: dict[str, object] = {"clusterName": cluster, "brokerName": broker_name}
        if broker_id is not None:
            ext |= {"brokerId": broker_id, "designateElect": True}
        return dict((await self.call(controller_addr, RequestCode.CONTROLLER_ELECT_MASTER, ext)).ext)

    async def update_topics(self, broker_addr: str, configs: Sequence[Mapping[str, Any]]) -> None:
        """``UPDATE_AND_CREATE_TOPIC_LIST``: create or update every topic of ``configs`` (RocketMQ's
        TopicConfig JSON: topicName, readQueueNums, writeQueueNums, perm, ...) in one request;
        the broker takes all or none."""
        body = json.dumps({"topicConfigList": list(configs)}).encode()
        await self.call(broker_addr, RequestCode.UPDATE_AND_CREATE_TOPIC_LIST, body=body)

    async def clean_broker_metadata(
        self,
        controller_addr: str,
        cluster: str,
        broker_name: str,
        broker_ids: Sequence[int] = (),
        *,
        clean_living: bool = False,
    ) -> None:
        """``CLEAN_BROKER_DATA``: forget ``broker_ids`` of a broker set at the controller, or the
        whole set when none are given; replicas still alive only with ``clean_living``."""
        ext: dict[str, object] = {
            "clusterName": cluster,
            "brokerName": broker_name,
            "brokerControllerIdsToClean": ";".join(str(i) for i in broker_ids),
            "isCleanLivingBroker": clean_living,
        }
        await self.call(controller_addr, RequestCode.CLEAN_BROKER_DATA, ext)

    async def broker_runtime_info(self, broker_addr: str) -> dict[str, str]:
        return dict(
            json.loads((await self.call(broker_addr, RequestCode.GET_BROKER_RUNTIME_INFO)).body)["table"]
        )

    async def pending_transactions(self, broker_addr: str, group: str | None = None) -> dict[str, Any]:
        """Open transactional half messages of a broker (of ``group`` when given) and its
        transaction figures.

        :raises AdminError: the broker has no transaction plugin, or refused.
        """
        ext = {"producerGroup": group} if group else {}
        response = await self.call(
            broker_addr,
            RequestCode.QUERY_PENDING_TRANSACTIONS,
            ext,
            ok=(ResponseCode.SUCCESS, ResponseCode.REQUEST_CODE_NOT_SUPPORTED),
        )
        if response.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
            raise AdminError(f"broker {broker_addr} does not handle transactions (no transaction plugin)")
        return dict(json.loads(response.body))

    # --- messages ---------------------------------------------------------------------------

    async def query_by_key(
        self,
        topic: str,
        key: str,
        *,
        unique: bool = False,
        max_num: int = 64,
        begin_ms: int = 0,
        end_ms: int = 2**62,
    ) -> list[StoredMessage]:
        """Messages of ``topic`` indexed under ``key`` (``unique``: the client's message id),
        stored between ``begin_ms`` and ``end_ms``, at most ``max_num`` per broker."""
        route = await self.route(topic)
        found: list[StoredMessage] = []
        for broker in route["brokerDatas"]:
            for address in broker["brokerAddrs"].values():
                response = await self.call(
                    address,
                    RequestCode.QUERY_MESSAGE,
                    {
                        "topic": topic,
                        "key": key,
                        "maxNum": max_num,
                        "beginTimestamp": begin_ms,
                        "endTimestamp": end_ms,
                        "_UNIQUE_KEY_QUERY": unique,
                    },
                    ok=(0, ResponseCode.QUERY_NOT_FOUND),
                )
                if response.code == 0:
                    found += record.decode_records(response.body)
                break  # the master answers for its broker name
        return found

    async def view_message(self, offset_msg_id: str) -> StoredMessage:
        try:
            (host, port), offset = record.parse_offset_msg_id(offset_msg_id)
        except ValueError as error:
            raise AdminError(f"{offset_msg_id!r} is not an offset message id: {error}") from None
        response = await self.call(f"{host}:{port}", RequestCode.VIEW_MESSAGE_BY_ID, {"offset": offset})
        return record.decode_record(response.body)

    async def message_at(
        self, topic: str, broker_name: str, queue_id: int, offset: int
    ) -> StoredMessage | None:
        route = await self.route(topic)
        addresses = [
            b["brokerAddrs"].get("0") for b in route["brokerDatas"] if b["brokerName"] == broker_name
        ]
        if not addresses or addresses[0] is None:
            raise AdminError(f"broker {broker_name!r} does not serve topic {topic!r}")
        messages, _ = await self.pull(addresses[0], topic, queue_id, offset, 1)
        return messages[0] if messages else None

    async def pull(
        self, address: str, topic: str, queue_id: int, offset: int, max_nums: int
    ) -> tuple[list[StoredMessage], int]:
        """Messages from ``offset`` on, as the tools' group (no offset is committed), and the
        offset to pull from next."""
        response = await self.call(
            address,
            RequestCode.PULL_MESSAGE,
            {
                "consumerGroup": TOOLS_CONSUMER,
                "topic": topic,
                "queueId": queue_id,
                "queueOffset": offset,
                "maxMsgNums": max_nums,
                "sysFlag": 4,
                "commitOffset": 0,
                "suspendTimeoutMillis": 0,
                "subscription": "*",
                "subVersion": 0,
            },
            ok=_PULL_ANSWERS,
        )
        next_offset = int(response.ext.get("nextBeginOffset", offset))
        if response.code != 0 or not response.body:
            return [], next_offset
        return record.decode_records(response.body), next_offset

    # --- consumers --------------------------------------------------------------------------

    async def consumer_progress(self, group: str) -> list[dict[str, Any]]:
        rows = []
        for broker_name, address in (await self.master_addrs()).items():
            response = await self.call(
                address,
                RequestCode.GET_CONSUME_STATS,
                {"consumerGroup": group},
                ok=(0, ResponseCode.SYSTEM_ERROR),
            )
            if response.code != 0:
                continue
            for key, value in loads_admin_json(response.body)["offsetTable"].items():
                topic, name, queue_id = split_queue_key(key)
                rows.append(
                    {
                        "topic": topic,
                        "brokerName": name or broker_name,
                        "queueId": queue_id,
                        **value,
                        "diff": value["brokerOffset"] - value["consumerOffset"],
                    }
                )
        if not rows:
            raise AdminError(f"consumer group {group!r} has no progress on any broker")
        return sorted(rows, key=lambda r: (r["topic"], r["brokerName"], r["queueId"]))

    async def consumer_connection(self, group: str) -> dict[str, Any]:
        errors = []
        for address in (await self.master_addrs()).values():
            response = await self.call(
                address,
                RequestCode.GET_CONSUMER_CONNECTION_LIST,
                {"consumerGroup": group},
                ok=(0, ResponseCode.CONSUMER_NOT_ONLINE),
            )
            if response.code == 0:
                return dict(json.loads(response.body))
            errors.append(response.remark or "")
        raise AdminError(f"consumer group {group!r} is not online" + (f" ({errors[0]})" if errors else ""))

    async def offset_by_time(self, broker_addr: str, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """The first queue offset whose message was stored at or after ``timestamp_ms``
        (``SEARCH_OFFSET_BY_TIMESTAMP``; the queue's end when none was)."""
        response = await self.call(
            broker_addr,
            RequestCode.SEARCH_OFFSET_BY_TIMESTAMP,
            {"topic": topic, "queueId": queue_id, "timestamp": timestamp_ms},
        )
        return int(response.ext.get("offset", "0"))

    async def commit_offset(
        self, broker_addr: str, group: str, topic: str, queue_id: int, offset: int
    ) -> None:
        """Set ``group``'s committed offset of one queue (``UPDATE_CONSUMER_OFFSET``)."""
        await self.call(
            broker_addr,
            RequestCode.UPDATE_CONSUMER_OFFSET,
            {"consumerGroup": group, "topic": topic, "queueId": queue_id, "commitOffset": offset},
        )

    async def reset_offset_by_time(self, group: str, topic: str, timestamp_ms: int) -> list[dict[str, Any]]:
        """Commit, for every queue of ``topic`` on every master, the offset of the first message
        stored at or after ``timestamp_ms`` (mqadmin ``resetOffsetByTime`` for a group whose
        consumers are stopped: running ones keep the offsets they hold and commit them again).
        Returns one row per queue with its old and new offset."""
        rows = []
        masters = await self.master_addrs()
        for queue in await self.topic_status(topic):
            address = masters.get(queue["brokerName"])
            if address is None:
                continue
            offset = await self.offset_by_time(address, topic, queue["queueId"], timestamp_ms)
            before = await self.call(
                address,
                RequestCode.QUERY_CONSUMER_OFFSET,
                {
                    "consumerGroup": group,
                    "topic": topic,
                    "queueId": queue["queueId"],
                    "setZeroIfNotFound": False,
                },
                ok=(0, ResponseCode.QUERY_NOT_FOUND),
            )
            await self.commit_offset(address, group, topic, queue["queueId"], offset)
            rows.append(
                {
                    "brokerName": queue["brokerName"],
                    "queueId": queue["queueId"],
                    "oldOffset": int(before.ext.get("offset", "-1")) if before.code == 0 else -1,
                    "newOffset": offset,
                }
            )
        if not rows:
            raise AdminError(f"topic {topic!r} has no queue on a master broker")
        return rows

    async def delete_sub_group(self, group: str, cluster: str | None = None) -> list[str]:
        """Delete ``group``'s subscription config on every master (mqadmin ``deleteSubGroup``);
        the brokers' names."""
        brokers = await self.master_addrs(cluster)
        for address in brokers.values():
            await self.call(address, RequestCode.DELETE_SUBSCRIPTIONGROUP, {"groupName": group})
        return sorted(brokers)

    async def update_sub_group(self, broker_addr: str, config: Mapping[str, Any]) -> None:
        await self.call(
            broker_addr,
            RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
            body=json.dumps(dict(config)).encode(),
        )
