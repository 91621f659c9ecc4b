"""RocketMQ's own config files start Trocket as they are (issue 22, item 2): the shipped
``conf/broker.conf`` (properties syntax in a ``.conf`` file) and the ``2m-2s-sync`` pair; keys
RocketMQ defines that Trocket does not use are named as ignored; typos get a suggestion."""

from __future__ import annotations

import functools
import signal

import pytest

import kernel
from kernel import Broker
from kernel.errors import ConfigError
from tests.network.conftest import free_port
from tests.support import start_trocket, write
from trocket.cli.defaults import TROCKET_DEFAULTS

# Files loaded as the trocket CLI loads them: a file naming no plugins gets the shipped set.
load_config = functools.partial(kernel.load_config, defaults=TROCKET_DEFAULTS)

# RocketMQ's conf/broker.conf as shipped (its Apache licence header is a comment block).
BROKER_CONF = """
# Licensed to the Apache Software Foundation (ASF) ...
brokerClusterName = DefaultCluster
brokerName = broker-a
brokerId = 0
deleteWhen = 04
fileReservedTime = 48
brokerRole = ASYNC_MASTER
flushDiskType = ASYNC_FLUSH
"""

SYNC_MASTER = """
brokerClusterName=DefaultCluster
brokerName=broker-a
brokerId=0
deleteWhen=04
fileReservedTime=48
brokerRole=SYNC_MASTER
flushDiskType=ASYNC_FLUSH
"""

SYNC_SLAVE = SYNC_MASTER.replace("brokerId=0", "brokerId=1").replace("SYNC_MASTER", "SLAVE")

TUNED = """
brokerIP2 = 10.0.0.2
sendMessageThreadPoolNums = 16
pullMessageThreadPoolNums = 32
enablePropertyFilter = true
serverWorkerThreads = 8
"""


def test_shipped_broker_conf_is_read_as_properties_and_says_so(tmp_path):
    config = load_config(write(tmp_path, "broker.conf", BROKER_CONF))
    assert config.broker.broker_name == "broker-a" and config.broker.flush == "async"
    assert (
        config.notes[0]
        == "broker.conf read as RocketMQ broker.properties (key = value lines, no [table] headers)"
    )
    assert config.sections["store_mmap"]["file_reserved_time"] == "48h"
    Broker.assemble(config)


def test_a_conf_file_with_tables_is_toml(tmp_path):
    config = load_config(write(tmp_path, "broker.conf", '[broker]\nbroker_name = "broker-t"\n'))
    assert config.broker.broker_name == "broker-t" and "read as TOML" in config.notes[0]


@pytest.mark.parametrize("text", [SYNC_MASTER, SYNC_SLAVE], ids=["broker-a", "broker-a-s"])
def test_2m_2s_sync_files_assemble_with_replication(tmp_path, text):
    config = load_config(write(tmp_path, "broker.properties", text))
    broker = Broker.assemble(config)
    assert config.broker.replicator == "ha" and broker.role.value in ("SYNC_MASTER", "SLAVE")


def test_rocketmq_keys_trocket_does_not_use_are_named_as_ignored(tmp_path):
    config = load_config(write(tmp_path, "broker.properties", BROKER_CONF + TUNED))
    ignored = [
        note for note in config.notes if note.endswith("a RocketMQ setting Trocket does not use; ignored")
    ]
    assert [note.split(":")[0] for note in ignored] == [
        "brokerIP2",
        "sendMessageThreadPoolNums",
        "pullMessageThreadPoolNums",
        "enablePropertyFilter",
        "serverWorkerThreads",
    ]


def test_keys_nobody_defines_are_errors_with_a_suggestion(tmp_path):
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, "broker.conf", BROKER_CONF + "flushDiskTpye = SYNC_FLUSH\n"))
    assert "flushDiskTpye: unknown key" in str(caught.value) and "did you mean flushDiskType?" in str(
        caught.value
    )


