"""The broker's request handlers, one module per concern; :func:`register_all` wires them."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from plugins.remoting.handlers import admin, assignment, consumer, pull, query, send, send_back
from plugins.remoting.handlers.common import RequestProblem, check_names
from wire.remoting import Connection, RemotingCommand, RequestCode, Router

if TYPE_CHECKING:
    from plugins.remoting.service import BrokerNetwork

NetHandler = Callable[["BrokerNetwork", Connection, RemotingCommand], Awaitable[RemotingCommand | None]]

HANDLERS: dict[int, NetHandler] = {
    RequestCode.SEND_MESSAGE: send.handle_send,
    RequestCode.SEND_MESSAGE_V2: send.handle_send,
    RequestCode.SEND_BATCH_MESSAGE: send.handle_send,
    RequestCode.PULL_MESSAGE: pull.handle_pull,
    RequestCode.QUERY_MESSAGE: query.query_message,
    RequestCode.VIEW_MESSAGE_BY_ID: query.view_message,
    RequestCode.HEART_BEAT: consumer.heartbeat,
    RequestCode.UNREGISTER_CLIENT: consumer.unregister_client,
    RequestCode.GET_CONSUMER_LIST_BY_GROUP: consumer.consumer_list,
    RequestCode.LOCK_BATCH_MQ: consumer.lock_batch,
    RequestCode.UNLOCK_BATCH_MQ: consumer.unlock_batch,
    RequestCode.QUERY_CONSUMER_OFFSET: consumer.query_offset,
    RequestCode.UPDATE_CONSUMER_OFFSET: consumer.update_offset,
    RequestCode.GET_MAX_OFFSET: consumer.max_offset,
    RequestCode.GET_MIN_OFFSET: consumer.min_offset,
    RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: consumer.search_offset,
    RequestCode.GET_EARLIEST_MSG_STORETIME: consumer.earliest_store_time,
    RequestCode.CONSUMER_SEND_MSG_BACK: send_back.handle_send_back,
    RequestCode.UPDATE_AND_CREATE_TOPIC: admin.update_topic,
    RequestCode.UPDATE_AND_CREATE_TOPIC_LIST: admin.update_topic_list,
    RequestCode.DELETE_TOPIC_IN_BROKER: admin.delete_topic,
    RequestCode.GET_ALL_TOPIC_CONFIG: admin.all_topic_config,
    RequestCode.GET_TOPIC_CONFIG: admin.topic_config,
    RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: admin.update_group,
    RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: admin.all_groups,
    RequestCode.GET_SUBSCRIPTIONGROUP_CONFIG: admin.group_config,
    RequestCode.DELETE_SUBSCRIPTIONGROUP: admin.delete_group,
    RequestCode.GET_ALL_CONSUMER_OFFSET: admin.all_consumer_offsets,
    RequestCode.GET_ALL_DELAY_OFFSET: admin.all_delay_offsets,
    RequestCode.GET_BROKER_RUNTIME_INFO: admin.runtime_info,
    RequestCode.GET_BROKER_HA_STATUS: admin.ha_status,
    RequestCode.GET_CONSUME_STATS: admin.consume_stats,
    RequestCode.GET_TOPIC_STATS_INFO: admin.topic_stats,
    RequestCode.GET_CONSUMER_CONNECTION_LIST: admin.consumer_connections,
    RequestCode.GET_PRODUCER_CONNECTION_LIST: admin.producer_connections,
    RequestCode.GET_BROKER_CONSUME_STATS: admin.broker_consume_stats,
    RequestCode.GET_BROKER_CONFIG: admin.broker_config,
    RequestCode.GET_CONSUMER_RUNNING_INFO: admin.consumer_running_info,
    RequestCode.VIEW_BROKER_STATS_DATA: admin.view_broker_stats,
    RequestCode.QUERY_TOPIC_CONSUME_BY_WHO: admin.topic_consumers,
    RequestCode.UPDATE_BROKER_CONFIG: admin.update_broker_config,
    RequestCode.QUERY_ASSIGNMENT: assignment.query_assignment,
    RequestCode.SET_MESSAGE_REQUEST_MODE: assignment.set_message_request_mode,
}


GROUPED = (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2)
"""Codes whose requests, read from one connection at once, are handled together
(:func:`send.handle_send_group`: one store append for all of them). Batch sends are not: each
is a batch already, and answering a group of them only when the last is stored would stall a
pipelining producer (measured: 20 % less throughput)."""


INLINE = (
    RequestCode.GET_CONSUMER_LIST_BY_GROUP,
    RequestCode.LOCK_BATCH_MQ,
    RequestCode.UNLOCK_BATCH_MQ,
    RequestCode.QUERY_CONSUMER_OFFSET,
    RequestCode.UPDATE_CONSUMER_OFFSET,
    RequestCode.GET_MAX_OFFSET,
    RequestCode.GET_MIN_OFFSET,
    RequestCode.GET_TOPIC_CONFIG,
)
"""Handlers that never wait for anything but the CPU: run in the connection's read loop, with
their answers written together (``./run bench remoting``: 1.4-1.7x the round trips of a task
per request with 64 in flight, 8 against 19 µs of server CPU each). Sends are not among them,
even when puts never wait (async flush, no replica): measured in ``bench produce_consume``,
answering a receive's sends only once all of them are stored stalls pipelining producers, as
grouping batch sends did (docs/performance.md, item 5). A send alone in its receive is inline
when puts never wait (``SENDS`` below)."""


SENDS = (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE)

CLEANUPS = (RequestCode.DELETE_SUBSCRIPTIONGROUP, RequestCode.DELETE_TOPIC_IN_BROKER)
"""Requests that take any name: an operator must be able to remove a junk group or topic that
an older version let in."""


def register_all(router: Router, net: BrokerNetwork) -> None:
    # A send alone in its receive (one in flight) is answered from the read loop when the put
    # waits for nothing (async flush, no replica): no task, no scheduler pass between the
    # append and the answer (single-message round trip, docs/performance.md, sixth step). When
    # puts wait (sync flush, a replica), only while nothing else of the connection is in
    # flight: the client then waits for this answer before its next request anyway.
    lone_sends = net.runtime.puts_acknowledged_at_once
    for code, handler in HANDLERS.items():
        router.register(
            code,
            functools.partial(_answer_problems, handler, net, validate_names=code not in CLEANUPS),
            inline=code in INLINE,
            inline_alone=lone_sends and code in SENDS,
            inline_idle=not lone_sends and code in SENDS,
        )
    sends = functools.partial(send.handle_send_group, net)
    for code in GROUPED:
        router.register_group(code, sends)
    across = functools.partial(send.handle_sends_across, net)
    for code in SENDS:
        router.register_across(code, across)


async def _answer_problems(
    handler: NetHandler,
    net: BrokerNetwork,
    connection: Connection,
    request: RemotingCommand,
    *,
    validate_names: bool,
) -> RemotingCommand | None:
    """A handler raises :class:`RequestProblem` for a bad request; it is answered here with the
    problem's own code and remark (anything else is the router's SYSTEM_ERROR). Group names in
    the header are checked first, for every handler (bodies are checked by their handlers)."""
    try:
        if validate_names:
            check_names(request)
        return await handler(net, connection, request)
    except RequestProblem as problem:
        return problem.response_to(request)
