"""What a plugin's derived view learns of each record (issue 41): body length, the message id
clients see and the broker's offset id, born and store hosts, for single sends (records handed
over one by one) and batches (columns) alike, through a real broker."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import trio

from kernel import hookimpl
from trocket import Message, Producer
from trocket.testing import open_broker


class SeenView:
    name = "seen"

    def __init__(self) -> None:
        self.records: list = []
        self.offset = 0

    def dispatched_offset(self) -> int:
        return self.offset

    def dispatch(self, records, end_offset: int) -> None:
        self.records += list(records)  # a batch is a Sequence of DispatchRecord too
        self.offset = end_offset

    async def persist(self, *, thorough: bool) -> None:
        pass


@pytest.mark.trio
async def test_a_view_sees_lengths_ids_and_hosts_of_single_and_batched_sends(tmp_path: Path):
    view = SeenView()
    plugin = SimpleNamespace(trocket_register_dispatchers=hookimpl(lambda ctx, store: [view]))
    async with open_broker(tmp_path, plugin_objects=(("seen_view", plugin),)) as running:
        async with Producer("PG_contract", running.namesrv_addr) as producer:
            single = await producer.send(Message("Contract", b"x" * 300, keys=["k1"]))
            batch = await producer.send_batch([Message("Contract", b"y" * n) for n in (1, 2, 3)])
        with trio.fail_after(10):
            while len(view.records) < 4:  # noqa: ASYNC110 - polls a view the loop fills
                await trio.sleep(0.01)
    first, *rest = view.records
    assert (first.body_length, first.msg_id, first.offset_msg_id) == (
        300,
        single.msg_id,
        single.offset_msg_id,
    )
    assert first.store_host == running.broker_addr and first.born_host.startswith("127.0.0.1:")
    assert [r.body_length for r in rest] == [1, 2, 3]
    assert [r.msg_id for r in rest] == batch.msg_id.split(",")
    assert [r.offset_msg_id for r in rest] == batch.offset_msg_id.split(",")
    assert {r.store_host for r in rest} == {running.broker_addr}
    assert {r.born_host.rsplit(":", 1)[0] for r in rest} == {"127.0.0.1"}


class AheadView(SeenView):
    """A view whose saved progress is past the log's end (its broker lost a torn tail)."""

    def __init__(self, saved: int, can_cut: bool) -> None:
        super().__init__()
        self.offset = saved
        self.cuts: list[int] = []
        if can_cut:
            self.truncate = self._truncate

    def _truncate(self, offset: int) -> None:
        self.cuts.append(offset)
        self.offset = offset


@pytest.mark.trio
async def test_a_view_ahead_of_the_log_is_cut_before_dispatch_resumes(tmp_path: Path, caplog):
    cut, stuck = AheadView(10**9, can_cut=True), AheadView(10**9, can_cut=False)
    plugin = SimpleNamespace(trocket_register_dispatchers=hookimpl(lambda ctx, store: [cut, stuck]))
    async with open_broker(tmp_path, plugin_objects=(("ahead_views", plugin),)) as running:
        async with Producer("PG_ahead", running.namesrv_addr) as producer:
            await producer.send(Message("Ahead", b"after the cut"))
        with trio.fail_after(10):
            while not cut.records:  # noqa: ASYNC110 - polls a view the loop fills
                await trio.sleep(0.01)
    assert cut.cuts == [0] and [r.body_length for r in cut.records] == [len(b"after the cut")]
    assert stuck.records == []
    assert "view seen covers the log up to 1000000000 but the log ends at 0" in caplog.text