def test_trocket_broker_starts_from_the_shipped_conf(tmp_path):
    namesrv = free_port()
    text = (
        BROKER_CONF
        + TUNED
        + (
            f"storePathRootDir = {tmp_path / 'store'}\nlistenPort = {free_port()}\n"
            f"haListenPort = {free_port()}\nnamesrvAddr = 127.0.0.1:{namesrv}\n"
            "mapedFileSizeCommitLog = 4194304\n"
        )
    )
    path = write(tmp_path, "broker.conf", text)
    process, lines = start_trocket("broker", "-c", str(path))
    process.send_signal(signal.SIGTERM)
    rest, _ = process.communicate(timeout=60)
    output = "".join(lines) + rest
    assert "ready (Ctrl-C to stop)" in output, output
    assert "note: brokerIP2: a RocketMQ setting Trocket does not use; ignored" in output
    assert process.returncode == 0 and "Traceback" not in output


def test_a_plugin_declares_its_own_broker_properties_keys(tmp_path, monkeypatch):
    """The properties loader knows no plugin's keys: an installed third-party plugin declares
    ``acmeFlushIntervalMs`` with its table, and a RocketMQ-style file sets it."""
    (tmp_path / "acme_tuning.py").write_text(
        "import attrs\n"
        "from kernel import hookimpl\n"
        "from kernel.config import fields\n"
        "from kernel.config import property_aliases as rocketmq\n"
        "from kernel.model import ConfigSection\n\n"
        "@attrs.frozen(kw_only=True)\n"
        "class AcmeConfig:\n"
        "    interval: float = fields.duration('1s')\n\n"
        "@hookimpl\n"
        "def trocket_config_sections():\n"
        "    return [ConfigSection('acme_tuning', AcmeConfig,\n"
        "                          {'acmeFlushIntervalMs': rocketmq.milliseconds_alias('interval')})]\n"
    )
    dist = tmp_path / "acme_tuning-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-tuning\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[trocket.plugins]\nacme_tuning = acme_tuning\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    path = write(tmp_path, "broker.properties", "brokerName=broker-a\nacmeFlushIntervalMs=250\n")
    config = load_config(path, lenient=True)
    # The plugin is not in this broker's list: the value was read and checked, then reported.
    assert any("acmeFlushIntervalMs: applies to plugin 'acme_tuning'" in note for note in config.notes)
    with pytest.raises(ConfigError, match=r"acmeFlushIntervalMs.*expected an integer.*milliseconds"):
        load_config(write(tmp_path, "bad.properties", "acmeFlushIntervalMs=soon\n"))


def test_a_plugin_that_cannot_be_imported_is_named_and_its_keys_are_unknown(tmp_path, monkeypatch):
    dist = tmp_path / "broken_tuning-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-tuning\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[trocket.plugins]\nbroken_tuning = no_such_module_here\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    config = load_config(write(tmp_path, "broker.properties", "brokerName=broker-a\n"), lenient=True)
    assert any("'broken_tuning' could not be imported" in note for note in config.notes)
    assert config.broker.broker_name == "broker-a"


def test_every_declared_key_lands_on_a_field_of_its_table():
    """A declaration naming a key its table does not have would make a RocketMQ file fail."""
    import attrs

    from kernel.config.broker import BrokerConfig
    from kernel.config.properties_file import declared_properties
    from kernel.plugin import available_plugins, resolve_plugin

    declared, notes = declared_properties(available_plugins())
    assert not notes
    tables = {"broker": BrokerConfig}
    for name in available_plugins():
        declare = getattr(resolve_plugin(name), "trocket_config_sections", None)
        tables.update({section.name: section.type for section in (declare() if declare else ())})
    for key, targets in declared.items():
        for target in targets:
            names = {f.alias or f.name for f in attrs.fields(tables[target.section])}
            assert target.alias.key in names, f"{key} -> [{target.section}] {target.alias.key}"
