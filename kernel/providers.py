"""What registration hooks return: config sections, providers of the single-provider roles
(store, flush policy, replicator), allocation strategies and services, with the lifecycle
phases services start in."""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Iterable, Mapping
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any

import attrs

if TYPE_CHECKING:
    from kernel.config.property_aliases import PropertyAlias
    from kernel.context import BrokerContext, BrokerRuntime
    from kernel.protocols import AllocateStrategyFn, FlushPolicy, MessageStore, Replicator, Service
    from wire.remoting import Connection, RemotingCommand


class Phase(enum.IntEnum):
    """Lifecycle phases, outermost first; a phase's services start after the ones before it
    and stop after the ones after it."""

    DURABILITY = 1
    DERIVED = 2
    SCHEDULING = 3
    EXPORT = 4
    INGRESS = 5


@attrs.frozen
class ConfigSection:
    """A plugin's configuration table: ``[name]`` in TOML, validated into ``type``.

    ``properties`` are the RocketMQ ``broker.properties`` keys the table takes, by RocketMQ
    name (see :mod:`kernel.config.property_aliases`): a RocketMQ config sets them."""

    name: str
    type: type
    properties: Mapping[str, PropertyAlias] = attrs.field(factory=dict)


# --- Providers: what the registration hooks return -------------------------------------------


@attrs.frozen
class StoreProvider:
    """A message store implementation, chosen by ``[broker] store = name``.

    ``open`` is an async context manager factory: ``async with provider.open(ctx) as store``.
    """

    name: str
    open: Callable[[BrokerContext], AbstractAsyncContextManager[MessageStore]]
    description: str = ""
    settings: Callable[[BrokerContext], Mapping[str, object]] | None = None
    """Optional: the effective settings worth showing at start (file sizes, what is reserved
    on disk), shown by ``trocket up`` and ``trocket plugins``."""


@attrs.frozen
class FlushPolicyProvider:
    """A flush policy, chosen by ``[broker] flush = name``."""

    name: str
    make: Callable[[BrokerContext, MessageStore], FlushPolicy]
    description: str = ""
    settings: Callable[[BrokerContext], Mapping[str, object]] | None = None
    """Optional: the effective settings, shown by ``trocket plugins``."""


@attrs.frozen
class ReplicatorProvider:
    """A replication role implementation, chosen by ``[broker] replicator = name``."""

    name: str
    make: Callable[[BrokerContext, MessageStore], Replicator]
    description: str = ""


@attrs.frozen
class AllocateStrategy:
    """A consumer queue-allocation strategy: a pure function selected by name.

    Every client of a consumer group must compute the same assignment from the same sorted
    inputs, so strategies are deterministic; a client only keeps the queues it is given.
    """

    name: str
    allocate: AllocateStrategyFn
    """The strategy with its default options."""
    description: str = ""
    configure: Callable[[Mapping[str, str]], AllocateStrategyFn] | None = None
    """Builds the strategy from a consumer's options (e.g. ``virtual_nodes``), checking them
    (required ones included); None when it takes none."""

    def bind(self, options: Mapping[str, str]) -> AllocateStrategyFn:
        """The function to call for a consumer configured with ``options``.

        :raises ValueError: for options this strategy does not take, naming them.
        """
        if self.configure is not None:
            return self.configure(options)
        if options:
            raise ValueError(f"allocate strategy {self.name!r} takes no options, got {sorted(options)}")
        return self.allocate


@attrs.frozen
class ServiceSpec:
    """A long-running task a plugin contributes, started in ``phase``.

    ``make(runtime)`` returns an object with ``async run(*, task_status)``; it may also have
    ``async drain()``, awaited (with the graceful deadline) before the phase is cancelled.
    ``roles`` limits the service to processes hosting those roles (``"broker"``, ``"namesrv"``).
    """

    name: str
    phase: Phase
    make: Callable[[BrokerRuntime], Service]
    roles: frozenset[str] = frozenset({"broker"})


@attrs.frozen
class RequestHandlerSpec:
    """A remoting request code a plugin answers on the broker's port (the transaction plugin's
    ``END_TRANSACTION``), for codes the serving plugin does not handle itself.

    ``handle(runtime, connection, request)`` returns the response, or ``None`` for a oneway
    request (or one RocketMQ leaves unanswered). An exception is answered ``SYSTEM_ERROR``
    with its text, and the connection lives on.
    """

    code: int
    name: str
    """Who answers, for errors (two plugins claiming one code) and logs."""
    handle: Callable[[BrokerRuntime, Connection, RemotingCommand], Awaitable[RemotingCommand | None]]
    in_process: Callable[[BrokerRuntime, RemotingCommand], Awaitable[RemotingCommand | None]] | None = None
    """The same answer for a caller in the broker's own process (the gRPC proxy beside it),
    when the handler needs nothing of a connection: no socket, no frame encoding, no loopback
    round trip. Such a caller has done its own access checks (guards do not run), and the
    request is not counted by the port's request meter."""

    @classmethod
    def connectionless(
        cls,
        code: int,
        name: str,
        serve: Callable[[BrokerRuntime, RemotingCommand], Awaitable[RemotingCommand | None]],
    ) -> RequestHandlerSpec:
        """A handler that needs nothing of its connection: ``serve(runtime, request)`` answers
        both the broker's port and callers in process (``in_process``)."""

        async def handle(
            runtime: BrokerRuntime, connection: Connection, request: RemotingCommand
        ) -> RemotingCommand | None:
            return await serve(runtime, request)

        return cls(code, name, handle, serve)


@attrs.frozen
class RequestGuardSpec:
    """A check every request on the broker's port passes before its handler runs (the acl
    plugin's permission check). ``check(connection, request)`` returns ``None`` to let the
    request through, or the response that refuses it (the handler then never runs). It is
    called once per request, synchronously: keep it to a dictionary lookup and a hash."""

    name: str
    check: Callable[[Connection, RemotingCommand], RemotingCommand | None]


def flatten(results: Iterable[Iterable[Any] | None]) -> list[Any]:
    """Flatten the per-plugin lists a ``register_*`` hook returns (``None`` entries skipped)."""
    out: list[Any] = []
    for result in results:
        if result is not None:
            out.extend(result)
    return out
