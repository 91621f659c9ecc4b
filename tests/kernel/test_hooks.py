"""One test per kernel hook (``test_hook_<name>``), each exercised through a running broker.

tests/kernel/test_hookspecs.py checks that every hookspec has such a test and a docstring.
"""

from __future__ import annotations

from typing import Any

import attrs
import pluggy
import pytest
import trio

from kernel import (
    AllocateStrategy,
    Broker,
    BrokerRole,
    ConfigError,
    ConfigSection,
    Message,
    MessageBatch,
    MessageQueue,
    Phase,
    PutStatus,
    Redelivery,
    Rejection,
    ServiceSpec,
    hookimpl,
)
from kernel.config import fields
from kernel.context import BrokerContext
from kernel.host import PluginHost
from kernel.testing import make_config

from ..conftest import MEMORY_STORE


@attrs.frozen(kw_only=True)
class RecorderConfig:
    label: str = fields.string("default")


class Recorder:
    """A plugin object that records every kernel hook it receives."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.service_started = trio.Event()

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]

    def of(self, name: str) -> list[dict[str, Any]]:
        return [kwargs for n, kwargs in self.calls if n == name]

    @hookimpl
    def trocket_config_sections(self) -> list[ConfigSection]:
        self.calls.append(("trocket_config_sections", {}))
        return [ConfigSection("recorder", RecorderConfig)]

    @hookimpl
    def trocket_configure(self, config, ctx) -> None:
        self.calls.append(("trocket_configure", {"label": ctx.plugin_config(RecorderConfig).label}))

    @hookimpl
    def trocket_store_recovered(self, report, ctx) -> None:
        self.calls.append(("trocket_store_recovered", {"report": report}))

    @hookimpl
    def trocket_register_dispatchers(self, ctx, store) -> list[Any]:
        recorder = self

        class CountingView:
            name = "counting"
            seen: list[int] = []

            def dispatched_offset(self) -> int:
                return 0 if not self.seen else self._end

            def dispatch(self, records, end_offset) -> None:
                self.seen.extend(r.queue_offset for r in records)
                self._end = end_offset
                recorder.calls.append(("dispatcher", {"count": len(records)}))

            async def persist(self, *, thorough: bool) -> None:
                recorder.calls.append(("persist", {"thorough": thorough}))

        return [CountingView()]

    @hookimpl
    def trocket_register_services(self, ctx) -> list[ServiceSpec]:
        recorder = self

        class Service:
            async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
                task_status.started()
                recorder.service_started.set()
                await trio.sleep_forever()

        return [ServiceSpec("recorder-service", Phase.SCHEDULING, lambda runtime: Service())]

    @hookimpl
    def trocket_broker_ready(self, ctx) -> None:
        self.calls.append(("trocket_broker_ready", {"service": self.service_started.is_set()}))

    @hookimpl
    def trocket_broker_stopping(self, ctx, reason) -> None:
        self.calls.append(("trocket_broker_stopping", {"reason": reason}))

    @hookimpl
    def trocket_after_put(self, batch, result, ctx) -> None:
        self.calls.append(("trocket_after_put", {"status": result.status, "n": len(batch.messages)}))

    @hookimpl
    def trocket_records_dispatched(self, records, ctx) -> None:
        self.calls.append(("trocket_records_dispatched", {"n": len(records)}))

    @hookimpl
    def trocket_role_changed(self, previous, current, ctx) -> None:
        self.calls.append(("trocket_role_changed", {"previous": previous, "current": current}))


@pytest.fixture
async def recorded(broker_factory):
    recorder = Recorder()
    async with broker_factory(plugin_objects=[("recorder", recorder)], recorder={"label": "L"}) as broker:
        yield broker, recorder


async def test_hook_trocket_config_sections(recorded):
    broker, recorder = recorded
    assert broker.ctx.plugin_config(RecorderConfig).label == "L"
    assert "trocket_config_sections" in recorder.names()


async def test_hook_trocket_configure(recorded):
    _, recorder = recorded
    assert recorder.of("trocket_configure") == [{"label": "L"}]


def test_hook_trocket_configure_can_refuse_a_config(tmp_path):
    class Refuser:
        @hookimpl
        def trocket_configure(self, config, ctx):
            if config.broker_name == "forbidden":
                raise ConfigError("<test>", "broker.broker_name", "this name is reserved")

    config = make_config(broker={"plugins": [MEMORY_STORE, "flush_async"], "broker_name": "forbidden"})
    with pytest.raises(ConfigError, match="this name is reserved"):
        Broker.assemble(config, plugin_objects=[("refuser", Refuser())])


def test_hook_trocket_addhooks():
    class OwnSpecs:
        @pluggy.HookspecMarker("trocket")
        def trocket_export_row(self, row):
            """A plugin-owned hook."""

    class Owner:
        @hookimpl
        def trocket_addhooks(self, pluginmanager):
            pluginmanager.add_hookspecs(OwnSpecs)

    class Extender:
        @hookimpl(optionalhook=True)
        def trocket_export_row(self, row):
            row["extended"] = True

    host = PluginHost.load([], objects=[("owner", Owner()), ("extender", Extender())])
    row: dict[str, Any] = {}
    host.hook.trocket_export_row(row=row)
    assert row == {"extended": True}


def test_hook_trocket_register_stores():
    host = PluginHost.load([MEMORY_STORE])
    assert [p.name for p in host.stores()] == ["memory"]


def test_hook_trocket_register_flush_policies():
    host = PluginHost.load(["flush_sync", "flush_async"])
    assert {p.name: p.plugin for p in host.flush_policies()} == {"sync": "flush_sync", "async": "flush_async"}


def test_hook_trocket_register_replicators(tmp_path):
    """A replicator provider is selected by name and its wait joins the put status."""
    from kernel import Replication, ReplicatorProvider

    class SlowSlave:
        name = "slow"

        async def run(self, *, task_status=trio.TASK_STATUS_IGNORED):
            task_status.started()
            await trio.sleep_forever()

        async def wait_replicated(self, result, *, wait):
            await trio.lowlevel.checkpoint()
            return Replication.TIMEOUT

        def statistics(self):
            return None

    class Plugin:
        @hookimpl
        def trocket_register_replicators(self):
            return [ReplicatorProvider("slow", lambda ctx, store: SlowSlave())]

    async def main():
        config = make_config(
            broker={
                "plugins": [MEMORY_STORE, "flush_async"],
                "store": "memory",
                "replicator": "slow",
                "broker_role": "SYNC_MASTER",
                "data_dir": str(tmp_path),
            }
        )
        broker = Broker.assemble(config, plugin_objects=[("slow", Plugin())])
        async with trio.open_nursery() as nursery:
            await nursery.start(broker.run)
            result = await broker.put(MessageBatch([Message("T", b"x")]))
            broker.request_stop()
        assert result.status is PutStatus.FLUSH_SLAVE_TIMEOUT

    trio.run(main)


def test_hook_trocket_register_allocate_strategies():
    def first_only(group, current_id, queues, consumer_ids):
        return list(queues[:1]) if current_id == sorted(consumer_ids)[0] else []

    class Plugin:
        @hookimpl
        def trocket_register_allocate_strategies(self):
            return [AllocateStrategy("first_only", first_only)]

    host = PluginHost.load([], objects=[("p", Plugin())])
    strategy = host.select("allocate", host.allocate_strategies(), "first_only")
    queues = [MessageQueue("T", "b", i) for i in range(3)]
    assert strategy.allocate("g", "c1", queues, ["c2", "c1"]) == queues[:1]


async def test_hook_trocket_register_dispatchers(recorded):
    broker, recorder = recorded
    await broker.put(MessageBatch([Message("T", b"1"), Message("T", b"2")]))
    await broker.wait_dispatched()
    assert sum(c["count"] for c in recorder.of("dispatcher")) == 2


async def test_hook_trocket_register_services(recorded):
    _, recorder = recorded
    assert recorder.service_started.is_set()


async def test_hook_trocket_before_append(broker_factory):
    class Rewriter:
        @hookimpl
        def trocket_before_append(self, batch, ctx):
            if any(m.topic == "blocked" for m in batch.messages):
                return Rejection(PutStatus.MESSAGE_ILLEGAL, "blocked topic")
            for message in batch.messages:
                message.topic = "rewritten"
            return None

    async with broker_factory(plugin_objects=[("rewriter", Rewriter())]) as broker:
        refused = await broker.put(MessageBatch([Message("blocked", b"x")]))
        assert (refused.status, refused.remark) == (PutStatus.MESSAGE_ILLEGAL, "blocked topic")
        ok = await broker.put(MessageBatch([Message("orders", b"x")]))
        assert ok.ok
        await broker.wait_dispatched()
        assert broker.store.max_queue_offset("rewritten", 0) == 1
        assert broker.store.max_queue_offset("orders", 0) == 0


async def test_hook_trocket_register_parking_topics(broker_factory):
    """A plugin that parks delayed messages names its topic: there the consume-queue tag field
    holds the due time; a delayed message no plugin parked is refused."""
    from wire.java_hash import java_string_hash

    async with broker_factory() as plain:
        refused = await plain.put(MessageBatch([Message("T", b"x", properties={"DELAY": "2"})]))
        assert refused.status is PutStatus.SERVICE_NOT_AVAILABLE
        assert "no loaded plugin parks" in refused.remark

    class Parker:
        @hookimpl
        def trocket_register_parking_topics(self):
            return ["MY_PARKING"]

        @hookimpl
        def trocket_before_append(self, batch, ctx):
            for message in batch.messages:
                if message.wants_delay:
                    message.topic = "MY_PARKING"
                    message.properties["TIMER_OUT_MS"] = "1700000000123"
            return None

    async with broker_factory(plugin_objects=[("parker", Parker())]) as broker:
        assert broker.ctx.parking_topics == frozenset({"MY_PARKING"})
        delayed = Message("T", b"x", properties={"DELAY": "2", "TAGS": "TagA"})
        tagged = Message("T", b"y", properties={"TAGS": "TagA"})
        assert (await broker.put(MessageBatch([delayed]))).ok
        assert (await broker.put(MessageBatch([tagged]))).ok
        await broker.wait_dispatched()
        [parked] = broker.store.lookup("MY_PARKING", 0, 0, 1)
        [plain_entry] = broker.store.lookup("T", 0, 0, 1)
        assert parked.tags_code == 1700000000123
        assert plain_entry.tags_code == java_string_hash("TagA")


async def test_per_batch_hooks_nobody_implements_cost_no_pluggy_call(broker_factory):
    """A single send is a batch of one: the put path and dispatch call a per-batch hook only
    when a loaded plugin implements it (issue 22, item 4)."""
    async with broker_factory() as broker:
        called: list[str] = []
        broker.host.pm.add_hookcall_monitoring(
            lambda name, impls, kwargs: called.append(name), lambda *a: None
        )
        for i in range(3):
            assert (await broker.put(MessageBatch([Message("quiet", f"{i}".encode())]))).ok
        await broker.wait_dispatched()
        assert called == [], called

    seen: list[int] = []

    class AfterPut:
        @hookimpl
        def trocket_after_put(self, batch, result):
            seen.append(len(batch))

    async with broker_factory(plugin_objects=[("after", AfterPut())]) as broker:
        assert (await broker.put(MessageBatch([Message("quiet", b"x")]))).ok
        assert seen == [1]


def test_implemented_hooks_are_called_as_pluggy_calls_them():
    """``ctx.implemented`` calls plain implementations directly, with the hookspec's
    arguments by position: pluggy's order (tryfirst first, then the last registered), each with
    the arguments it declares, firstresult's first non-None answer."""
    order: list[str] = []

    def plugin(name: str, answer: object = None, **marks: bool) -> object:
        class Plugin:
            @hookimpl(**marks)
            def trocket_before_append(self, batch):
                order.append(name)
                return answer

        return Plugin()

    host = PluginHost.load(
        [],
        objects=[
            ("first", plugin("first", None, tryfirst=True)),
            ("middle", plugin("middle", "refused")),
            ("late", plugin("late", "never")),
            ("last", plugin("last", None, trylast=True)),
        ],
    )
    ctx = BrokerContext(make_config(), host.hook)
    call = ctx.implemented("trocket_before_append")
    direct = call("b", ctx)  # the hookspec's order: (batch, ctx)
    direct_order, order[:] = list(order), []
    assert direct == host.hook.trocket_before_append(batch="b", ctx=ctx)
    assert direct_order == order and order[0] == "first" and len(order) == 2  # stopped at a refusal
    assert direct in ("refused", "never")


