"""Issue 36's fault scenarios: each makes one class of fault against a replicated broker set
under load and leaves a history for the checker.

A scenario is an async function of a :class:`FaultRun`; :func:`run_scenario` builds the
deployment in a fresh :class:`~trocket.chaos.netlab.NetLab` (three etcd members, two
controllers, a NameServer, three replicas in controller mode, a client host), starts the
producers, lets the scenario make its faults, heals everything, waits for a master, drains it
and every other replica, and returns the checker's report with the scenario's own figures.
Seeds make the random choices replayable: the same seed makes the same faults at the same
offsets from the start of the run.
"""

from __future__ import annotations

import json
import random
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import attrs
import trio

from kernel.model import encode_properties
from trocket.chaos.checker import Report, check
from trocket.chaos.cluster import FAST_TIMINGS, LabCluster, LabProcess, freezer_available
from trocket.chaos.history import Event, HistoryWriter, read_history
from trocket.chaos.netlab import NetLab
from trocket.chaos.workload import Workload, consume, create_topic, drain, produce, pull_request, send_request
from wire import record
from wire.remoting import RemotingClient, RemotingCommand, RequestCode, ResponseCode

CLOCK_JUMP_TIMINGS = 'heartbeat_timeout = "6s"\nscan_interval = "200ms"\nlease_ttl = "6s"'
"""S9's controller timings: a 6 s lease leaves a master 5 s of room past ``fence_margin``, so a
heartbeat slowed by a busy machine fences nobody and the run's "no fence, no election" is
about the clock steps (an hour each: a lease read from the wall clock would break at any TTL).
With :data:`FAST_TIMINGS` the room is 1 s, and a controller or etcd stalled past it beside
other tests fenced the master once during the warm-up."""

WARMUP_ACKS = 1000
"""Acknowledged sends a run holds before its fault starts (beyond the warm-up's seconds)."""
WARMUP_TIMEOUT = 60.0
"""Seconds of warm-up after which too few acknowledgements fail the run: the workload is broken."""


@attrs.define(eq=False)
class FaultRun:
    """What a scenario works with: the deployment, the lab's firewall, the history (for fault
    events), a seeded random source, and figures it wants reported."""

    cluster: LabCluster
    lab: NetLab
    history: HistoryWriter
    rng: random.Random
    master: int
    figures: dict[str, Any] = attrs.field(factory=dict)

    @contextmanager
    def fault(self, name: str) -> Iterator[None]:
        """Logs the fault's start and stop around the block."""
        self.history.event("fault", name=name, phase="start")
        try:
            yield
        finally:
            self.history.event("fault", name=name, phase="stop")

    def replica_host(self, broker_id: int) -> str:
        return self.cluster.replicas[broker_id].host

    def slaves(self) -> list[int]:
        return [i for i in sorted(self.cluster.replicas) if i != self.master]

    @property
    def controller_hosts(self) -> list[str]:
        return [c.host for c in self.cluster.controllers]

    @property
    def etcd_hosts(self) -> list[str]:
        return [e.host for e in self.cluster.etcd]

    async def leading_controller(self) -> LabProcess | None:
        """The controller that says it leads (scans and elects), None when none answers so."""
        async with RemotingClient.open() as client:
            for controller in self.cluster.controllers:
                request = RemotingCommand.request(RequestCode.CONTROLLER_GET_METADATA_INFO, {})
                with trio.move_on_after(2):
                    try:
                        answer = await client.invoke(controller.addr, request, 2)
                    except Exception:  # noqa: BLE001, S112 - a dead or cut controller
                        continue
                    if (
                        answer.code == ResponseCode.SUCCESS
                        and str(answer.ext.get("isLeader")).lower() == "true"
                    ):
                        return controller
        return None

    async def etcd_leader(self) -> int | None:
        """The index of the etcd member that leads, from the members' own status."""
        for index, member in enumerate(self.cluster.etcd):
            status = await _etcd_status(member.addr)
            if (
                status
                and status.get("leader")
                and status.get("leader") == status.get("header", {}).get("member_id")
            ):
                return index
        return None


