"""Bounded chart history: memory stays O(cap), spikes survive thinning, deltas carry only new
points. Expected indices below are worked out by hand from the rule in timeline.thin_pass."""

import math

import pytest

from trainmeter.core.timeline import Timeline, thin, thin_pass


def test_a_million_points_keep_at_most_cap_per_series():
    tl = Timeline(cap=100)
    for i in range(1_000_000 // 100):  # 10k points is enough to cycle the thinning many times
        tl.append("loss", i, float(i))
    xs, _ = tl.full()["series"]["loss"]
    assert len(xs) <= 100
    assert xs == sorted(xs)  # thinning keeps order
    assert xs[-1] == 9_999  # the newest point is always kept
    assert xs[0] == 0  # and the first one: the minimum of its rising group of 4


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


def test_cap_below_eight_is_refused():
    # cap 7 would leave a full series of 8 points with an old half of 4: fine; but cap 6 gives
    # 7 points, an old half of 3 and no full group, so nothing could be removed
    with pytest.raises(ValueError, match="cap must be >= 8"):
        Timeline(cap=7)
    with pytest.raises(ValueError, match="max_series must be >= 1"):
        Timeline(max_series=0)


def test_one_pass_keeps_min_and_max_of_each_group_of_four_in_order():
    # n = 13, old half = indices 0..5: one full group 0..3, a partial group 4..5 kept whole,
    # the newer half 6..12 kept as is.
    ys = [5.0, 1.0, 9.0, 3.0, 7.0, 7.0, 0, 0, 0, 0, 0, 0, 0]
    # group 0..3: min 1.0 at 1, max 9.0 at 2 -> keep 1, 2 (in order)
    assert thin_pass(ys) == [1, 2, 4, 5, 6, 7, 8, 9, 10, 11, 12]
    # max before min: still in original order
    assert thin_pass([2.0, 9.0, 4.0, -1.0] + [0.0] * 4) == [1, 3, 4, 5, 6, 7]


def test_ties_flat_groups_and_non_finite_values():
    nan, inf = math.nan, math.inf
    # all equal: argmin == argmax -> first and last of the group
    assert thin_pass([3.0, 3.0, 3.0, 3.0] + [0.0] * 4)[:2] == [0, 3]
    # ties: the first point holding the min (0.0 at 1) and the first holding the max (2.0 at 2)
    assert thin_pass([1.0, 0.0, 2.0, 0.0, 2.0] + [0.0] * 4)[:2] == [1, 2]
    # NaN and infinity ignored: finite 4.0 at 1 and 2.0 at 3 -> keep 1, 3
    assert thin_pass([nan, 4.0, inf, 2.0] + [0.0] * 4)[:2] == [1, 3]
    # one finite value only: first and last of the group
    assert thin_pass([nan, 4.0, None, -inf] + [0.0] * 4)[:2] == [0, 3]


def test_a_spike_in_the_old_half_survives_thinning():
    tl = Timeline(cap=100)
    # a flat loss with one spike at x = 37, then flat again; 101 points force a thinning with
    # the spike in the old half (indices 0..49). Keeping every other point would drop index 37.
    for i in range(101):
        tl.append("loss", i, 50.0 if i == 37 else 1.0)
    xs, ys = tl.full()["series"]["loss"]
    assert len(xs) == 101 - 2 * (50 // 4)  # 12 groups of 4 each lose 2 points: 77
    assert 37 in xs and max(ys) == 50.0
    # and through many more thinnings, the spike stays the series' maximum
    for i in range(101, 20_000):
        tl.append("loss", i, 1.0)
    xs, ys = tl.full()["series"]["loss"]
    assert len(xs) <= 100 and 37 in xs and max(ys) == 50.0


def test_a_dip_survives_as_well_as_a_spike():
    xs = list(range(1000))
    ys = [0.5 if i == 123 else (90.0 if i == 456 else 1.0) for i in xs]
    txs, tys = thin(xs, ys, cap=50)
    assert len(txs) <= 50
    assert 123 in txs and 456 in txs and txs == sorted(txs)
    assert min(tys) == 0.5 and max(tys) == 90.0


def test_sequence_numbers_stay_with_their_points():
    tl = Timeline(cap=8)
    for i in range(9):  # the 9th append thins: old half 0..3 is one group
        tl.append("a", i, [4.0, 2.0, 8.0, 6.0, 0, 0, 0, 0, 0][i])
    # group [4, 2, 8, 6]: min 2.0 at 1, max 8.0 at 2 -> x 1 and 2 (seq 2 and 3) kept
    assert tl.full()["series"]["a"][0] == [1, 2, 4, 5, 6, 7, 8]
    assert tl.since(2)["series"]["a"][0] == [2, 4, 5, 6, 7, 8]  # seq 3 is x 2
    assert tl.since(5)["series"]["a"][0] == [5, 6, 7, 8]  # seqs 6.. are x 5..


def test_points_per_series_never_exceed_cap_over_a_million_appends():
    tl = Timeline(cap=2000)
    worst = 0
    for i in range(1_000_000):
        tl.append("loss", i, math.sin(i))
        if i % 997 == 0:
            worst = max(worst, len(tl))
    assert max(worst, len(tl)) <= 2000


def test_series_past_max_series_are_refused_and_counted():
    tl = Timeline(cap=8, max_series=2)
    assert tl.append("a", 0, 1.0) and tl.append("b", 0, 1.0)
    assert not tl.append("c", 0, 1.0)
    assert not tl.append("c", 1, 1.0) and not tl.append("d", 0, 1.0)
    assert tl.names() == ["a", "b"]
    assert tl.refused == 3 and tl.refused_names == 2
    assert tl.seq == 2  # refused points take no sequence number
