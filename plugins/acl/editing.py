"""Admin edits of ``plain_acl.yml`` (mqadmin's ``updateAclConfig``, ``deleteAclConfig`` and
``updateGlobalWhiteAddr``), written to the file so they outlive a restart.

Each edit reads the file as it is now (an operator may have changed it by hand), changes one
thing, bumps ``dataVersion`` as RocketMQ does, checks the result parses like any file, and
replaces the file atomically (a temporary file, fsync, rename). Only then is the new parse put
in force. An edit that would leave a file the broker cannot read is refused and nothing is
written; so is an edit while the file itself is broken (the operator's half-done change is not
overwritten). Edits run one at a time. YAML comments in the file do not survive an edit.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import attrs
import trio
import yaml

from plugins.acl.guard import AclGuard
from plugins.acl.plain_acl import AclFileError, PlainAcl, data_version, parse_plain_acl, read_acl_document

MIN_KEY_LENGTH = 6
"""RocketMQ refuses access and secret keys shorter than this."""
ACCOUNT_FIELDS = (
    "secretKey",
    "whiteRemoteAddress",
    "admin",
    "defaultTopicPerm",
    "defaultGroupPerm",
    "topicPerms",
    "groupPerms",
)
"""The request's ext fields an ``updateAclConfig`` may set; one left out keeps its value."""


class AclEditError(ValueError):
    """The edit was refused; the message says why (the file is unchanged)."""


@attrs.define(eq=False)
class AclFileEditor:
    path: Path
    guard: AclGuard
    _lock: trio.Lock = attrs.field(factory=trio.Lock, init=False)

    async def update_account(self, fields: Mapping[str, str]) -> bool:
        """Create or change the account ``fields["accessKey"]``; whether it was new.

        :raises AclEditError: a key too short, a new account without a secret, a bad value.
        """
        access_key = fields.get("accessKey") or ""
        if len(access_key) < MIN_KEY_LENGTH:
            raise AclEditError(f"accessKey {access_key!r} must have at least {MIN_KEY_LENGTH} characters")
        secret = fields.get("secretKey")
        if secret is not None and len(secret) < MIN_KEY_LENGTH:
            raise AclEditError(
                f"the secretKey of {access_key!r} must have at least {MIN_KEY_LENGTH} characters"
            )
        created = False

        def change(document: dict[str, Any]) -> None:
            nonlocal created
            accounts = document.setdefault("accounts", [])
            entry = next((a for a in accounts if str(a.get("accessKey")) == access_key), None)
            if entry is None:
                if secret is None:
                    raise AclEditError(f"a new account needs a secretKey ({access_key!r} does not exist yet)")
                entry = {"accessKey": access_key}
                accounts.append(entry)
                created = True
            for key in ACCOUNT_FIELDS:
                if key in fields:
                    entry[key] = _account_value(key, fields[key])

        await self._edit(change)
        return created

    async def delete_account(self, access_key: str) -> None:
        """:raises AclEditError: no such account."""

        def change(document: dict[str, Any]) -> None:
            accounts = document.get("accounts") or []
            kept = [a for a in accounts if str(a.get("accessKey")) != access_key]
            if len(kept) == len(accounts):
                raise AclEditError(f"there is no account with accessKey {access_key!r}")
            document["accounts"] = kept

        await self._edit(change)

    async def update_global_white(self, addresses: list[str]) -> None:
        """Replace ``globalWhiteRemoteAddresses``. :raises AclEditError: a bad pattern."""

        def change(document: dict[str, Any]) -> None:
            document["globalWhiteRemoteAddresses"] = addresses

        await self._edit(change)

    async def _edit(self, change: Callable[[dict[str, Any]], None]) -> PlainAcl:
        async with self._lock:
            acl = await trio.to_thread.run_sync(self._edit_file, change)
            self.guard.acl = acl
            return acl

    def _edit_file(self, change: Callable[[dict[str, Any]], None]) -> PlainAcl:
        try:
            document = read_acl_document(self.path)
        except AclFileError as error:
            raise AclEditError(f"the file cannot be edited until it is fixed: {error}") from None
        try:
            previous = data_version(document, str(self.path)).counter
        except AclFileError:
            previous = self.guard.acl.version.counter
        change(document)
        document["dataVersion"] = [{"counter": previous + 1, "timestamp": int(time.time() * 1000)}]
        try:
            acl = parse_plain_acl(document, str(self.path))
        except AclFileError as error:
            raise AclEditError(f"refused, the file would not be usable: {error}") from None
        _write_atomically(self.path, yaml.safe_dump(document, sort_keys=False, allow_unicode=True))
        return acl


def _account_value(key: str, value: str) -> Any:
    if key == "admin":
        if value.lower() not in ("true", "false"):
            raise AclEditError(f"admin must be true or false, got {value!r}")
        return value.lower() == "true"
    if key in ("topicPerms", "groupPerms"):
        return [item.strip() for item in value.split(",") if item.strip()]
    return value


def _write_atomically(path: Path, text: str) -> None:
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.chmod(temporary, path.stat().st_mode & 0o7777)  # the operator's choice of who reads secrets
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
