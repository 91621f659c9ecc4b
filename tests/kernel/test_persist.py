import pytest

from kernel.errors import ConfigError
from kernel.persist import read_json_with_backup, write_json_atomic


def test_write_keeps_a_backup_and_reads_back(tmp_path):
    path = tmp_path / "config" / "topics.json"
    assert read_json_with_backup(path) is None
    write_json_atomic(path, {"v": 1})
    write_json_atomic(path, {"v": 2})
    assert read_json_with_backup(path) == {"v": 2}
    assert (tmp_path / "config" / "topics.json.bak").read_text().count('"v": 1') == 1
    assert not (tmp_path / "config" / "topics.json.tmp").exists()


def test_a_corrupt_file_falls_back_to_the_backup(tmp_path):
    path = tmp_path / "consumerOffset.json"
    write_json_atomic(path, {"offset": 7})
    write_json_atomic(path, {"offset": 8})
    path.write_text('{"offset": ')  # torn write
    assert read_json_with_backup(path) == {"offset": 7}


def test_both_corrupt_is_a_clear_error(tmp_path):
    path = tmp_path / "delayOffset.json"
    path.write_text("{")
    path.with_name("delayOffset.json.bak").write_text("[")
    with pytest.raises(ConfigError, match="delayOffset.json: unreadable, and so is its backup"):
        read_json_with_backup(path)
