"""Administration of a running cluster (what RocketMQ's mqadmin does), as a Python API."""

from trocket.admin.client import AdminClient, AdminError

__all__ = ["AdminClient", "AdminError"]
