"""TLS on the remoting and HA ports, configured as RocketMQ configures it.

A server runs in one of RocketMQ's three modes (``tls.server.mode``):

- ``disabled``: plain TCP only; a TLS handshake is read as a broken frame and the connection
  closed;
- ``permissive``: both. The first byte a client sends decides: ``0x16`` opens a TLS handshake
  record, while a plain RocketMQ frame starts with its length, whose top byte is 0 for any
  frame under 16 MiB (RocketMQ sniffs the same byte);
- ``enforcing``: TLS only; a plain client is refused and the refusal logged.

Clients (the SDK, the admin client, the broker's own connections to NameServers and masters)
speak TLS when given a client context. The broker's own connections (``tls.enable``) verify
the server's certificate only when asked (``tls.client.authServer``: RocketMQ's default is not
to); the SDK's :func:`trocket.client.tls.tls_context` verifies unless told not to. A server
asks for client certificates with ``tls.server.need.client.auth``.
"""

from __future__ import annotations

import enum
import logging
import ssl
from pathlib import Path

import attrs
import trio

log = logging.getLogger(__name__)

TLS_HANDSHAKE_RECORD = 0x16
"""The first byte of every TLS connection (a handshake record)."""
HANDSHAKE_TIMEOUT = 10.0
"""How long an accepted connection may take to send its first byte and finish a handshake
(a peer that connects and says nothing must not hold a task for ever)."""


class TlsMode(enum.Enum):
    DISABLED = "disabled"
    PERMISSIVE = "permissive"
    ENFORCING = "enforcing"


class ClientAuth(enum.Enum):
    NONE = "none"
    OPTIONAL = "optional"
    REQUIRE = "require"


class TlsConfigError(ValueError):
    """A certificate, key or trust file cannot be used; the message names the file."""


def server_context(
    cert_path: Path,
    key_path: Path,
    *,
    key_password: str | None = None,
    client_auth: ClientAuth = ClientAuth.NONE,
    trust_cert_path: Path | None = None,
) -> ssl.SSLContext:
    """A server context from PEM files.

    :raises TlsConfigError: a file is missing or not a usable certificate/key/trust store.
    """
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    _load_chain(context, cert_path, key_path, key_password)
    if client_auth is not ClientAuth.NONE:
        context.verify_mode = ssl.CERT_REQUIRED if client_auth is ClientAuth.REQUIRE else ssl.CERT_OPTIONAL
        _load_trust(context, trust_cert_path)
    return context


def client_context(
    *,
    verify_server: bool = True,
    trust_cert_path: Path | None = None,
    cert_path: Path | None = None,
    key_path: Path | None = None,
    key_password: str | None = None,
) -> ssl.SSLContext:
    """A client context. ``verify_server`` checks the server's certificate and name against
    ``trust_cert_path`` (PEM CA bundle) or the system's CAs; a client certificate is sent when
    ``cert_path`` is given (for servers with ``need.client.auth``).

    :raises TlsConfigError: a file is missing or unusable.
    """
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if verify_server:
        if trust_cert_path is not None:
            _load_trust(context, trust_cert_path)
    else:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if cert_path is not None:
        _load_chain(context, cert_path, key_path or cert_path, key_password)
    return context


def _load_chain(context: ssl.SSLContext, cert_path: Path, key_path: Path, password: str | None) -> None:
    for kind, path in (("certificate", cert_path), ("private key", key_path)):
        if not path.is_file():
            raise TlsConfigError(f"TLS {kind} file {path} does not exist")
    try:
        context.load_cert_chain(cert_path, key_path, password)
    except (ssl.SSLError, OSError) as error:
        raise TlsConfigError(
            f"TLS certificate {cert_path} with key {key_path} cannot be loaded: {error}"
        ) from None


def _load_trust(context: ssl.SSLContext, trust_path: Path | None) -> None:
    if trust_path is None:
        context.load_default_certs(ssl.Purpose.CLIENT_AUTH)
        return
    try:
        context.load_verify_locations(cafile=trust_path)
    except (ssl.SSLError, OSError) as error:
        raise TlsConfigError(f"TLS trust file {trust_path} cannot be loaded: {error}") from None


class ReplayStream(trio.abc.Stream):
    """A stream whose first ``receive_some`` returns bytes already read from it (the sniffed
    first chunk of a permissive port's plain connection)."""

    def __init__(self, first: bytes, stream: trio.abc.Stream) -> None:
        self._first = first
        self.transport_stream = stream

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        if self._first:
            data, self._first = self._first, b""
            if max_bytes is not None and len(data) > max_bytes:
                data, self._first = data[:max_bytes], data[max_bytes:]
            return data
        return await self.transport_stream.receive_some(max_bytes)

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self.transport_stream.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.transport_stream.wait_send_all_might_not_block()

    async def aclose(self) -> None:
        await self.transport_stream.aclose()


@attrs.frozen
class ServerTls:
    """How a listener treats what it accepts: :meth:`accept` turns an accepted socket into the
    stream to serve, or refuses it."""

    mode: TlsMode
    context: ssl.SSLContext | None = None

    def __attrs_post_init__(self) -> None:
        if self.mode is not TlsMode.DISABLED and self.context is None:
            raise ValueError(f"TLS mode {self.mode.value} needs a server context")

    async def accept(self, stream: trio.SocketStream, server: str, peer: str) -> trio.abc.Stream | None:
        """The stream to serve (TLS after a finished handshake, or plain), or ``None`` when the
        connection was refused or failed (logged; the socket is closed)."""
        if self.mode is TlsMode.DISABLED:
            return stream
        assert self.context is not None
        first = b""
        if self.mode is TlsMode.PERMISSIVE:
            with trio.move_on_after(HANDSHAKE_TIMEOUT):
                try:
                    first = await stream.receive_some(65536)
                except trio.BrokenResourceError:
                    pass
            if not first:
                await trio.aclose_forcefully(stream)
                return None
            if first[0] != TLS_HANDSHAKE_RECORD:
                return ReplayStream(first, stream)
        secure = trio.SSLStream(
            ReplayStream(first, stream) if first else stream, self.context, server_side=True
        )
        try:
            with trio.fail_after(HANDSHAKE_TIMEOUT):
                await secure.do_handshake()
        except (trio.BrokenResourceError, trio.TooSlowError) as error:
            reason = error.__cause__ or error
            if isinstance(reason, ssl.SSLError) and "WRONG_VERSION_NUMBER" in str(reason):
                reason = "a plain-text client on a port in TLS enforcing mode"
            log.warning("%s: TLS handshake with %s failed: %s", server, peer, reason or "timed out")
            await trio.aclose_forcefully(stream)
            return None
        return secure


async def open_client_stream(
    host: str, port: int, context: ssl.SSLContext | None
) -> tuple[trio.abc.Stream, trio.SocketStream]:
    """A connected stream to ``host:port`` (TLS after a finished handshake when ``context`` is
    given) and the socket under it (for its addresses).

    :raises OSError, trio.BrokenResourceError: the connection or the handshake failed.
    """
    socket_stream = await trio.open_tcp_stream(host, port)
    if context is None:
        return socket_stream, socket_stream
    secure = trio.SSLStream(socket_stream, context, server_hostname=host if context.check_hostname else None)
    try:
        await secure.do_handshake()
    except BaseException:
        await trio.aclose_forcefully(socket_stream)
        raise
    return secure, socket_stream
