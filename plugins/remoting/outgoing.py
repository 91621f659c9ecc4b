"""How the broker's own requests travel: registration with the NameServers and a slave's
metadata sync from its master go over TLS when ``tls_enable`` is set and are signed with the
broker's ACL account when it has one, so both work against servers that demand them."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import attrs

from wire.remoting import RemotingClient
from wire.remoting.signature import SessionCredentials


@attrs.frozen
class OutgoingConnections:
    tls: ssl.SSLContext | None = None
    credentials: SessionCredentials | None = None

    @asynccontextmanager
    async def open(self) -> AsyncIterator[RemotingClient]:
        async with RemotingClient.open(credentials=self.credentials, tls=self.tls) as client:
            yield client
