"""PluginHost: loads exactly the configured plugins and gives the kernel typed access to hooks.

Resolution of a configured name: an entry point of that name in group ``trocket.plugins``
(built-ins are declared there too), otherwise a dotted module path; otherwise
:class:`~kernel.errors.PluginLoadError` listing what is available. Installed plugins that the
config does not list are never loaded, so installing a package cannot change a broker.

Plugins are registered in sorted name order, whatever order the config lists them in, so
pluggy's LIFO call order (and so every firstresult tie) is the same for any permutation.
"""

from __future__ import annotations

import inspect
import logging
import os
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Generic, Protocol, TypeVar, cast

import attrs
import pluggy

from kernel import hookspecs
from kernel.config import Config, structure
from kernel.errors import (
    AmbiguousProvider,
    ConfigError,
    ConfigErrors,
    DuplicateProvider,
    PluginContractError,
    PluginError,
    ProviderNotFound,
)
from kernel.model import (
    AllocateStrategy,
    ConfigSection,
    FlushPolicyProvider,
    ReplicatorProvider,
    StoreProvider,
)
from kernel.plugin import PROJECT, resolve_plugin

log = logging.getLogger(__name__)
hook_log = logging.getLogger("trocket.hooks")


@attrs.frozen
class PluginInfo:
    """What ``trocket plugins`` shows about one loaded plugin."""

    name: str
    module: str
    hooks: tuple[str, ...]


class _Named(Protocol):
    @property
    def name(self) -> str: ...


P = TypeVar("P", bound=_Named)
"""A provider record (:class:`~kernel.model.StoreProvider`, ...): anything with a name."""


@attrs.frozen
class Provided(Generic[P]):
    """A provider together with the plugin that registered it."""

    plugin: str
    provider: P

    @property
    def name(self) -> str:
        return str(self.provider.name)


