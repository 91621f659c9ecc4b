"""A small etcd v3 client over etcd's JSON gateway (``/v3/kv/*``, ``/v3/lease/*``), on trio.

Why the gateway and not gRPC: it needs nothing but HTTP, ``httpx`` runs on trio (through
anyio), and the controller uses five calls: range, put, delete, txn (compare-and-swap on a
key's ``mod_revision``) and leases. Keys and values travel base64-encoded, numbers as strings,
as the gateway's protobuf-to-JSON mapping does.

Several endpoints may be given (the members of one etcd cluster): a call that cannot reach one
tries the next, so a dead member costs one connect timeout, not the controller.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Sequence
from typing import Any

import attrs
import httpx
import orjson

log = logging.getLogger(__name__)
logging.getLogger("httpx").setLevel(logging.WARNING)  # one INFO line per etcd call otherwise


class EtcdUnavailable(Exception):
    """No endpoint answered (every member down or unreachable); the text names them."""


class EtcdError(Exception):
    """An endpoint answered with an error (bad request, a lease that does not exist)."""


def _b64(text: str | bytes) -> str:
    data = text.encode() if isinstance(text, str) else text
    return base64.b64encode(data).decode()


def prefix_end(prefix: str) -> str:
    """The ``range_end`` that selects every key starting with ``prefix`` (etcd's convention:
    the prefix with its last byte incremented)."""
    data = bytearray(prefix.encode())
    data[-1] += 1
    return bytes(data).decode()


@attrs.frozen
class KeyValue:
    key: str
    value: bytes
    mod_revision: int
    create_revision: int
    lease: int


def _kvs(answer: dict[str, Any]) -> list[KeyValue]:
    return [
        KeyValue(
            base64.b64decode(kv["key"]).decode(),
            base64.b64decode(kv.get("value", "")),
            int(kv.get("mod_revision", 0)),
            int(kv.get("create_revision", 0)),
            int(kv.get("lease", 0)),
        )
        for kv in answer.get("kvs", ())
    ]


@attrs.frozen
class Compare:
    """One txn comparison: ``key``'s ``mod_revision`` (0: the key does not exist) equals
    ``revision``."""

    key: str
    revision: int

    def to_json(self) -> dict[str, Any]:
        return {
            "key": _b64(self.key),
            "target": "MOD",
            "result": "EQUAL",
            "mod_revision": str(self.revision),
        }


@attrs.frozen
class Put:
    key: str
    value: bytes
    lease: int = 0

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"key": _b64(self.key), "value": _b64(self.value)}
        if self.lease:
            body["lease"] = str(self.lease)
        return {"request_put": body}


@attrs.frozen
class Delete:
    key: str

    def to_json(self) -> dict[str, Any]:
        return {"request_delete_range": {"key": _b64(self.key)}}


@attrs.define(eq=False)
class EtcdClient:
    """See the module docstring. Use as ``async with EtcdClient(endpoints) as etcd``."""

    endpoints: Sequence[str]
    """``http://host:port`` of each member (``host:port`` is taken as http)."""
    timeout: float = 2.0
    """Per request; a member that does not answer within it is skipped for the next."""
    _http: httpx.AsyncClient | None = attrs.field(default=None, init=False)
    _preferred: int = attrs.field(default=0, init=False)

    def __attrs_post_init__(self) -> None:
        if not self.endpoints:
            raise ValueError("etcd needs at least one endpoint")
        self.endpoints = [e if "://" in e else f"http://{e}" for e in self.endpoints]

    async def __aenter__(self) -> EtcdClient:
        self._http = httpx.AsyncClient(timeout=self.timeout)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    async def _call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        assert self._http is not None, "use EtcdClient as an async context manager"
        errors = []
        count = len(self.endpoints)
        first = self._preferred  # read once: concurrent calls move it
        for step in range(count):
            index = (first + step) % count
            endpoint = self.endpoints[index]
            try:
                response = await self._http.post(endpoint + path, content=orjson.dumps(body))
            except httpx.HTTPError as error:
                errors.append(f"{endpoint}: {error.__class__.__name__} {error}".rstrip())
                continue
            if response.status_code >= 500 and "no leader" in response.text:
                errors.append(f"{endpoint}: no leader")
                continue
            self._preferred = index
            answer: dict[str, Any] = orjson.loads(response.content or b"{}")
            if response.status_code != 200 or "error" in answer:
                message = answer.get("error") or answer.get("message") or response.text
                raise EtcdError(f"etcd {path}: {message}")
            return answer
        raise EtcdUnavailable("no etcd endpoint answered: " + "; ".join(errors))

    # --- kv -------------------------------------------------------------------------------

    async def get(self, key: str) -> KeyValue | None:
        found = _kvs(await self._call("/v3/kv/range", {"key": _b64(key)}))
        return found[0] if found else None

    async def get_prefix(self, prefix: str) -> list[KeyValue]:
        body = {"key": _b64(prefix), "range_end": _b64(prefix_end(prefix))}
        return _kvs(await self._call("/v3/kv/range", body))

    async def put(self, key: str, value: bytes, *, lease: int = 0) -> None:
        await self._call("/v3/kv/put", Put(key, value, lease).to_json()["request_put"])

    async def delete(self, key: str) -> None:
        await self._call("/v3/kv/deleterange", {"key": _b64(key)})

    async def txn(self, compare: Sequence[Compare], success: Sequence[Put | Delete]) -> bool:
        """Apply ``success`` atomically if every comparison holds; whether it did."""
        answer = await self._call(
            "/v3/kv/txn",
            {"compare": [c.to_json() for c in compare], "success": [op.to_json() for op in success]},
        )
        return bool(answer.get("succeeded", False))

    # --- leases ---------------------------------------------------------------------------

    async def grant(self, ttl: float) -> int:
        """A new lease of ``ttl`` seconds (rounded up to whole seconds, etcd's unit)."""
        answer = await self._call("/v3/lease/grant", {"TTL": str(max(1, int(-(-ttl // 1))))})
        return int(answer["ID"])

    async def keep_alive(self, lease: int) -> int:
        """Renew ``lease``; the TTL it now has, 0 when it had expired (etcd forgets it)."""
        answer = await self._call("/v3/lease/keepalive", {"ID": str(lease)})
        return int(answer.get("result", {}).get("TTL", 0))

    async def revoke(self, lease: int) -> None:
        """End ``lease`` now; its keys are deleted. A lease already gone is not an error."""
        try:
            await self._call("/v3/lease/revoke", {"ID": str(lease)})
        except EtcdError as error:
            if "not found" not in str(error):
                raise

    async def status(self) -> dict[str, Any]:
        """The answering member's status (version, leader, raft term)."""
        return await self._call("/v3/maintenance/status", {})
