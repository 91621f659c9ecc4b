"""Whether a derived view can take records now: the store refuses puts while it cannot."""

from __future__ import annotations

from collections.abc import Sequence

from kernel.model import DispatchRecord
from kernel.open_files import explain_open_failure


class TracksDispatchFailure:
    """Mixin of the store's views: :meth:`dispatch` runs the view's ``_dispatch`` and keeps why
    it failed in ``failing`` (an ``attrs`` field of the view) until a dispatch succeeds, so the
    store can refuse puts that the view could not index meanwhile."""

    failing: str

    def _dispatch(self, records: Sequence[DispatchRecord], end_offset: int) -> None:
        raise NotImplementedError

    def dispatch(self, records: Sequence[DispatchRecord], end_offset: int) -> None:
        try:
            self._dispatch(records, end_offset)
        except OSError as error:
            self.failing = explain_open_failure(error)
            raise
        self.failing = ""
