"""Plugin loading: names, dotted paths, installed entry points, misspelt hooks, ordering."""

from __future__ import annotations

import random
import sys
import textwrap

import pytest

from kernel import Broker, Message, MessageBatch, PluginError, PluginLoadError, PutStatus
from kernel.errors import AmbiguousProvider, DuplicateProvider, PluginContractError, ProviderNotFound
from kernel.host import PluginHost
from kernel.plugin import available_plugins
from kernel.testing import make_config

MEMORY = "kernel.testing.memory_store"


def test_loads_exactly_the_listed_plugins():
    host = PluginHost.load(["flush_sync"])
    assert host.names == ("flush_sync",)
    assert [p.name for p in host.flush_policies()] == ["sync"]
    assert host.stores() == []


def test_unknown_name_lists_what_is_available():
    with pytest.raises(PluginLoadError) as caught:
        PluginHost.load(["flush_synk"])
    message = str(caught.value)
    assert "unknown plugin 'flush_synk'" in message
    for name in available_plugins():
        assert name in message


def test_broken_import_inside_a_plugin_is_reported_with_its_cause(tmp_path, monkeypatch):
    (tmp_path / "broken_plugin.py").write_text("import no_such_dependency_xyz\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(PluginLoadError, match="import failed: No module named 'no_such_dependency_xyz'"):
        PluginHost.load(["broken_plugin"])


def test_listing_a_plugin_twice_is_an_error():
    with pytest.raises(PluginError, match="listed twice"):
        PluginHost.load(["flush_sync", "flush_sync"])


def test_misspelt_hookimpl_is_caught_by_check_pending(tmp_path, monkeypatch):
    (tmp_path / "typo_plugin.py").write_text(
        textwrap.dedent(
            """
            from kernel import hookimpl

            @hookimpl
            def trocket_befor_append(batch):
                return None
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(PluginError, match="trocket_befor_append"):
        PluginHost.load(["typo_plugin"])


def test_async_hookimpl_is_refused(tmp_path, monkeypatch):
    (tmp_path / "async_plugin.py").write_text(
        textwrap.dedent(
            """
            from kernel import hookimpl

            @hookimpl
            async def trocket_before_append(batch):
                return None
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(PluginContractError, match="hooks must be synchronous"):
        PluginHost.load(["async_plugin"])


def test_third_party_plugin_installed_with_its_own_entry_point(tmp_path, monkeypatch):
    """A distribution on sys.path with an entry point in trocket.plugins is picked up by name."""
    (tmp_path / "acme_flush.py").write_text(
        textwrap.dedent(
            """
            from kernel import FlushPolicyProvider, hookimpl

            @hookimpl
            def trocket_register_flush_policies():
                return [FlushPolicyProvider("acme", lambda ctx, store: None, "acme policy")]
            """
        )
    )
    dist = tmp_path / "acme_flush-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-flush\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[trocket.plugins]\nacme = acme_flush\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert available_plugins()["acme"] == "acme_flush"
    host = PluginHost.load(["acme"])
    assert [p.name for p in host.flush_policies()] == ["acme"]
    assert host.flush_policies()[0].plugin == "acme"


def test_example_plugin_by_dotted_path_changes_behaviour(tmp_path):
    """The worked example of docs/plugin-authors.md refuses topics outside its prefixes."""
    import trio

    async def main() -> None:
        config = make_config(
            broker={
                "plugins": [MEMORY, "flush_async", "trocket_topic_guard"],
                "store": "memory",
                "data_dir": str(tmp_path),
            },
            trocket_topic_guard={"allowed_prefixes": ["orders-"]},
        )
        broker = Broker.assemble(config)
        async with trio.open_nursery() as nursery:
            await nursery.start(broker.run)
            ok = await broker.put(MessageBatch([Message("orders-eu", b"x")]))
            refused = await broker.put(MessageBatch([Message("payments", b"y")]))
            broker.request_stop()
        assert ok.status is PutStatus.PUT_OK
        assert refused.status is PutStatus.MESSAGE_ILLEGAL
        assert "outside the allowed prefixes" in refused.remark
        from trocket_topic_guard import counters

        assert counters(broker.ctx).refused == 1

    trio.run(main)


def test_provider_selection_errors():
    host = PluginHost.load(["flush_sync", "flush_async"])
    with pytest.raises(AmbiguousProvider, match="several flush providers"):
        host.select("flush", host.flush_policies(), None)
    with pytest.raises(ProviderNotFound, match="loaded flush providers: async, sync"):
        host.select("flush", host.flush_policies(), "fsync")
    with pytest.raises(ProviderNotFound, match="no loaded plugin provides a store"):
        host.select("store", host.stores(), None)
    assert host.select("flush", host.flush_policies(), "sync").name == "sync"


def test_duplicate_provider_names_are_refused(tmp_path, monkeypatch):
    (tmp_path / "dup_sync.py").write_text(
        textwrap.dedent(
            """
            from kernel import FlushPolicyProvider, hookimpl

            @hookimpl
            def trocket_register_flush_policies():
                return [FlushPolicyProvider("sync", lambda ctx, store: None)]
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    host = PluginHost.load(["flush_sync", "dup_sync"])
    with pytest.raises(DuplicateProvider, match="'sync' is registered by both"):
        host.flush_policies()


def test_wrong_provider_type_is_a_contract_error(tmp_path, monkeypatch):
    (tmp_path / "bad_store.py").write_text(
        "from kernel import hookimpl\n\n@hookimpl\ndef trocket_register_stores():\n    return ['mmap']\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(PluginContractError, match="expected StoreProvider"):
        PluginHost.load(["bad_store"]).stores()


ORDER_PLUGINS = ("first_says_a", "second_says_b")


@pytest.fixture
def two_deciders(tmp_path, monkeypatch):
    for name, remark in zip(ORDER_PLUGINS, "ab", strict=True):
        (tmp_path / f"{name}.py").write_text(
            textwrap.dedent(
                f"""
                from kernel import Rejection, hookimpl

                @hookimpl
                def trocket_before_append(batch):
                    return Rejection(remark={remark!r})
                """
            )
        )
    monkeypatch.syspath_prepend(str(tmp_path))


def test_plugin_order_in_the_config_never_changes_behaviour(two_deciders, tmp_path):
    """Shuffle the plugin list: same registration order, same firstresult winner, same providers."""
    import trio

    base = [MEMORY, "flush_sync", "flush_async", *ORDER_PLUGINS]
    outcomes = set()
    for seed in range(6):
        names = list(base)
        random.Random(seed).shuffle(names)
        host = PluginHost.load(names)
        rejection = host.hook.trocket_before_append(batch=None, ctx=None)
        outcomes.add((host.names, rejection.remark, tuple(p.name for p in host.flush_policies())))

        async def put_once(names: list[str] = names) -> str:
            config = make_config(
                broker={"plugins": names, "store": "memory", "flush": "sync", "data_dir": str(tmp_path)}
            )
            broker = Broker.assemble(config)
            async with trio.open_nursery() as nursery:
                await nursery.start(broker.run)
                result = await broker.put(MessageBatch([Message("T", b"x")]))
                broker.request_stop()
            return result.remark

        outcomes.add(("put", trio.run(put_once)))
    assert len(outcomes) == 2, outcomes


def test_module_state_is_not_shared_between_hosts():
    """Same plugin module in two brokers: per-broker state lives in each context's stash."""
    from kernel.context import StashKey
    from kernel.testing import make_context

    first = PluginHost.load(["flush_sync"])
    second = PluginHost.load(["flush_sync"])
    assert first.pm is not second.pm
    assert sys.modules["plugins.flush_sync"] is first.pm.get_plugin("flush_sync")
    key = StashKey[list[str]]("test.state")
    one, two = make_context(), make_context()
    one.stash.setdefault(key, []).append("broker one")
    assert key not in two.stash
    assert two.stash.get(key, []) == []


def test_a_dotted_path_that_implements_no_hook_is_an_error():
    """A typo in a dotted path can load a real but unrelated module; it must not start as a
    silent empty plugin (issue 22, item 6)."""
    with pytest.raises(PluginError, match=r"plugin 'json' \(json\) implements no trocket_ hook"):
        PluginHost.load(["json"])
