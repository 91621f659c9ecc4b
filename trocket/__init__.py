"""Trocket's public face: the client SDK (``trocket.Producer``; everything in
:mod:`trocket.client` is importable from here), the admin client and the command-line tool.
The broker itself is :mod:`kernel` plus :mod:`plugins`."""

from trocket.client import *  # noqa: F403  (the SDK's names, listed once in trocket.client)
from trocket.client import __all__ as _sdk_names

__version__ = "0.1.0"
__all__ = list(_sdk_names)
