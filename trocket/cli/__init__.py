"""``trocket``: run a broker/NameServer, produce and consume, administer, inspect plugins and
check configuration files.

Every expected failure (bad config, unknown plugin, locked store) is printed as one line
``trocket: error: ...`` with exit status 2; tracebacks are for bugs only.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from kernel.errors import TrocketError
from trocket.cli import admin_commands, client_commands, inspect_commands, plugin_commands, run_commands


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trocket", description="Trocket: RocketMQ rebuilt as a trio + pluggy microkernel."
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    run_commands.add_parsers(sub)
    inspect_commands.add_parsers(sub)
    admin_commands.add_parsers(sub)
    client_commands.add_parsers(sub)
    plugin_commands.add_parsers(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        return int(args.handler(args) or 0)
    except TrocketError as error:
        print(f"trocket: error: {error}", file=sys.stderr)
        return 2
    except BaseExceptionGroup as group:
        # Errors raised inside the broker's nurseries arrive grouped; expected ones (a locked
        # store, a bad file) still deserve one clear line each, not a traceback.
        expected, rest = group.split(TrocketError)
        if expected is None or rest is not None:
            raise
        for error in _leaves(expected):
            print(f"trocket: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # Output piped into `head` and closed early: not an error worth a traceback.
        sys.stderr.close()
        return 0


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    out: list[BaseException] = []
    for error in group.exceptions:
        out.extend(_leaves(error) if isinstance(error, BaseExceptionGroup) else [error])
    return out


if __name__ == "__main__":
    sys.exit(main())
