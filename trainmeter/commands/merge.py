"""``tm merge RUN... [--out DIR] [--name N] [--force]``: one job's node runs as one run.

A multi-node job runs one ``tm`` per node, and each writes its own run folder
(``<run id>-<host>-r<lo>-<hi>``, docs/multinode.md). This command reads those logs (never
changing them) and writes a new run folder whose ``run.jsonl`` replays as the whole job:

- one ``run_start`` (the earliest start; the node holding rank 0 gives name, argv, options and
  job; ``nodes`` lists each node's host, run, ranks and merged GPU indices) and one ``run_end``
  (the latest end; ``error`` if any node failed, else ``interrupted`` if any was, else ``ok``);
- every other record of every node, interleaved by time with each node's own order kept (a
  k-way merge, so each node's records reach the engine in the order its supervisor saw them),
  ranks as they were, and ``node`` (the node's label: its host) added to each;
- the nodes' GPUs renumbered so they do not collide: node k's GPU i becomes ``offset_k + i``
  (``node_index`` keeps i), in one ``gpu_devices`` record listing every node's devices.

Replayed, the merged run has every rank's steps (so stragglers across nodes show), rank 0's
step clock with the job's world size, and every node's GPUs and energy. The runs must name the
same job (``run_start.job.id``, recorded from the environment ``tm`` started in:
``store.job_facts``) and hold disjoint ranks; otherwise the merge is refused unless ``--force``.
"""

from __future__ import annotations

import heapq
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainmeter.core import checkpoint, logread, records
from trainmeter.core.engine import Engine, replay
from trainmeter.core.summary import summary_line
from trainmeter.supervisor.store import RunLog, find_run, new_run_id

FORCE_HINT = "; --force merges anyway"
_SEGMENTS = ("segment_start", "segment_end")
_FOLDED = ("run_start", "run_end", "gpu_devices")  # replaced by the merged run's own


class MergeError(ValueError):
    """Runs that cannot be merged as asked (the message says why, in one line)."""


@dataclass
class NodeRun:
    """One node's run log, read whole."""

    folder: Path
    recs: list[dict[str, Any]]
    start: dict[str, Any]
    end: dict[str, Any] | None
    ranks: list[int]
    world: int
    devices: list[dict[str, Any]] = field(default_factory=list)
    bad_lines: int = 0
    label: str = ""

    @property
    def job_id(self) -> str | None:
        return (self.start.get("job") or {}).get("id")

    def rank_text(self) -> str:
        if not self.ranks:
            return "no ranks"
        lo, hi = self.ranks[0], self.ranks[-1]
        return f"rank {lo}" if lo == hi else f"ranks {lo}-{hi}"


def read_node(folder: Path) -> NodeRun:
    """Read ``folder/run.jsonl``; malformed lines are skipped and counted.

    Raises:
        MergeError: the log has no ``run_start`` (not a trainmeter run log).
    """
    recs, reader = logread.read(folder / "run.jsonl")  # bad lines skipped and counted
    bad = reader.total_skipped()
    start = next((r for r in recs if r["k"] == "run_start"), None)
    if start is None:
        raise MergeError(f"{folder}: no run_start record (not a trainmeter run log)")
    steps = {r["rank"] for r in recs if r["k"] == "step"}
    hellos = [r for r in recs if r["k"] == "agent_hello"]
    # a launcher's own agent (torchrun's) is rank 0 alone in a world of 1: not a training rank
    ranks = steps | {r["rank"] for r in hellos if r["world_size"] > 1}
    devices = next((r["devices"] for r in recs if r["k"] == "gpu_devices"), [])
    return NodeRun(folder=folder, recs=recs, start=start,
                   end=next((r for r in reversed(recs) if r["k"] == "run_end"), None),
                   ranks=sorted(ranks), world=max([r["world_size"] for r in hellos] or [1]),
                   devices=[d for d in devices if isinstance(d, dict)], bad_lines=bad)  # fmt: skip


