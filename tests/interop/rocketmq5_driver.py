"""Drives the official RocketMQ 5 Python client (PyPI ``rocketmq-python-client``) as its README
shows, for the proxy's tests. Runs in that client's own virtualenv (``.venv-rocketmq5``: its
``rocketmq`` package would clash with the 4.x client's), one scenario per process:

    python rocketmq5_driver.py ENDPOINT SCENARIO_JSON

and prints one ``@RESULT@{json}`` line per outcome. Only this file imports the client.
"""

from __future__ import annotations

import json
import sys
import threading
import time

from rocketmq import (
    ClientConfiguration,
    ConsumeResult,
    Credentials,
    FilterExpression,
    Message,
    MessageListener,
    Producer,
    PushConsumer,
    SimpleConsumer,
    TransactionChecker,
    TransactionResolution,
)


def emit(**fields):
    print("@RESULT@" + json.dumps(fields), flush=True)


def configuration(endpoint, scenario):
    credentials = Credentials(scenario.get("ak", ""), scenario.get("sk", ""))
    return ClientConfiguration(endpoint, credentials, request_timeout=scenario.get("request_timeout", 3))


def message_of(topic, index, scenario):
    message = Message()
    message.topic = topic
    message.body = f"{scenario.get('prefix', 'm')}-{index}".encode()
    if scenario.get("tag"):
        message.tag = scenario["tag"]
    message.keys = f"key-{index}"
    if scenario.get("group"):
        message.message_group = scenario["group"]
    if scenario.get("delay_s"):
        message.delivery_timestamp = int(time.time()) + scenario["delay_s"]  # this client takes seconds
    message.add_property("origin", "rocketmq5")
    return message


class Checker(TransactionChecker):
    def __init__(self, answer):
        self.answer = answer

    def check(self, message):
        emit(event="checked", body=message.body.decode(), message_id=message.message_id)
        return TransactionResolution.COMMIT if self.answer == "commit" else TransactionResolution.ROLLBACK


def produce(endpoint, scenario):
    topic = scenario["topic"]
    checker = Checker(scenario.get("check_answer", "commit")) if scenario.get("transaction") else None
    producer = Producer(configuration(endpoint, scenario), (topic,), checker)
    producer.startup()
    try:
        for index in range(scenario.get("count", 1)):
            message = message_of(topic, index, scenario)
            try:
                if scenario.get("transaction"):
                    transaction = producer.begin_transaction()
                    receipt = producer.send(message, transaction)
                    resolution = scenario["transaction"]
                    if resolution == "commit":
                        transaction.commit()
                    elif resolution == "rollback":
                        transaction.rollback()
                else:
                    receipt = producer.send(message)
                emit(
                    event="sent",
                    body=message.body.decode(),
                    message_id=receipt.message_id,
                    offset=receipt.offset,
                )
            except Exception as error:  # noqa: BLE001 - reported to the test
                emit(event="send_failed", body=message.body.decode(), error=str(error))
        time.sleep(scenario.get("linger", 0))
    finally:
        producer.shutdown()


def received(message, **extra):
    emit(
        event="received",
        body=message.body.decode(),
        message_id=message.message_id,
        attempt=message.delivery_attempt,
        tag=message.tag,
        keys=sorted(message.keys),
        group=message.message_group,
        properties=dict(message.properties),
        topic=message.topic,
        **extra,
    )


def simple(endpoint, scenario):
    """Receive until ``count`` messages are acked (or ``seconds`` pass); ``nack_first``: the
    first delivery of each message is not acked (it comes back after ``invisible`` seconds);
    ``change_to``: the first delivery's invisible duration is changed to that many seconds;
    ``ack_only``: only these bodies are acked, and the run ends once ``count`` messages were
    received (a consumer that dies holding the others)."""
    topic = scenario["topic"]
    consumer = SimpleConsumer(
        configuration(endpoint, scenario),
        scenario["consumer_group"],
        {topic: FilterExpression(scenario.get("filter", "*"))},
        await_duration=scenario.get("await", 5),
    )
    consumer.startup()
    deadline = time.time() + scenario.get("seconds", 30)
    acked = seen = 0
    only = scenario.get("ack_only")
    try:
        while time.time() < deadline:
            if (seen if only is not None else acked) >= scenario.get("count", 1):
                break
            for message in consumer.receive(scenario.get("batch", 16), scenario.get("invisible", 15)):
                received(message)
                seen += 1
                if only is not None:
                    if message.body.decode() in only:
                        consumer.ack(message)
                        emit(event="acked", body=message.body.decode())
                    continue
                if message.delivery_attempt == 1 and scenario.get("change_to") is not None:
                    consumer.change_invisible_duration(message, scenario["change_to"])
                    emit(event="changed", body=message.body.decode())
                    continue
                if message.delivery_attempt == 1 and scenario.get("nack_first"):
                    continue
                consumer.ack(message)
                acked += 1
                emit(event="acked", body=message.body.decode())
    finally:
        consumer.shutdown()


class Listener(MessageListener):
    def __init__(self, failures):
        self.failures = failures
        self.lock = threading.Lock()

    def consume(self, message):
        received(message)
        return ConsumeResult.FAILURE if message.delivery_attempt <= self.failures else ConsumeResult.SUCCESS


def push(endpoint, scenario):
    topic = scenario["topic"]
    consumer = PushConsumer(
        configuration(endpoint, scenario),
        scenario["consumer_group"],
        Listener(scenario.get("failures", 0)),
        {topic: FilterExpression(scenario.get("filter", "*"))},
    )
    consumer.startup()
    try:
        time.sleep(scenario.get("seconds", 20))
    finally:
        consumer.shutdown()


def main():
    endpoint, scenario = sys.argv[1], json.loads(sys.argv[2])
    {"produce": produce, "simple": simple, "push": push}[scenario["kind"]](endpoint, scenario)
    emit(event="done")


if __name__ == "__main__":
    main()
