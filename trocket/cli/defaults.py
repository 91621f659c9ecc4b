"""The plugins Trocket's CLI assembles a broker from when a config names none.

This is the distribution's choice, not the kernel's: the kernel knows no plugin by name and
loads what it is given (:class:`kernel.config.PluginDefaults`). An application that embeds the
kernel passes its own list, or none.
"""

from __future__ import annotations

from kernel.config import PluginDefaults

TROCKET_DEFAULTS = PluginDefaults(
    plugins=(
        "store_mmap",
        "flush_async",
        "flush_sync",
        "remoting",
        "namesrv",
        "allocate",
        "retry_dlq",
        "transaction",
        "pop",
    ),
    flush_plugins={"async": "flush_async", "sync": "flush_sync"},
    replication_plugin="ha",
    replicator="ha",
    switches={"aclEnable": "acl"},
)
"""RocketMQ's broker as it ships: mmap store, both flush policies (``flush`` picks one),
remoting, a NameServer role, queue allocation, retries/delays/DLQ, transactional messages
(every RocketMQ broker accepts them) and POP consumption (every RocketMQ 5 broker serves it);
a ``brokerRole`` in a properties file adds master/slave replication, ``aclEnable=true`` the
plain ACL."""
