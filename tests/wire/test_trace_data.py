"""RocketMQ 4.x trace data: records written as RocketMQ's clients write them decode to the same
fields, old record lengths included, and what Trocket encodes decodes back unchanged."""

from __future__ import annotations

from wire.trace_data import CONTENT_SPLITOR as C
from wire.trace_data import FIELD_SPLITOR as F
from wire.trace_data import MessageType, TraceRecord, TraceType, decode, encode


def line(*fields: object) -> str:
    return C.join(str(f) for f in fields) + F


def test_records_in_rocketmq_layout_decode_field_by_field():
    body = (
        line(
            "Pub",
            1700000000000,
            "DefaultRegion",
            "PG",
            "Orders",
            "UNIQ1",
            "paid",
            "k1",
            "10.0.0.1:10911",
            128,
            3,
            0,
            "OFFSET1",
            "true",
        )
        + line("SubBefore", 1700000000100, "DefaultRegion", "CG", "req-1", "UNIQ1", 0, "k1")
        + line("SubAfter", "req-1", "UNIQ1", 7, "true", "k1", 0, 1700000000107)
        + line(
            "EndTransaction",
            1700000000200,
            "DefaultRegion",
            "PG",
            "Orders",
            "UNIQ2",
            "",
            "k2",
            "10.0.0.1:10911",
            1,
            "TX-1",
            "COMMIT_MESSAGE",
            "false",
        )
    )
    pub, before, after, end = decode(body)
    assert encode([pub, before, after, end])[0] == body, "encoded exactly as RocketMQ's clients write"
    assert pub == TraceRecord(
        TraceType.PUB,
        "UNIQ1",
        1700000000000,
        "DefaultRegion",
        "PG",
        "Orders",
        "paid",
        "k1",
        "10.0.0.1:10911",
        128,
        3,
        MessageType.NORMAL,
        "OFFSET1",
        True,
    )
    assert (before.group, before.request_id, before.retry_times, before.msg_id) == ("CG", "req-1", 0, "UNIQ1")
    assert (after.request_id, after.cost_ms, after.success, after.timestamp) == (
        "req-1",
        7,
        True,
        1700000000107,
    )
    assert (end.transaction_id, end.transaction_state, end.message_type) == ("TX-1", "COMMIT_MESSAGE", 1)


def test_older_and_newer_record_lengths_and_damage_are_tolerated():
    old_pub = line("Pub", 1, "R", "PG", "T", "M", "", "", "h:1", 5, 2, 0, "false")  # 13 fields
    new_pub = line(
        "Pub", 1, "R", "PG", "T", "M", "", "", "h:1", 5, 2, 0, "O", "true", "10.9.9.9"
    )  # 15 fields
    old_after = line("SubAfter", "r", "M", 4, "false", "")  # no return code, no timestamp
    garbage = line("Pub", "not a number") + line("Unknown", 1, 2) + "no splitter at all"
    old, new, after = decode(old_pub + new_pub + old_after + garbage)
    assert old.success is False and old.offset_msg_id == ""
    assert new.client_host == "10.9.9.9" and new.offset_msg_id == "O"
    assert after.success is False and after.timestamp == 0 and after.context_code == 0


def test_what_is_encoded_decodes_back_with_its_keys():
    records = [
        TraceRecord(
            TraceType.PUB, "M1", 10, "DefaultRegion", "PG", "T", "a", "k1 k2", "h:1", 12, 1, 0, "O1", True
        ),
        TraceRecord(TraceType.SUB_BEFORE, "M1", 20, "DefaultRegion", "CG", keys="k1 k2", request_id="r1"),
        TraceRecord(TraceType.SUB_AFTER, "M1", 25, keys="k1 k2", cost_ms=5, request_id="r1", success=False),
        TraceRecord(
            TraceType.END_TRANSACTION,
            "M2",
            30,
            "R",
            "PG",
            "T",
            message_type=MessageType.TRANS_HALF,
            transaction_id="X",
            transaction_state="ROLLBACK_MESSAGE",
            from_check=True,
        ),
    ]
    body, keys = encode(records)
    assert decode(body) == records
    assert keys == ["M1", "k1 k2", "M2"]
