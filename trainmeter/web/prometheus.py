"""Live metrics in the Prometheus text format: ``tm --prometheus [HOST:]PORT``.

A cluster already runs Prometheus and Grafana; each node's ``tm`` exposes its live snapshot
(:meth:`trainmeter.supervisor.live.Live.snapshot`) at ``http://HOST:PORT/metrics`` for them to
scrape and aggregate across nodes, rather than trainmeter growing an aggregator of its own
(docs/multinode.md). The HTTP server and the text format are ``prometheus-client``'s
(an optional dependency, imported only when the endpoint starts); this module maps the snapshot
onto metric families, read at scrape time by a custom collector, so a scrape always sees one
consistent snapshot taken under the supervisor's lock.

Names follow Prometheus's conventions (https://prometheus.io/docs/practices/naming/): prefix
``trainmeter_``, base units as suffixes (``_seconds``, ``_bytes``, ``_joules``, ``_watts``,
``_hertz``; a 0..1 fraction is ``_ratio``), counters end in ``_total``. Every sample has a
``node`` label (the supervisor's hostname; on a merged run's GPU samples, the GPU's own node,
with ``gpu`` its index on that node, and on its per-rank samples the rank's own node); per-GPU
families add ``gpu`` (the NVML index) and ``gpu_name``, per-rank families ``rank``, FLOPs and
MFU families ``convention`` (the named-convention invariant). A figure the snapshot does not
have (null) is left out, never exported as 0.

Job-wide figures (step, tokens and samples and their rates, FLOPs, MFU, the time split) are
the job's as rank 0's supervisor sees them (docs/spec.md "Counts from every rank"), so only the
supervisor that sees rank 0 exports them; every node exports its ranks' step counts and times
and its GPUs and host. Thus a PromQL ``sum`` over nodes counts the job once (docs/prometheus.md).
"""

from __future__ import annotations

import math
import socket
import sys
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from trainmeter.core import counters
from trainmeter.core.records import RUN_STATES
from trainmeter.core.units import quoted

INSTALL_HINT = '--prometheus needs prometheus-client: pip install "trainmeter[prometheus]"'
ALL_INTERFACES = "0.0.0.0"
PREFIX = "trainmeter_"

UNIT_SUFFIX = {  # counters.UNITS unit -> (metric-name suffix, factor to the base unit)
    "fraction": ("_ratio", 1.0),
    "bytes": ("_bytes", 1.0),
    "W": ("_watts", 1.0),
    "J": ("_joules", 1.0),
    "MHz": ("_hertz", 1e6),
    "FLOP/s": ("_flops_per_second", 1.0),
    "bytes/s": ("_bytes_per_second", 1.0),
    "FLOP/byte": ("_flops_per_byte", 1.0),
}
GPU_UNITS = {**counters.UNITS, "train_mem_bytes": "bytes"}  # as hardware["units"] says
GPU_FIELDS = {  # hardware["gpus"] field -> (name stem, help); unit from GPU_UNITS
    "gpu_util": ("gpu_utilization", "NVML GPU-Util: time a kernel ran"),
    "sm_active": ("gpu_sm_active", "SM activity (NVML GPM)"),
    "sm_occupancy": ("gpu_sm_occupancy", "SM occupancy: resident warps over the maximum (GPM)"),
    "tensor_active": ("gpu_tensor_active", "tensor-pipe activity (NVML GPM)"),
    "dram_active": ("gpu_dram_active", "DRAM bandwidth used over its peak (NVML GPM)"),
    "ofu": ("gpu_ofu", "observed FLOPs utilisation: tensor activity, beside MFU"),
    "observed_flops_per_s": ("gpu_observed", "tensor activity times the dense peak"),
    "dram_bytes_per_s": ("gpu_dram", "DRAM activity times the datasheet bandwidth"),
    "intensity": ("gpu_arithmetic_intensity", "observed FLOP/s over DRAM bytes/s"),
    "ridge_point": ("gpu_ridge_point", "dense peak over memory bandwidth"),
    "mem_used_bytes": ("gpu_memory_used", "GPU memory used, all processes"),
    "mem_total_bytes": ("gpu_memory_total", "GPU memory"),
    "train_mem_bytes": ("gpu_training_memory", "GPU memory of the training processes"),
    "power_w": ("gpu_power", "board power"),
    "power_limit_w": ("gpu_power_limit", "board power limit"),
    "energy_j": ("gpu_energy", "energy since the run started (NVML counter)"),
    "sm_clock_mhz": ("gpu_sm_clock", "SM clock"),
    "mem_clock_mhz": ("gpu_memory_clock", "memory clock"),
}
GPU_COUNTERS = frozenset({"energy_j"})  # only grows during a run
HOST_FIELDS = {  # hardware["host"] field -> (name stem, help)
    "cpu_util": ("host_cpu_utilization", "CPU time used, all CPUs"),
    "mem_used_bytes": ("host_memory_used", "host memory used"),
    "mem_total_bytes": ("host_memory_total", "host memory"),
    "rss_bytes": ("training_resident_memory", "resident memory of the training processes"),
}
# they add up to elapsed_s (startup: before the first step: imports, data, model build)
TIME_BUCKETS = ("compute", "data", "checkpoint", "eval", "startup", "other")


