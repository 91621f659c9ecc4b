"""Configuration: TOML and broker.properties, and every error path naming file and key."""

from __future__ import annotations

import functools

import pytest

import kernel
from kernel import Broker, BrokerRole, ConfigError
from plugins.flush_async.config import FlushAsyncConfig
from plugins.flush_sync.config import FlushSyncConfig
from tests.support import write
from trocket.cli.defaults import TROCKET_DEFAULTS

# Files loaded as the trocket CLI loads them: a file naming no plugins gets the shipped set.
load_config = functools.partial(kernel.load_config, defaults=TROCKET_DEFAULTS)

MEMORY = "kernel.testing.memory_store"


def test_toml_broker_table_and_plugin_tables(tmp_path):
    path = write(
        tmp_path,
        "broker.toml",
        f"""
        [broker]
        plugins = ["{MEMORY}", "flush_sync", "flush_async"]
        store = "memory"
        flush = "sync"
        cluster_name = "C1"
        broker_name = "broker-b"
        broker_id = 0
        listen_port = 20911
        namesrv_addr = ["127.0.0.1:9876", "127.0.0.2:9876"]
        max_message_size = "1MiB"
        graceful_timeout = "3s"

        [flush_sync]
        timeout = "750ms"

        [flush_async]
        interval = "200ms"
        least_pages = 8
        """,
    )
    config = load_config(path)
    assert config.broker.cluster_name == "C1"
    assert config.broker.max_message_size == 1 << 20
    assert config.broker.graceful_timeout == 3.0
    assert config.broker.namesrv_addr == ("127.0.0.1:9876", "127.0.0.2:9876")
    broker = Broker.assemble(config)
    assert broker.ctx.plugin_config(FlushSyncConfig).timeout == 0.75
    assert broker.ctx.plugin_config(FlushAsyncConfig).least_pages == 8
    assert broker.ctx.plugin_config(FlushAsyncConfig).thorough_interval == 10.0  # default


@pytest.mark.parametrize(
    ("body", "key", "expected"),
    [
        ("[broker]\nlisten_port = 'x'", "[broker] listen_port", "expected an integer"),
        ("[broker]\nlisten_port = 70000", "[broker] listen_port", "<= 65535"),
        ("[broker]\nmax_message_size = '4 parsecs'", "[broker] max_message_size", "size"),
        ("[broker]\ngraceful_timeout = 'soon'", "[broker] graceful_timeout", "duration"),
        ("[broker]\nbroker_role = 'LEADER'", "[broker] broker_role", "ASYNC_MASTER"),
        ("[broker]\nroles = ['gateway']", "[broker] roles", "unknown role"),
        ("[broker]\nlisten_prot = 1", "[broker] listen_prot", "unknown key; known keys:"),
        ("[broker]\nmessage_delay_level = '1s 2q'", "[broker] message_delay_level", "delay level"),
        ("[broker]\nauto_create_topic_enable = 'yes'", "[broker] auto_create_topic_enable", "true or false"),
        ("broker = 3", "broker", "[broker]"),
        ("[broker\n", None, "invalid TOML"),
    ],
)
def test_toml_errors_name_file_and_key(tmp_path, body, key, expected):
    path = write(tmp_path, "bad.toml", body)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(path) in str(caught.value)
    if key:
        assert key in str(caught.value)
    assert expected in str(caught.value)


def test_plugin_table_errors_are_reported_at_assembly(tmp_path):
    path = write(
        tmp_path,
        "b.toml",
        f"""
        [broker]
        plugins = ["{MEMORY}", "flush_sync"]
        store = "memory"
        flush = "sync"
        [flush_sync]
        timeout = "eventually"
        """,
    )
    with pytest.raises(ConfigError, match=r"b\.toml: \[flush_sync\] timeout: expected a duration"):
        Broker.assemble(load_config(path))


def test_table_for_a_plugin_that_is_not_loaded_is_an_error(tmp_path):
    path = write(
        tmp_path,
        "b.toml",
        f"""
        [broker]
        plugins = ["{MEMORY}", "flush_async"]
        store = "memory"
        [flush_sync]
        timeout = "1s"
        """,
    )
    with pytest.raises(ConfigError, match=r"\[flush_sync\]: no loaded plugin declares this table"):
        Broker.assemble(load_config(path))


