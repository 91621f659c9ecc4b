"""The six allocation strategies: seed 001's examples, each strategy's contract, and properties
every rebalance relies on (each queue to exactly one consumer, same answer for the same input,
consistent hashing moves few queues)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kernel.host import PluginHost
from kernel.model import MessageQueue
from plugins.allocate import STRATEGIES, strategy_named
from plugins.allocate.strategies import (
    averagely,
    averagely_by_circle,
    consistent_hash,
    consumer_room,
)


def queues(count: int, broker: str = "broker-a", topic: str = "T") -> list[MessageQueue]:
    return [MessageQueue(topic, broker, i) for i in range(count)]


def consumers(count: int) -> list[str]:
    return [f"10.0.0.{i}@c{i:02d}" for i in range(count)]


def split(allocate, qs, cids, group="G") -> dict[str, list[MessageQueue]]:
    return {cid: allocate(group, cid, qs, cids) for cid in cids}


def ids(assigned: list[MessageQueue]) -> list[int]:
    return [q.queue_id for q in assigned]


def assert_each_queue_exactly_once(assignment: dict[str, list[MessageQueue]], qs) -> None:
    given_out = [q for mine in assignment.values() for q in mine]
    assert sorted(given_out, key=lambda q: (q.broker_name, q.queue_id)) == sorted(
        qs, key=lambda q: (q.broker_name, q.queue_id)
    )


# --- seed 001's examples --------------------------------------------------------------------


def test_averagely_ten_consumers_twenty_two_queues():
    assignment = split(averagely, queues(22), consumers(10))
    got = [ids(assignment[c]) for c in consumers(10)]
    assert got[0] == [0, 1, 2] and got[1] == [3, 4, 5]
    assert got[2:] == [[6, 7], [8, 9], [10, 11], [12, 13], [14, 15], [16, 17], [18, 19], [20, 21]]


def test_averagely_by_circle_ten_consumers_twenty_two_queues():
    assignment = split(averagely_by_circle, queues(22), consumers(10))
    got = [ids(assignment[c]) for c in consumers(10)]
    assert got[0] == [0, 10, 20] and got[1] == [1, 11, 21] and got[2] == [2, 12] and got[9] == [9, 19]


@pytest.mark.parametrize("name", ["averagely", "averagely_by_circle", "consistent_hash"])
def test_more_consumers_than_queues_leaves_some_idle(name):
    allocate = strategy_named(name).bind({})
    assignment = split(allocate, queues(3), consumers(8))
    assert_each_queue_exactly_once(assignment, queues(3))
    assert sum(1 for mine in assignment.values() if not mine) == 5
    if name != "consistent_hash":
        assert all(len(mine) <= 1 for mine in assignment.values())


@pytest.mark.parametrize("strategy", [s for s in STRATEGIES if s.name != "by_config"], ids=lambda s: s.name)
def test_an_unknown_consumer_gets_nothing(strategy):
    """(by_config is the exception, as in RocketMQ: it returns its queues to whoever asks.)"""
    allocate = strategy.bind({"rooms": "broker"} if strategy.name == "by_machine_room" else {})
    assert allocate("G", "stranger", queues(4), consumers(2)) == []


# --- configured strategies -----------------------------------------------------------------


def test_by_config_returns_the_configured_queues_that_exist():
    allocate = strategy_named("by_config").bind({"queues": "broker-a:1, broker-a:3,broker-b:0,broker-a:9"})
    qs = queues(4) + queues(2, "broker-b")
    assert allocate("G", "anyone", qs, ["anyone", "other"]) == [qs[1], qs[3], qs[4]]


def test_by_machine_room_shares_only_the_rooms_queues():
    qs = queues(5, "hz@broker-a") + queues(3, "sh@broker-b")
    allocate = strategy_named("by_machine_room").bind({"rooms": "hz"})
    assignment = split(allocate, qs, consumers(2))
    assert_each_queue_exactly_once(assignment, qs[:5])
    c0, c1 = consumers(2)
    assert ids(assignment[c0]) == [0, 1, 4] and ids(assignment[c1]) == [2, 3]


def test_machine_room_nearby_prefers_consumers_in_the_same_room():
    qs = queues(4, "hz@broker-a") + queues(4, "sh@broker-b") + queues(2, "bj@broker-c")
    cids = ["10.0.0.1@hz-app-1", "10.0.0.2@hz-app-2", "10.0.0.3@sh-app-1"]
    assignment = split(strategy_named("machine_room_nearby").bind({}), qs, cids)
    assert_each_queue_exactly_once(assignment, qs)
    rooms = {cid: {q.broker_name.split("@")[0] for q in mine} for cid, mine in assignment.items()}
    assert rooms[cids[0]] <= {"hz", "bj"} and rooms[cids[1]] <= {"hz", "bj"}
    assert rooms[cids[2]] <= {"sh", "bj"} and len(assignment[cids[2]]) >= 4, "sh's queues stay in sh"
    bj = [cid for cid, mine in assignment.items() if any(q.broker_name.startswith("bj@") for q in mine)]
    assert len(bj) == 2, "a room with no consumer is shared by everyone"


def test_machine_room_nearby_can_decorate_another_strategy():
    inner = strategy_named("machine_room_nearby").bind({"inner": "averagely_by_circle"})
    qs = queues(6, "hz@b")
    cids = ["1@hz-a", "2@hz-b"]
    assert ids(inner("G", cids[0], qs, cids)) == [0, 2, 4]


def test_consumer_rooms_come_from_the_instance_name():
    assert consumer_room("10.0.0.7@hz-orders-1") == "hz"
    assert consumer_room("10.0.0.7@hz@orders") == "hz"
    assert consumer_room("plain") == "plain"


@pytest.mark.parametrize(
    ("name", "options", "words"),
    [
        ("by_config", {}, "needs the option 'queues'"),
        ("by_config", {"queues": "broker-a"}, "not broker:queueId"),
        ("by_machine_room", {}, "needs the option 'rooms'"),
        ("machine_room_nearby", {"inner": "by_config"}, "cannot decorate 'by_config'"),
        ("consistent_hash", {"virtual_nodes": "0"}, "positive whole number"),
        ("consistent_hash", {"nodes": "3"}, "does not take ['nodes']"),
        ("averagely", {"x": "1"}, "takes no options"),
    ],
)
def test_bad_options_are_refused_with_the_reason(name, options, words):
    with pytest.raises(ValueError, match=r".*") as error:
        strategy_named(name).bind(options)
    assert words in str(error.value)


def test_the_plugin_registers_all_six_through_the_hook():
    host = PluginHost.load(["allocate"])
    names = {p.name for p in host.allocate_strategies()}
    assert names == {s.name for s in STRATEGIES} and len(names) == 6
    chosen = host.select("allocate", host.allocate_strategies(), "averagely_by_circle")
    assert chosen.allocate("G", "a", queues(4), ["a", "b"]) == [queues(4)[0], queues(4)[2]]


# --- properties -----------------------------------------------------------------------------

SHARING = ["averagely", "averagely_by_circle", "consistent_hash", "machine_room_nearby"]


@given(
    name=st.sampled_from(SHARING),
    queue_count=st.integers(0, 48),
    broker_count=st.integers(1, 3),
    consumer_count=st.integers(1, 12),
)
def test_every_queue_is_assigned_exactly_once_and_deterministically(
    name, queue_count, broker_count, consumer_count
):
    qs = [q for b in range(broker_count) for q in queues(queue_count, f"room{b}@broker-{b}")]
    cids = consumers(consumer_count)
    allocate = strategy_named(name).bind({})
    first = split(allocate, qs, cids)
    assert_each_queue_exactly_once(first, qs)
    assert split(strategy_named(name).bind({}), qs, cids) == first, "same input, same answer"


@given(queue_count=st.integers(1, 64), consumer_count=st.integers(1, 12))
def test_averagely_sizes_differ_by_at_most_one(queue_count, consumer_count):
    sizes = [len(m) for m in split(averagely, queues(queue_count), consumers(consumer_count)).values()]
    assert max(sizes) - min(sizes) <= 1


@given(
    queue_count=st.integers(1, 64),
    consumer_count=st.integers(2, 12),
    leaver=st.integers(0, 11),
    virtual_nodes=st.integers(1, 40),
)
def test_consistent_hash_moves_only_the_leavers_queues(queue_count, consumer_count, leaver, virtual_nodes):
    allocate = consistent_hash(virtual_nodes)
    qs, cids = queues(queue_count), consumers(consumer_count)
    gone = cids[leaver % consumer_count]
    before = split(allocate, qs, cids)
    after = split(allocate, qs, [c for c in cids if c != gone])
    for cid, mine in after.items():
        assert set(before[cid]) <= set(mine), "a consumer that stays keeps every queue it had"
    moved = sum(len(set(mine) - set(before[cid])) for cid, mine in after.items())
    assert moved == len(before[gone])


def test_consistent_hash_moves_far_fewer_queues_than_averagely():
    qs, cids = queues(64), consumers(8)
    for name in ("consistent_hash", "averagely"):
        allocate = strategy_named(name).bind({})
        before, after = split(allocate, qs, cids), split(allocate, qs, cids[:-1])
        moved = sum(len(set(after[c]) - set(before[c])) for c in cids[:-1])
        if name == "consistent_hash":
            hashed = moved
    assert hashed <= len(qs) // 4 < moved
