"""Argument types of ``trocket admin`` commands, as mqadmin writes them."""

from __future__ import annotations

import argparse
import datetime
import time


def boolean_arg(text: str) -> bool:
    if text.lower() in ("true", "1", "yes"):
        return True
    if text.lower() in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def timestamp_arg(text: str) -> int:
    """mqadmin's ``-s``: milliseconds since the epoch, ``now``, or ``yyyy-MM-dd#HH:mm:ss:SSS``
    (local time)."""
    if text == "now":
        return int(time.time() * 1000)
    if text.isdigit():
        return int(text)
    try:
        moment = datetime.datetime.strptime(text, "%Y-%m-%d#%H:%M:%S:%f")
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not milliseconds, 'now' or yyyy-MM-dd#HH:mm:ss:SSS"
        ) from None
    return int(moment.timestamp() * 1000)