def test_unreadable_file(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.toml")


PROPERTIES = """\
# a RocketMQ broker.properties
brokerClusterName=DefaultCluster
brokerName=broker-a
brokerId=0
listenPort=10915
namesrvAddr=127.0.0.1:9876;127.0.0.1:9877
brokerRole=ASYNC_MASTER
flushDiskType=SYNC_FLUSH
storePathRootDir={root}
storePathCommitLog={root}/commitlog
mapedFileSizeCommitLog=1073741824
mapedFileSizeConsumeQueue=6000000
flushIntervalCommitLog=500
flushCommitLogLeastPages=4
flushCommitLogThoroughInterval=10000
syncFlushTimeout=2500
deleteWhen=04
fileReservedTime=48
diskMaxUsedSpaceRatio=88
maxMessageSize=4194304
messageDelayLevel=1s 5s 10s
defaultTopicQueueNums=8
autoCreateTopicEnable=false
haListenPort=10912
"""


def test_properties_are_mapped_onto_the_model(tmp_path):
    path = write(tmp_path, "broker.properties", PROPERTIES.format(root=tmp_path / "store"))
    config = load_config(path)
    b = config.broker
    assert (b.cluster_name, b.broker_name, b.broker_id, b.listen_port) == (
        "DefaultCluster",
        "broker-a",
        0,
        10915,
    )
    assert b.namesrv_addr == ("127.0.0.1:9876", "127.0.0.1:9877")
    assert b.broker_role is BrokerRole.ASYNC_MASTER
    assert b.flush == "sync" and "flush_sync" in b.plugins and "flush_async" not in b.plugins
    assert b.data_dir == tmp_path / "store"
    assert b.max_message_size == 4194304 and b.default_topic_queue_nums == 8
    assert b.auto_create_topic_enable is False
    assert b.message_delay_level == (1.0, 5.0, 10.0)
    assert config.sections["flush_sync"] == {"timeout": "2500ms"}
    assert "store_mmap" in b.plugins
    assert config.sections["store_mmap"]["commit_log_file_size"] == 1073741824
    assert config.sections["store_mmap"]["file_reserved_time"] == "48h"
    assert config.sections["store_mmap"]["disk_max_used_space_ratio"] == 88
    broker = Broker.assemble(config)
    from plugins.store_mmap.config import StoreMmapConfig

    store = broker.ctx.plugin_config(StoreMmapConfig)
    assert store.commit_log_dir == tmp_path / "store" / "commitlog"
    assert store.consume_queue_file_size == 6000000 and store.file_reserved_time == 48 * 3600
    assert store.delete_when == "04" and store.disk_max_used_space_ratio == 88
    # Keys for plugins this broker does not load are reported, not silently dropped.
    notes = "\n".join(config.notes)
    assert "flushIntervalCommitLog" in notes and "'flush_async'" in notes
    # A role in a properties file asks for RocketMQ's HA service: the ha plugin replicates.
    assert "ha" in b.plugins and b.replicator == "ha"
    assert "haListenPort" not in notes
    from plugins.ha.config import HaConfig

    ha = broker.ctx.plugin_config(HaConfig)
    assert ha.sync_timeout == 2.5, "syncFlushTimeout bounds the slave wait too"


@pytest.mark.parametrize(
    ("line", "key", "expected"),
    [
        ("listenPort=ten", "listenPort", "expected an integer"),
        ("flushDiskType=SOMETIMES", "flushDiskType", "ASYNC_FLUSH or SYNC_FLUSH"),
        ("brokerRole=BOSS", "brokerRole", "SYNC_MASTER"),
        ("autoCreateTopicEnable=maybe", "autoCreateTopicEnable", "true or false"),
        ("namesrvAddr=localhost", "namesrvAddr", "host:port"),
        ("flushIntervalCommitLog=fast", "flushIntervalCommitLog", "milliseconds"),
        (
            "brokerNmae=broker-a",
            "brokerNmae",
            "unknown key (neither Trocket nor RocketMQ defines it); did you mean brokerName?",
        ),
        ("justakey", "line 1", "expected key=value"),
    ],
)
def test_properties_errors_name_file_and_key(tmp_path, line, key, expected):
    path = write(tmp_path, "broker.properties", line + "\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    message = str(caught.value)
    assert str(path) in message and key in message and expected in message


def test_properties_value_checked_by_the_plugin_schema(tmp_path):
    path = write(tmp_path, "broker.properties", "flushDiskType=SYNC_FLUSH\nsyncFlushTimeout=-5\n")
    with pytest.raises(ConfigError, match="duration"):
        Broker.assemble(load_config(path))


def test_properties_continuation_lines_and_duplicates(tmp_path):
    path = write(tmp_path, "broker.properties", "messageDelayLevel=1s \\\n  5s\n")
    assert load_config(path).broker.message_delay_level == (1.0, 5.0)
    dup = write(tmp_path, "dup.properties", "brokerId=0\nbrokerId=1\n")
    with pytest.raises(ConfigError, match="brokerId: set twice"):
        load_config(dup)


def test_sync_master_without_a_replicator_is_refused(tmp_path):
    path = write(
        tmp_path,
        "b.toml",
        f"""
        [broker]
        plugins = ["{MEMORY}", "flush_sync"]
        store = "memory"
        flush = "sync"
        broker_role = "SYNC_MASTER"
        """,
    )
    with pytest.raises(ConfigError, match="SYNC_MASTER needs a replicator"):
        Broker.assemble(load_config(path))


def test_network_properties_are_mapped_onto_the_remoting_table(tmp_path):
    path = write(
        tmp_path,
        "broker.properties",
        "brokerPermission=4\nlongPollingEnable=false\nshortPollingTimeMills=300\nbrokerIP1=10.0.0.5\n",
    )
    config = load_config(path)
    assert config.broker.listen_host == "10.0.0.5"
    assert config.sections["remoting"] == {
        "broker_permission": 4,
        "long_polling_enable": False,
        "short_polling_time": "300ms",
    }
    from plugins.remoting.config import RemotingConfig

    remoting = Broker.assemble(config).ctx.plugin_config(RemotingConfig)
    assert (remoting.broker_permission, remoting.long_polling_enable, remoting.short_polling_time) == (
        4,
        False,
        0.3,
    )


def test_flush_and_transient_pool_properties_are_mapped(tmp_path):
    path = write(
        tmp_path,
        "broker.properties",
        "\n".join(
            [
                "flushDiskType=ASYNC_FLUSH",
                "transientStorePoolEnable=true",
                "commitIntervalCommitLog=100",
                "commitCommitLogLeastPages=8",
                "commitCommitLogThoroughInterval=400",
                "flushCommitLogTimed=false",
                "flushIntervalConsumeQueue=2000",
                "flushConsumeQueueThoroughInterval=30000",
                "flushConsumeQueueLeastPages=3",
            ]
        ),
    )
    config = load_config(path)
    assert (config.broker.view_persist_interval, config.broker.view_persist_thorough_interval) == (2.0, 30.0)
    assert config.sections["store_mmap"] == {"write_path": "buffered", "flush_consume_queue_least_pages": 3}
    from plugins.flush_async.config import FlushAsyncConfig

    flush = Broker.assemble(config).ctx.plugin_config(FlushAsyncConfig)
    assert (flush.commit_interval, flush.commit_least_pages, flush.commit_thorough_interval) == (0.1, 8, 0.4)
    assert flush.timed is False


def test_a_file_naming_no_plugins_gets_its_loaders_defaults(tmp_path):
    """The kernel names no plugin: without defaults a file loads exactly what it lists; the
    CLI (or an embedding application) supplies the set a file without a list gets."""
    path = write(tmp_path, "b.toml", '[broker]\nbroker_name = "b"\n')
    assert kernel.load_config(path).broker.plugins == ()
    own = kernel.config.PluginDefaults(plugins=("flush_sync", "not_installed_here"))
    config = kernel.load_config(path, defaults=own)
    assert config.broker.plugins == ("flush_sync",)
    assert "default plugins not installed (not part of this build yet): not_installed_here" in config.notes
    assert set(load_config(path).broker.plugins) == set(TROCKET_DEFAULTS.plugins)
