"""What the POP modules share without importing each other in a circle."""

from __future__ import annotations

from kernel.clock import steady_ms


class PopRefused(Exception):
    """A pop, ack or change the broker answers with ``code`` and ``remark``."""

    def __init__(self, code: int, remark: str) -> None:
        super().__init__(remark)
        self.code = code
        self.remark = remark


def now_ms() -> int:
    """Pop times and invisibility deadlines run on the broker's steady clock (kernel.clock)."""
    return steady_ms()
