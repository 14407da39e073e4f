"""Many step records of one rank folded at once: ``Engine.apply_steps``'s common case.

A run of one rank sends its steps in batches (a wire ``steps`` batch per agent flush, or
consecutive step lines of a run log); folding each as its own record costs a dict, a dozen
calls and four sliding windows per step. :func:`fold` folds a batch's rows into the same
state ``Engine.apply`` of each row's record would leave, the same float operations in the same
order (every running sum is carried row by row; what only the last rows decide, such as a
window's contents, is taken at the end), and hands the chart its points a list at a time
(``Timeline.extend``). It takes only the case it can prove equal: one rank that is the
step clock, a world of one, each row timed (later than the one before), counts in range, no
arrival or merged rows; anything else (and whatever a row would raise on) is left to
``Engine.apply``, row by row. Pure standard library.
"""

from __future__ import annotations

import math
from itertools import accumulate, groupby, repeat
from operator import gt, itemgetter, lt, mul, sub, truediv
from typing import Any

from trainmeter.core import flops
from trainmeter.core.timeline import scaled

MAX_COUNT = 2**53  # as engine.MAX_COUNT (steps, tokens, samples must be below)
RESUM = 1023  # the windows' float sums are summed afresh each 1024 steps (engine, ranks, ...)
FEW = 4  # rows fewer than this go to Engine.apply one by one: a batch's own work costs more
_FIRST, _SECOND, _THIRD, _FOURTH, _FIFTH = map(itemgetter, range(5))


def fold(eng: Any, b: Any, i: int, tap: dict | None = None) -> int:
    """Fold rows ``i`` on of the steps batch ``b`` into the engine ``eng`` when they are the
    common case (module docstring); returns the end of the rows folded (``i``: none, so
    ``Engine.apply`` takes row ``i``). Raises nothing for a batch it takes. ``tap`` (a dict,
    for ``tm export``) gets what each folded row left, as :func:`rows_left` says."""
    took = _take(eng, b, i)
    if took is None:
        return i
    j, got, ts, rc, r, own = took
    if tap is not None:
        tap.update(rows_left(eng, got, ts, own))
    _commit(eng, got, ts, rc, r, own)
    return j


def fold_run(eng: Any, b: Any, cuts: list, apply: Any, tap: dict | None = None) -> bool:
    """Fold every row of ``b``, a run of one rank's steps that a log holds with other records
    between them, and apply those in their places: ``cuts`` is ``[(row, records), ...]``, the
    records that came after row ``row - 1`` (rows ascending, each at least 1), each list given
    to ``apply`` (``Engine.apply`` of each, or what ``tm export`` makes of them) with the clock's
    step that row's. The engine is left as :meth:`Engine.apply` of every record in log order
    leaves it, when the records are ``series`` with a step or ``gpu`` readings: those read no
    step state but the clock's step, and the step fold reads none of theirs but the chart's
    divisor, which a reading changes only on fake GPUs or in ``tm attach``'s run
    (``Engine.readings_move_divisor``); the chart's points and theirs reach the timeline in log
    order. Returns False, with nothing changed, unless every row is the common case and every
    record one of those (then fold the parts one at a time, as a log gives them). ``tap`` as
    :func:`fold`'s, for all of ``b``'s rows. Raises whatever ``apply`` raises (the engine is
    then left part-way: ``tm export`` gives one that never raises)."""
    gpu = False
    for _, recs in cuts:
        for rec in recs:
            if rec["k"] == "gpu":
                gpu = True
            elif rec["k"] != "series" or rec.get("step") is None:
                return False
    if gpu and eng.readings_move_divisor():
        return False
    took = _take(eng, b, 0)
    if took is None or took[0] != len(b):
        return False
    _, got, ts, rc, r, own = took
    if tap is not None:
        tap.update(rows_left(eng, got, ts, own))
    xs, ys, runs = got["chart"]
    steps, rates, lo, before = got["steps"], got["rates"], 0, 0
    for row, recs in cuts:
        hi = lo + row - before - rates[before:row].count(None)  # the charted rows' points
        _extend(eng, xs, ys, runs, lo, hi)
        eng.clock.step = steps[row - 1]
        apply(recs)
        lo, before = hi, row
    _extend(eng, xs, ys, runs, lo, len(xs))
    _commit(eng, got, ts, rc, r, own, chart=False)
    return True


