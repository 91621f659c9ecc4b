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


async def test_concurrent_writers_share_writes_and_each_finds_its_change_written(tmp_path, monkeypatch):
    """``write_latest`` is a group commit: 200 changes made at once cost a few writes, and every
    caller returns only once a write holding its change is done."""
    import trio

    from kernel import persist

    path = tmp_path / "topics.json"
    state: dict[str, int] = {}
    writes = []
    real = persist.write_json_atomic

    def counting(target, data):
        writes.append(dict(data))
        real(target, data)

    monkeypatch.setattr(persist, "write_json_atomic", counting)
    state_file = persist.JsonStateFile(path)

    async def change(i: int) -> None:
        state[f"T{i}"] = i
        await state_file.write_latest(lambda: dict(state))
        assert read_json_with_backup(path)[f"T{i}"] == i  # on disk when the caller returns

    async with trio.open_nursery() as nursery:
        for i in range(200):
            nursery.start_soon(change, i)
    assert len(writes) <= 3, len(writes)
    assert read_json_with_backup(path) == {f"T{i}": i for i in range(200)}
