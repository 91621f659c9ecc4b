"""Settings a running broker changes without a restart (mqadmin ``updateBrokerConfig``), and
the file that keeps the changes across restarts.

A plugin whose setting is read where it is used (not copied at start) offers it with
:func:`offer` when its service starts: the key (RocketMQ's name, or ``table.key`` for a setting
RocketMQ does not have), how to parse a value (raising ``ValueError`` that says what is
expected) and how to apply it. :func:`update` applies a set of changes all or nothing: a key no
plugin offers is refused with the reason (it takes effect only at a restart, from the config
file), a bad value with the parser's reason, and nothing is applied then. Applied changes are
written to ``<data_dir>/config/runtime.properties``; when a plugin offers a key again after a
restart, the value kept there is applied at once, so a change outlives the process as
RocketMQ's (which rewrites its config file) does.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs

from kernel.config.property_aliases import PropertyAlias
from kernel.context import BrokerContext, StashKey

log = logging.getLogger(__name__)


@attrs.frozen
class RuntimeSetting:
    key: str
    parse: Callable[[str], Any]
    """The properties text to the value; raises ``ValueError`` saying what is expected."""
    apply: Callable[[Any], None]
    """Make the parsed value current."""


class SettingRefused(ValueError):
    """Changes that cannot be applied, each key with its reason (nothing was applied);
    ``unchangeable``: some key cannot change at run time at all (not just a bad value)."""

    def __init__(self, reasons: Mapping[str, str], *, unchangeable: bool) -> None:
        self.reasons = dict(reasons)
        self.unchangeable = unchangeable
        super().__init__("; ".join(f"{key}: {why}" for key, why in self.reasons.items()))


RUNTIME_SETTINGS = StashKey[dict[str, RuntimeSetting]]("kernel.runtime_settings")


def table_setting(
    ctx: BrokerContext,
    key: str,
    alias: PropertyAlias,
    current: Callable[[], Any],
    replace: Callable[[Any], None],
    after: Callable[[], None] = lambda: None,
) -> RuntimeSetting:
    """A field of a plugin's config object (frozen attrs) as a runtime setting: parsed with the
    key's RocketMQ converter and checked by the field's own converter and validator; applied
    by replacing the config object, in the plugin (which must read the value where it uses it)
    and in ``ctx`` (so ``ctx.plugin_config`` and ``getBrokerConfig`` show the new value)."""

    def parse(text: str) -> Any:
        value = alias.convert(text)
        try:
            attrs.evolve(current(), **{alias.key: value})
        except (TypeError, ValueError) as error:
            raise ValueError(f"expected {alias.expected}: {error}") from None
        return value

    def apply(value: Any) -> None:
        new = attrs.evolve(current(), **{alias.key: value})
        replace(new)
        if type(new) in ctx.plugin_configs:
            ctx.plugin_configs[type(new)] = new
        after()

    return RuntimeSetting(key, parse, apply)


def runtime_file(ctx: BrokerContext) -> Path:
    return Path(ctx.data_dir) / "config" / "runtime.properties"


def kept(ctx: BrokerContext) -> dict[str, str]:
    """The changes kept from earlier :func:`update` calls (empty when there is no file)."""
    path = runtime_file(ctx)
    if not path.exists():
        return {}
    from kernel.config.properties_file import parse_properties

    return parse_properties(path.read_text(), source=str(path))


def offer(ctx: BrokerContext, settings: Iterable[RuntimeSetting]) -> None:
    """Make ``settings`` changeable at run time, applying the values kept for them."""
    table = ctx.stash.setdefault(RUNTIME_SETTINGS, {})
    saved = kept(ctx)
    for setting in settings:
        table[setting.key] = setting
        if setting.key in saved:
            try:
                setting.apply(setting.parse(saved[setting.key]))
            except ValueError as error:
                log.error(
                    "%s: %s=%s not applied: %s", runtime_file(ctx), setting.key, saved[setting.key], error
                )
                continue
            log.warning("%s: %s=%s (changed at run time)", runtime_file(ctx), setting.key, saved[setting.key])


def offered(ctx: BrokerContext) -> list[str]:
    return sorted(ctx.stash.get(RUNTIME_SETTINGS, {}))


def update(ctx: BrokerContext, changes: Mapping[str, str]) -> None:
    """Apply ``changes`` (key → properties text) and keep them, all or none.

    :raises SettingRefused: naming each key that cannot change now and why.
    """
    table = ctx.stash.get(RUNTIME_SETTINGS, {})
    reasons: dict[str, str] = {}
    parsed: dict[str, Any] = {}
    unchangeable = False
    for key, text in changes.items():
        setting = table.get(key)
        if setting is None:
            unchangeable = True
            changeable = ", ".join(offered(ctx)) or "none"
            reasons[key] = (
                f"cannot change while the broker runs; set it in {ctx.config.source} and restart "
                f"(changeable now: {changeable})"
            )
            continue
        try:
            parsed[key] = setting.parse(text)
        except ValueError as error:
            reasons[key] = str(error)
    if not changes:
        reasons[""] = "no key given"
    if reasons:
        raise SettingRefused(reasons, unchangeable=unchangeable)
    for key, value in parsed.items():
        table[key].apply(value)
        log.warning("runtime setting %s=%s (updateBrokerConfig)", key, changes[key])
    _keep(ctx, changes)


def _keep(ctx: BrokerContext, changes: Mapping[str, str]) -> None:
    path = runtime_file(ctx)
    merged = {**kept(ctx), **changes}
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "# written by updateBrokerConfig / updateNamesrvConfig: applied at start over the config file\n"
    text += "".join(f"{key}={value}\n" for key, value in sorted(merged.items()))
    temporary = path.with_suffix(".tmp")
    temporary.write_text(text)
    temporary.replace(path)