def _extend(eng: Any, xs: list, ys: list, runs: list, lo: int, hi: int) -> None:
    """Chart points ``lo`` to ``hi`` of :func:`_chart`'s ``(xs, ys, runs)``, a run of one
    scale at a time."""
    a = 0
    for m, sc in runs:
        p, q = max(a, lo), min(a + m, hi)
        if p < q:
            eng.timeline.extend("tokens_per_s", xs[p:q], ys[p:q], sc)
        a += m


def _take(eng: Any, b: Any, i: int) -> tuple | None:
    """``(j, rows' sums, times, rank clock, rank, its counts)`` of rows ``i`` to ``j`` of
    ``b`` when they are the common case (:func:`fold`), else None; changes nothing."""
    n = len(b)
    if n - i < FEW or b.agg is not None or b.arr is not None:
        return None
    rank, c = b.rank, eng.clock
    rc = eng.rank_clocks.get(rank)
    if rc is None or len(eng.rank_clocks) != 1 or eng.clock_rank != rank or eng.world != 1:
        return None
    last = rc.last_t
    counts, ranks = eng.counts, eng.ranks
    own, r = counts.own.get(rank), ranks.ranks.get(rank)
    if last is None or c.last_t != last or own is None or len(counts.own) != 1 or r is None:
        return None
    if ranks._agents_seen != len(eng.agents) or counts.newest_t is None:
        return None
    ts = b.t[i:] if i else b.t
    end = _clean(ts, b, i, last, counts.newest_t)
    if end == 0:
        return None
    if end < len(ts):
        ts = ts[:end]
    j = i + end
    got = _rows(eng, b, i, j, ts, last, rc, r, own)
    if got is None:
        return None
    return j, got, ts, rc, r, own


def _clean(ts: list, b: Any, i: int, last: float, newest: float) -> int:
    """How many rows from ``i`` on are the common case: each later than the one before (the
    first later than ``last``, not before ``newest``), its step and counts in range."""
    if not (ts[0] > last and ts[0] >= newest):
        return 0
    cols = [b.step, b.tokens, b.samples] + ([b.seq_sq] if b.seq_sq is not None else [])
    if i:
        cols = [col[i:] for col in cols]
    if all(map(lt, ts, ts[1:])) and all(_in_range(col) for col in cols):
        return len(ts)
    for k, t in enumerate(ts):  # a rare batch: its clean rows up to the first that is not
        if (k and not t > ts[k - 1]) or not all(_in_range(col[k : k + 1]) for col in cols):
            return k
    return len(ts)


def _in_range(col: list) -> bool:
    """Every int of ``col`` (None aside) in [0, 2**53)."""
    try:  # ints only, the usual case: no scan for None first (an int compared to None raises)
        return min(col) >= 0 and max(col) < MAX_COUNT
    except TypeError:
        col = [x for x in col if x is not None]
    return not col or (min(col) >= 0 and max(col) < MAX_COUNT)


def has_none(col: list) -> bool:
    """Whether a column of ints and None holds a None: ``sum`` in C, three times faster than
    ``None in col`` (which compares each int with None)."""
    try:
        sum(col)
    except TypeError:
        return True
    return False


