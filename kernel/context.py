"""Per-broker state handed to hooks and providers: config, plugin configs, hook relay, stash.

There is no module-global state anywhere: two brokers (master and slave, two clusters) in one
process each have their own context.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

import attrs
import pluggy

from kernel.config import BrokerConfig, Config
from kernel.persist import BackgroundWrites
from kernel.sync_overlap import SyncOverlap
from wire.remoting.metering import RequestMeters

if TYPE_CHECKING:
    from kernel.broker import BrokerStatistics
    from kernel.host import PluginHost
    from kernel.model import BrokerRole, MessageBatch, PutResult
    from kernel.protocols import MessageStore, Replicator

T = TypeVar("T")
D = TypeVar("D")


@attrs.frozen(eq=False)
class StashKey(Generic[T]):
    """A typed key for :class:`Stash` (pytest's idea): plugins keep per-broker state there
    instead of in module globals."""

    name: str = ""


@attrs.define(eq=False)
class Stash:
    """Typed per-broker storage for plugins, keyed by :class:`StashKey` identity."""

    _items: dict[StashKey[Any], Any] = attrs.field(factory=dict, init=False)

    def __setitem__(self, key: StashKey[T], value: T) -> None:
        self._items[key] = value

    def __getitem__(self, key: StashKey[T]) -> T:
        return self._items[key]  # type: ignore[no-any-return]

    def get(self, key: StashKey[T], default: D) -> T | D:
        return self._items.get(key, default)  # type: ignore[no-any-return]

    def setdefault(self, key: StashKey[T], default: T) -> T:
        return self._items.setdefault(key, default)  # type: ignore[no-any-return]

    def __contains__(self, key: StashKey[Any]) -> bool:
        return key in self._items


@attrs.define(eq=False)
class BrokerContext:
    """What every hook and provider of one broker shares."""

    config: Config
    hook: pluggy.HookRelay
    plugin_configs: dict[type, Any] = attrs.field(factory=dict)
    stash: Stash = attrs.field(factory=Stash)
    background_writes: BackgroundWrites = attrs.field(factory=BackgroundWrites)
    """Periodic persists that failed (logged, counted, retried; never the end of the process)."""
    sync_overlap: SyncOverlap = attrs.field(factory=SyncOverlap)
    """Work the event loop does while the store's disk sync runs without it (the views'
    dispatch of what was just appended): see :mod:`kernel.sync_overlap`."""
    parking_topics: frozenset[str] = frozenset()
    """Topics where plugins park messages until they are due
    (``trocket_register_parking_topics``): their consume-queue tag field holds each message's
    due time (``TIMER_OUT_MS``) instead of its tag's hash, so a scheduler finds due messages
    from the queue alone (RocketMQ's rule for its schedule topic). A delayed message put
    anywhere else was parked by no plugin and is refused."""

    @classmethod
    def assemble(cls, config: Config, host: PluginHost) -> BrokerContext:
        """The context of ``config`` with ``host``'s plugins loaded: their tables validated and
        what they declare at assembly collected (one place, for the broker and for tests).

        :raises kernel.errors.ConfigError: a plugin table does not validate.
        """
        return cls(
            config=config,
            hook=host.hook,
            plugin_configs=host.validate_sections(config),
            parking_topics=host.parking_topics(),
        )

    @property
    def broker(self) -> BrokerConfig:
        return self.config.broker

    @property
    def data_dir(self) -> Path:
        return self.config.broker.data_dir

    def implemented(self, hook_name: str) -> Callable[..., Any] | None:
        """A caller of ``hook_name`` taking the hookspec's arguments *by position*, if a loaded
        plugin implements it; else None.

        The put path and dispatch look their per-batch hooks up once at assembly through this
        and skip the ones nobody implements: a single send is a batch of one, and a pluggy
        call costs 2-3 µs. When no implementation is a wrapper, the caller calls the
        implementations directly, as pluggy would (its order, the arguments each declares,
        ``firstresult``), without keyword arguments or pluggy's per-call machinery; with a
        wrapper it hands the arguments to pluggy by name.
        """
        caller = getattr(self.hook, hook_name)
        impls = caller.get_hookimpls()
        if not impls:
            return None
        spec_names: tuple[str, ...] = caller.spec.argnames if caller.spec is not None else ()
        if any(impl.hookwrapper or impl.wrapper for impl in impls):
            return lambda *args: caller(**dict(zip(spec_names, args, strict=True)))
        first_result = bool(caller.spec is not None and caller.spec.opts.get("firstresult"))
        calls = [_positional(impl.function, impl.argnames, spec_names) for impl in reversed(impls)]
        return _direct_caller(calls, first_result)

    def plugin_config(self, cls: type[T]) -> T:
        """The validated config object of type ``cls`` (defaults if its table was absent).

        :raises KeyError: if no loaded plugin declared a section of that type.
        """
        try:
            return self.plugin_configs[cls]  # type: ignore[no-any-return]
        except KeyError:
            declared = ", ".join(sorted(t.__name__ for t in self.plugin_configs)) or "none"
            raise KeyError(
                f"no loaded plugin declares config class {cls.__name__}; declared: {declared}"
            ) from None


class BrokerRuntime(Protocol):
    """What services see of a running broker (implemented by :class:`kernel.broker.Broker`)."""

    ctx: BrokerContext
    role: BrokerRole
    """The broker's current role (``brokerRole``); a SLAVE takes no puts."""

    @property
    def store(self) -> MessageStore: ...

    @property
    def replicator(self) -> Replicator | None:
        """The configured replicator, or None for a standalone broker."""

    @property
    def puts_acknowledged_at_once(self) -> bool:
        """Whether a put's answer waits for nothing but the append (no flush or replica wait)."""

    async def put(self, batch: MessageBatch) -> PutResult: ...

    async def put_group(self, batches: Sequence[MessageBatch]) -> list[PutResult]:
        """Batches that arrived together, appended at once where possible; one result each."""

    async def wait_dispatched(self, offset: int | None = None) -> None:
        """Wait until derived views (consume queues) cover ``offset`` (default: the log end)."""

    def statistics(self) -> BrokerStatistics:
        """A snapshot of the broker's pipelines."""


def _positional(
    function: Callable[..., Any], argnames: tuple[str, ...], spec_names: tuple[str, ...]
) -> Callable[..., Any]:
    """``function`` called with the hookspec's positional arguments: as it is when it declares
    them all in order, else picking the ones it declares."""
    if argnames == spec_names:
        return function
    positions = [spec_names.index(name) for name in argnames]
    return lambda *args: function(*[args[i] for i in positions])


def _direct_caller(calls: list[Callable[..., Any]], first_result: bool) -> Callable[..., Any]:
    """Calls plain hook implementations in pluggy's order: every non-None result in a list,
    or the first one for a ``firstresult`` hook."""
    if len(calls) == 1 and not first_result:
        (only,) = calls

        def call_one(*args: Any) -> list[Any]:
            result = only(*args)
            return [] if result is None else [result]

        return call_one

    def call(*args: Any) -> Any:
        results = []
        for function in calls:
            result = function(*args)
            if result is not None:
                if first_result:
                    return result
                results.append(result)
        return None if first_result else results

    return call


REQUEST_METERS = StashKey[RequestMeters]("kernel.request_meters")
"""Set by a plugin that reads request figures (metrics) in ``trocket_register_services``;
routers built after that count their requests into it (:mod:`wire.remoting.metering`)."""
