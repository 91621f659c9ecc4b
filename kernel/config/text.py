"""Reading a configuration file's text, with an error that says where it is not UTF-8."""

from __future__ import annotations

from pathlib import Path

from kernel.errors import ConfigError


def read_config_text(path: Path) -> str:
    """The file's text, decoded as UTF-8.

    :raises ConfigError: unreadable, or not UTF-8: the error gives the byte offset, line and
        column of the first bad byte, so a file saved as Latin-1 or UTF-16 is found at once.
    """
    source = str(path)
    try:
        data = path.read_bytes()
    except OSError as error:
        raise ConfigError(source, None, f"cannot read: {error.strerror}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        column = error.start - (data.rfind(b"\n", 0, error.start) + 1) + 1
        raise ConfigError(
            source,
            None,
            f"not UTF-8: byte 0x{data[error.start]:02x} at offset {error.start} (line {line}, "
            f"column {column}) {error.reason}; save the file as UTF-8",
        ) from None
