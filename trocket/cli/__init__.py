"""``trocket``: run a broker/NameServer, produce and consume, administer, inspect plugins and
check configuration files.

Every expected failure (bad config, unknown plugin, locked store) is printed as one line
``trocket: error: ...`` with exit status 2; tracebacks are for bugs only.
"""

from __future__ import annotations

import argparse
import errno
import logging
import platform
import sys
from collections.abc import Sequence

from kernel.errors import TrocketError
from trocket.cli import admin_commands, client_commands, inspect_commands, plugin_commands, run_commands


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trocket", description="Trocket: RocketMQ rebuilt as a trio + pluggy microkernel."
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument(
        "--version", action=_Version, nargs=0, help="print the version, the Python and the codec, and exit"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    version = sub.add_parser("version", help="print the version, the Python and the codec in use")
    version.set_defaults(handler=lambda args: print(version_text()))
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
    except OSError as error:
        line = environment_problem(error)
        if line is None:
            raise
        print(f"trocket: error: {line}", file=sys.stderr)
        return 2
    except BaseExceptionGroup as group:
        # Errors raised inside the broker's nurseries arrive grouped; expected ones (a locked
        # store, a bad file, a port in use) still deserve one clear line each, not a traceback.
        expected, rest = group.split(
            lambda e: isinstance(e, TrocketError) or environment_problem(e) is not None
        )
        if expected is None or rest is not None:
            raise
        for error in _leaves(expected):
            print(f"trocket: error: {environment_problem(error) or error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # Output piped into `head` and closed early: not an error worth a traceback.
        sys.stderr.close()
        return 0


class _Version(argparse.Action):
    """``--version`` without argparse's line wrapping."""

    def __call__(self, parser: argparse.ArgumentParser, *args: object, **kwargs: object) -> None:
        print(version_text())
        parser.exit()


def version_text() -> str:
    from trocket import __version__
    from trocket.cli.assembly import codec_text

    return f"trocket {__version__} (Python {platform.python_version()}, batch codec: {codec_text()})"


def environment_problem(error: BaseException) -> str | None:
    """One line for what the machine refuses (a port in use, a path without permission), or
    ``None`` for anything else (a bug keeps its traceback)."""
    if not isinstance(error, OSError):
        return None
    if error.errno == errno.EADDRINUSE:
        return (
            f"a port this command listens on is taken (another broker, NameServer or proxy?): stop it "
            f"or choose other ports ({error})"
        )
    if error.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        where = f" {error.filename}" if error.filename else ""
        return f"permission denied{where}: give this user access to it or choose another path ({error})"
    if error.errno == errno.EADDRNOTAVAIL:
        return f"cannot listen on that address: it is not one of this host's ({error})"
    return None


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    out: list[BaseException] = []
    for error in group.exceptions:
        out.extend(_leaves(error) if isinstance(error, BaseExceptionGroup) else [error])
    return out


if __name__ == "__main__":
    sys.exit(main())
