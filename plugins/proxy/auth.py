"""RocketMQ 5's call signature, checked against the broker's ACL (``kernel.access``).

A signed call carries ``authorization: MQv2-HMAC-SHA1 Credential=<accessKey>,
SignedHeaders=x-mq-date-time, Signature=<hex>``, the signature being HMAC-SHA1 of the
``x-mq-date-time`` header with the account's secret (Python signs lower-case hex, Node
upper-case: compared without case). Without an ACL plugin every call passes.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping

from kernel.access import AccessControl
from plugins.proxy.status import Code, ProxyProblem

AUTHORIZATION = "authorization"
DATE_TIME = "x-mq-date-time"
SCHEME = "MQv2-HMAC-SHA1"


def parse_authorization(value: str) -> tuple[str, str]:
    """(access key, signature) of an ``authorization`` header; ("", "") when absent or not ours."""
    scheme, _, rest = value.strip().partition(" ")
    if scheme != SCHEME:
        return "", ""
    fields = {}
    for part in rest.split(","):
        key, _, val = part.strip().partition("=")
        fields[key] = val
    return fields.get("Credential", ""), fields.get("Signature", "")


def peer_ip(peer: str) -> str:
    """The address of a grpcio peer string (``ipv4:1.2.3.4:5``, ``ipv6:[::1]:5``)."""
    _, _, address = peer.partition(":")
    host = address.rsplit(":", 1)[0]
    return host.strip("[]")


def peer_port(peer: str) -> int:
    try:
        return int(peer.rsplit(":", 1)[1])
    except (IndexError, ValueError):
        return 0


def authorize(
    access: AccessControl | None,
    metadata: Mapping[str, str],
    peer: str,
    *,
    topics: Mapping[str, str] | None = None,
    groups: Mapping[str, str] | None = None,
) -> None:
    """:raises ProxyProblem: UNAUTHORIZED (no key, unknown key, bad signature) or FORBIDDEN."""
    if access is None:
        return
    access_key, signature = parse_authorization(metadata.get(AUTHORIZATION, ""))
    date_time = metadata.get(DATE_TIME, "").encode()

    def signed(secret: str) -> bool:
        expected = hmac.new(secret.encode(), date_time, hashlib.sha1).hexdigest()
        return hmac.compare_digest(expected, signature.lower())

    denied = access.authorize(peer_ip(peer), access_key, signed, topics=topics or {}, groups=groups or {})
    if denied is not None:
        raise ProxyProblem(Code.FORBIDDEN if denied.authenticated else Code.UNAUTHORIZED, denied.reason)