async def _etcd_status(endpoint: str) -> dict[str, Any] | None:
    """etcd's ``/v3/maintenance/status`` over a plain HTTP/1.0 request made from this task's
    namespace (a worker thread would not be in the lab)."""
    host, port = endpoint.rsplit(":", 1)
    request = (
        f"POST /v3/maintenance/status HTTP/1.0\r\nHost: {endpoint}\r\nContent-Type: application/json\r\n"
        "Content-Length: 2\r\n\r\n{}"
    ).encode()
    try:
        with trio.fail_after(2):
            stream = await trio.open_tcp_stream(host, int(port))
            async with stream:
                await stream.send_all(request)
                data = b""
                while chunk := await stream.receive_some(65536):
                    data += chunk
    except (OSError, trio.TooSlowError):
        return None
    _, _, body = data.partition(b"\r\n\r\n")
    try:
        return dict(json.loads(body))
    except ValueError:
        return None


Scenario = Callable[[FaultRun], Awaitable[None]]


@attrs.frozen
class ScenarioResult:
    name: str
    seed: int
    report: Report
    figures: dict[str, Any]
    history: Path
    seconds: float

    def line(self) -> str:
        extra = "".join(f" {k}={v}" for k, v in self.figures.items())
        return f"{self.name} seed={self.seed} {self.seconds:.0f}s: {self.report.summary()}{extra}"


@attrs.frozen
class Deployment:
    """What a scenario runs against: the replicas' HA settings, flush policy and role, and
    whether processes start under libfaketime."""

    role: str = "SYNC_MASTER"
    flush: str = "flush_async"
    ha: str = ""
    catchup: str = "3s"
    faketime: bool = False
    timings: str = FAST_TIMINGS
    clock_rate: float = 1.0
    """The replicas' clocks run at this rate (libfaketime; 1: real)."""
    disk_image: bool = False
    """The replicas' data on loop-mounted images, so one can lose power or fill up."""
    plugins: tuple[str, ...] = ()
    store: str = "mmap"

    def label(self) -> str:
        flush = self.flush.removeprefix("flush_")
        extra = " ".join(line.replace(" ", "") for line in self.ha.splitlines() if line.strip())
        return f"{self.role} {flush}{' ' + extra if extra else ''}"


def run_scenario(
    name: str,
    scenario: Scenario,
    *,
    seed: int | None = None,
    root: Path | None = None,
    deployment: Deployment = Deployment(),
    producers: int = 6,
    warmup: float = 3.0,
    warmup_acks: int = WARMUP_ACKS,
    recover: float = 3.0,
) -> ScenarioResult:
    """Build the lab, run ``scenario`` under load, heal, drain, check. Blocking: it runs trio on
    a thread inside the lab's client host."""
    seed = random.randrange(2**31) if seed is None else seed
    root = Path(tempfile.mkdtemp(prefix=f"chaos-{name}-")) if root is None else root
    started = time.monotonic()
    with NetLab() as lab:
        cluster = LabCluster(lab, root, timings=deployment.timings)
        try:
            lab.add_host("client")
            cluster.start_etcd(3)
            cluster.start_controllers(2, faketime=deployment.faketime)
            cluster.start_namesrv()
            for broker_id in (1, 2, 3):
                cluster.start_replica(
                    broker_id, role=deployment.role, flush=deployment.flush, ha=deployment.ha,
                    catchup=deployment.catchup, faketime=deployment.faketime,
                    clock_rate=deployment.clock_rate, disk_image=deployment.disk_image,
                    plugins=deployment.plugins, store=deployment.store,
                )  # fmt: skip
            path = root / "history.jsonl"
            figures = lab.run_inside(
                "client",
                trio.run,
                _drive,
                cluster,
                lab,
                scenario,
                path,
                random.Random(seed),
                producers,
                warmup,
                warmup_acks,
                recover,
            )
        finally:
            cluster.stop()
    events = read_history(path)
    figures["sends_to_deposed_master"] = sends_to_deposed_master(events)
    return ScenarioResult(name, seed, check(events), figures, path, time.monotonic() - started)