def parse_address(text: str) -> tuple[str, int]:
    """``PORT``, ``HOST:PORT`` or ``[IPv6]:PORT`` as ``(host, port)``.

    A bare port binds all interfaces (``0.0.0.0``): a cluster's Prometheus scrapes from another
    host, which is what the flag is for. Port 0 asks the system for a free one.
    Raises:
        ValueError: not that form, or a port outside 0-65535.
    """
    host, sep, port = text.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if sep and not host:
        raise ValueError(f"{quoted(text)}: give PORT or HOST:PORT")
    try:
        number = int(port)
    except ValueError:
        number = -1
    if not 0 <= number <= 65535:
        raise ValueError(
            f"{quoted(text)} is not [HOST:]PORT with a port 0-65535 (0: any free port)"
        )
    return (host or ALL_INTERFACES), number


def require() -> None:
    """Check that prometheus-client imports.

    Raises:
        ValueError: with :data:`INSTALL_HINT` when it does not.
    """
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        raise ValueError(INSTALL_HINT) from None


def _number(value: Any) -> float | None:
    """A finite number as float; None for null, bool, text or NaN/inf (left out)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


class SnapshotCollector:
    """A prometheus-client collector of one supervisor's live snapshot.

    Args:
        snapshot: returns the snapshot now (``Live.snapshot``; docs/spec.md "Snapshot").
        node: the ``node`` label; default the snapshot's ``run.host``, else this hostname.
        job_id: the job this node belongs to (``store.job_facts``), in ``trainmeter_run_info``.
    """

    def __init__(self, snapshot: Callable[[], Mapping], node: str | None = None,
                 job_id: str | None = None) -> None:  # fmt: skip
        self.snapshot = snapshot
        self.node = node
        self.job_id = job_id
        self.errors = 0

    def collect(self) -> Iterator[Any]:
        """The metric families of one snapshot (prometheus-client's collector protocol).

        A snapshot this code cannot read is one line on stderr (the first time) and the
        families read so far, never a traceback per scrape in the person's terminal; the
        count is ``trainmeter_scrape_errors_total``.
        """
        snap = self.snapshot()
        run = snap.get("run") or {}
        out = _Families(self.node or run.get("host") or socket.gethostname())
        try:
            _run_families(out, snap, self.job_id)
            if "0" in (snap.get("ranks") or {}):  # this supervisor holds the step clock
                _clock_families(out, snap)
            _rank_families(out, snap)
            _hardware_families(out, snap.get("hardware"))
        except Exception as exc:  # a view must not fail loudly; the run log has everything
            self.errors += 1
            if self.errors == 1:
                print(f"[trainmeter] Prometheus: a metric could not be read ({exc!r})",
                      file=sys.stderr)  # fmt: skip
        out.add("scrape_errors", "scrapes that could not read every metric", self.errors,
                "counter")  # fmt: skip
        return iter(out.families.values())


class _Families:
    """Metric families by name, each with the ``node`` label first."""

    def __init__(self, node: str) -> None:
        from prometheus_client import core

        self.node = node
        self.families: dict[str, Any] = {}
        self._core = core

    def add(self, name: str, help_: str, value: Any, kind: str = "gauge", /, **labels: str) -> None:
        """One sample of ``trainmeter_<name>`` (a counter's name gets ``_total``); skipped
        when ``value`` is not a finite number. A ``node`` label given here replaces this
        supervisor's (a merged run's GPU is labelled with its own node)."""
        x = _number(value)
        if x is None:
            return
        node = labels.pop("node", None) or self.node
        fam = self.families.get(name)
        if fam is None:
            core = self._core
            cls = core.CounterMetricFamily if kind == "counter" else core.GaugeMetricFamily
            fam = self.families[name] = cls(PREFIX + name, help_, labels=["node", *labels])
        fam.add_metric([node, *labels.values()], x)

    def info(self, name: str, help_: str, values: dict[str, str]) -> None:
        fam = self._core.InfoMetricFamily(PREFIX + name, help_, labels=["node"])
        self.families[name] = fam
        fam.add_metric([self.node], values)


def _run_families(out: _Families, snap: Mapping, job_id: str | None) -> None:
    run = snap.get("run") or {}
    info = {"run_id": run.get("id"), "name": run.get("name"), "job_id": job_id,
            "convention": snap.get("convention"), "version": run.get("version")}  # fmt: skip
    out.info("run", "the run this supervisor watches", {k: str(v or "") for k, v in info.items()})
    for state in RUN_STATES:
        out.add("run_state", "1 for the run's state, 0 for the others",
                int(run.get("state") == state), state=state)  # fmt: skip
    out.add("elapsed_seconds", "time inside segments (a tm run is one)", snap.get("elapsed_s"))


def _by_convention(out: _Families, name: str, help_: str, values: Any, kind="gauge") -> None:
    for convention, value in (values or {}).items():
        out.add(name, help_, value, kind, convention=convention)


def _clock_families(out: _Families, snap: Mapping) -> None:
    """Job-wide figures of rank 0's step clock (docs/spec.md "Snapshot")."""
    out.add("step", "rank 0's optimizer step (the step clock)", snap.get("step"))
    out.add("tokens", "tokens trained, all ranks (each rank's own, summed)", snap.get("tokens"),
            "counter")  # fmt: skip
    out.add("samples", "samples trained, all ranks", snap.get("samples"), "counter")
    out.add("tokens_per_second", "tokens/s over the last 20 timed steps", snap.get("tokens_per_s"))
    out.add("samples_per_second", "samples/s over the last 20 timed steps (any model: "
            "images, audio, rows)", snap.get("samples_per_s"))  # fmt: skip
    out.add("train_seconds", "sum of timed step intervals", snap.get("train_time_s"))
    out.add("budget_tokens", "the token budget", snap.get("budget_tokens"))
    out.add("progress_ratio", "tokens over the token budget", snap.get("progress"))
    out.add("eta_seconds", "time to the budget at the recent rate", snap.get("eta_s"))
    out.add("gpus", "devices MFU divides by", snap.get("gpus"))
    _by_convention(out, "model_flops_per_token", "training FLOPs per token under a named "
                   "convention", snap.get("flops_per_token"))  # fmt: skip
    out.add("counted_flops_per_token", "executed FLOPs per token of one real step "
            "(FlopCounterMode), beside the conventions",
            snap.get("flops_per_token_counted"))  # fmt: skip
    _by_convention(out, "model_flops", "training FLOPs spent under a named convention",
                   snap.get("flops_spent"), "counter")  # fmt: skip
    _by_convention(out, "model_flops_per_second", "model FLOP/s, all devices",
                   snap.get("model_flops_per_s"))  # fmt: skip
    _by_convention(out, "mfu_ratio", "model FLOPs utilisation over the last 20 timed steps",
                   snap.get("mfu"))  # fmt: skip
    peak = snap.get("peak") or {}
    out.add("peak_flops_per_second", "dense peak of one device for the run's dtype",
            peak.get("flops"), dtype=str(peak.get("dtype") or ""),
            source=str(peak.get("source") or ""))  # fmt: skip
    split = snap.get("time_split") or {}
    for bucket in TIME_BUCKETS:
        out.add("time_split_seconds", "rank 0's time per bucket; the buckets add up to "
                "elapsed", split.get(bucket), bucket=bucket)  # fmt: skip
    out.add("warmup_seconds", "first forward pass to first optimizer step (part of 'other')",
            split.get("warmup"))  # fmt: skip
    for name, s in (snap.get("series") or {}).items():
        out.add("series", "the last value of a series the loop reported", s.get("value"),
                name=name, role=str(s.get("role") or ""))  # fmt: skip


def _rank_families(out: _Families, snap: Mapping) -> None:
    """Per rank this supervisor saw: steps, step time, arrival lag, the job's wait on it, its
    time per bucket, straggler flag (docs/spec.md "Stragglers")."""
    times = snap.get("rank_step_time_s") or {}
    lags = snap.get("rank_lag_s") or {}
    costs = snap.get("straggler_cost_s") or {}
    splits = snap.get("rank_time_split") or {}
    stragglers = snap.get("stragglers")
    nodes = snap.get("rank_nodes") if isinstance(snap.get("rank_nodes"), Mapping) else {}
    for rank, steps in (snap.get("ranks") or {}).items():
        node = nodes.get(rank)  # a merged run: the rank's own node, as its node's tm exports it
        where = {"rank": rank, **({"node": node} if isinstance(node, str) and node else {})}
        out.add("rank_steps", "optimizer steps of one rank", steps, "counter", **where)
        out.add("rank_step_time_seconds", "mean of a rank's last 20 timed step intervals",
                times.get(rank), **where)  # fmt: skip
        out.add("rank_lag_seconds", "mean lag of the rank's arrival at a step (its last "
                "backward) behind the median rank, last 20 synchronous steps", lags.get(rank),
                **where)  # fmt: skip
        out.add("rank_job_wait_seconds", "mean time per step the job waits for this rank "
                "(a straggler's cost), last 20 synchronous steps", costs.get(rank),
                **where)  # fmt: skip
        split = splits.get(rank) if isinstance(splits, Mapping) else None
        for bucket, seconds in (split or {}).items():
            out.add("rank_time_split_seconds", "one rank's time per bucket (wait: for "
                    "other ranks at synchronous steps)", seconds, **where,
                    bucket=str(bucket))  # fmt: skip
        if stragglers is not None:
            out.add("rank_straggler", "1 when the rank is flagged as consistently slower",
                    int(int(rank) in stragglers), **where)  # fmt: skip


def gpu_metric_name(field: str) -> tuple[str, float]:
    """``(name after the prefix, factor)`` of a ``hardware["gpus"]`` field: the stem of
    :data:`GPU_FIELDS` and the suffix and factor of its unit in :data:`GPU_UNITS`."""
    stem = GPU_FIELDS[field][0]
    suffix, factor = UNIT_SUFFIX[GPU_UNITS[field]]
    return stem + suffix, factor


def _hardware_families(out: _Families, hw: Mapping | None) -> None:
    if not hw:
        return
    lost = set(hw.get("lost") or [])
    for gpu in hw.get("gpus") or []:
        labels = {"gpu": str(gpu.get("index")), "gpu_name": str(gpu.get("name") or "")}
        if isinstance(gpu.get("node"), str) and gpu["node"]:  # a merged run: the GPU's node
            # and its index there, as that node's own tm exports it
            labels["node"] = gpu["node"]
            if isinstance(gpu.get("node_index"), int):
                labels["gpu"] = str(gpu["node_index"])
        for field, (_, help_) in GPU_FIELDS.items():
            name, factor = gpu_metric_name(field)
            kind = "counter" if field in GPU_COUNTERS else "gauge"
            value = _number(gpu.get(field))
            out.add(name, help_, None if value is None else value * factor, kind, **labels)
        for reason in gpu.get("throttle") or []:
            out.add("gpu_throttle", "1 for each active clock throttle reason (NVML)", 1,
                    reason=str(reason), **labels)  # fmt: skip
        out.add("gpu_lost", "1 when NVML stopped answering for this GPU",
                int(gpu.get("index") in lost), **labels)  # fmt: skip
    host = hw.get("host") or {}
    for field, (stem, help_) in HOST_FIELDS.items():
        suffix, factor = UNIT_SUFFIX[counters.UNITS.get(field, "bytes")]
        value = _number(host.get(field))
        out.add(stem + suffix, help_, None if value is None else value * factor)


class Exporter:
    """prometheus-client's HTTP server for one collector, in a daemon thread."""

    def __init__(self, httpd, thread) -> None:
        self._httpd = httpd
        self._thread = thread
        self.host, self.port = httpd.server_address[:2]

    @property
    def address(self) -> str:
        """``HOST:PORT`` as bound (``[::]:PORT`` for IPv6)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.address}/metrics"

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)


def start_exporter(snapshot: Callable[[], Mapping], host: str, port: int, *,
                   node: str | None = None, job_id: str | None = None) -> Exporter:  # fmt: skip
    """Serve ``snapshot`` at ``http://host:port/metrics`` (port 0: a free one).

    Uses a registry of its own, so only trainmeter's families are exposed.
    Raises:
        ImportError: prometheus-client is missing (check with :func:`require` first).
        OSError: the address cannot be bound (port taken, no such interface).
    """
    from prometheus_client import CollectorRegistry, start_http_server

    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(snapshot, node=node, job_id=job_id))
    httpd, thread = start_http_server(port, host, registry)
    return Exporter(httpd, thread)
