"""Trocket's microkernel: hook specifications, plugin host, config, pipelines and lifecycle.

The kernel holds contracts, assembly and the put/pull/dispatch pipelines; storage formats,
flush policies, replication and allocation are plugins. Plugin authors import from here::

    from kernel import hookimpl, ConfigSection, Message, Rejection
"""

from kernel.broker import Broker
from kernel.config import BrokerConfig, Config, default_config, load_config
from kernel.context import BrokerContext, StashKey
from kernel.errors import (
    ConfigError,
    CorruptRecord,
    FlushError,
    PluginError,
    PluginLoadError,
    StoreError,
    StoreNotWritable,
    TrocketError,
)
from kernel.model import (
    AllocateStrategy,
    AppendResult,
    BrokerRole,
    ConfigSection,
    DispatchRecord,
    Durability,
    FlushPolicyProvider,
    GetResult,
    GetStatus,
    Message,
    MessageBatch,
    MessageQueue,
    Phase,
    PutResult,
    PutStatus,
    Redelivery,
    Rejection,
    Replication,
    ReplicatorProvider,
    RequestGuardSpec,
    RequestHandlerSpec,
    ServiceSpec,
    StoreProvider,
)
from kernel.plugin import ENTRY_POINT_GROUP, PROJECT, hookimpl
from kernel.sync import Watermark

__all__ = [
    "ENTRY_POINT_GROUP",
    "PROJECT",
    "AllocateStrategy",
    "AppendResult",
    "Broker",
    "BrokerConfig",
    "BrokerContext",
    "BrokerRole",
    "Config",
    "ConfigError",
    "ConfigSection",
    "CorruptRecord",
    "DispatchRecord",
    "Durability",
    "FlushError",
    "FlushPolicyProvider",
    "GetResult",
    "GetStatus",
    "Message",
    "MessageBatch",
    "MessageQueue",
    "Phase",
    "PluginError",
    "PluginLoadError",
    "PutResult",
    "PutStatus",
    "Redelivery",
    "Rejection",
    "Replication",
    "ReplicatorProvider",
    "RequestGuardSpec",
    "RequestHandlerSpec",
    "ServiceSpec",
    "StashKey",
    "StoreError",
    "StoreNotWritable",
    "StoreProvider",
    "TrocketError",
    "Watermark",
    "default_config",
    "hookimpl",
    "load_config",
]
