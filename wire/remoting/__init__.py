"""RocketMQ's remoting protocol: frame codec, connection, server and client (shared by the
broker's network plugin, the NameServer plugin, the admin CLI and the client SDK)."""

from wire.remoting.client import RemotingClient, split_address
from wire.remoting.codes import RequestCode, ResponseCode, code_name
from wire.remoting.command import (
    FLAG_ONEWAY,
    FLAG_RESPONSE,
    SERIALIZE_JSON,
    SERIALIZE_ROCKETMQ,
    FrameDecoder,
    FrameError,
    RemotingCommand,
    parse_bool,
    string_fields,
)
from wire.remoting.connection import Connection, Guard, Handler, Router, TransportLimits
from wire.remoting.server import RemotingServer, format_address

__all__ = [
    "Guard",
    "FLAG_ONEWAY",
    "FLAG_RESPONSE",
    "SERIALIZE_JSON",
    "SERIALIZE_ROCKETMQ",
    "Connection",
    "FrameDecoder",
    "FrameError",
    "Handler",
    "RemotingClient",
    "RemotingCommand",
    "RemotingServer",
    "RequestCode",
    "ResponseCode",
    "Router",
    "TransportLimits",
    "code_name",
    "format_address",
    "parse_bool",
    "split_address",
    "string_fields",
]
