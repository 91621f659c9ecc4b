"""POP requests as a RocketMQ 5 remoting client sends them, and reading their answers."""

from __future__ import annotations

import attrs

from wire import record
from wire.pop_receipt import ReceiptHandle, receipt_handles
from wire.remoting import RemotingCommand, RequestCode

BROKER_NAME = "broker-a"


def pop_request(
    group: str,
    topic: str,
    *,
    queue_id: int = -1,
    max_msgs: int = 32,
    invisible_ms: int = 60_000,
    poll_ms: int = 0,
    exp: str = "*",
    order: bool = False,
    init_mode: int = 0,
) -> RemotingCommand:
    return RemotingCommand.request(
        RequestCode.POP_MESSAGE,
        {
            "consumerGroup": group,
            "topic": topic,
            "queueId": queue_id,
            "maxMsgNums": max_msgs,
            "invisibleTime": invisible_ms,
            "pollTime": poll_ms,
            "bornTime": 0,
            "initMode": init_mode,
            "expType": "TAG",
            "exp": exp,
            "order": "true" if order else "false",
        },
    )


@attrs.frozen
class Popped:
    message: record.StoredMessage
    handle: ReceiptHandle

    @property
    def body(self) -> bytes:
        return self.message.body


def popped(response: RemotingCommand, broker_name: str = BROKER_NAME) -> list[Popped]:
    if response.code != 0:
        return []
    messages = record.decode_records(response.body)
    handles = receipt_handles(
        response.ext,
        [(m.topic, m.queue_id, m.queue_offset, m.properties) for m in messages],
        broker_name,
    )
    return [Popped(m, h) for m, h in zip(messages, handles, strict=True)]


def _handle_header(group: str, item: Popped, handle: ReceiptHandle | None) -> dict[str, object]:
    handle = handle or item.handle
    return {
        "consumerGroup": group,
        "topic": item.message.topic,
        "queueId": handle.queue_id,
        "extraInfo": handle.format(),
        "offset": handle.queue_offset,
    }


def ack_request(group: str, item: Popped, *, handle: ReceiptHandle | None = None) -> RemotingCommand:
    return RemotingCommand.request(RequestCode.ACK_MESSAGE, _handle_header(group, item, handle))


def change_request(
    group: str, item: Popped, invisible_ms: int, *, handle: ReceiptHandle | None = None
) -> RemotingCommand:
    header = {**_handle_header(group, item, handle), "invisibleTime": invisible_ms}
    return RemotingCommand.request(RequestCode.CHANGE_MESSAGE_INVISIBLETIME, header)
