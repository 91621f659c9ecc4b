"""The ``[broker]`` table's ``tls_*`` keys turned into what servers and clients use, with
errors that name the config file and the key (a broker with a broken TLS setting does not
start half-protected)."""

from __future__ import annotations

import ssl
from pathlib import Path

import attrs

from kernel.config.broker import BrokerConfig, Config
from kernel.errors import ConfigError
from wire.remoting.signature import SessionCredentials
from wire.remoting.tls import ClientAuth, ServerTls, TlsConfigError, TlsMode, client_context, server_context


@attrs.frozen
class ServerFiles:
    """The listeners' certificate, key and trust files, resolved against the config file."""

    mode: TlsMode
    cert: Path
    key: Path
    key_password: str | None
    trust: Path | None
    client_auth: ClientAuth


def server_files(config: Config) -> ServerFiles | None:
    """What ``server_tls`` builds its context from, for a server that is not ``ssl``'s (gRPC);
    ``None`` when ``tls_server_mode`` is ``disabled``.

    :raises ConfigError: a mode that needs a certificate has none.
    """
    broker = config.broker
    mode = TlsMode(broker.tls_server_mode)
    if mode is TlsMode.DISABLED:
        return None
    for key in ("tls_server_cert_path", "tls_server_key_path"):
        if getattr(broker, key) is None:
            raise ConfigError(
                config.source, f"[broker] {key}", f"required when tls_server_mode = {mode.value!r}"
            )
    return ServerFiles(
        mode,
        _path(config, broker.tls_server_cert_path),
        _path(config, broker.tls_server_key_path),
        broker.tls_server_key_password,
        _optional_path(config, broker.tls_server_trust_cert_path),
        ClientAuth(broker.tls_server_need_client_auth),
    )


def server_tls(config: Config) -> ServerTls | None:
    """The listeners' TLS, or ``None`` when ``tls_server_mode`` is ``disabled``.

    :raises ConfigError: a mode that needs a certificate has none, or a file is unusable.
    """
    files = server_files(config)
    if files is None:
        return None
    try:
        context = server_context(
            files.cert,
            files.key,
            key_password=files.key_password,
            client_auth=files.client_auth,
            trust_cert_path=files.trust,
        )
    except TlsConfigError as error:
        raise ConfigError(config.source, "[broker] tls_server_*", str(error)) from None
    return ServerTls(files.mode, context)


def client_tls(config: Config) -> ssl.SSLContext | None:
    """The context of the broker's own connections, or ``None`` unless ``tls_enable``.

    :raises ConfigError: a file is unusable.
    """
    broker = config.broker
    if not broker.tls_enable:
        return None
    try:
        return client_context(
            verify_server=broker.tls_client_auth_server,
            trust_cert_path=_optional_path(config, broker.tls_client_trust_cert_path),
            cert_path=_optional_path(config, broker.tls_client_cert_path),
            key_path=_optional_path(config, broker.tls_client_key_path),
            key_password=broker.tls_client_key_password,
        )
    except TlsConfigError as error:
        raise ConfigError(config.source, "[broker] tls_client_*", str(error)) from None


def inner_credentials(config: Config) -> SessionCredentials | None:
    """The ACL account the broker signs its own requests with, or ``None``.

    :raises ConfigError: one key of the pair is set without the other.
    """
    broker: BrokerConfig = config.broker
    access, secret = broker.inner_access_key, broker.inner_secret_key
    if not access and not secret:
        return None
    if not access or not secret:
        missing = "inner_secret_key" if access else "inner_access_key"
        raise ConfigError(config.source, f"[broker] {missing}", "the broker's ACL account needs both keys")
    return SessionCredentials(access, secret)


def _path(config: Config, path: Path | None) -> Path:
    assert path is not None
    if path.is_absolute() or config.source.startswith("<"):
        return path
    return Path(config.source).parent / path


def _optional_path(config: Config, path: Path | None) -> Path | None:
    return None if path is None else _path(config, path)
