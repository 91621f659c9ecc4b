"""The lab's network: hosts in their own namespaces reach each other over the bridge, a
partition cuts exactly the paths it names, a one-way drop cuts one direction, heal restores."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import pytest

from trocket.chaos import netlab
from trocket.chaos.netlab import LabError, NetLab

REASON = netlab.unavailable()
pytestmark = pytest.mark.skipif(REASON is not None, reason=f"needs network namespaces: {REASON}")

SERVER = """
import socket
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("0.0.0.0", 7000))
server.listen()
while True:
    connection, _ = server.accept()
    connection.sendall(b"hello")
    connection.close()
"""


def greeting(address: str) -> bytes | str:
    try:
        with socket.create_connection((address, 7000), timeout=0.5) as connection:
            return connection.recv(16)
    except OSError as error:
        return type(error).__name__


def test_partitions_cut_the_named_paths_only_and_heal_restores_them():
    with NetLab() as lab:
        for name in ("a", "b", "c"):
            lab.add_host(name)
        server = subprocess.Popen(lab.command("b", [sys.executable, "-c", SERVER]))
        try:
            b = lab.hosts["b"].address
            deadline = time.monotonic() + 10
            while lab.run_inside("a", greeting, b) != b"hello" and time.monotonic() < deadline:
                time.sleep(0.1)
            assert lab.run_inside("a", greeting, b) == b"hello"
            lab.partition(["a"], ["b"])
            assert lab.run_inside("a", greeting, b) == "TimeoutError"
            assert lab.run_inside("c", greeting, b) == b"hello"  # c still reaches b
            assert "drop" in lab.rules("b")
            lab.heal()
            assert lab.run_inside("a", greeting, b) == b"hello"
            lab.drop_one_way("b", "a")  # b's answers (and its SYN-ACK) never reach a
            assert lab.run_inside("a", greeting, b) == "TimeoutError"
            lab.heal()
            lab.drop_one_way("a", "c")  # an unrelated direction: a -> b unaffected
            assert lab.run_inside("a", greeting, b) == b"hello"
        finally:
            server.kill()
            server.wait()


def test_bad_fault_arguments_are_refused_by_name():
    with NetLab() as lab:
        lab.add_host("a")
        lab.add_host("b")
        with pytest.raises(LabError, match="loss must be 1-100"):
            lab.lose("a", "b", 0)
        with pytest.raises(LabError, match="exists"):
            lab.add_host("a")