def _rows(eng: Any, b: Any, i: int, j: int, ts: list, last: float, rc, r, own) -> dict | None:
    """The rows' sums, row by row as ``Engine._on_step`` makes them, and the chart's points;
    None when the rows are not the common case after all (then nothing was changed)."""
    c, counts = eng.clock, eng.counts
    w = c.recent.maxlen
    if not (r.recent.maxlen == w == counts.window):
        return None
    prior_dt = list(map(_FIRST, c.recent))
    prior_tok = list(map(_SECOND, c.recent))
    if list(map(_FIRST, r.recent)) != prior_dt or list(map(_FIRST, own.recent)) != prior_dt:
        return None
    if list(map(_SECOND, own.recent)) != prior_tok:
        return None
    steps = b.step[i:j]
    toks = _zeros(b.tokens[i:j])
    smps = _zeros(b.samples[i:j])
    if b.seq_sq is None:
        sqv = sqt = [0] * len(ts)
    else:  # a row's seq_sq counts only with its tokens (Engine._own_counts)
        sq = b.seq_sq[i:j]
        if has_none(sq) or 0 in toks:
            sqv = [q if q is not None and t else 0 for q, t in zip(sq, toks, strict=True)]
            sqt = [t if q is not None and t else 0 for q, t in zip(sq, toks, strict=True)]
        else:
            sqv, sqt = sq, toks
    dts = list(map(sub, ts, [last, *ts[:-1]]))
    m, lp = len(ts), len(prior_dt)
    comb_dt, comb_tok = prior_dt + dts, prior_tok + toks
    off = lp - w  # row k's window drops comb[k + off] when that is >= 0
    # the rows after which each window's float sum is summed afresh (no drift): ranks' at
    # its timed steps, the counts' at their timed steps, the clock's at the step number
    res_r = set(range((-r.steps_timed - 1) & RESUM, m, RESUM + 1))
    res_o = set(range((-own.timed - 1) & RESUM, m, RESUM + 1))
    s0 = steps[0]
    if steps[-1] - s0 == m - 1 and steps == list(range(s0, s0 + m)):  # consecutive: the usual
        res_c = set(range(-s0 & RESUM, m, RESUM + 1))
    else:
        res_c = {k for k, s in enumerate(steps) if not s & RESUM}
    sr, so, sc = r.recent_s, own.recent_s, c.recent_s
    tr, to, tc = r.timed_s, own.timed_s, c.timed_s
    rt = own.recent_tokens
    rates: list = []
    add = rates.append
    sos: list = []  # the rank's own window seconds after each row (samples/s: rows_left)
    keep = sos.append
    start = 0
    for mark in [*sorted(res_r | res_o | res_c), m]:
        for k in range(start, min(mark + 1, m)):  # up to the mark, the mark's row included
            dt = dts[k]
            if k + off >= 0:
                old = comb_dt[k + off]
                sr -= old
                so -= old
                sc -= old
                rt -= comb_tok[k + off]
            sr += dt
            so += dt
            sc += dt
            rt += toks[k]
            tr += dt
            to += dt
            tc += dt
            add(rt / so if so > 0 else None)
            keep(so)
        if mark == m:
            break
        window = comb_dt[max(0, mark + lp + 1 - w) : mark + lp + 1]
        if mark in res_r:
            sr = math.fsum(window)
        if mark in res_o:  # the rate of the mark's row is of the sum made afresh
            so = sos[-1] = math.fsum(window)
            rates[-1] = rt / so if so > 0 else None
        if mark in res_c:
            sc = math.fsum(window)
        start = mark + 1
    if not counts.tokens:  # no tokens/s while no rank has counted a token (RankCounts.rate)
        first = next((k for k, x in enumerate(toks) if x), m)
        rates[:first] = [None] * first
    if math.inf in rates:  # too large to be finite: no rate (RankCounts.rate), row by row
        return None
    chart = _chart(eng, rates, steps, sqv, sqt, prior=list(c.recent), w=w)
    if chart is None:
        return None
    return {"steps": steps, "toks": toks, "smps": smps, "sqv": sqv, "sqt": sqt, "dts": dts,
            "off": off, "sos": sos, "rates": rates,
            "sr": sr, "so": so, "sc": sc, "tr": tr, "to": to, "tc": tc, "rt": rt,
            "chart": chart}  # fmt: skip


