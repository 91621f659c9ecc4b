"""The console's ASGI application: one HTML page, its script and stylesheet, and a JSON API.

Starlette runs on anyio, so the same app serves from the broker's trio loop (the console
plugin's service) and from ``trocket console``; hypercorn's trio worker serves it
(``plugins/console/server.py``). The page is plain HTML with a hand-written script: no build
chain, nothing downloaded at run time, every asset ships in the package.

Errors are answers, not tracebacks: a bad field is 400 with the reason, an error the cluster
gave (unknown topic, broker down) is 502 with its remark, anything else is 500 with the error's
one-line text (the traceback goes to the log). Request bodies are read only up to ``max_body``
(413 past it, judged by ``Content-Length`` before reading when the client sends one) and parsed
with orjson, which refuses what Python's ``json`` lets through: non-finite numbers (``1e999``),
lone surrogates, and nesting deeper than 1024 levels.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from kernel.errors import TrocketError
from plugins.console.api import ConsoleApi, ConsoleError, whole_number
from trocket.admin import AdminError
from wire.remoting import ResponseCode

log = logging.getLogger(__name__)
STATIC = Path(__file__).parent / "static"
DEFAULT_MAX_BODY = 1 << 20

Endpoint = Callable[[Request], Awaitable[Any]]


def json_endpoint(handler: Endpoint) -> Callable[[Request], Awaitable[Response]]:
    """``handler``'s value as JSON, or ``{"error": ...}`` with a status that says whose fault."""

    async def endpoint(request: Request) -> Response:
        try:
            return JSONResponse(await handler(request))
        except BodyTooLarge as error:
            return JSONResponse({"error": str(error)}, status_code=413)
        except ConsoleError as error:
            return JSONResponse({"error": str(error)}, status_code=400)
        except ClientDisconnect:
            log.info(
                "console: %s %s: the client left before sending its body", request.method, request.url.path
            )
            return _NoAnswer()
        except AdminError as error:
            if error.code == ResponseCode.NO_PERMISSION:  # ACL is on: the page asks for a key
                return JSONResponse({"error": str(error), "needsKey": True}, status_code=403)
            return JSONResponse({"error": str(error)}, status_code=502)
        except (TrocketError, OSError) as error:  # the cluster's answer, or no answer at all
            return JSONResponse({"error": str(error) or type(error).__name__}, status_code=502)
        except Exception as error:  # the page shows a sentence; the log keeps the traceback
            log.exception("console: %s %s failed", request.method, request.url.path)
            return JSONResponse({"error": f"{type(error).__name__}: {error}"}, status_code=500)

    return endpoint


class _NoAnswer(Response):
    """Nothing is sent: the client has gone (answering it raced hypercorn's own close of the
    stream and logged a traceback)."""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        return None


class BodyTooLarge(ConsoleError):
    """A request body over the console's ``max_body`` (answered 413)."""


async def _body(request: Request, limit: int) -> bytes:
    """The request body, read only while it stays within ``limit`` bytes."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge(f"the request body is {int(declared)} bytes; the console takes at most {limit}")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(f"the request body is over {limit} bytes, the most the console takes")
        chunks.append(chunk)
    return b"".join(chunks)


async def _fields(request: Request, limit: int) -> dict[str, Any]:
    try:
        value = orjson.loads(await _body(request, limit) or b"{}")
    except orjson.JSONDecodeError as error:
        raise ConsoleError(f"the request body is not JSON: {error}") from None
    if not isinstance(value, dict):
        raise ConsoleError("the request body must be a JSON object")
    return value


def console_app(api: ConsoleApi, *, max_body: int = DEFAULT_MAX_BODY) -> Starlette:
    """The app over ``api`` (one admin client, one cluster); bodies up to ``max_body`` bytes."""

    async def fields_of(request: Request) -> dict[str, Any]:
        return await _fields(request, max_body)

    async def cluster(request: Request) -> Any:
        return await api.cluster()

    async def topics(request: Request) -> Any:
        return await api.topics(request.query_params.get("kind", ""), request.query_params.get("q", ""))

    async def topic(request: Request) -> Any:
        return await api.topic(request.path_params["topic"])

    async def create_topic(request: Request) -> Any:
        return await api.update_topic(await fields_of(request))

    async def delete_topic(request: Request) -> Any:
        return await api.delete_topic(request.path_params["topic"])

    async def send(request: Request) -> Any:
        return await api.send_test_message(request.path_params["topic"], await fields_of(request))

    async def groups(request: Request) -> Any:
        return await api.groups(request.query_params.get("q", ""))

    async def group(request: Request) -> Any:
        return await api.group(request.path_params["group"])

    async def reset(request: Request) -> Any:
        return await api.reset_offset(request.path_params["group"], await fields_of(request))

    async def delete_group(request: Request) -> Any:
        return await api.delete_group(request.path_params["group"])

    async def messages(request: Request) -> Any:
        params = request.query_params
        if params.get("begin") or params.get("end"):
            begin = _query_whole(params.get("begin"), "begin")
            end = _query_whole(params.get("end"), "end")
            return await api.messages_by_time(params.get("topic", ""), begin, end)
        if params.get("trace"):
            return await api.trace(params.get("msgId", ""), params.get("topic", ""))
        if params.get("msgTrace"):
            return await api.message_trace(params.get("msgId", ""), params.get("traceTopic", ""))
        if params.get("msgId"):
            return [await api.message_by_id(params["msgId"], params.get("topic", ""))]
        return await api.messages_by_key(params.get("topic", ""), params.get("key", ""))

    async def dead_letters(request: Request) -> Any:
        return await api.dead_letters(request.path_params["group"])

    async def resend(request: Request) -> Any:
        fields = await fields_of(request)
        return await api.resend_dead_letter(request.path_params["group"], str(fields.get("msgId") or ""))

    async def schedule(request: Request) -> Any:
        return await api.schedule()

    async def session(request: Request) -> Any:
        return api.signed_in_as()

    async def sign_in(request: Request) -> Any:
        return await api.sign_in(await fields_of(request))

    async def sign_out(request: Request) -> Any:
        return api.sign_out()

    async def page(request: Request) -> Response:
        return FileResponse(STATIC / "index.html")

    routes = [
        Route("/", page),
        Route("/api/session", json_endpoint(session)),
        Route("/api/session", json_endpoint(sign_in), methods=["POST"]),
        Route("/api/session", json_endpoint(sign_out), methods=["DELETE"]),
        Route("/api/cluster", json_endpoint(cluster)),
        Route("/api/topics", json_endpoint(topics)),
        Route("/api/topics", json_endpoint(create_topic), methods=["POST"]),
        Route("/api/topics/{topic}", json_endpoint(topic)),
        Route("/api/topics/{topic}", json_endpoint(delete_topic), methods=["DELETE"]),
        Route("/api/topics/{topic}/messages", json_endpoint(send), methods=["POST"]),
        Route("/api/groups", json_endpoint(groups)),
        Route("/api/groups/{group}", json_endpoint(group)),
        Route("/api/groups/{group}", json_endpoint(delete_group), methods=["DELETE"]),
        Route("/api/groups/{group}/reset", json_endpoint(reset), methods=["POST"]),
        Route("/api/messages", json_endpoint(messages)),
        Route("/api/dlq/{group}", json_endpoint(dead_letters)),
        Route("/api/dlq/{group}/resend", json_endpoint(resend), methods=["POST"]),
        Route("/api/schedule", json_endpoint(schedule)),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    return Starlette(routes=routes)


def _query_whole(value: str | None, name: str) -> int:
    return whole_number(value or "", name, "milliseconds since the epoch")
