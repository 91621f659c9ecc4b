"""Many topics in one request (issue 39, item 5): RocketMQ 5's UPDATE_AND_CREATE_TOPIC_LIST and
mqadmin ``updateTopicList``, all or none, persisted once and routed by the NameServer."""

from __future__ import annotations

import json
import sys

import trio

from kernel.persist import read_json_with_backup
from wire.remoting import RequestCode, ResponseCode


def _configs(count: int, **overrides: object) -> list[dict[str, object]]:
    return [
        {"topicName": f"Bulk{i:05d}", "readQueueNums": 4, "writeQueueNums": 4, "perm": 6, **overrides}
        for i in range(count)
    ]


async def test_a_list_of_topics_is_created_at_once_or_not_at_all(cluster_factory, tmp_path):
    async with cluster_factory(store="mmap") as cluster:
        body = json.dumps({"topicConfigList": _configs(500)}).encode()
        created = await cluster.call(RequestCode.UPDATE_AND_CREATE_TOPIC_LIST, body=body)
        assert created.code == ResponseCode.SUCCESS, created.remark
        topics = cluster.network.topics.topics
        assert all(
            f"Bulk{i:05d}" in topics and topics[f"Bulk{i:05d}"].write_queue_nums == 4 for i in range(500)
        )
        on_disk = read_json_with_backup(cluster.network.topics.path)["topicConfigTable"]
        assert "Bulk00499" in on_disk

        bad = _configs(3, readQueueNums=2) + [{"topicName": "bad/name"}] + _configs(1, topicName="Never")
        refused = await cluster.call(
            RequestCode.UPDATE_AND_CREATE_TOPIC_LIST, body=json.dumps({"topicConfigList": bad}).encode()
        )
        assert refused.code == ResponseCode.SYSTEM_ERROR
        assert refused.remark.startswith("topicConfigList[3]: the topic 'bad/name' contains characters")
        assert topics["Bulk00000"].read_queue_nums == 4 and "Never" not in topics  # none applied
        for body in (b"[]", b'{"topicConfigList": []}', b'{"topicConfigList": [5]}', b"nope"):
            answer = await cluster.call(RequestCode.UPDATE_AND_CREATE_TOPIC_LIST, body=body)
            assert answer.code == ResponseCode.SYSTEM_ERROR, body

        # mqadmin updateTopicList, as an operator runs it.
        listing = tmp_path / "topics.json"
        listing.write_text(json.dumps([{"topicName": "FromFile", "perm": 6}]))
        done = await trio.run_process(
            [
                sys.executable, "-m", "trocket", "admin", "updateTopicList",
                "-n", cluster.namesrv_addr, "-b", cluster.broker_addr, "-f", str(listing),
            ],
            capture_stdout=True, capture_stderr=True, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr.decode()
        assert b"create 1 topics to" in done.stdout and "FromFile" in topics
