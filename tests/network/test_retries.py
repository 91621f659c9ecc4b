"""Consumer retries over TCP with the retry_dlq plugin: the retry schedule of a consumer that
always fails, the dead-letter queue, an overriding redelivery plugin, and the admin commands
(queryDlqMsg, resendDlqMsg, scheduleProgress, brokerStatus figures) run as a user runs them."""

from __future__ import annotations

import json
import sys

import trio

from kernel import Redelivery, hookimpl
from tests.network.test_broker_consumers import heartbeat
from tests.network.wire import pull_request, send_request
from wire import record
from wire.remoting import RequestCode

# Retries use level 3 + reconsume times: 1 s, 2 s, 3 s for the first three.
LEVELS = {"message_delay_level": "1s 1s 1s 2s 3s"}
GROUP = "CG_fail"


async def _create_group(cluster, group: str, retry_max_times: int) -> None:
    config = {"groupName": group, "retryMaxTimes": retry_max_times, "retryQueueNums": 1}
    response = await cluster.call(
        RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=json.dumps(config).encode()
    )
    assert response.code == 0, response.remark


async def _send_back(cluster, message: record.StoredMessage, group: str = GROUP) -> None:
    back = await cluster.call(
        RequestCode.CONSUMER_SEND_MSG_BACK,
        {"group": group, "offset": message.physical_offset, "delayLevel": 0, "originMsgId": "O-1"},
    )
    assert back.code == 0, back.remark


async def _pull_one(cluster, topic: str, offset: int, group: str = GROUP) -> record.StoredMessage:
    """Long-poll ``topic`` queue 0 at ``offset`` until a message is there."""
    for _ in range(40):
        response = await cluster.call_raw(
            pull_request(topic, 0, offset, group=group, suspend_ms=1000), timeout=5
        )
        if response.code == 0:
            return record.decode_records(response.body)[0]
    raise AssertionError(f"nothing arrived in {topic} at offset {offset}")


