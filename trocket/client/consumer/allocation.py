"""Choosing a consumer's queue-allocation strategy by name, from every plugin installed in the
``trocket.plugins`` entry-point group (the built-in ``allocate`` plugin and third-party ones)."""

from __future__ import annotations

import functools
from collections.abc import Mapping

from kernel.errors import PluginError
from kernel.host import PluginHost
from kernel.plugin import available_plugins
from kernel.protocols import AllocateStrategyFn
from trocket.client.errors import ClientError


def _installed() -> dict[str, object]:
    """Strategy name → ``AllocateStrategy`` of the installed plugins."""
    return _strategies_of(tuple(sorted(available_plugins().items())))


@functools.cache
def _strategies_of(plugins: tuple[tuple[str, str], ...]) -> dict[str, object]:
    """Loaded once per set of installed plugins (a plugin installed later is found)."""
    host = PluginHost.load([name for name, _ in plugins])
    return {provided.name: provided.provider for provided in host.allocate_strategies()}


def installed_strategies() -> list[str]:
    return sorted(_installed())


def resolve_strategy(
    strategy: str | AllocateStrategyFn, options: Mapping[str, str] | None = None
) -> AllocateStrategyFn:
    """The allocate function for a consumer: a name (with its options) or a function given
    directly.

    :raises ClientError: an unknown name (listing the installed ones) or bad options.
    """
    if callable(strategy):
        if options:
            raise ClientError("allocate options apply to a strategy chosen by name, not to a function")
        return strategy
    try:
        installed = _installed()
    except PluginError as error:
        raise ClientError(f"cannot load the installed trocket plugins to find strategies: {error}") from None
    provider = installed.get(strategy)
    if provider is None:
        raise ClientError(
            f"unknown allocate strategy {strategy!r}; installed: {', '.join(sorted(installed)) or 'none'} "
            "(strategies come from plugins in the trocket.plugins entry-point group)"
        )
    try:
        return provider.bind(dict(options or {}))  # type: ignore[attr-defined,no-any-return]
    except ValueError as error:
        raise ClientError(str(error)) from None
