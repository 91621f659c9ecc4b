"""`trocket produce` and `trocket consume` as a user runs them, against a real broker process."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

from tests.interop.conftest import subprocess_env


def trocket(*args: str, timeout: float = 60, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "trocket", *args], capture_output=True, text=True, timeout=timeout,
        env=subprocess_env(), input=stdin,
    )  # fmt: skip


def test_produce_lines_of_a_file_then_consume_a_count_and_commit(broker, tmp_path):
    lines = tmp_path / "orders.txt"
    lines.write_text("order 1\norder 2\n\norder 3\norder 4\n")
    sent = trocket("produce", "-n", broker.namesrv, "-t", "CliOrders", "-f", str(lines), "-c", "3",
                   "--tag", "paid", "-k", "k1,k2", "--json")  # fmt: skip
    assert sent.returncode == 0, sent.stderr
    results = [json.loads(line) for line in sent.stdout.splitlines()]
    assert [r["status"] for r in results] == ["SEND_OK"] * 3 and "sent 3 message(s)" in sent.stderr
    consumed = trocket("consume", "-n", broker.namesrv, "-g", "CG_cli", "-t", "CliOrders", "-s", "paid",
                       "--from", "first", "-c", "3", "--json")  # fmt: skip
    assert consumed.returncode == 0, consumed.stderr
    messages = [json.loads(line) for line in consumed.stdout.splitlines()]
    assert sorted(m["body"] for m in messages) == ["order 1", "order 2", "order 3"]
    assert {m["tags"] for m in messages} == {"paid"} and messages[0]["keys"] == ["k1", "k2"]
    assert {m["msgId"] for m in messages} == {r["msgId"] for r in results}
    assert "offsets committed for group CG_cli" in consumed.stderr
    progress = broker.admin_json("consumerProgress", "-g", "CG_cli")
    assert sum(r["#Consumer Offset"] for r in progress if r["#Topic"] == "CliOrders") == 3


def test_consume_until_ctrl_c_commits_what_it_printed(broker, tmp_path):
    sent = trocket(
        "produce", "-n", broker.namesrv, "-t", "CliStream", "-b", "event {i}", "-c", "25", "-r", "200"
    )
    assert sent.returncode == 0 and len(sent.stdout.splitlines()) == 25, sent.stderr
    out = tmp_path / "out.txt"
    with out.open("w") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "trocket", "consume", "-n", broker.namesrv, "-g", "CG_ctrl_c", "-t",
             "CliStream", "--from", "first"],
            stdout=sink, stderr=subprocess.PIPE, text=True, env=subprocess_env(),
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while len(out.read_text().splitlines()) < 25:
            assert time.monotonic() < deadline and process.poll() is None
            time.sleep(0.05)
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=60)
    assert process.returncode == 0, stderr
    assert "consumed 25 message(s); offsets committed" in stderr
    bodies = sorted(
        line.rsplit(" ", 2)[-2] + " " + line.rsplit(" ", 1)[-1] for line in out.read_text().splitlines()
    )
    assert bodies == sorted(f"event {i}" for i in range(25))
    progress = broker.admin_json("consumerProgress", "-g", "CG_ctrl_c")
    assert sum(r["#Consumer Offset"] for r in progress if r["#Topic"] == "CliStream") == 25


def test_bad_arguments_get_one_clear_line(broker, tmp_path):
    missing = trocket("produce", "-n", broker.namesrv, "-t", "T", "-f", str(tmp_path / "nope.txt"))
    assert missing.returncode == 2 and "cannot read" in missing.stderr and "Traceback" not in missing.stderr
    bad_time = trocket("consume", "-n", broker.namesrv, "-g", "G", "-t", "T", "--from", "timestamp",
                       "--timestamp", "yesterday")  # fmt: skip
    assert bad_time.returncode == 2 and "neither epoch milliseconds nor an ISO time" in bad_time.stderr


def test_reset_offset_by_time_lets_a_group_consume_again_and_delete_sub_group(broker):
    sent = trocket("produce", "-n", broker.namesrv, "-t", "CliReset", "-b", "again {i}", "-c", "3")
    assert sent.returncode == 0, sent.stderr
    first = trocket("consume", "-n", broker.namesrv, "-g", "CG_reset_cli", "-t", "CliReset",
                    "--from", "first", "-c", "3")  # fmt: skip
    assert first.returncode == 0, first.stderr
    rows = broker.admin_json("resetOffsetByTime", "-g", "CG_reset_cli", "-t", "CliReset", "-s", "0")
    assert sum(r["#oldOffset"] for r in rows) == 3 and {r["#newOffset"] for r in rows} == {0}
    again = trocket(
        "consume", "-n", broker.namesrv, "-g", "CG_reset_cli", "-t", "CliReset", "-c", "3", "--json"
    )
    assert again.returncode == 0, again.stderr
    assert sorted(json.loads(line)["body"] for line in again.stdout.splitlines()) == [
        "again 0", "again 1", "again 2"
    ]  # fmt: skip
    bad = trocket("admin", "resetOffsetByTime", "-n", broker.namesrv, "-g", "G", "-t", "T", "-s", "yesterday")
    assert bad.returncode == 2 and "is not milliseconds, 'now' or yyyy-MM-dd#HH:mm:ss:SSS" in bad.stderr
    deleted = trocket("admin", "deleteSubGroup", "-n", broker.namesrv, "-g", "CG_reset_cli")
    assert deleted.returncode == 0, deleted.stderr
    assert "delete subscription group [CG_reset_cli] from broker [broker-a] success." in deleted.stdout
