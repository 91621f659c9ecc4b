"""What a fault run's history says about safety: lost, unexpected, duplicated, inconsistent and
reordered messages, split-brain acknowledgements, and how long service was out.

Definitions (a *body* is unique per message the test sends; a send may take several attempts):

* **lost**: a body with an acknowledged attempt that the final drain never read; *lost below*:
  one of those acknowledged at an offset below the highest the drain read on its queue (a hole,
  not a tail the drain stopped short of);
* **unexpected**: a body read that no attempt sent;
* **recovered**: a body whose attempts were unknown (timeout, reset, FLUSH_SLAVE_TIMEOUT,
  fenced), then read: allowed;
* **aborted read**: a body whose every attempt failed definitely, then read;
* **duplicates**: a body at two positions (broker, queue, offset), from reads and acks;
  *explained* when the body was retried after an unknown outcome, the rest unexplained;
* **inconsistent**: one position holding two bodies, across reads, acks and replicas;
* **reordered**: two sends of one producer to one queue, the second invoked after the first was
  acknowledged, stored at a lower offset;
* **split-brain acks**: replicas A and B of one broker set where A acknowledged at t1 and t3 and
  B at t2, t1 < t2 < t3 and t3 - t1 <= ``max_gap``: A kept acknowledging around B's;
* **RTO after a fault**: fault start to the first ack from a replica other than the one acking
  before it (the first ack at all when none other ever acks); **after a failure**: the first
  failed or unknown send of an outage to the next ack.

The safety counts (lost, unexpected, aborted reads, unexplained duplicates, inconsistent,
reordered, split-brain) must be zero in configurations documented as safe.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterable, Sequence

import attrs

from trocket.chaos.history import Event

Position = tuple[str, int, int]
"""(broker set, queue id, queue offset)."""


@attrs.frozen
class SplitBrain:
    broker: str
    first: str
    """The replica that kept acknowledging."""
    second: str
    """The replica that acknowledged in between."""
    at: float


@attrs.frozen
class Report:
    attempts: int
    acked: int
    lost: tuple[str, ...]
    lost_below: tuple[str, ...]
    unexpected: tuple[str, ...]
    recovered: tuple[str, ...]
    aborted_reads: tuple[str, ...]
    duplicates_explained: tuple[str, ...]
    duplicates_unexplained: tuple[str, ...]
    inconsistent: tuple[Position, ...]
    reordered: tuple[tuple[str, str], ...]
    split_brain: tuple[SplitBrain, ...]
    rto_after_fault: tuple[float, ...]
    rto_after_failure: tuple[float, ...]

    @property
    def safe(self) -> bool:
        return not (
            self.lost
            or self.unexpected
            or self.aborted_reads
            or self.duplicates_unexplained
            or self.inconsistent
            or self.reordered
            or self.split_brain
        )

    def summary(self) -> str:
        def rto(values: tuple[float, ...]) -> str:
            if not values:
                return "-"
            ordered = sorted(values)
            return f"p50 {ordered[len(ordered) // 2]:.2f}s max {ordered[-1]:.2f}s"

        return (
            f"acked {self.acked} lost {len(self.lost)} (below read {len(self.lost_below)}) "
            f"unexpected {len(self.unexpected)} recovered {len(self.recovered)} "
            f"aborted {len(self.aborted_reads)} duplicates {len(self.duplicates_unexplained)} "
            f"(+{len(self.duplicates_explained)} explained) inconsistent {len(self.inconsistent)} "
            f"reordered {len(self.reordered)} split-brain {len(self.split_brain)} "
            f"RTO fault {rto(self.rto_after_fault)} failure {rto(self.rto_after_failure)}"
        )


@attrs.define
class _Attempt:
    body: str
    process: str
    invoked: float
    outcome: str = "pending"
    """pending, ok, fail or info."""
    done: float = 0.0
    position: Position | None = None
    replica: str = ""


def check(events: Iterable[Event], *, max_gap: float = 1.0) -> Report:
    history = sorted(events, key=lambda e: e.t)
    attempts: dict[str, _Attempt] = {}
    reads: list[Event] = []
    faults: list[float] = []
    for event in history:
        if event.kind == "invoke":
            attempts[str(event["id"])] = _Attempt(str(event["body"]), str(event.get("process", "")), event.t)
        elif event.kind in ("ok", "fail", "info"):
            attempt = attempts.get(str(event["id"]))
            if attempt is None or attempt.outcome != "pending":
                continue  # an answer to nothing invoked, or a second one: the first counts
            attempt.outcome, attempt.done = event.kind, event.t
            if event.kind == "ok":
                attempt.position = (str(event["broker"]), int(event["queue"]), int(event["offset"]))
                attempt.replica = str(event.get("replica", ""))
        elif event.kind == "read":
            reads.append(event)
        elif event.kind == "fault" and event.get("phase") == "start":
            faults.append(event.t)

    by_body: dict[str, list[_Attempt]] = defaultdict(list)
    for attempt in attempts.values():
        by_body[attempt.body].append(attempt)
    final = [r for r in reads if r.get("final")] or reads
    final_bodies = {str(r["body"]) for r in final}
    read_bodies = {str(r["body"]) for r in reads}
    highest: dict[tuple[str, int], int] = {}
    for r in final:
        key = (str(r["broker"]), int(r["queue"]))
        highest[key] = max(highest.get(key, -1), int(r["offset"]))

    acked = [body for body, tries in by_body.items() if any(a.outcome == "ok" for a in tries)]
    lost = sorted(body for body in acked if body not in final_bodies)
    lost_below = []
    for body in lost:
        for attempt in by_body[body]:
            if attempt.position is not None and attempt.position[2] < highest.get(attempt.position[:2], -1):
                lost_below.append(body)
                break
    outcomes = {body: {a.outcome for a in tries} for body, tries in by_body.items()}
    recovered = sorted(
        b for b in read_bodies if b in outcomes and "ok" not in outcomes[b] and "info" in outcomes[b]
    )
    aborted = sorted(b for b in read_bodies if outcomes.get(b) == {"fail"})
    unexpected = sorted(b for b in read_bodies if b not in by_body)

    positions: dict[str, set[Position]] = defaultdict(set)
    holders: dict[Position, set[str]] = defaultdict(set)
    for r in reads:
        where = (str(r["broker"]), int(r["queue"]), int(r["offset"]))
        positions[str(r["body"])].add(where)
        holders[where].add(str(r["body"]))
    for attempt in attempts.values():
        if attempt.position is not None:
            positions[attempt.body].add(attempt.position)
            holders[attempt.position].add(attempt.body)
    duplicated = sorted(b for b, where in positions.items() if len(where) > 1)
    explained = [b for b in duplicated if len(by_body.get(b, ())) > 1 and "info" in outcomes.get(b, set())]
    unexplained = [b for b in duplicated if b not in set(explained)]
    inconsistent = sorted(p for p, bodies in holders.items() if len(bodies) > 1)

    return Report(
        attempts=len(attempts),
        acked=len(acked),
        lost=tuple(lost),
        lost_below=tuple(lost_below),
        unexpected=tuple(unexpected),
        recovered=tuple(recovered),
        aborted_reads=tuple(aborted),
        duplicates_explained=tuple(explained),
        duplicates_unexplained=tuple(unexplained),
        inconsistent=tuple(inconsistent),
        reordered=tuple(_reordered(list(attempts.values()))),
        split_brain=tuple(_split_brain(list(attempts.values()), max_gap)),
        rto_after_fault=tuple(_rto_after_faults(list(attempts.values()), faults)),
        rto_after_failure=tuple(_rto_after_failures(list(attempts.values()))),
    )


def _reordered(attempts: Sequence[_Attempt]) -> list[tuple[str, str]]:
    """Per producer and queue: a send invoked after an earlier one was acknowledged must be
    stored above it. Walks the sends by invocation with the highest offset of those already
    acknowledged (O(n log n))."""
    out = []
    streams: dict[tuple[str, str, int], list[_Attempt]] = defaultdict(list)
    for attempt in attempts:
        if attempt.outcome == "ok" and attempt.position is not None:
            streams[(attempt.process, attempt.position[0], attempt.position[1])].append(attempt)
    for sends in streams.values():
        by_ack = sorted(sends, key=lambda a: a.done)
        acked_times = [a.done for a in by_ack]
        best: list[tuple[int, str]] = []  # running maximum (offset, body) over by_ack
        for attempt in by_ack:
            assert attempt.position is not None
            current = (attempt.position[2], attempt.body)
            best.append(max(best[-1], current) if best else current)
        for attempt in sorted(sends, key=lambda a: a.invoked):
            done_before = bisect.bisect_left(acked_times, attempt.invoked)
            assert attempt.position is not None
            if done_before and best[done_before - 1][0] > attempt.position[2]:
                out.append((best[done_before - 1][1], attempt.body))
    return sorted(out)


def _split_brain(attempts: Sequence[_Attempt], max_gap: float) -> list[SplitBrain]:
    out = []
    per_broker: dict[str, list[_Attempt]] = defaultdict(list)
    for attempt in attempts:
        if attempt.outcome == "ok" and attempt.position is not None and attempt.replica:
            per_broker[attempt.position[0]].append(attempt)
    for broker, acks in per_broker.items():
        acks.sort(key=lambda a: a.done)
        last_seen: dict[str, float] = {}
        seen_pairs: set[tuple[str, str]] = set()
        previous = None
        for attempt in acks:
            replica = attempt.replica
            if previous is not None and previous.replica != replica:
                # ``replica`` acked before at last_seen[replica]; did another replica ack since,
                # within max_gap of this one? Then both were acknowledging at once.
                before = last_seen.get(replica)
                if before is not None and attempt.done - before <= max_gap:
                    pair = (replica, previous.replica)
                    if pair not in seen_pairs:
                        seen_pairs.add(pair)
                        out.append(SplitBrain(broker, replica, previous.replica, previous.done))
            last_seen[replica] = attempt.done
            previous = attempt
    return out


def _rto_after_faults(attempts: Sequence[_Attempt], faults: Sequence[float]) -> list[float]:
    acks = sorted((a for a in attempts if a.outcome == "ok"), key=lambda a: a.done)
    times = [a.done for a in acks]
    out = []
    for start in faults:
        index = bisect.bisect_left(times, start)
        if index >= len(acks):
            continue  # service never came back within the run
        before = acks[index - 1].replica if index else ""
        later = acks[index:]
        other = next((a for a in later if a.replica != before), None)
        out.append((other or later[0]).done - start)
    return out


def _rto_after_failures(attempts: Sequence[_Attempt]) -> list[float]:
    answers = sorted((a for a in attempts if a.outcome in ("ok", "fail", "info")), key=lambda a: a.done)
    out = []
    outage: float | None = None
    for attempt in answers:
        if attempt.outcome == "ok":
            if outage is not None:
                out.append(attempt.done - outage)
                outage = None
        elif outage is None:
            outage = attempt.done
    return out