def order_nodes(nodes: list[NodeRun]) -> list[NodeRun]:
    """Nodes by their lowest rank (the step clock's node first), then start time; each gets a
    ``label``: its host, made unique with ``-<position>`` when hosts repeat."""
    nodes = sorted(nodes, key=lambda n: (n.ranks[0] if n.ranks else 2**63, n.start["t"]))
    hosts = [str(n.start.get("host") or "node") for n in nodes]
    for i, (node, host) in enumerate(zip(nodes, hosts, strict=True)):
        node.label = host if hosts.count(host) == 1 else f"{host}-{i}"
    return nodes


def check(nodes: list[NodeRun], force: bool) -> list[str]:
    """Refuse runs that are not one job's nodes; returns warnings for what is odd but fine.

    Raises:
        MergeError: a folder given twice (always); without ``force``: a run with no job id,
            runs of different jobs, or a rank in two runs.
    """
    folders = [n.folder.resolve() for n in nodes]
    if len(set(folders)) < len(folders):
        raise MergeError("the same run folder is given twice")
    problems = _job_problems(nodes) + _rank_problems(nodes)
    if problems and not force:
        raise MergeError(problems[0] + FORCE_HINT)
    warnings = [f"merged anyway (--force): {p}" for p in problems]
    world = max(n.world for n in nodes)
    seen = {r for n in nodes for r in n.ranks}
    missing = sorted(set(range(world)) - seen) if world > 1 else []
    if missing:
        warnings.append(f"{_span(missing)} of a world of {world} are in none of these runs "
                        "(a node's run not given?)")  # fmt: skip
    warnings += [f"{n.folder.name}: {n.bad_lines} malformed line(s) skipped"
                 for n in nodes if n.bad_lines]  # fmt: skip
    warnings += [f"{n.folder.name}: no run_end (its supervisor was cut short)"
                 for n in nodes if n.end is None]  # fmt: skip
    return warnings


def _job_problems(nodes: list[NodeRun]) -> list[str]:
    unnamed = [n.folder.name for n in nodes if not n.job_id]
    if unnamed:
        return [f"{unnamed[0]} records no job id (none of TRAINMETER_JOB_ID, SLURM_JOB_ID, "
                "TORCHELASTIC_RUN_ID, MASTER_ADDR/PORT was set when its tm started)"]  # fmt: skip
    first = nodes[0]
    other = next((n for n in nodes if n.job_id != first.job_id), None)
    if other is None:
        return []
    return [f"the runs belong to different jobs: {first.folder.name} is {first.job_id}, "
            f"{other.folder.name} is {other.job_id}"]  # fmt: skip


def _rank_problems(nodes: list[NodeRun]) -> list[str]:
    for i, a in enumerate(nodes):
        for b in nodes[i + 1 :]:
            both = sorted(set(a.ranks) & set(b.ranks))
            if both:
                return [f"{_span(both)} in both {a.folder.name} and {b.folder.name} (the same "
                        "node twice, or runs of different jobs)"]  # fmt: skip
    return []


def _span(ranks: list[int]) -> str:
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    contiguous = ranks[-1] - ranks[0] + 1 == len(ranks)
    return f"ranks {ranks[0]}-{ranks[-1]}" if contiguous else f"ranks {ranks}"


