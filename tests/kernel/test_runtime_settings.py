"""Runtime settings (updateBrokerConfig): all or nothing, refused with the reason, kept in
``config/runtime.properties`` and applied again when offered after a restart; and the effective
configuration in RocketMQ's keys and units (getBrokerConfig)."""

from __future__ import annotations

import attrs
import pytest

from kernel import runtime_settings
from kernel.config import property_aliases as rocketmq
from kernel.config.effective import effective_settings, render
from kernel.testing.helpers import make_config, make_context
from plugins.remoting.config import PROPERTIES, RemotingConfig


@attrs.define
class Holder:
    config: RemotingConfig


def remoting_settings(ctx, holder: Holder) -> list[runtime_settings.RuntimeSetting]:
    def replace(config: RemotingConfig) -> None:
        holder.config = config

    return [
        runtime_settings.table_setting(ctx, key, PROPERTIES[key], lambda: holder.config, replace)
        for key in ("brokerPermission", "shortPollingTimeMills")
    ]


def context(tmp_path):
    return make_context(make_config(broker={"plugins": ["remoting"], "data_dir": str(tmp_path)}))


def test_changes_apply_all_or_none_and_are_kept(tmp_path):
    ctx = context(tmp_path)
    holder = Holder(ctx.plugin_config(RemotingConfig))
    runtime_settings.offer(ctx, remoting_settings(ctx, holder))
    runtime_settings.update(ctx, {"brokerPermission": "4", "shortPollingTimeMills": "250"})
    assert holder.config.broker_permission == 4 and holder.config.short_polling_time == 0.25
    assert ctx.plugin_config(RemotingConfig).broker_permission == 4  # the context sees it too
    assert runtime_settings.kept(ctx) == {"brokerPermission": "4", "shortPollingTimeMills": "250"}
    with pytest.raises(runtime_settings.SettingRefused) as refused:
        runtime_settings.update(ctx, {"brokerPermission": "2", "listenPort": "1"})
    assert refused.value.unchangeable and "listenPort" in refused.value.reasons
    assert "brokerPermission, shortPollingTimeMills" in refused.value.reasons["listenPort"]
    assert holder.config.broker_permission == 4  # nothing applied
    with pytest.raises(runtime_settings.SettingRefused) as bad:
        runtime_settings.update(ctx, {"brokerPermission": "9"})
    assert not bad.value.unchangeable and "6 (RW), 4 (R) or 2 (W)" in str(bad.value)


def test_kept_values_are_applied_when_offered_again(tmp_path):
    first = context(tmp_path)
    runtime_settings.offer(first, remoting_settings(first, Holder(first.plugin_config(RemotingConfig))))
    runtime_settings.update(first, {"brokerPermission": "2"})
    again = context(tmp_path)  # a restart: a new context on the same data directory
    holder = Holder(again.plugin_config(RemotingConfig))
    assert holder.config.broker_permission == 6
    runtime_settings.offer(again, remoting_settings(again, holder))
    assert holder.config.broker_permission == 2


def test_effective_settings_use_rocketmq_keys_and_units(tmp_path):
    settings = dict(effective_settings(context(tmp_path)))
    assert settings["brokerPermission"] == "6"
    assert settings["shortPollingTimeMills"] == "1000"  # a duration in RocketMQ's milliseconds
    assert settings["brokerClusterName"] == "DefaultCluster"
    assert "remoting.max_frame_size" in settings  # no RocketMQ key: Trocket's own name
    assert render(rocketmq.seconds_alias("x"), 120.0) == "120" and render(None, ("a:1", "b:2")) == "a:1;b:2"
    assert render(rocketmq.boolean_alias("x"), True) == "true"