def _zeros(col: list) -> list:
    """A count column with None (none seen) as 0, as ``Engine._own_counts`` reads it."""
    return [x or 0 for x in col] if has_none(col) else col


def _chart(eng, rates, steps, sqv, sqt, prior, w) -> tuple | None:
    """``(xs, ys, runs)``: the tokens/s points ``Engine._on_step`` charts at these rows and
    the MFU scale they carry (``Engine._mfu_scale``), as ``[(points, scale or None), ...]``
    runs of one scale in order (one run unless the sequence length varies); None when a
    row's points are not those of the others or one would raise (then ``Engine.apply`` takes
    the rows)."""
    all_rows = None not in rates  # the usual case: every row has a tokens/s
    rows = range(len(rates)) if all_rows else [k for k, x in enumerate(rates) if x is not None]
    if not rows:
        return [], [], []
    xs = steps if all_rows else [steps[k] for k in rows]
    ys = rates if all_rows else [rates[k] for k in rows]
    if eng._divisor()[1] is None or eng.shape is None:  # as Engine._mfu_scale at its first point
        return xs, ys, [(len(ys), None)]
    seqs = _seq_recent(eng.clock, sqv, sqt, prior, w)
    by_seq = {s: mfu_scale(eng, s) for s in (set(seqs) if all_rows else {seqs[k] for k in rows})}
    if None in by_seq.values():
        return None
    if len(by_seq) == 1:
        return xs, ys, [(len(ys), next(iter(by_seq.values())) or None)]
    if len({sc[1] if sc else () for sc in by_seq.values()}) != 1:
        return None  # rows that chart different conventions: row by row
    runs = groupby(by_seq[seqs[k]] or None for k in rows)
    return xs, ys, [(sum(1 for _ in run), sc) for sc, run in runs]


def chart_columns(chart: tuple) -> tuple[tuple, list]:
    """``(names, columns)`` of the points :func:`_chart` gave (``(xs, ys, runs)``):
    ``tokens_per_s``, then each ``mfu/<c>`` as the timeline derives it (core/timeline.py
    ``scaled``; every run the same conventions, or none)."""
    _, ys, runs = chart
    names = next((sc[1] for _, sc in runs if sc), ())
    cols: list[list] = [[] for _ in names]
    a = 0
    for m, sc in runs:
        if sc:  # then every run's (_chart)
            for col, v in zip(cols, sc[2], strict=True):
                col += scaled(ys[a : a + m], v, sc[0])
        a += m
    return ("tokens_per_s", *names), [ys, *cols]


def mfu_scale(eng: Any, seq: float | None) -> tuple | None:
    """The scale (core/timeline.py) of the MFU points ``Engine._mfu_scale`` charts at the
    sequence length ``seq``, with the devices and peak of ``eng._mfu_divisor``: ``(den,
    ("mfu/<c>", ...), (FLOPs per token, ...))``, ``den`` the devices times the peak (FLOP/s),
    so a point's MFU is ``tokens/s * FLOPs per token / den`` as ``metrics.mfu`` computes it;
    ``()`` when none is charted (a peak of 0, no convention), None when ``metrics.mfu`` would
    raise. Kept per engine for its model shape (one length, a few, in a run)."""
    gpus, peak = eng._mfu_divisor
    p = peak.flops
    cache = eng.__dict__.setdefault("_fold_mfu", {})
    key = (seq, p, gpus)
    if cache.get("shape") is not eng.shape:
        cache.clear()
        cache["shape"] = eng.shape
    got = cache.get(key, False)
    if got is not False:
        return got
    if len(cache) > 64:  # lengths that vary: keep it small
        cache.clear()
        cache["shape"] = eng.shape
    got = cache[key] = _scale_of(flops.all_conventions_at(eng.shape, seq), gpus, p)
    return got


