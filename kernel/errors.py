"""One exception hierarchy for the whole broker (its root, :class:`TrocketError`, and the wire
formats' errors live in :mod:`wire.errors` and are re-exported here).

Expected outcomes (a flush that timed out, a rejected batch) are values such as
:class:`kernel.model.PutStatus`; exceptions are for misconfiguration, bugs, corruption and
resources that are gone. Every message names what it is about (a file and key, a plugin,
an offset), because these errors are read by operators, not programs.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from wire.errors import CorruptRecord as CorruptRecord  # re-exported: one hierarchy, one import
from wire.errors import MalformedBatch as MalformedBatch
from wire.errors import RemotingClosedError as RemotingClosedError
from wire.errors import RemotingConnectError as RemotingConnectError
from wire.errors import RemotingError as RemotingError
from wire.errors import RemotingTimeoutError as RemotingTimeoutError
from wire.errors import TrocketError as TrocketError


class ConfigError(TrocketError):
    """A configuration file or value is wrong; raised before anything starts.

    :param source: the file (or ``"<defaults>"``, ``"<command line>"``) the value came from.
    :param key: the dotted key (``broker.listen_port``) or properties key (``listenPort``).
    :param problem: what is wrong and what was expected.
    """

    def __init__(self, source: str, key: str | None, problem: str) -> None:
        self.source = source
        self.key = key
        self.problem = problem
        where = f"{source}: {key}" if key else source
        super().__init__(f"{where}: {problem}")


class ConfigErrors(ConfigError):
    """Several problems of one file, reported together so that one edit can fix them all.

    :param errors: the individual problems, in file order (nested groups are flattened).
    """

    def __init__(self, errors: Sequence[ConfigError]) -> None:
        flat: list[ConfigError] = []
        for error in errors:
            flat.extend(error.errors if isinstance(error, ConfigErrors) else [error])
        self.errors = tuple(flat)
        self.source = flat[0].source
        self.key = None
        lines = [f"{e.key}: {e.problem}" if e.key else e.problem for e in flat]
        self.problem = f"{len(flat)} problems:\n" + "\n".join(f"  - {line}" for line in lines)
        TrocketError.__init__(self, f"{self.source}: {self.problem}")

    @staticmethod
    def raise_any(errors: Sequence[ConfigError]) -> None:
        """Raise nothing, the one error, or all of them as a :class:`ConfigErrors`."""
        if len(errors) == 1:
            raise errors[0]
        if errors:
            raise ConfigErrors(errors)


class PluginError(TrocketError):
    """A plugin could not be loaded, or broke a kernel contract."""


class PluginLoadError(PluginError):
    """A configured plugin name resolves to nothing importable."""

    def __init__(self, name: str, available: Iterable[str], reason: str | None = None) -> None:
        self.name = name
        self.available = sorted(available)
        known = ", ".join(self.available) or "none installed"
        detail = f" ({reason})" if reason else ""
        super().__init__(
            f"unknown plugin {name!r}{detail}; available plugins: {known}; "
            "a third-party plugin can also be named by its dotted module path"
        )


class ProviderNotFound(PluginError):
    """No loaded plugin provides the requested role/name."""

    def __init__(self, role: str, name: str | None, candidates: Iterable[str]) -> None:
        self.role = role
        self.name = name
        self.candidates = sorted(candidates)
        wanted = f"{role} {name!r}" if name else f"a {role}"
        have = ", ".join(self.candidates) or "none"
        super().__init__(f"no loaded plugin provides {wanted}; loaded {role} providers: {have}")


class AmbiguousProvider(PluginError):
    """Several plugins provide a role and the config does not say which one to use."""

    def __init__(self, role: str, candidates: Iterable[str]) -> None:
        self.role = role
        self.candidates = sorted(candidates)
        super().__init__(
            f"several {role} providers are loaded ({', '.join(self.candidates)}); "
            f'choose one with [broker] {role} = "..."'
        )


class DuplicateProvider(PluginError):
    """Two plugins registered a provider under the same role and name."""


class PluginContractError(PluginError):
    """A plugin returned something that does not honour the contract of its hook."""


class StoreError(TrocketError):
    """Base of storage failures."""


class StoreClosed(StoreError):
    """The store was used after ``aclose()``."""


class StoreLocked(StoreError):
    """Another process holds the store's lock file."""


class StoreNotWritable(StoreError):
    """The store refuses writes (disk full, an earlier I/O error, or a slave role)."""


class OffsetOutOfRange(StoreError):
    """An offset that the store does not hold; never answered with ``None``."""


class FlushError(StoreError):
    """Flushing to disk failed; the flushed position did not move."""


class ReplicationError(TrocketError):
    """Master/slave replication failed in a way that is not a plain timeout."""


class ReplicaMismatch(ReplicationError):
    """A master's bytes do not continue this replica's log (wrong offset, different file size,
    or an offset the master cannot serve): the replica must not store them."""


class WatermarkFailed(TrocketError):
    """A :class:`kernel.sync.Watermark` was failed while a caller waited on it."""