async def test_hook_trocket_after_put(recorded):
    broker, recorder = recorded
    await broker.put(MessageBatch([Message("T", b"1"), Message("T", b"2"), Message("T", b"3")]))
    await broker.put(MessageBatch([Message("T", b"x" * (5 << 20))]))
    assert recorder.of("trocket_after_put") == [
        {"status": PutStatus.PUT_OK, "n": 3},
        {"status": PutStatus.MESSAGE_ILLEGAL, "n": 1},
    ]


async def test_hook_trocket_records_dispatched(recorded):
    broker, recorder = recorded
    await broker.put(MessageBatch([Message("T", b"1")]))
    await broker.wait_dispatched()
    assert recorder.of("trocket_records_dispatched")[-1] == {"n": 1}


async def test_hook_trocket_store_recovered(recorded):
    _, recorder = recorded
    (call,) = recorder.of("trocket_store_recovered")
    assert call["report"].clean_shutdown is True


async def test_hook_trocket_role_changed(recorded):
    broker, recorder = recorded
    broker.change_role(BrokerRole.SLAVE)
    broker.change_role(BrokerRole.SLAVE)
    assert recorder.of("trocket_role_changed") == [
        {"previous": BrokerRole.ASYNC_MASTER, "current": BrokerRole.SLAVE}
    ]