def _scale_of(fpt: dict, gpus: int, p: Any) -> tuple | None:
    if not (type(p) in (int, float) and 0 <= p < math.inf):
        return None  # metrics.mfu raises on it
    if not all(v is None or (type(v) in (int, float) and 0 <= v < math.inf) for v in fpt.values()):
        return None
    got = [(f"mfu/{k}", float(v)) for k, v in fpt.items() if v is not None]
    if not p or not got:
        return ()
    return max(gpus, 1) * float(p), tuple(k for k, _ in got), tuple(v for _, v in got)


def _seq_recent(c, sqv: list, sqt: list, prior: list, w: int) -> list:
    """Each row's ``seq_len_recent`` as ``Engine._mfu_scale`` reads it: the recent window's
    ``seq_sq`` over its tokens, else the run's mean, else None."""
    comb_sq = list(map(_THIRD, prior)) + sqv
    comb_sqt = list(map(_FOURTH, prior)) + sqt
    if comb_sqt and 0 not in comb_sqt:  # one sequence length throughout: it, at every row
        length, rest = divmod(comb_sq[0], comb_sqt[0])
        if not rest and list(map(mul, comb_sqt, repeat(length))) == comb_sq:
            return [length / 1] * len(sqv)  # the window's seq_sq / its tokens, exactly
    off = len(prior) - w
    rsq, rsqt, cum_sq, cum_sqt = c.recent_sq, c.recent_sq_tokens, c.seq_sq, c.seq_tokens
    out = []
    for k in range(len(sqv)):
        if k + off >= 0:
            rsq -= comb_sq[k + off]
            rsqt -= comb_sqt[k + off]
        rsq += sqv[k]
        rsqt += sqt[k]
        cum_sq += sqv[k]
        cum_sqt += sqt[k]
        if rsqt:
            out.append(rsq / rsqt)
        else:
            out.append(cum_sq / cum_sqt if cum_sqt else None)
    return out


def rows_left(eng: Any, got: dict, ts: list, own: Any) -> dict:
    """What each folded row leaves, before the rows are committed: ``steps``, ``t`` (s since
    the epoch), ``tokens`` and ``samples`` (the job's, so far), ``timed`` (the step clock's
    timed seconds grew), ``samples_per_s`` (``RankCounts.rate(1, samples=True)`` then: the
    rank's window samples over its window seconds, None before a sample) and ``chart`` (the
    points charted: ``(steps, tokens/s, runs of one scale)``, :func:`chart_columns` gives
    their series' columns), as ``Engine.apply`` of each row leaves them."""
    counts, c = eng.counts, eng.clock
    dts, smps, sos = got["dts"], got["smps"], got["sos"]
    samples = list(accumulate(smps, initial=counts.samples))[1:]
    # the window's samples as RankCounts.add slides them (ints: exact in any order): row k
    # adds its own and drops comb[k + off], nothing while the window fills
    comb, off, m = list(map(_THIRD, own.recent)) + smps, got["off"], len(smps)
    drop = comb[max(off, 0) : max(off + m, 0)]
    rss = list(accumulate(map(sub, smps, [0] * (m - len(drop)) + drop),
                          initial=own.recent_samples))[1:]  # fmt: skip
    if samples[0] and min(sos) > 0 and max(sos) < math.inf:  # the usual case (so no NaN)
        rates: list = list(map(truediv, rss, sos))
    else:
        rates = [x / y if y > 0 and n else None for x, y, n in zip(rss, sos, samples, strict=True)]
    if math.inf in rates:  # too large to be finite: none, as RankCounts.rate says
        rates = [None if x == math.inf else x for x in rates]
    return {"steps": got["steps"], "t": ts,
            "tokens": list(accumulate(got["toks"], initial=counts.tokens))[1:],
            "samples": samples, "timed": _timed(c.timed_s, dts),
            "samples_per_s": rates, "chart": got["chart"],
            "charted": _charted(got["rates"])}  # fmt: skip


def _timed(timed_s: float, dts: list) -> list[bool]:
    """Whether each row grew the step clock's timed seconds (``timed_s += dt``, as the fold
    carries it): every row does when the shortest interval is at least one unit in the last
    place of any sum it is added to (then ``s + dt >= s + ulp(s) > s``), else row by row."""
    if min(dts) >= math.ulp(2 * (timed_s + sum(dts))):  # twice: a bound on each rounded sum
        return [True] * len(dts)
    tcs = list(accumulate(dts, initial=timed_s))
    return list(map(gt, tcs[1:], tcs[:-1]))


