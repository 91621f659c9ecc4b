"""Every ``--help`` works, command groups list their commands, and broken config files get one
clear report (issue 23: ``trocket admin --help`` crashed on a ``%`` in a help string, a non-UTF-8
file gave a traceback, and ``config check`` stopped at the first error)."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from trocket.cli import build_parser

REPO = Path(__file__).resolve().parents[2]


def trocket(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "trocket", *args], cwd=REPO, capture_output=True, text=True, timeout=60
    )


def _command_paths(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    paths = [prefix]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                paths += _command_paths(child, (*prefix, name))
    return paths


COMMANDS = _command_paths(build_parser())


def test_the_walk_finds_every_level():
    assert ("admin", "queryDlqMsg") in COMMANDS and ("config", "check") in COMMANDS
    assert len(COMMANDS) >= 30


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(p) or "trocket")
@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_every_help_prints_usage_and_exits_zero(path, flag, capsys):
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args([*path, flag])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: trocket") and "Traceback" not in out


def test_admin_help_through_the_real_command_shows_the_dlq_commands():
    result = trocket("admin", "--help")
    assert result.returncode == 0, result.stderr
    assert "queryDlqMsg" in result.stdout and "%DLQ%<group>" in result.stdout


@pytest.mark.parametrize(("group", "listed"), [("admin", "clusterList"), ("config", "check")])
def test_a_command_group_alone_lists_its_commands(group, listed):
    result = trocket(group)
    assert result.returncode == 2
    assert listed in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("suffix", [".toml", ".properties"])
def test_a_config_file_that_is_not_utf8_is_named_with_the_byte_offset(tmp_path, suffix):
    path = tmp_path / f"broker{suffix}"
    text = '[broker]\nbroker_name = "caf\xe9"\n' if suffix == ".toml" else "brokerName=caf\xe9\n"
    path.write_bytes(text.encode("latin-1"))
    for args in (("config", "check", str(path)), ("broker", "-c", str(path))):
        result = trocket(*args)
        assert result.returncode == 2
        assert "Traceback" not in result.stderr
        offset = text.encode("latin-1").index(b"\xe9")
        expected = f"{path}: not UTF-8: byte 0xe9 at offset {offset}"
        assert expected in result.stderr, result.stderr


def test_config_check_reports_every_problem_of_a_file(tmp_path):
    path = tmp_path / "broker.toml"
    path.write_text(
        '[broker]\nlisten_port = "x"\nbroker_id = -1\n'
        '[store_mmap]\ncommit_log_file_size = "1KB"\nnope = 1\n'
        "[flush_async]\nbogus = 2\n[no_such_plugin]\nx = 1\n"
    )
    result = trocket("config", "check", str(path))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "6 problems" in result.stderr
    for key in (
        "[broker] listen_port",
        "[broker] broker_id",
        "[store_mmap] commit_log_file_size",
        "[store_mmap] nope",
        "[flush_async] bogus",
        "[no_such_plugin]",
    ):
        assert f"  - {key}" in result.stderr, key


def test_properties_check_reports_every_problem_too(tmp_path):
    path = tmp_path / "broker.properties"
    path.write_text("listenPort=abc\nnoSuchKey=1\nbrokerId=x\n")
    result = trocket("config", "check", str(path))
    assert result.returncode == 2 and "3 problems" in result.stderr
    assert "  - listenPort:" in result.stderr and "  - noSuchKey:" in result.stderr


def test_commands_come_from_plugins_and_a_broken_one_explains_itself(tmp_path, monkeypatch, capsys):
    """``trocket export`` is the spark_export plugin's contribution (entry-point group
    ``trocket.commands``); a command whose plugin cannot load costs that command only."""
    dist = tmp_path / "broken_cmd-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-cmd\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        "[trocket.commands]\nwobble = no_such_module_anywhere:add_parsers\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    from trocket.cli import main

    assert main(["wobble"]) == 2
    assert "command 'wobble' is unavailable: its plugin failed to load" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        main(["export", "--help"])
    assert exit_info.value.code == 0 and "usage: trocket export" in capsys.readouterr().out
