import pytest

from wire import units


@pytest.mark.parametrize(
    ("raw", "expected"),
    [(4096, 4096), ("64KiB", 65536), ("1GiB", 1 << 30), ("10MB", 10_000_000), ("1.5KiB", 1536), ("7", 7)],
)
def test_sizes(raw, expected):
    assert units.parse_size(raw) == expected


@pytest.mark.parametrize("raw", [-1, "1 parsec", "1.3B", True, None, "GiB"])
def test_bad_sizes_say_what_is_expected(raw):
    with pytest.raises(ValueError, match="size"):
        units.parse_size(raw)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (5, 5.0),
        ("200us", 0.0002),
        ("500ms", 0.5),
        ("10s", 10.0),
        ("2m", 120.0),
        ("72h", 259200.0),
        ("3d", 259200.0),
    ],
)
def test_durations(raw, expected):
    assert units.parse_duration(raw) == expected


@pytest.mark.parametrize("raw", [-2, "soon", "5 fortnights", False])
def test_bad_durations(raw):
    with pytest.raises(ValueError, match="duration"):
        units.parse_duration(raw)


def test_formatting_round_trips():
    assert units.format_size(1 << 30) == "1GiB"
    assert units.format_size(1000) == "1000"
    assert units.format_duration(0.5) == "500ms"
    assert units.format_duration(7200) == "2h"
    assert units.parse_duration(units.format_duration(0.2)) == 0.2


def test_rocketmq_default_delay_levels():
    levels = units.parse_delay_levels("1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h")
    assert len(levels) == 18 and levels[0] == 1 and levels[4] == 60 and levels[-1] == 7200


@pytest.mark.parametrize("raw", ["", "1s 5x", "1.5s", 3])
def test_bad_delay_levels(raw):
    with pytest.raises(ValueError):
        units.parse_delay_levels(raw)
