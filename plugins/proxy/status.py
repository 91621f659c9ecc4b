"""RocketMQ 5's business status codes, and how remoting answers map onto them.

A gRPC call that reaches its handler always ends with gRPC status OK; what went wrong is a
``Status{code, message}`` inside the response, as RocketMQ's proxy does. Handlers raise
:class:`ProxyProblem` for a refused request.
"""

from __future__ import annotations

from wire.grpc_v2 import definition_pb2 as pb
from wire.remoting import ResponseCode

Code = pb.Code


class ProxyProblem(Exception):
    """A request answered with RocketMQ status ``code`` and ``message``."""

    def __init__(self, code: pb.Code, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def status(self) -> pb.Status:
        return pb.Status(code=self.code, message=self.message)


def ok(message: str = "OK") -> pb.Status:
    return pb.Status(code=Code.OK, message=message)


_REMOTING: dict[int, pb.Code] = {
    ResponseCode.SUCCESS: Code.OK,
    ResponseCode.FLUSH_DISK_TIMEOUT: Code.MASTER_PERSISTENCE_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: Code.SLAVE_PERSISTENCE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: Code.HA_NOT_AVAILABLE,
    ResponseCode.SERVICE_NOT_AVAILABLE: Code.INTERNAL_SERVER_ERROR,
    ResponseCode.SYSTEM_BUSY: Code.TOO_MANY_REQUESTS,
    ResponseCode.MESSAGE_ILLEGAL: Code.MESSAGE_CORRUPTED,
    ResponseCode.NO_PERMISSION: Code.FORBIDDEN,
    ResponseCode.TOPIC_NOT_EXIST: Code.TOPIC_NOT_FOUND,
    ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST: Code.CONSUMER_GROUP_NOT_FOUND,
    ResponseCode.SUBSCRIPTION_PARSE_FAILED: Code.ILLEGAL_FILTER_EXPRESSION,
    ResponseCode.INVALID_PARAMETER: Code.BAD_REQUEST,
    ResponseCode.NO_MESSAGE: Code.INVALID_RECEIPT_HANDLE,
    ResponseCode.SYSTEM_ERROR: Code.INTERNAL_SERVER_ERROR,
}


def from_remoting(code: int) -> pb.Code:
    """The RocketMQ 5 code for a remoting response code (unknown ones are internal errors)."""
    return _REMOTING.get(code, Code.INTERNAL_SERVER_ERROR)


def problem_of(code: int, remark: str | None, what: str) -> ProxyProblem:
    return ProxyProblem(from_remoting(code), f"{what}: {remark or f'remoting code {code}'}")
