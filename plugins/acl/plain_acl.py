"""``plain_acl.yml``, RocketMQ's ACL 1.0 file, read into lookup tables.

::

    globalWhiteRemoteAddresses: ["10.10.103.*"]
    accounts:
      - accessKey: RocketMQ
        secretKey: "12345678"
        whiteRemoteAddress: ""
        admin: false
        defaultTopicPerm: DENY
        defaultGroupPerm: SUB
        topicPerms: ["topicA=DENY", "topicB=PUB|SUB"]
        groupPerms: ["groupA=DENY", "groupB=SUB"]

Permissions are RocketMQ's bits: DENY 1, ANY 2, PUB 4, SUB 8. A group ``g`` is kept under its
retry topic ``%RETRY%g``, as RocketMQ checks groups through it. A missing default is DENY.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import yaml

from plugins.acl.addresses import AddressMatch, AddressPatternError, compile_pattern
from wire.remoting.signature import Signer

DENY, ANY, PUB, SUB = 1, 2, 4, 8
RETRY_PREFIX = "%RETRY%"
PERM_NAMES = {"DENY": DENY, "PUB": PUB, "SUB": SUB, "PUB|SUB": PUB | SUB, "SUB|PUB": PUB | SUB}


class AclFileError(ValueError):
    """The file cannot be used; the message names the file and the key."""


def perm_name(perm: int) -> str:
    if perm & DENY:
        return "DENY"
    names = [name for name, bit in (("PUB", PUB), ("SUB", SUB)) if perm & bit]
    return "|".join(names) or "DENY"


def allows(needed: int, owned: int) -> bool:
    """RocketMQ's ``Permission.checkPermission``."""
    if owned & DENY:
        return False
    if needed & ANY:
        return bool(owned & (PUB | SUB))
    return bool(needed & owned)


@attrs.frozen
class Account:
    access_key: str
    secret_key: str = attrs.field(repr=False)
    white: AddressMatch = attrs.field(repr=False, eq=False)
    admin: bool
    default_topic_perm: int
    default_group_perm: int
    perms: Mapping[str, int]
    """Topic → perm, and ``%RETRY%group`` → perm."""
    signer: Signer = attrs.field(init=False, repr=False, eq=False)

    @signer.default
    def _keyed(self) -> Signer:
        return Signer(self.secret_key)

    def owned(self, resource: str) -> int:
        perm = self.perms.get(resource)
        if perm is not None:
            return perm
        return self.default_group_perm if resource.startswith(RETRY_PREFIX) else self.default_topic_perm


@attrs.frozen
class PlainAcl:
    """One parse of the file: the global white list and the accounts by access key."""

    global_white: tuple[AddressMatch, ...] = attrs.field(repr=False, eq=False)
    accounts: Mapping[str, Account]
    version: DataVersion = attrs.field(factory=lambda: DataVersion(0, 0))
    """The file's ``dataVersion`` (bumped by every admin edit; 0 for a file never edited so)."""


@attrs.frozen
class DataVersion:
    """RocketMQ's ``DataVersion`` of the file, as ``clusterAclConfigVersion`` shows it."""

    counter: int
    timestamp: int


def read_plain_acl(path: Path) -> PlainAcl:
    """:raises AclFileError: unreadable, not YAML, or a key with a bad value (named)."""
    return parse_plain_acl(read_acl_document(path), str(path))


def read_acl_document(path: Path) -> dict[str, Any]:
    """The file's YAML mapping. Whatever is wrong with the file is an :class:`AclFileError`
    naming it: the file is edited by hand while the broker runs, and a bad edit must cost the
    operator one clear line, never the broker process (a stray byte, a runaway nesting).

    :raises AclFileError: unreadable, not UTF-8, not YAML, nested too deep, empty, or not a mapping.
    """
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as error:
        raise AclFileError(f"{path}: cannot read: {error.strerror or error}") from None
    except UnicodeDecodeError as error:
        raise AclFileError(
            f"{path}: not UTF-8 text: byte 0x{error.object[error.start]:02X} at offset {error.start}"
        ) from None
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise AclFileError(f"{path}: not valid YAML: {error}") from None
    except RecursionError:
        raise AclFileError(f"{path}: not usable YAML: nested too deeply") from None
    if document is None:
        raise AclFileError(f"{path}: the file is empty (an ACL file lists its accounts)")
    if not isinstance(document, dict):
        raise AclFileError(f"{path}: the top level must be a mapping")
    return document


