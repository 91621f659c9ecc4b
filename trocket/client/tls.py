"""Whether and how a client speaks TLS: the context it was given, else the environment's
(``TROCKET_TLS=true``, ``TROCKET_TLS_CA_FILE``), else plain TCP (brokers in ``disabled`` or
``permissive`` mode serve both)."""

from __future__ import annotations

import os
import ssl
from pathlib import Path

from trocket.client.errors import ClientError
from wire.remoting.tls import TlsConfigError, client_context

ENV_TLS = "TROCKET_TLS"
ENV_TLS_CA_FILE = "TROCKET_TLS_CA_FILE"


def tls_context(
    ca_file: str | Path | None = None,
    *,
    verify_server: bool = True,
    cert_file: str | Path | None = None,
    key_file: str | Path | None = None,
) -> ssl.SSLContext:
    """A client TLS context. The server's certificate is checked against ``ca_file`` (a PEM
    bundle; for a self-signed broker, its certificate) or the system's CAs, and its name
    against the address connected to, unless ``verify_server`` is false. ``cert_file`` and
    ``key_file`` present a client certificate (brokers with ``need.client.auth``).

    :raises ClientError: a file is missing or unusable (the message names it).
    """
    try:
        return client_context(
            verify_server=verify_server,
            trust_cert_path=Path(ca_file) if ca_file else None,
            cert_path=Path(cert_file) if cert_file else None,
            key_path=Path(key_file) if key_file else None,
        )
    except TlsConfigError as error:
        raise ClientError(str(error)) from None


def resolve_tls(given: ssl.SSLContext | bool | None = None) -> ssl.SSLContext | None:
    """``given`` (``True``: verify against the system's CAs; ``False``: plain TCP), else the
    environment's choice, else ``None`` (plain TCP).

    :raises ClientError: ``TROCKET_TLS`` is not true/false, or the CA file is unusable.
    """
    if isinstance(given, ssl.SSLContext):
        return given
    wanted, ca_file = tls_from_environment()
    if given is not None:
        wanted = given
    return tls_context(ca_file) if wanted else None


def tls_from_environment() -> tuple[bool, str | None]:
    """Whether the environment asks for TLS, and the CA file it names: ``TROCKET_TLS=true``,
    or ``TROCKET_TLS_CA_FILE`` alone (unless ``TROCKET_TLS=false``).

    :raises ClientError: ``TROCKET_TLS`` is not true/false.
    """
    ca_file = os.environ.get(ENV_TLS_CA_FILE) or None
    flag = os.environ.get(ENV_TLS, "").strip().lower()
    if flag not in ("", "true", "false"):
        raise ClientError(f"{ENV_TLS} must be true or false, got {os.environ[ENV_TLS]!r}")
    return flag == "true" or (ca_file is not None and flag != "false"), ca_file