def merged_records(nodes: list[NodeRun], run_id: str, name: str | None,
                   notes: list[str]) -> Iterator[dict[str, Any]]:  # fmt: skip
    """The merged run's records in order (``nodes`` as :func:`order_nodes` returns them)."""
    offsets, gpus, devices = [], [], []
    for node in nodes:
        offsets.append(len(devices))
        moved = [_moved(d, len(devices), node.label) for d in node.devices]
        gpus.append([d["index"] for d in moved if isinstance(d.get("index"), int)])
        devices += moved
    yield _run_start(nodes, run_id, name, gpus)
    yield records.make("note", nodes[0].start["t"], source="merge", text=_summary(nodes))
    for text in notes:
        yield records.make("note", nodes[0].start["t"], source="merge", text=text)
    firsts = [r for r in (_first_devices(n) for n in nodes) if r is not None]
    if firsts:
        yield _devices(firsts, devices)
    streams = [_node_stream(n, offsets[i], i == 0) for i, n in enumerate(nodes)]
    yield from heapq.merge(*streams, key=lambda r: r["t"])
    yield _run_end(nodes)


def _moved(d: Any, offset: int, label: str) -> Any:
    """A device or sample dict with its index moved by ``offset`` and its ``node``."""
    if not isinstance(d, dict) or not isinstance(d.get("index"), int):
        return d
    out = {**d, "index": d["index"] + offset, "node_index": d["index"], "node": label}
    if isinstance(d.get("gpu_index"), int):  # a MIG instance's physical GPU
        out["gpu_index"] = d["gpu_index"] + offset
    return out


def _node_stream(node: NodeRun, offset: int, first: bool) -> Iterator[dict[str, Any]]:
    for rec in node.recs:
        kind = rec["k"]
        if kind in _FOLDED or (kind in _SEGMENTS and not first):
            continue  # notebook segments: the step clock's node's only
        rec = {**{k: v for k, v in rec.items() if k != "n"}, "node": node.label}  # n: restamped
        if kind == "gpu":
            rec["gpus"] = [_moved(s, offset, node.label) for s in rec["gpus"]]
        yield rec


def _run_start(nodes, run_id: str, name: str | None, gpus: list[list[int]]) -> dict[str, Any]:
    head = nodes[0].start
    facts = [{"node": n.label, "host": n.start.get("host"), "run": n.start.get("id"),
              "folder": n.folder.name, "ranks": [n.ranks[0], n.ranks[-1]] if n.ranks else None,
              "gpus": [g[0], g[-1]] if g else None}
             for n, g in zip(nodes, gpus, strict=True)]  # fmt: skip
    keep = {k: head[k] for k in ("version", "cwd", "host", "opts", "job") if k in head}
    return records.make("run_start", min(n.start["t"] for n in nodes), id=run_id,
                        name=name or head["name"], argv=head["argv"], **keep, nodes=facts,
                        merged_from=[n.folder.name for n in nodes])  # fmt: skip


def _first_devices(node: NodeRun) -> dict[str, Any] | None:
    """A node's first ``gpu_devices`` record (a run has one; later ones are not merged)."""
    return next((r for r in node.recs if r["k"] == "gpu_devices"), None)


def _devices(firsts: list[dict], devices: list[dict]) -> dict[str, Any]:
    """One ``gpu_devices`` record for every node's devices (renumbered)."""
    backends = "+".join(dict.fromkeys(r["backend"] for r in firsts))
    reason = None if devices else next((r["reason"] for r in firsts if r.get("reason")), None)
    return records.make("gpu_devices", min(r["t"] for r in firsts), backend=backends,
                        devices=devices, reason=reason)  # fmt: skip


def _run_end(nodes: list[NodeRun]) -> dict[str, Any]:
    ends = [n.end or {"t": n.recs[-1]["t"], "status": "error", "exit_code": None} for n in nodes]
    statuses = [e["status"] for e in ends]
    status = next((s for s in ("error", "interrupted") if s in statuses), "ok")
    codes = [e.get("exit_code") for e in ends]
    code = next((c for c in codes if c), codes[0])
    return records.make("run_end", max(e["t"] for e in ends), status=status, exit_code=code)


def _summary(nodes: list[NodeRun]) -> str:
    parts = [f"{n.label} {n.rank_text()} ({n.folder.name})" for n in nodes]
    return f"merged from {len(nodes)} node runs: " + ", ".join(parts)


