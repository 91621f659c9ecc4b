"""Choosing a consumer's queue-allocation strategy by name.

Strategies come from the ``trocket.allocate_strategies`` entry-point group, which the client
reads alone: each entry point names an ``AllocateStrategy`` or a sequence of them (the built-in
``allocate`` plugin declares its six). The client never loads broker plugins, so a broken or
heavy broker plugin installed beside it cannot break a consumer; a strategy entry point that
fails to load is reported only to a consumer that asks for one of its names.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from importlib.metadata import entry_points

from kernel.model import AllocateStrategy
from kernel.protocols import AllocateStrategyFn
from trocket.client.errors import ClientError

STRATEGY_GROUP = "trocket.allocate_strategies"


@functools.cache
def _load(group_entries: tuple[tuple[str, str], ...]) -> tuple[dict[str, AllocateStrategy], dict[str, str]]:
    """(name → strategy, entry point → why it failed), once per set of installed entry points."""
    found: dict[str, AllocateStrategy] = {}
    broken: dict[str, str] = {}
    for ep in entry_points(group=STRATEGY_GROUP):
        try:
            loaded = ep.load()
        except (ImportError, AttributeError) as error:
            broken[ep.name] = f"{ep.value}: {type(error).__name__}: {error}"
            continue
        for strategy in loaded if isinstance(loaded, list | tuple) else (loaded,):
            if not isinstance(strategy, AllocateStrategy):
                broken[ep.name] = f"{ep.value} is {strategy!r}, not an AllocateStrategy"
                continue
            found[strategy.name] = strategy
    return found, broken


def _installed() -> tuple[dict[str, AllocateStrategy], dict[str, str]]:
    group = tuple(sorted((ep.name, ep.value) for ep in entry_points(group=STRATEGY_GROUP)))
    return _load(group)


def installed_strategies() -> list[str]:
    return sorted(_installed()[0])


def resolve_strategy(
    strategy: str | AllocateStrategyFn, options: Mapping[str, str] | None = None
) -> AllocateStrategyFn:
    """The allocate function for a consumer: a name (with its options) or a function given
    directly.

    :raises ClientError: an unknown name (listing the installed ones and any entry point that
        failed to load) or bad options.
    """
    if callable(strategy):
        if options:
            raise ClientError("allocate options apply to a strategy chosen by name, not to a function")
        return strategy
    installed, broken = _installed()
    provider = installed.get(strategy)
    if provider is None:
        failed = "".join(
            f"; entry point {name} failed to load ({why})" for name, why in sorted(broken.items())
        )
        raise ClientError(
            f"unknown allocate strategy {strategy!r}; installed: {', '.join(sorted(installed)) or 'none'} "
            f"(strategies come from the {STRATEGY_GROUP} entry-point group){failed}"
        )
    try:
        return provider.bind(dict(options or {}))
    except ValueError as error:
        raise ClientError(str(error)) from None
