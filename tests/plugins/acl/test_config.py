"""``aclEnable=true`` in a RocketMQ ``broker.properties`` turns the plain ACL on (the plugin is
loaded, its file beside the config); a broker with ACL on and no usable file does not start."""

from __future__ import annotations

import functools

import pytest

import kernel
from kernel.errors import ConfigError
from tests.support import write
from trocket.cli.defaults import TROCKET_DEFAULTS

load_config = functools.partial(kernel.load_config, defaults=TROCKET_DEFAULTS)


@pytest.mark.parametrize(("value", "loaded"), [("true", True), ("false", False)])
def test_acl_enable_loads_the_plugin(tmp_path, value, loaded):
    config = load_config(write(tmp_path, "broker.properties", f"brokerName = b\naclEnable = {value}\n"))
    assert ("acl" in config.broker.plugins) is loaded
    assert not any("aclEnable" in note for note in config.notes)  # not reported as ignored


def test_a_bad_acl_enable_value_names_the_key(tmp_path):
    with pytest.raises(ConfigError, match="aclEnable"):
        load_config(write(tmp_path, "broker.properties", "aclEnable = maybe\n"))


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (None, "cannot read"),
        ("accounts: [", "not valid YAML"),
        ("accounts:\n  - accessKey: a\n", "accounts[0].secretKey: missing"),
        ("accounts:\n  - {accessKey: a, secretKey: b, defaultTopicPerm: ALL}\n", "is not DENY, PUB, SUB"),
        ("accounts:\n  - {accessKey: a, secretKey: b, topicPerms: [T]}\n", "is not 'name=PERM'"),
        ("globalWhiteRemoteAddresses: ['10.1.300.*']\n", "is not a number 0-255"),
    ],
)
async def test_a_broker_with_acl_on_and_no_usable_file_does_not_start(
    cluster_factory, tmp_path, text, problem
):
    path = tmp_path / "plain_acl.yml"
    if text is not None:
        path.write_text(text)
    with pytest.raises(BaseException) as raised:  # noqa: PT011 - a group wraps the ConfigError
        async with cluster_factory(plugins=["acl"], acl={"plain_acl_file": str(path)}):
            pass
    assert problem in _flat_message(raised.value) and str(path) in _flat_message(raised.value)


def _flat_message(error: BaseException) -> str:
    if isinstance(error, BaseExceptionGroup):
        return " | ".join(_flat_message(e) for e in error.exceptions)
    return str(error)