def _fold(eng: Engine, rec: dict[str, Any]) -> bool:
    """Fold one merged record as replay will; False when it raises (replay would count it,
    and a checkpoint holds a log read without a flaw: then none is written)."""
    try:
        eng.apply(rec)
    except Exception:  # a validated record never should
        return False
    return True


def _checkpoint(log: RunLog, eng: Engine) -> None:
    """The merged log's last line: a checkpoint of the whole job's engine, so ``tm ls`` and
    ``tm replay`` read the merged run from it (docs/spec.md "Checkpoints"); none when the
    state has no checkpoint form."""
    size = log.size()
    try:
        line = checkpoint.line(eng, eng.last_t or 0.0, size, log.n, eng.run.get("id"))
    except Exception:  # CheckpointError, or a bug: the merged log is whole without one
        return
    if size is not None:
        log.append_unnumbered(line)


def merge(folders: list[Path], out: Path | None = None, name: str | None = None,
          force: bool = False) -> tuple[Path, list[str]]:  # fmt: skip
    """Merge the runs in ``folders`` into a new run folder; returns it and the warnings.

    ``out`` defaults to ``<the first run's parent>/<new run id>-merged``.
    Raises:
        MergeError: fewer than two runs, runs that are not one job's (see :func:`check`), or
            an ``out`` that exists and is not empty.
        OSError: a log cannot be read or the new one written.
    """
    if len(folders) < 2:
        raise MergeError("give the run folders of two or more nodes")
    nodes = order_nodes([read_node(f) for f in folders])
    warnings = check(nodes, force)
    run_id = new_run_id()
    out = out or nodes[0].folder.parent / f"{run_id}-merged"
    if out.exists() and any(out.iterdir()):
        raise MergeError(f"{out} exists and is not empty: choose another --out")
    log = RunLog(out)
    eng, folded = Engine(), True
    try:
        batch = []
        for rec in merged_records(nodes, run_id, name, warnings):
            batch.append(rec)
            folded = folded and _fold(eng, rec)
            if len(batch) >= 4096:
                log.append_many(batch)
                batch.clear()
        log.append_many(batch)
        if folded:
            _checkpoint(log, eng)
    finally:
        log.close()
    return out, warnings


def main(argv: list[str]) -> int:
    """``tm merge``: exit 0 merged, 1 a run not found, 2 runs that cannot be merged."""
    from trainmeter.commands.args import Parser, run_arguments

    p = Parser(prog="tm merge", description="Combine the run folders of one multi-node job's "
                "nodes into one run for replay (docs/multinode.md).")  # fmt: skip
    p.add_argument("runs", nargs="+", metavar="RUN", help="run folders, ids or id prefixes")
    p.add_argument("--out", type=Path, help="the merged run's folder (default: beside the "
                   "first run, <new run id>-merged)")  # fmt: skip
    p.add_argument("--name", help="the merged run's name (default: rank 0's run name)")
    p.add_argument("--force", action="store_true",
                   help="merge runs that do not name one job, or share ranks")  # fmt: skip
    run_arguments(p, run=False)
    args = p.parse_args(argv)
    try:
        folders = [find_run(r, args.dir) for r in args.runs]
    except FileNotFoundError as exc:
        print(f"tm: {exc}", file=sys.stderr)
        return 1
    try:
        out, warnings = merge(folders, args.out, args.name, args.force)
    except MergeError as exc:
        print(f"tm merge: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"tm merge: {exc}", file=sys.stderr)
        return 1
    for w in warnings:
        print(f"tm merge: warning: {w}", file=sys.stderr)
    try:
        snap = replay(out / "run.jsonl").snapshot()
    except OSError as exc:
        print(f"tm merge: cannot read {out / 'run.jsonl'}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    snap["run"]["log"] = str(out / "run.jsonl")
    print(f"merged {len(folders)} runs into {out}")
    print(summary_line(snap))
    return 0