def sends_to_deposed_master(events: Sequence[Event], grace: float = 1.0) -> int:
    """Sends that went to a replica more than ``grace`` seconds after another replica of its set
    acknowledged in its place (and before it acknowledged again): a route naming the old master
    after the new one served. Zero when NameServers hold the newest master's route."""
    answered = sorted(
        (e for e in events if e.kind in ("ok", "fail", "info") and e.get("replica")), key=lambda e: e.t
    )
    deposed_at: dict[str, float] = {}
    master = ""
    stale = 0
    for event in answered:
        replica = event["replica"]
        if event.kind == "ok":
            if master and replica != master:
                deposed_at[master] = event.t
            deposed_at.pop(replica, None)
            master = replica
        elif replica in deposed_at and event.t > deposed_at[replica] + grace:
            stale += 1
    return stale


async def _drive(
    cluster: LabCluster,
    lab: NetLab,
    scenario: Scenario,
    path: Path,
    rng: random.Random,
    producers: int,
    warmup: float,
    warmup_acks: int,
    recover: float,
) -> dict[str, Any]:
    assert cluster.namesrv is not None
    workload = Workload(cluster.namesrv.addr)
    first = await cluster.wait_master(in_set=3)
    await create_topic([cluster.replicas[first].addr], workload)
    with path.open("wb") as out:
        history = HistoryWriter(out)
        run = FaultRun(cluster, lab, history, rng, first)
        stop = trio.Event()
        async with trio.open_nursery() as nursery:
            for number in range(producers):
                nursery.start_soon(produce, f"p{number}", workload, history, stop)
            nursery.start_soon(consume, workload, history, stop)
            await trio.sleep(warmup)
            await _acknowledged(history, warmup_acks)
            try:
                await scenario(run)
            finally:
                lab.heal()
                for process in cluster.processes():
                    process.resume()
            for process in cluster.replicas.values():
                if not process.alive():
                    cluster.restart(process)
            final = await cluster.wait_master(timeout=90)
            await trio.sleep(recover)
            stop.set()
        run.figures["final_master"] = final
        await trio.sleep(2)  # slaves catch up before they are read
        await drain(cluster.replicas[final].addr, workload, history)
        for broker_id, process in cluster.replicas.items():
            if broker_id != final:
                with trio.move_on_after(20):
                    await _read_replica(process.addr, workload, history)
    return run.figures


async def _acknowledged(history: HistoryWriter, count: int, timeout: float = WARMUP_TIMEOUT) -> None:
    """Wait until the producers hold ``count`` acknowledgements: a fault on a machine slower
    than usual (or shared with other tests) still meets a cluster that has taken real load."""
    with trio.move_on_after(timeout):
        while history.kinds["ok"] < count:  # noqa: ASYNC110 - the producers append as they go
            await trio.sleep(0.1)
        return
    raise RuntimeError(
        f"the producers had {history.kinds['ok']} acknowledgements after {timeout:.0f}s of warm-up, "
        f"fewer than the {count} a scenario starts with (failures: {history.kinds['fail']})"
    )


async def _read_replica(address: str, workload: Workload, history: HistoryWriter) -> None:
    """A slave's copy, read as non-final reads: two bodies at one position across replicas is
    an inconsistency even when no consumer was routed there."""
    try:
        scratch = _ReplicaReads(history)
        await drain(address, workload, scratch)  # type: ignore[arg-type]
    except Exception as error:  # noqa: BLE001 - a replica that does not answer adds no reads
        history.event("fault", name=f"replica {address} unreadable: {error}", phase="stop")