def parse_plain_acl(document: object, source: str) -> PlainAcl:
    if not isinstance(document, dict):
        raise AclFileError(f"{source}: the top level must be a mapping")
    global_white = tuple(
        _pattern(p, f"{source}: globalWhiteRemoteAddresses")
        for p in _string_list(document, "globalWhiteRemoteAddresses", source)
    )
    accounts: dict[str, Account] = {}
    listed = document.get("accounts")
    if listed is None:
        raise AclFileError(
            f"{source}: accounts: missing or without a value; a file with no accounts would refuse "
            "every request (write `accounts: []` to mean none)"
        )
    if not isinstance(listed, list):
        raise AclFileError(f"{source}: accounts: must be a list of mappings")
    for index, entry in enumerate(listed):
        where = f"{source}: accounts[{index}]"
        if not isinstance(entry, dict):
            raise AclFileError(f"{where}: must be a mapping")
        account = _account(entry, where)
        if account.access_key in accounts:
            raise AclFileError(f"{where}.accessKey: {account.access_key!r} is listed twice")
        accounts[account.access_key] = account
    return PlainAcl(
        global_white,
        accounts,
        data_version(document, source),
    )


def data_version(document: Mapping[str, Any], source: str) -> DataVersion:
    """``dataVersion: [{counter: N, timestamp: ms}]`` as RocketMQ writes it (absent: 0, 0)."""
    listed = document.get("dataVersion")
    if listed is None:
        return DataVersion(0, 0)
    entry = listed[0] if isinstance(listed, list) and listed else listed
    if not isinstance(entry, dict):
        raise AclFileError(f"{source}: dataVersion: must be a list of {{counter, timestamp}} mappings")
    counter, timestamp = entry.get("counter", 0), entry.get("timestamp", 0)
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in (counter, timestamp)):
        raise AclFileError(f"{source}: dataVersion: counter and timestamp must be whole numbers")
    return DataVersion(counter, timestamp)


def _account(entry: dict[str, Any], where: str) -> Account:
    access_key = _scalar(entry, "accessKey", where, required=True)
    secret_key = _scalar(entry, "secretKey", where, required=True)
    white = _scalar(entry, "whiteRemoteAddress", where) or ""
    admin = entry.get("admin", False)
    if not isinstance(admin, bool):
        raise AclFileError(f"{where}.admin: must be true or false, got {admin!r}")
    perms: dict[str, int] = {}
    for key, is_topic in (("topicPerms", True), ("groupPerms", False)):
        for item in _string_list(entry, key, where):
            name, sep, perm = item.partition("=")
            if not sep or not name.strip():
                raise AclFileError(f"{where}.{key}: {item!r} is not 'name=PERM' (for example topicA=SUB)")
            resource = name.strip() if is_topic else RETRY_PREFIX + name.strip()
            perms[resource] = _perm(perm, f"{where}.{key}: {item!r}")
    return Account(
        access_key,
        secret_key,
        _pattern(white, f"{where}.whiteRemoteAddress"),
        admin,
        _perm(entry.get("defaultTopicPerm"), f"{where}.defaultTopicPerm"),
        _perm(entry.get("defaultGroupPerm"), f"{where}.defaultGroupPerm"),
        perms,
    )


def _scalar(entry: dict[str, Any], key: str, where: str, *, required: bool = False) -> str | None:
    value = entry.get(key)
    if value is None or value == "":
        if required:
            raise AclFileError(f"{where}.{key}: missing")
        return None
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise AclFileError(f"{where}.{key}: must be a string, got {value!r}")
    return str(value)  # YAML reads secretKey: 12345678 as a number


def _string_list(entry: dict[str, Any], key: str, where: str) -> list[str]:
    value = entry.get(key)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str | int) for v in value):
        raise AclFileError(f"{where}: {key}: must be a list of strings")
    return [str(v) for v in value]


def _perm(value: object, where: str) -> int:
    if value is None:
        return DENY
    perm = PERM_NAMES.get(str(value).strip())
    if perm is None:
        raise AclFileError(f"{where}: {value!r} is not DENY, PUB, SUB or PUB|SUB")
    return perm


def _pattern(pattern: str, where: str) -> AddressMatch:
    try:
        return compile_pattern(pattern)
    except AddressPatternError as error:
        raise AclFileError(f"{where}: {error}") from None
