"""``[acl]``: where RocketMQ's ``plain_acl.yml`` is and how often it is re-read."""

from __future__ import annotations

import attrs

from kernel.config import fields


@attrs.frozen(kw_only=True)
class AclConfig:
    plain_acl_file: str | None = fields.optional_string()
    """Path of the ACL file. Default: ``plain_acl.yml`` beside the broker's config file (a
    relative path is taken from there too), as RocketMQ keeps it in its ``conf`` directory."""
    reload_interval: float = fields.duration("1s")
    """How often the file is looked at; a change takes effect for the next request without a
    restart. A file that no longer parses is reported and the last good one kept."""


PROPERTIES: dict = {}
"""``aclEnable`` turns the plugin on (the CLI's plugin defaults); the file has no other key."""