@attrs.define(eq=False)
class _ReplicaReads:
    """Forwards a drain's reads as non-final ones."""

    history: HistoryWriter

    def event(self, kind: str, **fields: Any) -> None:
        self.history.event(kind, **{**fields, "final": False})


# -- the scenarios ------------------------------------------------------------------------


async def master_cut_from_coordination(run: FaultRun, seconds: float = 10) -> None:
    """S2: the master cut from both controllers and every etcd member, while the clients, its
    slaves and the NameServer still reach it."""
    master = run.replica_host(run.master)
    with run.fault(f"partition r{run.master} (master) | controllers + etcd"):
        run.lab.partition([master], run.controller_hosts + run.etcd_hosts)
        await trio.sleep(seconds)
        run.lab.heal()


async def master_and_slave_cut(run: FaultRun, seconds: float = 10) -> None:
    """S3 (RocketMQ #6662): the master and one slave cut together from the controllers, etcd and
    the third replica; clients and the NameServer reach everyone."""
    slave, third = run.rng.sample(run.slaves(), 2)
    side = [run.replica_host(run.master), run.replica_host(slave)]
    others = run.controller_hosts + run.etcd_hosts + [run.replica_host(third)]
    with run.fault(f"partition r{run.master} (master) + r{slave} | controllers + etcd + r{third}"):
        run.lab.partition(side, others)
        await trio.sleep(seconds)
        run.lab.heal()


async def one_way_master_controllers(run: FaultRun, seconds: float = 8) -> None:
    """S4: packets from the master to the controllers dropped; healed; then packets from the
    controllers to the master dropped (its heartbeats arrive, the answers do not)."""
    master = run.replica_host(run.master)
    with run.fault(f"one-way r{run.master} (master) -> controllers"):
        for controller in run.controller_hosts:
            run.lab.drop_one_way(master, controller)
        await trio.sleep(seconds)
        run.lab.heal()
    run.master = await run.cluster.wait_master()
    master = run.replica_host(run.master)
    with run.fault(f"one-way controllers -> r{run.master} (master)"):
        for controller in run.controller_hosts:
            run.lab.drop_one_way(controller, master)
        await trio.sleep(seconds)
        run.lab.heal()


async def controller_cut_from_etcd(run: FaultRun, seconds: float = 10) -> None:
    """S5: the leading controller cut from every etcd member while the other reaches them (and
    every replica reaches both controllers)."""
    leader = await run.leading_controller()
    target = leader.host if leader is not None else run.controller_hosts[0]
    with run.fault(f"partition {target} (controller) | etcd"):
        run.lab.partition([target], run.etcd_hosts)
        await trio.sleep(seconds)
        run.lab.heal()


async def coordination_split(run: FaultRun, seconds: float = 12) -> None:
    """S5b: the controller the master talks to (the first) cut from etcd, the master cut from
    the other controller, the slaves cut from the first: the master hears only "etcd down"
    while the other controller, reaching etcd and the slaves, may elect one of them."""
    first, second = run.controller_hosts[0], run.controller_hosts[1]
    master = run.replica_host(run.master)
    slaves = [run.replica_host(i) for i in run.slaves()]
    with run.fault(f"{first} | etcd, r{run.master} (master) | {second}, slaves | {first}"):
        run.lab.partition([first], run.etcd_hosts)
        run.lab.partition([master], [second])
        run.lab.partition(slaves, [first])
        await trio.sleep(seconds)
        run.lab.heal()


SUCCESSORS = 2
"""SyncStateSet members a master must have before a fault kills it (itself and a slave in
sync). A master elected a moment ago starts with a set of one, and the controller rightly
elects nobody else if it dies then (``enableElectUncleanMaster`` false): killing it then tests
nothing but the harness's patience (an S1 run that killed two masters a few seconds apart waited 90 s
for an election that must not happen)."""


