"""The permission check every request passes before its handler (RocketMQ's
``PlainPermissionManager.validate``), in RocketMQ's order:

1. a peer in ``globalWhiteRemoteAddresses`` passes;
2. a request without ``AccessKey``, or with a key the file does not list, is refused;
3. a peer in the account's ``whiteRemoteAddress`` passes without a signature;
4. the signature must match (HMAC-SHA1 with the account's secret);
5. an admin-only request needs ``admin: true``;
6. every topic and group the request touches needs its permission, from the account's
   ``topicPerms``/``groupPerms`` or else its defaults.

A refusal is ``NO_PERMISSION`` with a remark naming the key, the resource and what is
missing; the handler never runs, so nothing refused touches the store.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

import attrs

from kernel.access import AccessDenied
from plugins.acl.addresses import peer_ip
from plugins.acl.plain_acl import PERM_NAMES, RETRY_PREFIX, Account, PlainAcl, allows, perm_name
from plugins.acl.resources import ADMIN_CODES, UnreadableRequest, needed
from wire.remoting import Connection, RemotingCommand, ResponseCode, code_name
from wire.remoting.signature import ACCESS_KEY

log = logging.getLogger(__name__)

_PASSED = AccessDenied("white-listed", authenticated=True)
"""A caller white-listed by address: no signature or permission is checked."""


@attrs.define
class AclStatistics:
    allowed: int = 0
    refused: int = 0


@attrs.define(eq=False)
class AclGuard:
    """Holds the file's current parse; :meth:`check` is the request guard."""

    acl: PlainAcl
    stats: AclStatistics = attrs.field(factory=AclStatistics)

    def check(self, connection: Connection, request: RemotingCommand) -> RemotingCommand | None:
        problem = self.problem(peer_ip(connection.peer), request)
        if problem is None:
            self.stats.allowed += 1
            return None
        self.stats.refused += 1
        log.info("ACL: %s from %s refused: %s", code_name(request.code), connection.peer, problem)
        return request.response(ResponseCode.NO_PERMISSION, remark=problem)

    def problem(self, address: str, request: RemotingCommand) -> str | None:
        """Why ``request`` from ``address`` is refused, or ``None``."""
        ext = request.ext
        access_key = ext.get(ACCESS_KEY) or ""
        denied = self._identify(
            address, access_key, lambda account: account.signer.matches(ext, request.body)
        )
        if denied is _PASSED:
            return None
        if denied is not None:
            return denied.reason
        account = self.acl.accounts[access_key]
        if request.code in ADMIN_CODES and not account.admin:
            return (
                f"Need admin permission for request code={int(request.code)} "
                f"({code_name(request.code)}), but accessKey={_shown(access_key)} is not"
            )
        try:
            resources = needed(request)
        except UnreadableRequest as error:
            return f"accessKey={_shown(access_key)}: {error}"
        return self._missing(account, access_key, resources)

    def authorize(
        self,
        peer_ip: str,
        access_key: str,
        signed: Callable[[str], bool],
        *,
        topics: Mapping[str, str],
        groups: Mapping[str, str],
    ) -> AccessDenied | None:
        """:class:`kernel.access.AccessControl`, for calls signed RocketMQ 5's way (the proxy)."""
        denied = self._identify(peer_ip, access_key, lambda account: signed(account.secret_key))
        if denied is _PASSED:
            self.stats.allowed += 1
            return None
        if denied is not None:
            self.stats.refused += 1
            return denied
        resources = {name: PERM_NAMES[perm] for name, perm in topics.items()}
        resources.update({RETRY_PREFIX + name: PERM_NAMES[perm] for name, perm in groups.items()})
        missing = self._missing(self.acl.accounts[access_key], access_key, resources)
        if missing is not None:
            self.stats.refused += 1
            return AccessDenied(missing, authenticated=True)
        self.stats.allowed += 1
        return None

    def _identify(
        self, address: str, access_key: str, signature_ok: Callable[[Account], bool]
    ) -> AccessDenied | None:
        """Steps 1-4: ``None`` when the account must still be checked for permissions,
        :data:`_PASSED` when the caller passes without (white-listed), else the refusal."""
        acl = self.acl
        if acl.global_white and any(match(address) for match in acl.global_white):
            return _PASSED
        if not access_key:
            return AccessDenied("No accessKey is configured: the request is not signed (ACL is on)", False)
        account = acl.accounts.get(access_key)
        if account is None:
            return AccessDenied(f"No acl config for {_shown(access_key)}", False)
        if account.white(address):
            return _PASSED
        if not signature_ok(account):
            return AccessDenied(f"Check signature failed for accessKey={_shown(access_key)}", False)
        return None

    def _missing(self, account: Account, access_key: str, resources: Mapping[str, int]) -> str | None:
        for resource, perm in resources.items():
            owned = account.owned(resource)
            if not allows(perm, owned):
                kind, name = (
                    ("group", resource[len(RETRY_PREFIX) :])
                    if resource.startswith(RETRY_PREFIX)
                    else ("topic", resource)
                )
                return (
                    f"No permission for {kind} {_shown(name)}: accessKey={_shown(access_key)} needs "
                    f"{perm_name(perm)} and has {perm_name(owned)}"
                )
        return None


def _shown(text: str, limit: int = 80) -> str:
    return repr(text) if len(text) <= limit else f"{text[:limit]!r}... ({len(text)} characters)"
