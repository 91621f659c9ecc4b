"""Which credentials a client signs with: the ones it was given, else the environment's
(``TROCKET_ACCESS_KEY`` and ``TROCKET_SECRET_KEY``), else none (the broker has ACL off)."""

from __future__ import annotations

import os

from trocket.client.errors import ClientError
from wire.remoting.signature import SessionCredentials

ENV_ACCESS_KEY = "TROCKET_ACCESS_KEY"
ENV_SECRET_KEY = "TROCKET_SECRET_KEY"


def resolve_credentials(
    given: SessionCredentials | None = None,
    *,
    access_key: str | None = None,
    secret_key: str | None = None,
) -> SessionCredentials | None:
    """``given``, else ``access_key``/``secret_key``, else the environment's pair, else ``None``.

    :raises ClientError: an access key without its secret, or a secret without its key.
    """
    if given is not None:
        return given
    access = access_key or os.environ.get(ENV_ACCESS_KEY, "")
    secret = secret_key or os.environ.get(ENV_SECRET_KEY, "")
    if not access and not secret:
        return None
    if not access or not secret:
        missing = "secret key" if access else "access key"
        raise ClientError(
            f"ACL credentials need both keys: the {missing} is missing "
            f"(options, or {ENV_ACCESS_KEY} and {ENV_SECRET_KEY})"
        )
    return SessionCredentials(access, secret)
