"""The options every command that talks to a cluster shares: the ACL account it signs with and
whether it speaks TLS (``trocket admin``, ``produce``, ``consume`` and ``export``).

The account's names are ``--authKey``/``--authSecret`` because mqadmin's ACL commands already
use ``--accessKey``/``--secretKey`` for the account they edit. A secret on a command line is
visible to other local users in the process list: ``TROCKET_ACCESS_KEY`` and
``TROCKET_SECRET_KEY`` are the better place for it.
"""

from __future__ import annotations

import argparse
import ssl

from trocket.client.credentials import ENV_ACCESS_KEY, ENV_SECRET_KEY, resolve_credentials
from trocket.client.tls import ENV_TLS, ENV_TLS_CA_FILE, resolve_tls, tls_context
from wire.remoting.signature import SessionCredentials


def add_connection_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("ACL and TLS")
    group.add_argument(
        "--authKey", dest="auth_key", default=None, help=f"ACL access key to sign with (or {ENV_ACCESS_KEY})"
    )
    group.add_argument(
        "--authSecret", dest="auth_secret", default=None, help=f"its secret key (better: {ENV_SECRET_KEY})"
    )
    group.add_argument(
        "--tls",
        action="store_true",
        default=None,
        help=f"connect with TLS, verifying the server (or {ENV_TLS})",
    )
    group.add_argument(
        "--tlsCaFile",
        dest="tls_ca_file",
        default=None,
        help=f"with TLS: the CA (or self-signed certificate) servers must chain to (or {ENV_TLS_CA_FILE})",
    )


def credentials_of(args: argparse.Namespace) -> SessionCredentials | None:
    """:raises ClientError: one key without the other."""
    return resolve_credentials(access_key=args.auth_key, secret_key=args.auth_secret)


def tls_of(args: argparse.Namespace) -> ssl.SSLContext | None:
    """:raises ClientError: an unusable CA file or ``TROCKET_TLS`` value."""
    if args.tls_ca_file:
        return tls_context(args.tls_ca_file)
    return resolve_tls(True if args.tls else None)