@attrs.define(eq=False)
class PluginHost:
    """One broker's pluggy manager, with the configured plugins registered and checked."""

    pm: pluggy.PluginManager
    names: tuple[str, ...]

    @classmethod
    def load(cls, names: Iterable[str], *, objects: Sequence[tuple[str, object]] = ()) -> PluginHost:
        """Load plugins by name, plus already-imported plugin ``objects`` as (name, object).

        :raises PluginLoadError: for names that resolve to nothing.
        :raises PluginError: for hookimpls without a matching spec (``check_pending``) or
            async hookimpls.
        """
        pm = pluggy.PluginManager(PROJECT)
        pm.add_hookspecs(hookspecs)
        if os.environ.get("TROCKET_TRACE_HOOKS"):
            pm.trace.root.setwriter(hook_log.debug)
            pm.enable_tracing()
        plugins: dict[str, object] = {}
        for name in names:
            if name in plugins:
                raise PluginError(f"plugin {name!r} is listed twice")
            plugins[name] = resolve_plugin(name)
        for name, obj in objects:
            plugins[name] = obj
        for name in sorted(plugins):
            _reject_async_hookimpls(name, plugins[name])
            pm.register(plugins[name], name=name)
            if not pm.get_hookcallers(plugins[name]):
                raise PluginError(
                    f"plugin {name!r} ({getattr(plugins[name], '__name__', type(plugins[name]).__name__)}) "
                    "implements no trocket_ hook: a module listed in [broker] plugins must mark its "
                    "hook functions with kernel.hookimpl (a typo in the dotted path loads a module "
                    "that does nothing)"
                )
        try:
            pm.check_pending()
        except pluggy.PluginValidationError as error:
            raise PluginError(
                f"plugin {error.plugin!r} implements a hook that does not exist: {error}; "
                "check the spelling (kernel hooks start with 'trocket_'), or mark a hook owned "
                "by another plugin optionalhook=True"
            ) from None
        return cls(pm=pm, names=tuple(sorted(plugins)))

    @property
    def hook(self) -> pluggy.HookRelay:
        return self.pm.hook

    def describe(self) -> list[PluginInfo]:
        infos = []
        for name in self.names:
            plugin = self.pm.get_plugin(name)
            callers = self.pm.get_hookcallers(plugin) or []
            module = getattr(plugin, "__name__", type(plugin).__qualname__)
            infos.append(PluginInfo(name, module, tuple(sorted(c.name for c in callers))))
        return infos

    # --- configuration ---------------------------------------------------------------------

    def config_sections(self) -> dict[str, tuple[str, ConfigSection]]:
        """Declared sections by table name -> (plugin, section)."""
        sections: dict[str, tuple[str, ConfigSection]] = {}
        for impl in self.hook.trocket_config_sections.get_hookimpls():
            for section in _registered(impl):
                if section.name in sections:
                    raise DuplicateProvider(
                        f"config section [{section.name}] is declared by both "
                        f"{sections[section.name][0]!r} and {impl.plugin_name!r}"
                    )
                sections[section.name] = (impl.plugin_name, section)
        return sections

    def validate_sections(self, config: Config) -> dict[type, Any]:
        """Validate every plugin table of ``config``; absent tables get their defaults.

        :raises ConfigError: a table nobody declared, an unknown key or a bad value.
        """
        declared = self.config_sections()
        errors: list[ConfigError] = list(config.problems)
        for table in config.sections:
            if table not in declared:
                owners = ", ".join(sorted(declared)) or "none"
                problem = (
                    f"no loaded plugin declares this table (loaded plugins: "
                    f"{', '.join(self.names)}; tables they declare: {owners})"
                )
                errors.append(ConfigError(config.source, f"[{table}]", problem))
        result: dict[type, Any] = {}
        for table, (_, section) in declared.items():
            raw = config.sections.get(table, {})
            try:
                result[section.type] = structure(section.type, raw, source=config.source, section=table)
            except ConfigError as error:
                errors.append(error)
        ConfigErrors.raise_any(errors)
        return result

    # --- providers ---------------------------------------------------------------------------

    def _collect(self, hook_name: str, kind: type[P]) -> list[Provided[P]]:
        caller = getattr(self.hook, hook_name)
        found: dict[str, Provided[P]] = {}
        for impl in caller.get_hookimpls():
            for provider in _registered(impl):
                if not isinstance(provider, kind):
                    raise PluginContractError(
                        f"plugin {impl.plugin_name!r}: {hook_name} returned {provider!r}, "
                        f"expected {kind.__name__}"
                    )
                if provider.name in found:
                    raise DuplicateProvider(
                        f"{kind.__name__} {provider.name!r} is registered by both "
                        f"{found[provider.name].plugin!r} and {impl.plugin_name!r}"
                    )
                found[provider.name] = Provided(impl.plugin_name, provider)
        return sorted(found.values(), key=lambda p: p.name)

    def stores(self) -> list[Provided[StoreProvider]]:
        return self._collect("trocket_register_stores", StoreProvider)

    def flush_policies(self) -> list[Provided[FlushPolicyProvider]]:
        return self._collect("trocket_register_flush_policies", FlushPolicyProvider)

    def replicators(self) -> list[Provided[ReplicatorProvider]]:
        return self._collect("trocket_register_replicators", ReplicatorProvider)

    def allocate_strategies(self) -> list[Provided[AllocateStrategy]]:
        return self._collect("trocket_register_allocate_strategies", AllocateStrategy)

    def parking_topics(self) -> frozenset[str]:
        """Every topic a loaded plugin parks messages in (``trocket_register_parking_topics``)."""
        found: set[str] = set()
        for topics in self.hook.trocket_register_parking_topics():
            if isinstance(topics, str):
                raise PluginError(
                    "trocket_register_parking_topics returned a string; return an iterable of topic names"
                )
            found.update(topics)
        return frozenset(found)

    def select(self, role: str, providers: list[Provided[P]], name: str | None) -> P:
        """Pick the provider named ``name``; with no name, the only one offered."""
        if name is not None:
            for provided in providers:
                if provided.name == name:
                    return provided.provider
            raise ProviderNotFound(role, name, (p.name for p in providers))
        if len(providers) == 1:
            return providers[0].provider
        if not providers:
            raise ProviderNotFound(role, None, ())
        raise AmbiguousProvider(role, (p.name for p in providers))


def _registered(impl: pluggy.HookImpl) -> Iterable[Any]:
    """What a registration hookimpl returned (``None`` counts as nothing)."""
    function = cast(Callable[[], Iterable[Any] | None], impl.function)
    return function() or ()


def _reject_async_hookimpls(name: str, plugin: object) -> None:
    for attr in dir(plugin):
        if not attr.startswith("trocket_"):
            continue
        function = getattr(plugin, attr, None)
        if inspect.iscoroutinefunction(function) or inspect.isasyncgenfunction(function):
            raise PluginContractError(
                f"plugin {name!r}: hook {attr} is async; hooks must be synchronous "
                "(return an object with async methods instead)"
            )
