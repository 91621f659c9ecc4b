"""allocate: RocketMQ's six consumer queue-allocation strategies (seed 001).

Registered through ``trocket_register_allocate_strategies`` and selected by name in a consumer's
config, with options where a strategy takes some:

========================  ===========================  ===========================================
name                      RocketMQ class               options
========================  ===========================  ===========================================
``averagely``             AllocateMessageQueueAveragely  none (the default)
``averagely_by_circle``   ...AveragelyByCircle         none
``by_config``             ...ByConfig                  ``queues``: ``broker:queueId,...`` (required)
``by_machine_room``       ...ByMachineRoom             ``rooms``: ``room1,room2`` (required)
``machine_room_nearby``   AllocateMachineRoomNearby    ``inner``: another strategy (``averagely``)
``consistent_hash``       ...ConsistentHash            ``virtual_nodes`` (10)
========================  ===========================  ===========================================

Machine rooms follow RocketMQ's convention: broker names ``room@name``; consumers' instance
names start with their room (see :func:`plugins.allocate.strategies.consumer_room`). A plugin
with other conventions registers ``machine_room_nearby(inner, queue_room, client_room)`` under
its own name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from kernel import AllocateStrategy, hookimpl
from kernel.model import MessageQueue
from kernel.protocols import AllocateStrategyFn
from plugins.allocate.strategies import (
    DEFAULT_VIRTUAL_NODES,
    averagely,
    averagely_by_circle,
    by_config,
    by_machine_room,
    consistent_hash,
    machine_room_nearby,
)

__all__ = ["STRATEGIES", "strategy_named"]

_PLAIN: dict[str, AllocateStrategyFn] = {
    "averagely": averagely,
    "averagely_by_circle": averagely_by_circle,
    "consistent_hash": consistent_hash(),
}


def _only(options: Mapping[str, str], allowed: set[str], strategy: str) -> None:
    unknown = sorted(set(options) - allowed)
    if unknown:
        allowed_text = ", ".join(sorted(allowed))
        raise ValueError(f"allocate strategy {strategy!r} does not take {unknown}; it takes {allowed_text}")


def _needs(option: str, strategy: str) -> AllocateStrategyFn:
    def allocate(
        group: str, current_id: str, queues: Sequence[MessageQueue], consumer_ids: Sequence[str]
    ) -> list[MessageQueue]:
        raise ValueError(f"allocate strategy {strategy!r} needs the option {option!r}")

    return allocate


def _configure_by_config(options: Mapping[str, str]) -> AllocateStrategyFn:
    _only(options, {"queues"}, "by_config")
    if "queues" not in options:
        raise ValueError("allocate strategy 'by_config' needs the option 'queues' (broker:queueId,...)")
    configured = set()
    for item in options["queues"].split(","):
        broker, _, queue_id = item.strip().rpartition(":")
        if not broker or not queue_id.isdigit():
            raise ValueError(f"by_config queue {item!r} is not broker:queueId")
        configured.add((broker, int(queue_id)))
    return by_config(frozenset(configured))


def _configure_by_machine_room(options: Mapping[str, str]) -> AllocateStrategyFn:
    _only(options, {"rooms"}, "by_machine_room")
    rooms = {room.strip() for room in options.get("rooms", "").split(",") if room.strip()}
    if not rooms:
        raise ValueError("allocate strategy 'by_machine_room' needs the option 'rooms' (room1,room2)")
    return by_machine_room(frozenset(rooms))


def _configure_nearby(options: Mapping[str, str]) -> AllocateStrategyFn:
    _only(options, {"inner"}, "machine_room_nearby")
    inner = options.get("inner", "averagely")
    if inner not in _PLAIN:
        raise ValueError(f"machine_room_nearby cannot decorate {inner!r}; choose one of {sorted(_PLAIN)}")
    return machine_room_nearby(_PLAIN[inner])


def _configure_consistent_hash(options: Mapping[str, str]) -> AllocateStrategyFn:
    _only(options, {"virtual_nodes"}, "consistent_hash")
    text = options.get("virtual_nodes", str(DEFAULT_VIRTUAL_NODES))
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"consistent_hash virtual_nodes must be a positive whole number, got {text!r}")
    return consistent_hash(int(text))


STRATEGIES: tuple[AllocateStrategy, ...] = (
    AllocateStrategy("averagely", averagely, "contiguous blocks, remainder to the first consumers"),
    AllocateStrategy("averagely_by_circle", averagely_by_circle, "queue i to consumer i mod n"),
    AllocateStrategy(
        "by_config", _needs("queues", "by_config"), "the configured queues", _configure_by_config
    ),
    AllocateStrategy(
        "by_machine_room",
        _needs("rooms", "by_machine_room"),
        "queues of brokers in the configured rooms",
        _configure_by_machine_room,
    ),
    AllocateStrategy(
        "machine_room_nearby",
        machine_room_nearby(averagely),
        "same-room consumers first, then everyone (decorates 'inner')",
        _configure_nearby,
    ),
    AllocateStrategy(
        "consistent_hash",
        _PLAIN["consistent_hash"],
        "MD5 ring with virtual nodes; few queues move on membership changes",
        _configure_consistent_hash,
    ),
)


def strategy_named(name: str) -> AllocateStrategy:
    """One of this plugin's strategies (clients use the plugin host to find third-party ones)."""
    for strategy in STRATEGIES:
        if strategy.name == name:
            return strategy
    raise ValueError(f"unknown allocate strategy {name!r}; built in: {[s.name for s in STRATEGIES]}")


@hookimpl
def trocket_register_allocate_strategies() -> list[AllocateStrategy]:
    return list(STRATEGIES)
