"""The pure parts of controller mode: the epoch file and its consistent point (RocketMQ's
EpochFileCacheTest cases), and how the controller picks a master."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernel.errors import ConfigError
from plugins.controller.state import BrokerLive, Replica, ReplicaSet, choose_master
from plugins.ha.epoch_file import FILE_NAME, EpochEntry, EpochFile, consistent_point, with_ends


def entries(*pairs: tuple[int, int], end: int) -> list[EpochEntry]:
    return with_ends(list(pairs), end)


def test_epoch_file_appends_truncates_and_survives_a_reload(tmp_path: Path):
    epochs = EpochFile.load(tmp_path)
    assert epochs.last_epoch == 0 and epochs.entries(0) == []
    epochs.append(1, 0)
    epochs.append(2, 300)
    epochs.append(4, 900)
    assert EpochFile.load(tmp_path).entries(1000) == [
        EpochEntry(1, 0, 300),
        EpochEntry(2, 300, 900),
        EpochEntry(4, 900, 1000),
    ]
    assert [e.epoch for e in epochs.entries(500)] == [1, 2], "an epoch begun past the end is left out"
    epochs.truncate_from(800)
    assert EpochFile.load(tmp_path).starts == [(1, 0), (2, 300)]


def test_a_damaged_epoch_file_names_itself(tmp_path: Path):
    (tmp_path / FILE_NAME).write_text(
        '{"epochs": [{"epoch": 2, "startOffset": 10}, {"epoch": 1, "startOffset": 20}]}'
    )
    with pytest.raises(ConfigError, match="does not follow"):
        EpochFile.load(tmp_path)


@pytest.mark.parametrize(
    ("local", "remote", "point"),
    [
        # Same history, the local log shorter: nothing to cut.
        (entries((1, 0), (2, 100), end=150), entries((1, 0), (2, 100), end=400), 150),
        # The old master of epoch 2 wrote past where the new master's epoch 3 began.
        (entries((1, 0), (2, 100), end=500), entries((1, 0), (2, 100), (3, 300), end=800), 300),
        # Epoch 2 began at different offsets: only epoch 1 is shared.
        (entries((1, 0), (2, 120), end=500), entries((1, 0), (2, 100), end=800), 100),
        # Nothing shared.
        (entries((5, 0), end=500), entries((1, 0), (2, 100), end=800), -1),
    ],
)
def test_consistent_point(local, remote, point):
    assert consistent_point(local, remote) == point


def test_copy_from_takes_the_masters_later_epochs(tmp_path: Path):
    epochs = EpochFile.load(tmp_path)
    epochs.append(1, 0)
    epochs.append(2, 100)
    epochs.copy_from(entries((1, 0), (3, 80), end=900), upto=80)
    assert epochs.starts == [(1, 0), (3, 80)]


REPLICAS = ReplicaSet(
    "C", "b", {i: Replica(f"h:{i}", f"h:{i + 1}") for i in (1, 2, 3)}, 1, 4, frozenset({1, 2}), 7
)


def live(broker_id: int, epoch: int = 4, offset: int = 100, priority: int = 0) -> BrokerLive:
    return BrokerLive(broker_id, f"h:{broker_id}", epoch, offset, 0, priority)


def test_choose_master_prefers_the_set_then_the_most_up_to_date():
    alive = {2: live(2, offset=90), 3: live(3, offset=500)}
    assert choose_master(REPLICAS, alive, allow_unclean=False).broker_id == 2, "3 is not in the set"
    assert choose_master(REPLICAS, {3: live(3)}, allow_unclean=False) is None
    unclean = choose_master(REPLICAS, {3: live(3)}, allow_unclean=True)
    assert unclean is not None and unclean.broker_id == 3 and unclean.unclean
    both = {1: live(1, offset=50), 2: live(2, offset=90)}
    assert choose_master(REPLICAS, both, allow_unclean=False).broker_id == 2
    tied = {1: live(1, priority=5), 2: live(2, priority=1)}
    assert choose_master(REPLICAS, tied, allow_unclean=False).broker_id == 2
    assert choose_master(REPLICAS, alive, allow_unclean=False, designated=3) is None
    assert choose_master(REPLICAS, alive, allow_unclean=False, designated=2).broker_id == 2
    new_set = ReplicaSet("C", "b", REPLICAS.replicas)
    assert choose_master(new_set, {3: live(3, epoch=0, offset=0)}, allow_unclean=False).broker_id == 3


def test_replica_set_round_trips_through_json():
    assert ReplicaSet.from_json(REPLICAS.to_json()) == REPLICAS
    assert BrokerLive.from_json(live(2).to_json()) == live(2)
