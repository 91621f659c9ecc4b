"""Trocket's public face: the command-line tool (and, as they land, the client SDK and admin
client). The broker itself is :mod:`kernel` plus :mod:`plugins`."""

__version__ = "0.1.0"
