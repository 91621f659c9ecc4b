"""The faulty_disk test plugin's control file: the faults it names, and a clear error naming
the file for anything else."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernel.errors import ConfigError
from trocket.chaos.faulty_disk import DiskFault, control_file


def test_the_control_file_sits_beside_the_data_directory():
    assert control_file(Path("/data/r1")) == Path("/data/r1.disk-fault")


@pytest.mark.parametrize(
    ("text", "fault"),
    [
        ("", DiskFault()),
        ("\n", DiskFault()),
        ("delay 8", DiskFault(delay=8.0)),
        ("fail\n", DiskFault(fail=True)),
    ],
)
def test_faults_parse(text, fault):
    assert DiskFault.parse(text, Path("r1.disk-fault")) == fault


@pytest.mark.parametrize("text", ["slow", "delay", "delay soon", "fail now"])
def test_anything_else_is_refused_naming_the_file(text):
    with pytest.raises(ConfigError, match="r1.disk-fault"):
        DiskFault.parse(text, Path("r1.disk-fault"))
