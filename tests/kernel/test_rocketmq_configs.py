"""RocketMQ's own config files start Trocket as they are (issue 22, item 2): the shipped
``conf/broker.conf`` (properties syntax in a ``.conf`` file) and the ``2m-2s-sync`` pair; keys
RocketMQ defines that Trocket does not use are named as ignored; typos get a suggestion."""

from __future__ import annotations

import signal

import pytest

from kernel import Broker, load_config
from kernel.errors import ConfigError
from tests.network.conftest import free_port
from tests.support import start_trocket, write

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
