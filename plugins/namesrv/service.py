"""The NameServer service: route lookups for clients, registrations from brokers."""

from __future__ import annotations

import json
import logging
import zlib
from typing import Any

import attrs
import trio

from kernel import runtime_settings
from kernel.config import property_aliases as rocketmq
from kernel.config.effective import effective_settings, properties_text
from kernel.config.properties_file import parse_properties
from kernel.config.property_aliases import PropertyAlias
from kernel.context import REQUEST_METERS, BrokerContext, BrokerRuntime
from kernel.errors import ConfigError
from kernel.tls_config import server_tls
from plugins.namesrv.config import NamesrvConfig
from plugins.namesrv.kv_config import KvConfig
from plugins.namesrv.route_table import Registration, RouteTable
from wire.remoting import (
    Connection,
    RemotingCommand,
    RemotingServer,
    RequestCode,
    ResponseCode,
    Router,
    TransportLimits,
    parse_bool,
)
from wire.remoting.metering import RequestMeter
from wire.remoting.register_body import RegisterBodyError, decode_register_body
from wire.remoting.tls import ServerTls

log = logging.getLogger(__name__)

ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"


def _json(data: Any) -> bytes:
    return json.dumps(data, separators=(",", ":")).encode()


@attrs.define(eq=False)
class NameServer:
    """Serves RocketMQ's NameServer requests; one instance per configured process."""

    config: NamesrvConfig
    kv: KvConfig
    routes: RouteTable = attrs.field(factory=RouteTable)
    tls: ServerTls | None = None
    server: RemotingServer | None = None
    meter: RequestMeter | None = None
    """Counts the requests served, when a metrics plugin asked for figures."""
    ctx: BrokerContext | None = None
    """The process's context: its effective settings and runtime settings."""

    @classmethod
    def make(cls, runtime: BrokerRuntime) -> NameServer:
        config = runtime.ctx.plugin_config(NamesrvConfig)
        path = config.kv_config_path or runtime.ctx.data_dir / "namesrv" / "kvConfig.json"
        meters = runtime.ctx.stash.get(REQUEST_METERS, None)
        return cls(
            config,
            KvConfig.load(path),
            tls=server_tls(runtime.ctx.config),
            meter=meters.meter("nameserver") if meters is not None else None,
            ctx=runtime.ctx,
        )

    @property
    def address(self) -> str:
        assert self.server is not None, "not started"
        return self.server.address

    def router(self) -> Router:
        router = Router(name="namesrv", meter=self.meter)
        for code, handler in {
            RequestCode.REGISTER_BROKER: self.register_broker,
            RequestCode.UNREGISTER_BROKER: self.unregister_broker,
            RequestCode.QUERY_DATA_VERSION: self.query_data_version,
            RequestCode.GET_ROUTEINFO_BY_TOPIC: self.get_route,
            RequestCode.GET_BROKER_CLUSTER_INFO: self.get_cluster_info,
            RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: self.get_topic_list,
            RequestCode.WIPE_WRITE_PERM_OF_BROKER: self.wipe_write_perm,
            RequestCode.ADD_WRITE_PERM_OF_BROKER: self.add_write_perm,
            RequestCode.DELETE_TOPIC_IN_NAMESRV: self.delete_topic,
            RequestCode.PUT_KV_CONFIG: self.put_kv,
            RequestCode.GET_KV_CONFIG: self.get_kv,
            RequestCode.DELETE_KV_CONFIG: self.delete_kv,
            RequestCode.GET_KVLIST_BY_NAMESPACE: self.get_kv_list,
            RequestCode.GET_NAMESRV_CONFIG: self.get_config,
            RequestCode.UPDATE_NAMESRV_CONFIG: self.update_config,
        }.items():
            router.register(code, handler)
        return router

    def _runtime_settings(self, ctx: BrokerContext) -> list[runtime_settings.RuntimeSetting]:
        """How long a silent broker stays in routes and how often that is checked: read by the
        expiry loop at each round, so ``updateNamesrvConfig`` changes them in place."""

        def replace(config: NamesrvConfig) -> None:
            self.config = config

        return [
            runtime_settings.table_setting(
                ctx,
                f"namesrv.{field}",
                PropertyAlias(field, rocketmq.text, "a duration (120s, 2m)"),
                lambda: self.config,
                replace,
            )  # fmt: skip
            for field in ("broker_expiry", "scan_interval")
        ]

    async def run(self, *, task_status: trio.TaskStatus[NameServer] = trio.TASK_STATUS_IGNORED) -> None:
        if self.ctx is not None:
            runtime_settings.offer(self.ctx, self._runtime_settings(self.ctx))
        self.server = RemotingServer(
            "namesrv",
            self.config.listen_host,
            self.config.listen_port,
            self.router(),
            TransportLimits(
                self.config.max_frame_size,
                max_connections=self.config.max_connections,
                idle_timeout=self.config.channel_max_idle_time,
                frame_timeout=self.config.frame_read_timeout,
            ),
            on_close=[self._connection_closed],
            tls=self.tls,
        )
        async with trio.open_nursery() as nursery:
            await nursery.start(self.server.run)
            nursery.start_soon(self._expire_loop)
            task_status.started(self)

    async def _expire_loop(self) -> None:
        while True:
            await trio.sleep(self.config.scan_interval)
            for addr in self.routes.expire(trio.current_time(), self.config.broker_expiry):
                log.warning("broker %s expired: no registration for %.0fs", addr, self.config.broker_expiry)

    def _connection_closed(self, connection: Connection) -> None:
        for addr in self.routes.channel_closed(connection):
            log.info("broker %s removed: its connection closed (%s)", addr, connection.close_reason)

    # --- handlers ---------------------------------------------------------------------------

    async def register_broker(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        ext = request.ext
        missing = [k for k in ("brokerName", "brokerAddr", "clusterName", "brokerId") if not ext.get(k)]
        if missing:
            return request.response(ResponseCode.SYSTEM_ERROR, remark=f"missing header fields {missing}")
        crc = int(ext.get("bodyCrc32", "0") or 0)
        if crc and zlib.crc32(request.body) & 0x7FFFFFFF != crc:
            return request.response(ResponseCode.SYSTEM_ERROR, remark="crc32 not match")
        try:
            version, topics = decode_register_body(request.body, compressed=parse_bool(ext.get("compressed")))
        except RegisterBodyError as error:
            return request.response(ResponseCode.SYSTEM_ERROR, remark=str(error))
        registration = Registration(
            ext["clusterName"],
            ext["brokerAddr"],
            ext["brokerName"],
            int(ext["brokerId"]),
            ext.get("haServerAddr", ""),
            version,
            topics,
            connection,
        )
        outranked_by = self.routes.stale_master(registration)
        if outranked_by:
            log.warning(
                "master registration of %s/%s at %s ignored: %s registered a newer master epoch",
                ext["clusterName"], ext["brokerName"], ext["brokerAddr"], outranked_by,
            )  # fmt: skip
        master, master_ha = self.routes.register(registration, trio.current_time())
        body = _json({"table": self.kv.namespace(ORDER_TOPIC_CONFIG)})
        return request.response(
            ext={"masterAddr": master or None, "haServerAddr": master_ha or None}, body=body
        )

    async def unregister_broker(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        ext = request.ext
        self.routes.unregister(
            ext.get("clusterName", ""),
            ext.get("brokerAddr", ""),
            ext.get("brokerName", ""),
            int(ext.get("brokerId", 0)),
        )
        log.info("broker %s unregistered", ext.get("brokerAddr"))
        return request.response()

    async def query_data_version(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        try:
            version = json.loads(request.body) if request.body else {}
        except ValueError as error:
            return request.response(
                ResponseCode.SYSTEM_ERROR, remark=f"data version does not decode: {error}"
            )
        changed = self.routes.data_version_changed(
            request.ext.get("brokerAddr", ""), version, trio.current_time()
        )
        return request.response(ext={"changed": changed})

    async def get_route(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        topic = request.ext.get("topic", "")
        route = self.routes.route(topic)
        if route is None:
            return request.response(
                ResponseCode.TOPIC_NOT_EXIST,
                remark=f"No topic route info in name server for the topic: {topic}",
            )
        order = self.kv.get(ORDER_TOPIC_CONFIG, topic)
        if order:
            route["orderTopicConf"] = order
        return request.response(body=_json(route))

    async def get_cluster_info(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        return request.response(body=_json(self.routes.cluster_info()))

    async def get_topic_list(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        return request.response(body=_json({"topicList": self.routes.topic_list()}))

    async def wipe_write_perm(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        count = self.routes.set_write_perm(request.ext.get("brokerName", ""), writable=False)
        return request.response(ext={"wipeTopicCount": count})

    async def add_write_perm(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        count = self.routes.set_write_perm(request.ext.get("brokerName", ""), writable=True)
        return request.response(ext={"addTopicCount": count})

    async def delete_topic(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        self.routes.delete_topic(request.ext.get("topic", ""))
        return request.response()

    async def put_kv(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        ext = request.ext
        if not ext.get("namespace") or not ext.get("key"):
            return request.response(ResponseCode.SYSTEM_ERROR, remark="namespace and key are required")
        await self.kv.put(ext["namespace"], ext["key"], ext.get("value", ""))
        return request.response()

    async def get_kv(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        namespace, key = request.ext.get("namespace", ""), request.ext.get("key", "")
        value = self.kv.get(namespace, key)
        if value is None:
            return request.response(
                ResponseCode.QUERY_NOT_FOUND, remark=f"No config item, Namespace: {namespace} Key: {key}"
            )
        return request.response(ext={"value": value})

    async def delete_kv(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        await self.kv.delete(request.ext.get("namespace", ""), request.ext.get("key", ""))
        return request.response()

    async def get_config(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        """RocketMQ's ``GET_NAMESRV_CONFIG``: the process's effective settings as properties."""
        if self.ctx is None:
            return request.response(ResponseCode.SYSTEM_ERROR, remark="this NameServer has no configuration")
        return request.response(body=properties_text(effective_settings(self.ctx)).encode())

    async def update_config(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        """RocketMQ's ``UPDATE_NAMESRV_CONFIG``: the body's ``key=value`` lines, all applied and
        kept, or none (a key that takes effect only at a restart is refused with the reason)."""
        if self.ctx is None:
            return request.response(ResponseCode.SYSTEM_ERROR, remark="this NameServer has no configuration")
        try:
            changes = parse_properties(
                request.body.decode("utf-8", "replace"), source="UPDATE_NAMESRV_CONFIG"
            )
            runtime_settings.update(self.ctx, changes)
        except runtime_settings.SettingRefused as refused:
            code = ResponseCode.NO_PERMISSION if refused.unchangeable else ResponseCode.INVALID_PARAMETER
            return request.response(code, remark=str(refused))
        except ConfigError as error:
            return request.response(ResponseCode.INVALID_PARAMETER, remark=str(error))
        return request.response()

    async def get_kv_list(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        table = self.kv.namespace(request.ext.get("namespace", ""))
        if not table:
            return request.response(
                ResponseCode.QUERY_NOT_FOUND,
                remark=f"No config item, Namespace: {request.ext.get('namespace')}",
            )
        return request.response(body=_json({"table": table}))
