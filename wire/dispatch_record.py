"""What derived views learn about one stored record (the store's dispatch loop decodes it)."""

from __future__ import annotations

import functools
import ipaddress
import struct

import attrs

_PORT_OFFSET = struct.Struct(">iq")


@functools.lru_cache(maxsize=4096)
def pack_host(host: str) -> int:
    """An IPv4 ``ip:port`` as the commit log stores it (IP, then port, big-endian: one
    64-bit number); 0 for anything else."""
    ip, _, port = host.rpartition(":")
    try:
        return int(ipaddress.IPv4Address(ip)) << 32 | int(port)
    except ValueError:
        return 0


def host_text(packed: int) -> str:
    """:func:`pack_host` undone: ``ip:port``."""
    return f"{ipaddress.IPv4Address(packed >> 32)}:{packed & 0xFFFFFFFF}"


def offset_msg_id(store_host: str, physical_offset: int) -> str:
    """RocketMQ's offset message id: the store host's address and port, then the commit-log
    offset, as upper-case hex (32 characters for IPv4, 56 for IPv6: ``[ip6]:port``)."""
    ip, _, port = store_host.rpartition(":")
    address = ipaddress.ip_address(ip.strip("[]"))
    return (address.packed + _PORT_OFFSET.pack(int(port), physical_offset)).hex().upper()


@attrs.define
class DispatchRecord:
    """What derived views learn about one stored record, decoded once per dispatch batch.

    Hosts are ``ip:port`` text (``[ip6]:port`` for IPv6), as the record states them: the
    client that sent the message (``born_host``) and the broker that first stored it
    (``store_host``; a slave's records keep their master's)."""

    topic: str
    queue_id: int
    queue_offset: int
    physical_offset: int
    size: int
    """The whole record's bytes in the commit log."""
    tags_code: int
    store_timestamp: int
    sys_flag: int
    keys: str
    unique_key: str | None
    properties: dict[str, str]
    prepared_transaction_offset: int = 0
    body_length: int = 0
    """The body's bytes as stored (compressed when ``sys_flag`` bit 0 is set)."""
    born_host: str = ""
    store_host: str = ""

    @property
    def offset_msg_id(self) -> str:
        """The broker's id of the record (store host and commit-log offset; ``queryMsgById``)."""
        return offset_msg_id(self.store_host, self.physical_offset)

    @property
    def msg_id(self) -> str:
        """The message's id as clients see it: the producer's ``UNIQ_KEY``, else the broker's
        offset id (RocketMQ's ``MessageExt.getMsgId``)."""
        return self.unique_key or self.offset_msg_id
