"""The dispatch record's ids and hosts, for either address family: the offset id as RocketMQ
writes it (16 bytes for IPv4, 28 for IPv6: address, port, offset) and the packed host columns."""

from __future__ import annotations

from wire.dispatch_record import DispatchRecord, host_text, pack_host
from wire.record import offset_msg_id as stored_offset_msg_id


def record(**fields: object) -> DispatchRecord:
    base: dict[str, object] = dict(
        topic="T", queue_id=0, queue_offset=0, physical_offset=4096, size=100, tags_code=0, store_timestamp=0,
        sys_flag=0, keys="", unique_key=None, properties={},
    )  # fmt: skip
    return DispatchRecord(**(base | fields))  # type: ignore[arg-type]


def test_ids_of_ipv4_records_are_the_brokers_own():
    r = record(store_host="10.1.2.3:10911", born_host="10.9.9.9:50000")
    assert r.offset_msg_id == stored_offset_msg_id(("10.1.2.3", 10911), 4096)
    assert len(r.offset_msg_id) == 32 and r.msg_id == r.offset_msg_id
    assert record(unique_key="ABC", store_host="10.1.2.3:10911").msg_id == "ABC"


def test_ipv6_hosts_give_rocketmqs_longer_offset_id():
    r = record(store_host="[fe80::1]:10911")
    assert len(r.offset_msg_id) == 56
    assert r.offset_msg_id.startswith("FE80" + "0" * 24 + "0001" + f"{10911:08X}")


def test_packed_hosts_round_trip_and_unknown_ones_are_zero():
    for host in ("127.0.0.1:10911", "10.0.0.255:1", "255.255.255.255:65535"):
        assert host_text(pack_host(host)) == host
    assert pack_host("[::1]:10911") == 0 and pack_host("") == 0
