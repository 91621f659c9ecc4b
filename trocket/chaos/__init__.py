"""Tools for fault runs: the history a run writes (:mod:`.history`) and the checker that says
what it shows (:mod:`.checker`). Issue 36's scenarios and ``bench/chaos.py`` build on them."""

from trocket.chaos.checker import Report, SplitBrain, check
from trocket.chaos.history import BadHistory, Event, HistoryWriter, parse, read_history

__all__ = ["BadHistory", "Event", "HistoryWriter", "Report", "SplitBrain", "check", "parse", "read_history"]