async def master_then_controller_killed(run: FaultRun, delays_ms: tuple[int, ...] = (0, 150, 300)) -> None:
    """S6: the master SIGKILLed, then the leading controller SIGKILLed ``delay`` ms later (a
    sweep); both restarted before the next round."""
    for delay in delays_ms:
        run.master = await run.cluster.wait_master(in_set=SUCCESSORS, timeout=90)
        leader = await run.leading_controller()
        master = run.cluster.replicas[run.master]
        with run.fault(
            f"SIGKILL r{run.master} (master), then {leader.name if leader else 'no'} controller +{delay}ms"
        ):
            master.kill()
            await trio.sleep(delay / 1000)
            if leader is not None:
                leader.kill()
            run.master = await run.cluster.wait_master(not_ids=[int(master.name[1:])], timeout=90)
        await trio.sleep(1)
        run.cluster.restart(master)
        if leader is not None:
            run.cluster.restart(leader)
        await trio.sleep(2)
    run.figures["rounds"] = len(delays_ms)


async def etcd_faults_during_election(run: FaultRun, down: float = 5) -> None:
    """S7: the master SIGKILLed and the etcd leader SIGKILLed at once (the election runs while
    etcd elects its own leader); later two of three etcd members down for ``down`` seconds."""
    leader = await run.etcd_leader()
    index = leader if leader is not None else 0
    master = run.cluster.replicas[run.master]
    with run.fault(f"SIGKILL r{run.master} (master) and etcd{index} (etcd leader)"):
        master.kill()
        run.cluster.etcd[index].kill()
        run.master = await run.cluster.wait_master(not_ids=[int(master.name[1:])], timeout=90)
    run.cluster.restart_etcd(index)
    run.cluster.restart(master)
    await trio.sleep(3)
    pair = run.rng.sample(range(len(run.cluster.etcd)), 2)
    with run.fault(f"etcd{pair[0]} and etcd{pair[1]} paused {down}s (no etcd quorum)"):
        for i in pair:
            run.cluster.etcd[i].pause()
        await trio.sleep(down)
        for i in pair:
            run.cluster.etcd[i].resume()


async def seeded_mix(run: FaultRun, rounds: int = 4) -> None:
    """S1: a seeded sequence of: kill the master, pause the master (SIGSTOP or the cgroup
    freezer), pause a slave, kill the leading controller, each followed by recovery."""
    for _ in range(rounds):
        choice = run.rng.choice(["kill master", "pause master", "pause slave", "kill controller"])
        hold = run.rng.uniform(2, 6)
        if choice == "kill master":
            run.master = await run.cluster.wait_master(in_set=SUCCESSORS, timeout=90)
            master = run.cluster.replicas[run.master]
            with run.fault(f"SIGKILL r{run.master} (master)"):
                master.kill()
                run.master = await run.cluster.wait_master(not_ids=[run.master], timeout=90)
            run.cluster.restart(master)
        elif choice == "pause master":
            master = run.cluster.replicas[run.master]
            frozen = freezer_available() and run.rng.random() < 0.5
            with run.fault(f"{'freezer' if frozen else 'SIGSTOP'} r{run.master} (master) {hold:.1f}s"):
                if frozen:
                    master.freeze()
                else:
                    master.pause()
                await trio.sleep(hold)
                master.resume()
        elif choice == "pause slave":
            slave = run.cluster.replicas[run.rng.choice(run.slaves())]
            with run.fault(f"SIGSTOP {slave.name} (slave) {hold:.1f}s"):
                slave.pause()
                await trio.sleep(hold)
                slave.resume()
        else:
            leader = await run.leading_controller()
            if leader is None:
                continue
            with run.fault(f"SIGKILL {leader.name} (leading controller)"):
                leader.kill()
                await trio.sleep(hold)
                run.cluster.restart(leader)
        run.master = await run.cluster.wait_master(timeout=90)
        await trio.sleep(1)


