"""What a command group does when it is given without a subcommand."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable


def list_subcommands(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    """A handler that prints ``parser``'s help (which lists its subcommands) and exits with 2:
    ``trocket admin`` alone shows what it can do instead of "the following arguments are
    required"."""

    def handler(_args: argparse.Namespace) -> int:
        parser.print_help(sys.stderr)
        return 2

    return handler