def _charted(rates: list) -> list[bool]:
    """Whether each row charted a tokens/s point (had a rate)."""
    if None not in rates:  # the usual case
        return [True] * len(rates)
    return [x is not None for x in rates]


def _commit(eng: Any, got: dict, ts: list, rc, r, own, chart: bool = True) -> None:
    """Leave the state ``Engine.apply`` of each row would have left (``chart`` False: but
    the chart's points, which :func:`fold_run` hands on itself)."""
    c, counts = eng.clock, eng.counts
    steps, toks, smps, sqv, sqt, dts = (got[k] for k in ("steps", "toks", "smps", "sqv", "sqt",
                                                         "dts"))  # fmt: skip
    m, t_end, w = len(ts), ts[-1], c.recent.maxlen
    eng.records += m
    if eng.last_t is None or t_end > eng.last_t:
        eng.last_t = t_end
    ones = repeat(1)
    rc.steps += m
    rc.recent.extend(zip(dts[-w:], ones, strict=False))
    rc.mean = None
    rc.last_t = t_end
    # the rank's arrival, lag and split (core/ranks.py Ranks.on_step, no arrival)
    r.steps += m
    r.recent.extend(zip(dts[-w:], ones, strict=False))
    r.recent_s = got["sr"]
    r.recent_steps = w if m >= w else sum(map(_SECOND, r.recent))  # each new interval: 1
    r.timed_s = got["tr"]
    r.steps_timed += m
    r.inside_s += r.pending_s
    r.pending_s = 0.0
    r.last_t = t_end
    # its own counts (core/rank_counts.py RankCounts.add)
    tsum, ssum = sum(toks), sum(smps)
    own.tokens += tsum
    own.samples += ssum
    own.steps += m
    counts.tokens += tsum
    counts.samples += ssum
    own.last_t = counts.newest_t = t_end
    own.timed_tokens += tsum
    own.timed_samples += ssum
    own.timed_s = got["to"]
    own.timed += m
    own.recent.extend(zip(dts[-w:], toks[-w:], smps[-w:], strict=True))
    while len(own.recent) > counts.window:
        own.recent.popleft()
    own.recent_tokens = got["rt"]
    own.recent_samples = sum(map(_THIRD, own.recent))
    own.recent_s = got["so"]
    # the step clock (Engine._on_step, _Clock.push)
    c.tokens, c.samples = counts.tokens, counts.samples
    c.seq_sq += sum(sqv)
    c.seq_tokens += sum(sqt)
    c.step = steps[-1]
    c.timed_s = got["tc"]
    eng.span_inside_s += eng.span_pending_s
    eng.span_pending_s = 0.0
    c.timed_tokens += tsum
    c.recent.extend(zip(dts[-w:], toks[-w:], sqv[-w:], sqt[-w:], ones, strict=False))
    c.recent_tokens = got["rt"]  # the counts' window holds the same tokens (checked)
    c.recent_sq = sum(map(_THIRD, c.recent))
    c.recent_sq_tokens = sum(map(_FOURTH, c.recent))
    c.recent_steps = w if m >= w else sum(map(_FIFTH, c.recent))
    c.recent_s = got["sc"]
    c.last_t = t_end
    if eng.run["state"] == "idle":
        eng.run["state"] = "running"
    if not chart:
        return
    xs, ys, runs = got["chart"]
    if len(runs) == 1:  # the usual case: no copy
        eng.timeline.extend("tokens_per_s", xs, ys, runs[0][1])
        return
    a = 0
    for m, sc in runs:  # rows of lengths that vary: a run of one scale at a time
        eng.timeline.extend("tokens_per_s", xs[a : a + m], ys[a : a + m], sc)
        a += m