async def clock_jumps(run: FaultRun, hold: float = 8) -> None:
    """S9: the master's and the leading controller's wall clocks jump +1 h, then -1 h (relative
    to real time), under load; needs a deployment started with ``faketime``. Messages delayed
    5 s (level 2) are sent just before, during and just after each jump. Figures: the master's
    epoch before and after (an election would change it), each delayed message's arrival
    error in seconds, and how far the master's store timestamps moved (the jump took effect)."""
    before = await run.cluster.replica_info()
    leader = await run.leading_controller()
    hosts = [run.replica_host(run.master), *([leader.host] if leader else [])]
    address = run.cluster.replicas[run.master].addr
    probe = DelayProbe(address)
    await create_topic([address], probe.workload)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(probe.poll)
        for offset in (3600, -3600):
            await probe.send(nursery)
            with run.fault(f"wall clock {offset:+d}s on {', '.join(hosts)}"):
                for host in hosts:
                    run.cluster.set_clock_offset(host, offset)
                await trio.sleep(2.5)  # libfaketime re-reads its file each second
                run.figures.setdefault("store_clock_moved_s", []).append(await probe.store_clock_offset())
                await probe.send(nursery)
                await trio.sleep(hold - 4)
                await probe.send(nursery)  # due after the clock moved back
                await trio.sleep(1.5)
                for host in hosts:
                    run.cluster.set_clock_offset(host, 0)
            await trio.sleep(1.5)
            await probe.send(nursery)
        await probe.wait_all(timeout=20)
        nursery.cancel_scope.cancel()
    after = await run.cluster.replica_info()
    run.figures["epoch_before"] = before.get("masterEpoch")
    run.figures["epoch_after"] = after.get("masterEpoch")
    run.figures["delay_errors_s"] = probe.errors()


@attrs.define(eq=False)
class DelayProbe:
    """Messages delayed by level 2 (5 s) to one queue of ``ChaosDelay`` on one broker, and when
    each arrived on the client's monotonic clock."""

    address: str
    delay: float = 5.0
    workload: Workload = attrs.field(factory=lambda: Workload("", topic="ChaosDelay", queues=1))
    sent: dict[str, float] = attrs.field(factory=dict)
    arrived: dict[str, float] = attrs.field(factory=dict)
    offset: int = 0

    async def send(self, nursery: trio.Nursery) -> None:
        body = f"delayed-{len(self.sent)}"
        request = send_request(self.workload.topic, 0, body.encode())
        request.ext["i"] = encode_properties({"WAIT": "true", "DELAY": "2"}).decode()
        async with RemotingClient.open() as client:
            answer = await client.invoke(self.address, request, 5)
        if answer.code == ResponseCode.SUCCESS:
            self.sent[body] = time.monotonic()

    async def _pull(self, max_messages: int = 32) -> list[Any]:
        pull = pull_request("CG_chaos_delay", self.workload.topic, 0, self.offset, max_messages)
        async with RemotingClient.open() as client:
            answer = await client.invoke(self.address, pull, 5)
        if answer.code != ResponseCode.SUCCESS:
            return []
        self.offset = int(answer.ext["nextBeginOffset"])
        return list(record.decode_records(answer.body))

    async def poll(self) -> None:
        while True:
            for message in await self._pull():
                self.arrived.setdefault(message.body.decode(), time.monotonic())
            await trio.sleep(0.05)

    async def store_clock_offset(self) -> float:
        """Seconds between the broker's store timestamp of a message sent now and this clock."""
        body = f"clock-{time.monotonic()}"
        async with RemotingClient.open() as client:
            answer = await client.invoke(self.address, send_request(self.workload.topic, 0, body.encode()), 5)
        offset = int(answer.ext["queueOffset"])
        pull = pull_request("CG_chaos_clock", self.workload.topic, 0, offset, 1)
        async with RemotingClient.open() as client:
            with trio.fail_after(10):
                while True:  # dispatch makes it readable a moment after the answer
                    answer = await client.invoke(self.address, pull, 5)
                    found = (
                        list(record.decode_records(answer.body))
                        if answer.code == ResponseCode.SUCCESS
                        else []
                    )
                    if found:
                        return round(found[0].store_timestamp / 1000 - time.time(), 1)
                    await trio.sleep(0.05)

    async def wait_all(self, timeout: float) -> None:
        with trio.move_on_after(timeout):
            while set(self.sent) - set(self.arrived):  # noqa: ASYNC110 - the poller fills arrived
                await trio.sleep(0.1)

    def errors(self) -> list[float | None]:
        """Per delayed message: arrival minus (send + delay) in seconds; None if it never came."""
        return [
            round(self.arrived[body] - sent - self.delay, 2) if body in self.arrived else None
            for body, sent in self.sent.items()
        ]


