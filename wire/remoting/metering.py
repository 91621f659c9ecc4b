"""Requests served, counted by code, response code and result, with their latency: RocketMQ 5's
``rocketmq_rpc_latency`` histogram.

A :class:`RequestMeter` belongs to one server's :class:`~wire.remoting.connection.Router`
(the broker's port, the NameServer's). Routers have none unless someone reads the figures: a
metrics plugin puts a :class:`RequestMeters` in ``ctx.stash`` under ``kernel.context.REQUEST_METERS``
when it registers its services, and the plugins that build routers attach a meter from it.
Without one the router does not even read the clock.

One observation is a dictionary lookup, a ``bisect`` and three additions, once per request (a
grouped run of sends is one observation per request, with the run's time).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator

import attrs

RPC_LATENCY_BOUNDS_MS = (1, 3, 5, 7, 10, 100, 1000, 2000, 3000)
"""RocketMQ 5's ``rocketmq_rpc_latency`` buckets, in milliseconds (and +Inf)."""
_BOUNDS_SECONDS = tuple(bound / 1000 for bound in RPC_LATENCY_BOUNDS_MS)
_bucket = bisect.bisect_left

RESULT_SUCCESS = "success"
"""The handler answered (whatever the response code says)."""
RESULT_ONEWAY = "oneway"
"""A oneway request was handled (nothing is answered)."""
RESULT_FAILED = "process_request_failed"
"""The handler raised; the client got ``SYSTEM_ERROR``."""
RESULT_CANCELLED = "cancelled"
"""The connection closed (or the broker stopped) before the handler finished."""
NO_RESPONSE = -1
"""The response code of requests that got none (oneway, cancelled)."""
OTHER_REQUEST = -1
"""The request code shown for codes this server has no handler for, and for any label set past
:data:`MAX_ROWS`: a client can send any of 2^31 codes, and each must not become a series."""
MAX_ROWS = 1024
"""Label sets one meter makes before folding new ones into (:data:`OTHER_REQUEST`, no response,
result): at most this many plus one per result (a busy broker shows about a hundred)."""


@attrs.frozen
class RequestFigures:
    """One label set's figures: ``counts`` per latency bucket (not cumulative, +Inf last)."""

    request_code: int
    response_code: int
    result: str
    counts: tuple[int, ...]
    total_seconds: float

    @property
    def count(self) -> int:
        return sum(self.counts)


@attrs.define(eq=False)
class RequestMeter:
    server: str
    """Which server's requests (``broker``, ``nameserver``): the ``node_type`` they show under."""
    _rows: dict[tuple[int, int, str], list[float]] = attrs.field(factory=dict, init=False)
    """(request code, response code, result) → [count per bucket..., seconds in total]."""

    def observe(self, request_code: int, response_code: int, result: str, seconds: float) -> None:
        key = (request_code, response_code, result)
        try:
            row = self._rows[key]
        except KeyError:
            if len(self._rows) >= MAX_ROWS:
                key = (OTHER_REQUEST, NO_RESPONSE, result)
            row = self._rows.setdefault(key, [0] * (len(_BOUNDS_SECONDS) + 2))
        row[_bucket(_BOUNDS_SECONDS, seconds)] += 1
        row[-1] += seconds

    def figures(self) -> list[RequestFigures]:
        """A copy of every row (taken on the loop that observes; safe to read elsewhere)."""
        return [
            RequestFigures(code, response, result, tuple(int(c) for c in row[:-1]), row[-1])
            for (code, response, result), row in self._rows.items()
        ]


@attrs.define(eq=False)
class RequestMeters:
    """The meters of one process's servers, by server name."""

    _meters: dict[str, RequestMeter] = attrs.field(factory=dict, init=False)

    def meter(self, server: str) -> RequestMeter:
        """The meter for ``server``, made on first use."""
        meter = self._meters.get(server)
        if meter is None:
            meter = self._meters[server] = RequestMeter(server)
        return meter

    def __iter__(self) -> Iterator[RequestMeter]:
        return iter(list(self._meters.values()))
