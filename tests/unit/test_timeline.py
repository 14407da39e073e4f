"""Bounded chart history: memory stays O(cap), spikes survive thinning, deltas carry only new
points. Expected indices below are worked out by hand from the rule in timeline.thin_pass."""

import math
import random

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


# -- derived series: a point's scale (den, names, factors) --------------------------------------
SC = (4.0, ("d/a", "d/b"), (2.0, 3.0))  # d/a = y * 2 / 4, d/b = y * 3 / 4


def test_a_scaled_point_is_also_a_point_of_each_derived_series_at_the_same_x():
    tl = Timeline(cap=100)
    tl.append("lead", 1, 8.0)  # no scale: no derived point
    tl.append("lead", 2, 10.0, SC)
    tl.extend("lead", [3, 4], [12.0, 0.1], SC)
    got = tl.full()
    # by hand: 10 * 2 / 4 = 5, 12 * 2 / 4 = 6, 0.1 * 2 / 4 = 0.05; 10 * 3 / 4 = 7.5, 9, 0.075
    assert got["series"]["d/a"] == [[2, 3, 4], [5.0, 6.0, 0.1 * 2.0 / 4.0]]
    assert got["series"]["d/b"] == [[2, 3, 4], [7.5, 9.0, 0.1 * 3.0 / 4.0]]
    assert got["series"]["lead"] == [[1, 2, 3, 4], [8.0, 10.0, 12.0, 0.1]]
    assert tl.names() == ["lead", "d/a", "d/b"] and tl.seq == 4  # one sequence number a point
    assert tl.sizes() == {"lead": 4, "d/a": 3, "d/b": 3} and len(tl) == 10
    assert tl.since(3)["series"] == {"lead": [[4], [0.1]], "d/a": [[4], [0.05]],
                                     "d/b": [[4], [0.1 * 3.0 / 4.0]]}  # fmt: skip
    assert tl.since(1)["series"]["d/a"] == [[2, 3, 4], [5.0, 6.0, 0.05]]


def test_derived_series_are_thinned_with_their_leader_and_deltas_still_add_up():
    rng = random.Random(3)
    tl = Timeline(cap=16)
    client: dict = {}
    seq = -1
    for x in range(500):
        scale = rng.choice([SC, (3.0, ("d/a",), (5.0,)), None])  # lengths that vary, gaps
        tl.append("lead", x, rng.random(), scale)
        delta = tl.since(seq) if seq >= 0 else tl.full()
        for name, (xs, ys) in delta["series"].items():
            have = client.setdefault(name, [[], []])
            have[0] += xs
            have[1] += ys
        seq = delta["seq"]
    full = tl.full()["series"]
    lead_x = full["lead"][0]
    assert len(lead_x) <= 16
    for name in ("d/a", "d/b"):
        xs, _ = full[name]
        assert set(xs) <= set(lead_x)  # the leader's points only: thinned with it
        assert set(xs) <= set(client[name][0])  # every point kept was sent once
        assert len(xs) <= 16


def test_derived_values_follow_each_points_own_scale_through_passes_and_compaction():
    rng = random.Random(7)
    tl = Timeline(cap=8)
    scale_at, y_at = {}, {}
    for x in range(3000):  # a new scale nearly every point: the table is compacted many times
        sc = (float(rng.randint(1, 9)), ("d/a",), (float(rng.randint(0, 500)),))
        y_at[x], scale_at[x] = rng.random() * 100, sc
        tl.append("lead", x, y_at[x], sc)
        assert len(tl.scales) <= 2 * 8 + 64 + 1  # bounded: Timeline._thin compacts it
    xs, ys = tl.full()["series"]["d/a"]
    # each derived point is its own x's leader value times its own scale, by the module's rule
    assert ys == [y_at[x] * scale_at[x][2][0] / scale_at[x][0] for x in xs]
    assert xs == tl.full()["series"]["lead"][0]


def test_a_derived_name_past_the_limit_or_of_another_kind_is_refused_and_counted():
    tl = Timeline(cap=100, max_series=2)
    tl.extend("lead", [1, 2, 3], [1.0, 2.0, 3.0], SC)  # room for d/a only
    assert tl.names() == ["lead", "d/a"]
    assert (tl.refused, tl.refused_names) == (3, 1)  # d/b's three points, one name
    tl.append("lead", 4, 4.0, SC)
    assert tl.refused == 4
    assert not tl.append("d/a", 5, 1.0)  # a point of its own in a derived series: refused
    assert tl.clashed == 1
    tl2 = Timeline(cap=100)
    tl2.append("d/a", 1, 1.0)  # an own series first
    tl2.append("lead", 2, 2.0, SC)
    assert tl2.clashed == 1 and tl2.full()["series"]["d/a"] == [[1], [1.0]]
    assert tl2.full()["series"]["d/b"] == [[2], [1.5]]


def test_a_table_holding_a_scale_twice_still_takes_points():
    # a checkpoint refuses such a table (checkpoint._scales_ok); the timeline must not loop on it
    tl = Timeline(cap=100)
    tl.scales = [SC, SC]
    tl.append("lead", 1, 8.0, (1.0, ("d/c",), (1.0,)))
    tl.append("lead", 2, 8.0, SC)
    assert tl.full()["series"]["d/a"] == [[2], [4.0]]
    assert tl.full()["series"]["d/c"] == [[1], [8.0]]


@pytest.mark.parametrize("fill", [2 * 8 + 64, 2 * 8 + 65])  # at the compaction bound, and past
def test_a_batch_longer_than_the_room_keeps_its_scale_through_its_own_passes(fill):
    # a break-test found it: extend() took the scale's index once, and a compaction during
    # its own thinning passes renumbered the table under it (full() then raised IndexError)
    tl = Timeline(cap=8)
    x = 0
    while len(tl.scales) < fill and x < 10_000:  # the table grows to 2 * cap + 65 at most
        tl.append("lead", x, 1.0, (1.0, ("d",), (float(x),)))
        x += 1
    assert len(tl.scales) == fill
    tl.extend("lead", list(range(x, x + 40)), [1.0] * 40, (1.0, ("d",), (1000.0,)))
    xs, ys = tl.full()["series"]["d"]
    # by hand: a point at x carries the factor x before the batch, 1000 from the batch on
    assert ys == [1000.0 if v >= x else float(v) for v in xs]
    assert xs[-1] == x + 39