async def set_shrunk_then_power_cut(run: FaultRun) -> None:
    """S8: both slaves paused past ``haMaxTimeSlaveNotCatchup`` until the SyncStateSet is the
    master alone, then the master loses power (needs ``disk_image``); the slaves resume and the
    master restarts on what reached its disk. With async flush the master alone acknowledges
    from its page cache unless ``min_in_sync_replicas`` refuses: the configuration decides
    whether the cut loses acknowledged messages. Figures: the set before the cut."""
    slaves = [run.cluster.replicas[i] for i in run.slaves()]
    with run.fault(f"SIGSTOP {' and '.join(s.name for s in slaves)} (both slaves)"):
        for slave in slaves:
            slave.pause()
        with trio.move_on_after(30):
            while await run.cluster.sync_state_set() != [run.master]:  # noqa: ASYNC110 - polling the controller
                await trio.sleep(0.2)
        run.figures["set_before_cut"] = await run.cluster.sync_state_set()
        await trio.sleep(2)  # the master alone: acknowledging, or refusing
        run.figures["unflushed_at_cut"] = await _log_tail_unflushed(run, within=3.0)
        with run.fault(f"power cut r{run.master} (master)"):
            run.cluster.power_cut(run.master)
        for slave in slaves:
            slave.resume()
    await trio.sleep(1)
    run.cluster.restart(run.cluster.replicas[run.master])


async def _log_tail_unflushed(run: FaultRun, *, within: float) -> int:
    """Bytes of the master's commit log past its flushed position, once there are any (at most
    ``within`` seconds): the power cut then finds a tail in the page cache. Cut right after an
    interval flush, an async-flush master that acknowledged alone loses nothing, and the run
    would show the configuration safe by luck. 0 when none came (sync flush, or no sends)."""
    with trio.move_on_after(within):
        while True:
            figures = await run.cluster.broker_role(run.master)
            tail = int(figures.get("commitLogMaxOffset", 0)) - int(figures.get("commitLogFlushedOffset", 0))
            if tail > 0:
                return tail
            await trio.sleep(0.02)
    return 0


async def clock_skew_master_cut(run: FaultRun, seconds: float = 12) -> None:
    """S10: with the replicas' clocks running slow (``clock_rate``), the master cut from the
    controllers and etcd: its lease runs out later in real time than the controller thinks."""
    with run.fault(f"partition r{run.master} (master, slow clock) | controllers + etcd"):
        run.lab.partition([run.replica_host(run.master)], run.controller_hosts + run.etcd_hosts)
        await trio.sleep(seconds)
        run.lab.heal()


