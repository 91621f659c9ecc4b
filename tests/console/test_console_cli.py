"""``trocket console`` on its own: it says where it serves, and warns when it listens beyond
loopback (it asks nobody who they are)."""

from __future__ import annotations

import pytest

from tests.network.conftest import free_port
from tests.support import start_trocket


@pytest.mark.parametrize(("host", "warned"), [("0.0.0.0", True), ("127.0.0.1", False)])
def test_console_warns_when_it_listens_beyond_loopback(tmp_path, host, warned):
    process, lines = start_trocket(
        "console", "-n", f"127.0.0.1:{free_port()}", "--host", host, "--port", "0", cwd=tmp_path
    )
    try:
        output = "".join(lines)
        assert any(line.startswith("console: http://") for line in lines), output
        assert ("WARNING: the console listens beyond loopback" in output) is warned, output
    finally:
        process.kill()
        process.communicate()
