"""What a plugin may ask of the broker's access control, for requests that do not arrive as
remoting commands (the gRPC proxy's calls, signed RocketMQ 5's way).

The accounts belong to whichever plugin enforces ACL (``acl``: ``plain_acl.yml``). It publishes
an :class:`AccessControl` in ``ctx.stash`` under :data:`ACCESS_CONTROL`; without one, every call
is allowed, as every remoting request is without the acl plugin.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

import attrs

from kernel.context import StashKey


@attrs.frozen
class AccessDenied:
    reason: str
    """Names the key, the resource and what is missing (never the secret)."""
    authenticated: bool
    """False: no key, an unknown key or a wrong signature; True: the account lacks a permission."""


class AccessControl(Protocol):
    def authorize(
        self,
        peer_ip: str,
        access_key: str,
        signed: Callable[[str], bool],
        *,
        topics: Mapping[str, str],
        groups: Mapping[str, str],
    ) -> AccessDenied | None:
        """``None`` when the caller may go on.

        :param access_key: the caller's key ("" when the call is not signed).
        :param signed: whether the call's signature was made with a given secret key.
        :param topics: topic name → ``"PUB"`` or ``"SUB"`` the call needs.
        :param groups: consumer group name → ``"SUB"``.
        """
        ...


ACCESS_CONTROL = StashKey[AccessControl]("kernel.access_control")