async def disk_faults(run: FaultRun, hold: float = 10) -> None:
    """S11: the master's fsync slower than ``syncFlushTimeout`` (``trocket.chaos.faulty_disk``),
    then one slave's disk full, then the other slave killed with bit flips and a torn write in
    the tail of its commit log and restarted (recovery must cut the tail, never serve it).
    Figures: the bytes the full disk took, the corrupted log's data end."""
    full, corrupt = run.rng.sample(run.slaves(), 2)
    with run.fault(f"fsync of r{run.master} (master) delayed 8s"):
        run.cluster.set_disk_fault(run.master, "delay 8")
        await trio.sleep(hold)
        run.cluster.set_disk_fault(run.master, "")
    with run.fault(f"disk of r{full} (slave) full"):
        run.figures["filled_bytes"] = run.cluster.fill_disk(full)
        await trio.sleep(hold)
        run.cluster.free_disk(full)
    with run.fault(f"r{corrupt} (slave) killed, its commit log tail corrupted, restarted"):
        run.cluster.replicas[corrupt].kill()
        run.figures["corrupted_log_end"] = run.cluster.corrupt_tail(corrupt, run.rng)
        run.cluster.restart(run.cluster.replicas[corrupt])
        await trio.sleep(hold / 2)


async def lossy_and_slow_links(run: FaultRun, seconds: float = 60, loss: int = 20, kbytes: int = 256) -> None:
    """S12: ``loss`` % of the packets between the master and one slave dropped, and the link
    to the other slave limited to ``kbytes`` KB/s (both directions), then healed."""
    lossy, slow = run.rng.sample(run.slaves(), 2)
    master = run.replica_host(run.master)
    with run.fault(f"{loss}% loss r{run.master}<->r{lossy}, {kbytes} KB/s r{run.master}<->r{slow}"):
        run.lab.lose(master, run.replica_host(lossy), loss)
        run.lab.lose(run.replica_host(lossy), master, loss)
        run.lab.limit(master, run.replica_host(slow), kbytes)
        run.lab.limit(run.replica_host(slow), master, kbytes)
        await trio.sleep(seconds)
        run.lab.heal()


SCENARIOS: dict[str, tuple[Scenario, Deployment]] = {
    "S1": (seeded_mix, Deployment()),
    "S2": (master_cut_from_coordination, Deployment()),
    "S3": (master_and_slave_cut, Deployment()),
    "S4": (one_way_master_controllers, Deployment()),
    "S5": (controller_cut_from_etcd, Deployment()),
    "S5b": (coordination_split, Deployment()),
    "S6": (master_then_controller_killed, Deployment()),
    "S7": (etcd_faults_during_election, Deployment()),
    "S8-sync": (set_shrunk_then_power_cut, Deployment(flush="flush_sync", disk_image=True)),
    "S8-async-min2": (
        set_shrunk_then_power_cut,
        Deployment(disk_image=True, ha="min_in_sync_replicas = 2"),
    ),
    "S9": (clock_jumps, Deployment(faketime=True, timings=CLOCK_JUMP_TIMINGS)),
    "S10-x0.8": (clock_skew_master_cut, Deployment(clock_rate=0.8)),
    "S10-x0.5": (clock_skew_master_cut, Deployment(clock_rate=0.5)),
    "S11": (
        disk_faults,
        Deployment(
            flush="flush_sync", disk_image=True, plugins=("trocket.chaos.faulty_disk",), store="faulty_mmap"
        ),
    ),
    "S12": (lossy_and_slow_links, Deployment()),
}
"""Scenario name -> (scenario, the deployment it runs against). Every deployment here is one
docs/durability.md calls safe: each run must end with every safety count at zero."""

UNSAFE: dict[str, tuple[Scenario, Deployment]] = {
    "S5-async": (controller_cut_from_etcd, Deployment(role="ASYNC_MASTER")),
    "S5b-async": (coordination_split, Deployment(role="ASYNC_MASTER")),
    "S8-async": (set_shrunk_then_power_cut, Deployment(disk_image=True)),
}
"""Deployments documented as unsafe for a fault: runs report their measured loss, not a failure
(async flush with the set shrunk to the master alone and no ``min_in_sync_replicas``)."""

__all__ = ["SCENARIOS", "UNSAFE", "Deployment", "FaultRun", "ScenarioResult", "run_scenario"]
