"""Bounded chart history: memory stays O(cap) and deltas carry only new points."""

import pytest

from trainmeter.core.timeline import Timeline


def test_a_million_points_keep_at_most_cap_per_series():
    tl = Timeline(cap=100)
    for i in range(1_000_000 // 100):  # 10k points is enough to cycle the thinning many times
        tl.append("loss", i, float(i))
    xs, _ = tl.full()["series"]["loss"]
    assert len(xs) <= 100
    assert xs == sorted(xs)  # thinning keeps order
    assert xs[-1] == 9_999  # the newest point is always kept
    assert xs[0] == 0  # and the first one too (thinning keeps even positions)


def test_since_returns_only_points_after_the_given_sequence():
    tl = Timeline(cap=10)
    tl.append("a", 1, 1.0)
    tl.append("b", 1, 5.0)
    seq = tl.seq
    tl.append("a", 2, 2.0)
    delta = tl.since(seq)
    assert delta == {"seq": 3, "series": {"a": [[2], [2.0]]}}
    assert tl.since(tl.seq)["series"] == {}


def test_full_state_plus_deltas_equals_full_state_later():
    tl = Timeline(cap=1000)
    for i in range(5):
        tl.append("loss", i, i * 0.5)
    client = {k: [list(v[0]), list(v[1])] for k, v in tl.full()["series"].items()}
    seq = tl.seq
    for i in range(5, 9):
        tl.append("loss", i, i * 0.5)
    for name, (xs, ys) in tl.since(seq)["series"].items():
        client[name][0] += xs
        client[name][1] += ys
    assert client == tl.full()["series"]


def test_cap_below_four_is_refused():
    with pytest.raises(ValueError, match="cap must be >= 4"):
        Timeline(cap=3)