async def _admin(cluster, *args: str) -> tuple[int, str, str]:
    done = await trio.run_process(
        [sys.executable, "-m", "trocket", "admin", args[0], "-n", cluster.namesrv_addr, *args[1:]],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    return done.returncode, done.stdout.decode(), done.stderr.decode()


async def test_an_always_failing_consumer_sees_the_retry_schedule_then_the_dlq(cluster_factory):
    async with cluster_factory(plugins=["retry_dlq"], broker=LEVELS) as cluster:
        await _create_group(cluster, GROUP, retry_max_times=3)
        await cluster.call_raw(heartbeat("c1", GROUP))
        sent = await cluster.call_raw(send_request("Orders", b"bad order", tags="T", keys="K-9"))
        assert sent.code == 0
        message = await _pull_one(cluster, "Orders", 0)
        delays = []
        for attempt in (1, 2, 3):
            given_back = trio.current_time()
            await _send_back(cluster, message)
            message = await _pull_one(cluster, f"%RETRY%{GROUP}", attempt - 1)
            delays.append(trio.current_time() - given_back)
            assert (message.body, message.reconsume_times, message.tags) == (b"bad order", attempt, "T")
            assert message.properties["RETRY_TOPIC"] == "Orders"
            assert message.properties["ORIGIN_MESSAGE_ID"] == "O-1"
            assert "DELAY" not in message.properties, "delivered copies do not carry the delay"
        # Due times are whole milliseconds of wall-clock time: allow that granularity.
        assert delays[0] >= 0.995 and delays[1] >= 1.995 and delays[2] >= 2.995, delays
        await _send_back(cluster, message)  # attempt 4 > retryMaxTimes 3: dead letter, at once
        dead = await _pull_one(cluster, f"%DLQ%{GROUP}", 0)
        assert (dead.body, dead.reconsume_times, dead.keys) == (b"bad order", 4, ["K-9"])

        code, out, err = await _admin(cluster, "queryDlqMsg", "-g", GROUP, "--json")
        assert code == 0, err
        (listed,) = json.loads(out)
        assert listed["offsetMsgId"] == dead.offset_msg_id and listed["body"] == "bad order"
        assert listed["properties"]["RETRY_TOPIC"] == "Orders"

        code, out, err = await _admin(
            cluster, "resendDlqMsg", "-g", GROUP, "-i", dead.offset_msg_id, "--json"
        )
        assert code == 0, err
        (resent,) = json.loads(out)
        assert resent["topic"] == "Orders"
        await cluster.broker.wait_dispatched()
        pulled = await cluster.call_raw(pull_request("Orders", resent["queueId"], 0, group=GROUP, max_msgs=8))
        again = record.decode_records(pulled.body)[-1]
        assert (again.body, again.reconsume_times, again.keys) == (b"bad order", 0, ["K-9"])
        assert "RETRY_TOPIC" not in again.properties, "a resent message starts over"


async def test_dlq_admin_commands_explain_what_is_wrong(cluster_factory):
    async with cluster_factory(plugins=["retry_dlq"], broker=LEVELS) as cluster:
        code, _, err = await _admin(cluster, "queryDlqMsg", "-g", "NeverFailed")
        assert code == 1 and "no dead-letter queue" in err
        sent = await cluster.call_raw(send_request("Orders", b"fine"))
        code, _, err = await _admin(cluster, "resendDlqMsg", "-g", GROUP, "-i", sent.ext["msgId"])
        assert code == 1 and "is in topic 'Orders', not '%DLQ%CG_fail'" in err


class DeadLetterAfterThree:
    """Overrides retry_dlq's default for one group: dead letter on the third failure."""

    @hookimpl(tryfirst=True)
    def trocket_redelivery_decision(self, message, group, attempt, max_attempts):
        if group != GROUP:
            return None
        return Redelivery.dead_letter() if attempt >= 3 else None


async def test_a_plugin_overrides_the_redelivery_decision(cluster_factory):
    plugin = [("dead_letter_after_three", DeadLetterAfterThree())]
    async with cluster_factory(plugins=["retry_dlq"], broker=LEVELS, plugin_objects=plugin) as cluster:
        await _create_group(cluster, GROUP, retry_max_times=16)
        await cluster.call_raw(heartbeat("c1", GROUP))
        await cluster.call_raw(send_request("Orders", b"twice"))
        message = await _pull_one(cluster, "Orders", 0)
        for attempt in (1, 2):  # deferred to the default: retried with a delay
            await _send_back(cluster, message)
            message = await _pull_one(cluster, f"%RETRY%{GROUP}", attempt - 1)
        await _send_back(cluster, message)
        dead = await _pull_one(cluster, f"%DLQ%{GROUP}", 0)
        assert (dead.body, dead.reconsume_times) == (b"twice", 3)
        assert cluster.network.topics.get(f"%RETRY%{GROUP}") is not None


async def test_hook_trocket_runtime_figures(cluster_factory):
    """retry_dlq's scheduler progress reaches brokerStatus and scheduleProgress."""

    class Clashing:
        @hookimpl
        def trocket_runtime_figures(self):
            return {"brokerName": "not me", "acmeQueueDepth": "7"}

    plugins = [("clashing", Clashing())]
    async with cluster_factory(plugins=["retry_dlq"], broker=LEVELS, plugin_objects=plugins) as cluster:
        for level in (2, 2, 5):
            await cluster.call_raw(send_request("Later", b"x", properties={"DELAY": str(level)}))
        await cluster.call_raw(send_request("Later", b"y", properties={"TIMER_DELAY_MS": "60000"}))
        await cluster.broker.wait_dispatched()
        response = await cluster.call(RequestCode.GET_BROKER_RUNTIME_INFO)
        table = json.loads(response.body)["table"]
        assert table["brokerName"] != "not me" and table["acmeQueueDepth"] == "7"
        assert table["messageDelayLevel"] == "1s 1s 1s 2s 3s"
        assert table["scheduleMessageOffset_5"] == "0,1" and table["timerPending"] == "1"

        code, out, err = await _admin(cluster, "scheduleProgress", "--json")
        assert code == 0, err
        rows = {row["level"]: row for row in json.loads(out)}
        assert rows["5"]["pending"] == 1 and rows["5"]["delay"] == "3s"
        assert rows["timer"]["pending"] == 1
        await trio.sleep(1.5)  # level 2 (1 s) is delivered by now
        code, out, err = await _admin(cluster, "scheduleProgress", "--json")
        rows = {row["level"]: row for row in json.loads(out)}
        assert (rows["2"]["nextOffset"], rows["2"]["pending"]) == (2, 0)


async def test_delayed_sends_without_the_plugin_are_refused(cluster_factory):
    async with cluster_factory() as cluster:
        for properties in ({"DELAY": "2"}, {"TIMER_DELAY_MS": "1000"}):
            refused = await cluster.call_raw(send_request("Later", b"x", properties=properties))
            assert refused.code != 0 and "no loaded plugin parks delayed messages" in refused.remark


async def test_level_two_is_invisible_for_five_seconds_then_delivered_intact(cluster_factory):
    """Default levels: level 2 is 5 s."""
    async with cluster_factory(plugins=["retry_dlq"]) as cluster:
        sent_at = trio.current_time()
        request = send_request("Later", b"in five", tags="TagL", keys="K-5", properties={"DELAY": "2"})
        assert (await cluster.call_raw(request)).code == 0
        await trio.sleep(4.0)
        early = await cluster.call_raw(pull_request("Later", 0, 0))
        assert early.code != 0, "nothing is visible before 5 s"
        message = await _pull_one(cluster, "Later", 0)
        assert trio.current_time() - sent_at >= 4.995  # whole-millisecond due times
        assert (message.body, message.tags, message.keys) == (b"in five", "TagL", ["K-5"])
        assert message.queue_id == 0 and "DELAY" not in message.properties
