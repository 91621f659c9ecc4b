"""An in-process NameServer + broker with the acl plugin over real TCP, its ``plain_acl.yml``
written by the test."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.network.conftest import Cluster, cluster_factory  # noqa: F401

ACL_FILE = """
globalWhiteRemoteAddresses: []
accounts:
  - accessKey: writer-key
    secretKey: writer-secret
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms: ["Orders=PUB|SUB", "ReadOnly=SUB"]
    groupPerms: ["CG_orders=SUB"]
  - accessKey: reader-key
    secretKey: 12345678
    defaultTopicPerm: SUB
    defaultGroupPerm: SUB
    topicPerms: ["Orders=SUB"]
  - accessKey: admin-key
    secretKey: admin-secret
    admin: true
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: PUB|SUB
"""


@pytest.fixture
def acl_file(tmp_path: Path) -> Path:
    path = tmp_path / "plain_acl.yml"
    path.write_text(ACL_FILE)
    return path


@pytest.fixture
def acl_cluster(cluster_factory, acl_file) -> Callable[..., Any]:  # noqa: F811
    """``async with acl_cluster() as cluster``: ACL on, the file re-read every 100 ms."""

    @asynccontextmanager
    async def factory(**acl: Any) -> AsyncIterator[Cluster]:
        async with cluster_factory(
            plugins=["acl"],
            acl={"plain_acl_file": str(acl_file), "reload_interval": "100ms", **acl},
        ) as cluster:
            yield cluster

    return factory
