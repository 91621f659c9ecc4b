"""The web console as an operator uses it, in real headless Chromium against ``trocket up``:
see the broker, create a topic, send a test message and find it by key, watch a group's lag go
to zero as ``trocket consume`` catches up, resend a dead letter and see it delivered, and a
delete that asks first. Errors (unknown topic, no cluster) read as sentences."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import trio
from playwright.sync_api import expect

from tests.console.conftest import screenshot, submit
from tests.network.conftest import free_port
from tests.support import REPO, start_trocket
from trocket import ConsumeFromWhere, ConsumeStatus, Message, Producer, PushConsumer
from trocket.admin import AdminClient
from trocket.admin.message_trace import query_trace
from wire.record import parse_offset_msg_id
from wire.remoting import RequestCode

NAMESRV = "127.0.0.1:9876"


def trocket(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "trocket", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def confirm(page) -> None:
    dialog = page.locator("dialog#confirm")
    expect(dialog).to_be_visible()
    page.click("#confirm-ok")


def test_cluster_page_shows_the_broker_and_a_live_chart(up_with_console, page):
    page.goto(up_with_console["console"])
    brokers = page.locator("table#brokers")
    expect(brokers).to_contain_text("broker-a")
    expect(brokers).to_contain_text("ASYNC_MASTER")
    expect(brokers).to_contain_text("127.0.0.1:10911")
    expect(page.locator("canvas#tps-chart")).to_be_visible()
    expect(page.locator("#tps-now")).to_contain_text("msgs/s")
    expect(page.locator("#tps-now")).to_contain_text("lag 0 messages")  # no group is behind yet
    screenshot(page, "cluster")
    page.click("nav >> text=Schedule")
    schedule = page.locator("table#schedule")
    expect(schedule).to_contain_text("127.0.0.1:10911")
    expect(schedule.locator("tbody tr")).to_have_count(19)  # 18 delay levels (1s to 2h) and the timer
    expect(schedule).to_contain_text("2h")


def test_create_a_topic_send_a_test_message_and_find_it_by_key(up_with_console, page):
    page.goto(up_with_console["console"] + "#/topics")
    submit(page, "topic-create", topic="WebOrders", writeQueueNums="4", readQueueNums="4")
    confirm(page)
    expect(page.locator("#answer")).to_contain_text("create topic WebOrders on broker-a")
    expect(page.locator("table#topics")).to_contain_text("WebOrders")
    screenshot(page, "topics")
    page.select_option("form#topic-filter select[name=kind]", "system")
    page.click("form#topic-filter button[type=submit]")
    system = page.locator("table#topics")
    expect(system).to_contain_text("SCHEDULE_TOPIC_XXXX")
    expect(system).to_contain_text("DefaultCluster")  # the cluster's own route probe
    expect(system).not_to_contain_text("WebOrders")
    page.goto(up_with_console["console"] + "#/topics?kind=normal")

    page.locator("table#topics a", has_text="WebOrders").click()
    expect(page.locator("table#queues tbody tr")).to_have_count(4)
    submit(page, "send-message", body="hello from the console", key="order-77")
    confirm(page)
    expect(page.locator("#answer")).to_contain_text("sendStatus: SEND_OK")
    screenshot(page, "topic")

    page.goto(up_with_console["console"] + "#/messages?topic=WebOrders&key=order-77")
    expect(page.locator("table#messages")).to_contain_text("order-77")
    page.locator("table#messages button.view").first.click()
    expect(page.locator("#message-body")).to_have_text("hello from the console")
    screenshot(page, "messages")


def test_a_groups_lag_goes_to_zero_after_trocket_consume(up_with_console, page):
    trocket("produce", "-t", "WebLag", "-b", "early {i}", "-c", "3")
    trocket("consume", "-g", "CG_web", "-t", "WebLag", "--from", "first", "-c", "3")
    trocket("produce", "-t", "WebLag", "-b", "lag {i}", "-c", "5")
    page.goto(up_with_console["console"] + "#/group/CG_web")
    expect(page.locator("#group-lag")).to_have_text("Lag: 5 messages")
    trocket("consume", "-g", "CG_web", "-t", "WebLag", "-c", "5")
    page.reload()
    expect(page.locator("#group-lag")).to_have_text("Lag: 0 messages")
    expect(page.locator("table#progress")).to_contain_text("WebLag")
    screenshot(page, "group")
    page.goto(up_with_console["console"] + "#/groups?q=CG_web")
    expect(page.locator("table#groups")).to_contain_text("CG_web")


def test_resend_a_dead_letter_and_see_it_delivered(up_with_console, page):
    sent = json.loads(trocket("produce", "-t", "WebDead", "-b", "poison pill", "-c", "1", "--json"))
    trocket("consume", "-g", "CG_dead", "-t", "WebDead", "--from", "first", "-c", "1")
    (host, port), offset = parse_offset_msg_id(sent["offsetMsgId"])

    async def give_up() -> None:  # the consumer gives up on it at once: straight to %DLQ%CG_dead
        async with AdminClient.open([NAMESRV]) as admin:
            await admin.call(
                f"{host}:{port}",
                RequestCode.CONSUMER_SEND_MSG_BACK,
                {"group": "CG_dead", "offset": offset, "delayLevel": -1, "originMsgId": sent["msgId"]},
            )

    page.goto(up_with_console["console"] + "#/dlq?group=CG_dead")
    expect(page.locator("#no-messages")).to_have_text('Group "CG_dead" has no dead letters.')
    trio.run(give_up)
    page.reload()
    letters = page.locator("table#messages")
    expect(letters).to_contain_text(sent["msgId"])
    letters.locator("button.view").first.click()
    expect(page.locator("#message-body")).to_have_text("poison pill")
    expect(page.locator("#message-detail")).not_to_contain_text("null")  # optional parts left out
    page.click("#trace")
    steps = page.locator("table#trace-table tbody tr")
    expect(steps).to_have_count(2)
    expect(steps.nth(0)).to_contain_text("sent")
    expect(steps.nth(0)).to_contain_text("WebDead")
    expect(steps.nth(1)).to_contain_text("dead letter")
    expect(steps.nth(1)).to_contain_text("%DLQ%CG_dead")
    screenshot(page, "dead-letters")
    letters.locator("button.resend").first.click()
    confirm(page)
    expect(page.locator("#answer")).to_contain_text("topic: WebDead")
    delivered = trocket("consume", "-g", "CG_dead", "-t", "WebDead", "-c", "1", "--json")
    assert json.loads(delivered.splitlines()[0])["body"] == "poison pill"


def test_a_delete_asks_first_and_cancel_keeps_the_topic(up_with_console, page):
    trocket("admin", "updateTopic", "-t", "WebDoomed", "-c", "DefaultCluster")
    page.goto(up_with_console["console"] + "#/topic/WebDoomed")
    page.click("#delete-topic")
    expect(page.locator("dialog#confirm")).to_be_visible()
    expect(page.locator("#confirm-text")).to_contain_text('Delete topic "WebDoomed"')
    page.click("#confirm-cancel")
    expect(page.locator("#answer")).to_have_text("Cancelled: nothing was sent.")
    assert "WebDoomed" in trocket("admin", "topicList")
    page.click("#delete-topic")
    confirm(page)
    expect(page.locator("#answer")).to_contain_text("delete topic WebDoomed")
    expect(page.locator("table#topics")).to_be_visible()
    assert "WebDoomed" not in trocket("admin", "topicList")


def test_errors_read_as_sentences_not_tracebacks(up_with_console, page):
    page.goto(up_with_console["console"] + "#/topic/NoSuchTopic")
    error = page.locator("#error")
    expect(error).to_contain_text("topic 'NoSuchTopic' has no route")
    assert "Traceback" not in error.inner_text()


def test_a_console_without_a_cluster_says_so(tmp_path, page):
    nobody = f"127.0.0.1:{free_port()}"
    process, lines = start_trocket("console", "-n", nobody, "--port", "0", cwd=tmp_path)
    try:
        url = next(line.split()[1] for line in lines if line.startswith("console: "))
        page.goto(url)
        error = page.locator("#error")
        expect(error).to_contain_text(nobody)
        assert "Traceback" not in error.inner_text()
    finally:
        process.kill()
        process.communicate()


def test_reset_a_groups_offsets_by_time_then_delete_the_group(up_with_console, page):
    trocket("produce", "-t", "WebReset", "-b", "again {i}", "-c", "4")
    trocket("consume", "-g", "CG_reset", "-t", "WebReset", "--from", "first", "-c", "4")
    page.goto(up_with_console["console"] + "#/group/CG_reset")
    expect(page.locator("#group-lag")).to_have_text("Lag: 0 messages")
    page.locator("form#reset-offsets select[name=topic]").select_option("WebReset")
    submit(page, "reset-offsets", time="2000-01-01T00:00")
    confirm(page)
    expect(page.locator("#answer")).to_contain_text("reset CG_reset on WebReset")
    expect(page.locator("#answer")).to_contain_text("-> 0")
    expect(page.locator("#group-lag")).to_have_text("Lag: 4 messages")  # all of it to consume again
    again = trocket("consume", "-g", "CG_reset", "-t", "WebReset", "-c", "4", "--json")
    assert sorted(json.loads(line)["body"] for line in again.splitlines()) == [f"again {i}" for i in range(4)]

    page.click("#delete-group")
    expect(page.locator("#confirm-text")).to_contain_text('Delete the subscription group "CG_reset"')
    confirm(page)
    expect(page.locator("#answer")).to_contain_text(
        "delete subscription group CG_reset from broker-a success"
    )
    expect(page.locator("table#groups")).to_be_visible()


def test_messages_by_time_range(up_with_console, page):
    trocket("produce", "-t", "WebTime", "-b", "timed {i}", "-c", "3")
    page.goto(up_with_console["console"] + "#/messages")
    submit(page, "time-range", topic="WebTime", begin="2000-01-01T00:00", end="2100-01-01T00:00")
    expect(page.locator("table#messages tbody tr")).to_have_count(3)
    page.locator("table#messages button.view").first.click()
    expect(page.locator("#message-body")).to_contain_text("timed ")
    submit(page, "time-range", begin="2090-01-01T00:00")
    expect(page.locator("#no-messages")).to_have_text("No message was stored in that range.")


def test_a_traced_messages_timeline(up_with_console, page):
    """Message trace from traced SDK clients: sent, stored, then each group's consumption with
    its cost and result, in time order; a message no traced client touched says it has none."""

    async def traced_round_trip() -> tuple[str, str]:
        async with Producer("PG_web_traced", NAMESRV, trace=True) as producer:
            traced = await producer.send(Message("WebTraced", b"traced", keys=["web-traced"]))
        async with Producer("PG_web_plain", NAMESRV) as producer:
            plain = await producer.send(Message("WebUntraced", b"plain", keys=["web-plain"]))
        seen = trio.Event()

        async def listener(messages, context):
            if any(m.body == b"traced" for m in messages):
                seen.set()
            return ConsumeStatus.CONSUME_SUCCESS

        consumer = PushConsumer(
            "CG_web_traced", NAMESRV, consume_from_where=ConsumeFromWhere.FIRST_OFFSET, trace=True
        )
        consumer.subscribe("WebTraced")
        consumer.register_listener(listener)
        async with consumer:
            with trio.fail_after(30):
                await seen.wait()
        async with AdminClient.open([NAMESRV]) as admin:  # indexed a moment after it is stored
            with trio.fail_after(20):
                while len(await query_trace(admin, traced.msg_id)) < 3:  # noqa: ASYNC110 - polls the index
                    await trio.sleep(0.1)
        return traced.msg_id, plain.msg_id

    traced, _ = trio.run(traced_round_trip)
    page.goto(up_with_console["console"] + "#/messages?topic=WebTraced&key=web-traced")
    page.locator("table#messages button.view").first.click()
    page.click("#msg-trace")
    steps = page.locator("ol#trace-timeline li")
    expect(steps).to_have_count(3)
    expect(steps.nth(0)).to_contain_text("sent by PG_web_traced")
    expect(steps.nth(1)).to_contain_text("stored")
    expect(steps.nth(2)).to_contain_text("consumed by CG_web_traced")
    expect(steps.nth(2)).to_contain_text("success")
    expect(steps.nth(2)).to_contain_text("took")
    screenshot(page, "message-trace")

    page.goto(up_with_console["console"] + "#/messages?topic=WebUntraced&key=web-plain")
    expect(page.locator("table#messages")).to_contain_text("web-plain")
    page.locator("table#messages button.view").first.click()
    page.click("#msg-trace")
    expect(page.locator("#no-trace")).to_contain_text("No trace")
