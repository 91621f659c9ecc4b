"""The check-back's durable position, ``config/transactionProgress.json``.

``halfOffset``: every half message below it is resolved (committed, rolled back or given up).
``opOffset``: every op record below it ends only half messages below ``halfOffset``, so reading
op records from there rebuilds what is known about the half messages still open.
``checks``: per open half offset, how often it was checked and when last, so a restart neither
checks a message again before its interval nor forgets a count.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs

from kernel.errors import ConfigError
from kernel.persist import JsonStateFile, read_json_with_backup


@attrs.define
class CheckState:
    times: int
    last_ms: int


@attrs.define
class Progress:
    half_offset: int = 0
    op_offset: int = 0
    checks: dict[int, CheckState] = attrs.field(factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "halfOffset": self.half_offset,
            "opOffset": self.op_offset,
            "checks": {str(k): [v.times, v.last_ms] for k, v in sorted(self.checks.items())},
        }

    @classmethod
    def from_json(cls, data: Any, path: Path) -> Progress:
        try:
            checks = {int(k): CheckState(int(v[0]), int(v[1])) for k, v in data.get("checks", {}).items()}
            return cls(int(data.get("halfOffset", 0)), int(data.get("opOffset", 0)), checks)
        except (AttributeError, TypeError, ValueError, IndexError) as error:
            raise ConfigError(str(path), None, f"not a transaction progress file: {error}") from None


@attrs.define(eq=False)
class ProgressFile:
    path: Path
    _file: JsonStateFile = attrs.field(init=False)
    _written: dict[str, Any] | None = attrs.field(default=None, init=False)

    def __attrs_post_init__(self) -> None:
        self._file = JsonStateFile(self.path)

    def load(self) -> Progress:
        """The saved progress, or a fresh one (a new broker, or one upgraded to transactions).

        :raises ConfigError: the file and its backup are both unreadable (named in the text).
        """
        data = read_json_with_backup(self.path)
        return Progress() if data is None else Progress.from_json(data, self.path)

    async def save(self, progress: Progress) -> None:
        """Write ``progress`` unless it equals what was last written."""
        data = progress.to_json()
        if data != self._written:
            await self._file.write(data)
            self._written = data
