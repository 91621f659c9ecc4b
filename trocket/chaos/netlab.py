"""A private network on one machine for fault runs: one network namespace per host, joined by
veth pairs to a bridge in a hub namespace, with nftables rules for partitions, one-way
partitions, packet loss and rate limits.

Why namespaces rather than loopback ports: a partition must cut *some* paths while others
still work (the master cut from its controllers while clients still reach it), and a one-way
partition must drop one direction only. On loopback every process shares one address and
one firewall; here each host has its own address (``10.231.0.N``, existing only inside these
namespaces: nothing is routed anywhere else), its own firewall table and its own ``lo``.

The lab needs ``CAP_NET_ADMIN`` (root), iproute2's ``ip`` and Debian's ``nft``;
:func:`unavailable` says why a lab cannot be made here, so callers can skip with the reason.
Processes run in a host with :meth:`NetLab.command` (``ip netns exec``); the calling program
can itself act as a host (a test's clients) through :meth:`NetLab.run_inside`, which runs a
function on a thread that entered the host's namespace: sockets made on that thread belong to
it, whoever uses them later.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import threading
import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import attrs

T = TypeVar("T")

SUBNET = "10.231.0"
"""The lab's addresses: ``SUBNET.N/24``; they exist only inside the lab's namespaces."""

CLONE_NEWNET = 0x40000000
TABLE = "trocket_chaos"


class LabError(RuntimeError):
    """A namespace, link or firewall command failed (the message names it and its output)."""


def unavailable() -> str | None:
    """Why a lab cannot be made on this machine, or None when it can."""
    if os.geteuid() != 0:
        return "network namespaces need root (CAP_NET_ADMIN)"
    for tool, package in (("ip", "iproute2"), ("nft", "nftables")):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (Debian's {package}; ./run tests installs it)"
    probe = f"trq-probe-{uuid.uuid4().hex[:6]}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"cannot make a network namespace here: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def _run(argv: Sequence[str], stdin: str | None = None) -> str:
    done = subprocess.run(list(argv), input=stdin, capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise LabError(f"{' '.join(argv)}: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout


@attrs.frozen
class Host:
    name: str
    namespace: str
    address: str

    def endpoint(self, port: int) -> str:
        return f"{self.address}:{port}"


@attrs.define(eq=False)
class NetLab:
    """Hosts on one bridge; every rule a fault adds is removed by :meth:`heal`, and
    :meth:`close` deletes the namespaces (and with them every link and rule)."""

    prefix: str = attrs.field(factory=lambda: f"trq{uuid.uuid4().hex[:5]}")
    hosts: dict[str, Host] = attrs.field(factory=dict)
    hub: str = ""

    def __attrs_post_init__(self) -> None:
        self.hub = f"{self.prefix}-hub"

    def __enter__(self) -> NetLab:
        _run(["ip", "netns", "add", self.hub])
        _run(["ip", "-n", self.hub, "link", "add", "br0", "type", "bridge"])
        _run(["ip", "-n", self.hub, "link", "set", "br0", "up"])
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def add_host(self, name: str) -> Host:
        """A new namespace with ``eth0`` on the bridge and the next address."""
        if name in self.hosts:
            raise LabError(f"host {name!r} exists")
        index = len(self.hosts) + 1
        if index > 250:
            raise LabError("a lab holds at most 250 hosts")
        host = Host(name, f"{self.prefix}-{name}", f"{SUBNET}.{index}")
        _run(["ip", "netns", "add", host.namespace])
        port = f"p{index}"
        _run(["ip", "link", "add", "eth0", "netns", host.namespace, "type", "veth",
              "peer", "name", port, "netns", self.hub])  # fmt: skip
        _run(["ip", "-n", self.hub, "link", "set", port, "master", "br0", "up"])
        _run(["ip", "-n", host.namespace, "addr", "add", f"{host.address}/24", "dev", "eth0"])
        _run(["ip", "-n", host.namespace, "link", "set", "eth0", "up"])
        _run(["ip", "-n", host.namespace, "link", "set", "lo", "up"])
        self.hosts[name] = host
        self._reset_rules(host)
        return host

    def command(self, host: str, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside ``host``'s namespace."""
        return ["ip", "netns", "exec", self.hosts[host].namespace, *argv]

    def run_inside(self, host: str, function: Callable[..., T], *args: Any) -> T:
        """``function(*args)`` on a new thread inside ``host``'s namespace; its result or its
        exception. Sockets the function makes belong to that namespace."""
        outcome: dict[str, Any] = {}

        def enter_and_run() -> None:
            try:
                with open(f"/run/netns/{self.hosts[host].namespace}") as handle:
                    libc = ctypes.CDLL(None, use_errno=True)
                    if libc.setns(handle.fileno(), CLONE_NEWNET) != 0:
                        raise LabError(f"setns into {host}: {os.strerror(ctypes.get_errno())}")
                outcome["value"] = function(*args)
            except BaseException as error:  # noqa: BLE001 - handed to the caller's thread
                outcome["error"] = error

        thread = threading.Thread(target=enter_and_run, name=f"in-{host}")
        thread.start()
        thread.join()
        if "error" in outcome:
            raise outcome["error"]
        return outcome["value"]  # type: ignore[no-any-return]

    # -- faults --------------------------------------------------------------------------

    def partition(self, side_a: Iterable[str], side_b: Iterable[str]) -> None:
        """No packet between any host of ``side_a`` and any host of ``side_b``, either way."""
        side_a, side_b = list(side_a), list(side_b)
        for a in side_a:
            for b in side_b:
                self.drop_one_way(a, b)
                self.drop_one_way(b, a)

    def drop_one_way(self, source: str, target: str) -> None:
        """Packets from ``source`` to ``target`` are dropped (on ``target``'s way in); the other
        direction still flows: TCP segments and their acknowledgements are cut one way."""
        self._rule(target, "input", f"ip saddr {self.hosts[source].address} drop")

    def lose(self, source: str, target: str, percent: int) -> None:
        """``percent`` of the packets from ``source`` to ``target`` are dropped at random."""
        if not 0 < percent <= 100:
            raise LabError(f"loss must be 1-100 %, got {percent}")
        self._rule(
            target, "input", f"ip saddr {self.hosts[source].address} numgen random mod 100 < {percent} drop"
        )

    def limit(self, source: str, target: str, kbytes_per_second: int) -> None:
        """Packets from ``source`` to ``target`` beyond ``kbytes_per_second`` are dropped."""
        address = self.hosts[source].address
        self._rule(
            target, "input", f"ip saddr {address} limit rate over {kbytes_per_second} kbytes/second drop"
        )

    def isolate(self, host: str) -> None:
        """``host`` cut from every other host."""
        self.partition([host], [h for h in self.hosts if h != host])

    def heal(self) -> None:
        """Every fault rule removed; the links were never touched."""
        for host in self.hosts.values():
            self._reset_rules(host)

    def rules(self, host: str) -> str:
        """The host's firewall table as ``nft list`` prints it (for a failing test's message)."""
        return _run(self.command(host, ["nft", "list", "table", "inet", TABLE]))

    def _reset_rules(self, host: Host) -> None:
        script = (
            f"table inet {TABLE} {{}}\n"
            f"delete table inet {TABLE}\n"
            f"table inet {TABLE} {{\n"
            "  chain input { type filter hook input priority 0; policy accept; }\n"
            "  chain output { type filter hook output priority 0; policy accept; }\n"
            "}\n"
        )
        _run(["ip", "netns", "exec", host.namespace, "nft", "-f", "-"], stdin=script)

    def _rule(self, host: str, chain: str, rule: str) -> None:
        _run(self.command(host, ["nft", "add", "rule", "inet", TABLE, chain, *rule.split()]))

    def close(self) -> None:
        """Every namespace deleted (processes still inside lose their network: stop them first)."""
        for host in list(self.hosts.values()):
            subprocess.run(["ip", "netns", "del", host.namespace], capture_output=True)
        self.hosts.clear()
        subprocess.run(["ip", "netns", "del", self.hub], capture_output=True)