async def test_hook_trocket_broker_ready(recorded):
    _, recorder = recorded
    assert recorder.of("trocket_broker_ready") == [{"service": True}], "ready after every service started"


async def test_hook_trocket_broker_stopping(broker_factory):
    recorder = Recorder()
    async with broker_factory(plugin_objects=[("recorder", recorder)]) as broker:
        broker.request_stop("maintenance")
        await broker.wait_stopped()
    assert recorder.of("trocket_broker_stopping") == [{"reason": "maintenance"}]
    names = recorder.names()
    assert names.index("trocket_broker_stopping") < names.index(
        "persist", names.index("trocket_broker_stopping")
    )


def test_hook_trocket_redelivery_decision():
    """A tryfirst override decides for its group and defers (None) for the others."""

    class Default:
        @hookimpl(trylast=True)
        def trocket_redelivery_decision(self, message, group, attempt, max_attempts, ctx):
            if attempt >= max_attempts:
                return Redelivery.dead_letter()
            return Redelivery.retry(3 + attempt)

    class Strict:
        @hookimpl(tryfirst=True)
        def trocket_redelivery_decision(self, group, attempt):
            if group == "billing" and attempt >= 3:
                return Redelivery.dead_letter()
            return None

    host = PluginHost.load([], objects=[("default", Default()), ("strict", Strict())])
    decide = host.hook.trocket_redelivery_decision
    args = {"message": None, "max_attempts": 16, "ctx": None}
    assert decide(group="billing", attempt=3, **args) == Redelivery.dead_letter()
    assert decide(group="orders", attempt=3, **args) == Redelivery.retry(6)
    assert decide(group="orders", attempt=16, **args) == Redelivery.dead_letter()


def test_hook_trocket_dead_lettered():
    seen = []

    class Alerting:
        @hookimpl
        def trocket_dead_lettered(self, message, group, reason):
            seen.append((group, reason))

    host = PluginHost.load([], objects=[("alerting", Alerting())])
    host.hook.trocket_dead_lettered(message=None, group="g", reason="max reconsume times reached", ctx=None)
    assert seen == [("g", "max reconsume times reached")]


async def test_views_persist_lightly_each_interval_and_thoroughly_on_schedule(broker_factory, autojump_clock):
    """``view_persist_interval`` / ``view_persist_thorough_interval`` (flushIntervalConsumeQueue,
    flushConsumeQueueThoroughInterval): light persists every second, a thorough one every five
    here, and a thorough one at shutdown."""
    recorder = Recorder()
    settings = {"view_persist_interval": "1s", "view_persist_thorough_interval": "5s"}
    async with broker_factory(plugin_objects=[("recorder", recorder)], broker=settings):
        await trio.sleep(10.5)
    flags = [call["thorough"] for call in recorder.of("persist")]
    assert flags == [False] * 4 + [True] + [False] * 4 + [True] + [True], flags
