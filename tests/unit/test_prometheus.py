"""The Prometheus endpoint's collector, against a hand-built snapshot (each exported value is
the snapshot's own, times a unit factor worked out by hand) and against a real engine snapshot
(every figure the snapshot has is exported), plus the address form and the missing-package
error."""

import socket
import sys
import urllib.request

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from trainmeter import cli
from trainmeter.core import counters, records
from trainmeter.core.engine import Engine
from trainmeter.web import prometheus
from trainmeter.web.prometheus import SnapshotCollector, parse_address, start_exporter

H100 = "NVIDIA H100 80GB HBM3"


def _gpu(index, **fields):
    entry = dict.fromkeys(counters.GPU_KEYS)
    entry.update(index=index, name=H100, missing={}, throttle=[], train_mem_bytes=None)
    entry.update(fields)
    return entry


SNAP = {  # the shape of Engine.snapshot(), the values picked by hand
    "run": {"id": "20260101-000000-abcd", "name": "pretrain", "state": "running",
            "host": "gpu-017", "version": "0.1.0"},
    "convention": "titan", "step": 120, "tokens": 245_760, "samples": 960,
    "elapsed_s": 61.5, "train_time_s": 59.0, "tokens_per_s": 8192.5, "step_time_s": 0.25,
    "budget_tokens": 1e9, "progress": 0.00024576, "eta_s": 122_000.0, "gpus": 8,
    "flops_per_token": {"hf": 5.83e9, "titan": 6.28e9, "embeddings": None},
    "flops_spent": {"hf": 1.4e15, "titan": 1.5e15, "embeddings": None},
    "model_flops_per_s": {"hf": 4.8e13, "titan": 5.1e13, "embeddings": None},
    "mfu": {"hf": 0.38, "titan": 0.41, "embeddings": None},
    "flops_per_token_counted": None,
    "peak": {"flops": 989.5e12, "dtype": "bf16", "source": "table"},
    "ranks": {"0": 120, "1": 118},
    "rank_step_time_s": {"0": 0.25, "1": 0.33},
    "stragglers": [1],
    "time_split": {"compute": 50.0, "data": 5.0, "checkpoint": 2.0, "eval": 1.0,
                   "startup": 9.0, "other": 3.5, "warmup": 1.5},
    "series": {"train/loss": {"step": 120, "value": 2.75, "ema": 2.8, "role": "train_loss"}},
    "hardware": {
        "backend": "nvml", "lost": [1],
        "gpus": [_gpu(0, gpu_util=0.97, sm_active=0.81, sm_occupancy=None, power_w=612.5,
                      energy_j=3600.0, sm_clock_mhz=1980, mem_used_bytes=7.5e10,
                      throttle=["sw_power_cap"]),
                 _gpu(1, gpu_util=0.5)],
        "host": {"cpu_util": 0.25, "mem_used_bytes": 1e10, "mem_total_bytes": 2e11,
                 "rss_bytes": 4e9, "missing": {}},
    },
}  # fmt: skip


def _scrape(snap, **kw) -> dict:
    """{(sample name, frozenset of labels): value} of one collection, through the text format
    and prometheus-client's own parser."""
    registry = CollectorRegistry()
    registry.register(SnapshotCollector(lambda: snap, **kw))
    text = generate_latest(registry).decode()
    return _samples(text)


def _samples(text: str) -> dict:
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def _get(samples, name, /, **labels):
    return samples[(name, frozenset({"node": "gpu-017", **labels}.items()))]


def test_step_tokens_rate_and_mfu_are_the_snapshots_with_node_and_convention_labels():
    s = _scrape(SNAP)
    assert _get(s, "trainmeter_step") == 120
    assert _get(s, "trainmeter_tokens_total") == 245_760
    assert _get(s, "trainmeter_tokens_per_second") == 8192.5
    assert _get(s, "trainmeter_mfu_ratio", convention="titan") == 0.41
    assert _get(s, "trainmeter_mfu_ratio", convention="hf") == 0.38
    assert _get(s, "trainmeter_model_flops_total", convention="titan") == 1.5e15
    assert _get(s, "trainmeter_peak_flops_per_second", dtype="bf16", source="table") == 989.5e12
    assert _get(s, "trainmeter_time_split_seconds", bucket="data") == 5.0
    assert _get(s, "trainmeter_time_split_seconds", bucket="startup") == 9.0  # its own bucket
    assert _get(s, "trainmeter_series", name="train/loss", role="train_loss") == 2.75
    # a convention without a figure is left out, never exported as 0
    assert not [k for k in s if ("convention", "embeddings") in k[1]]
    assert not [k for k in s if k[0] == "trainmeter_counted_flops_per_token"]
    assert _get(s, "trainmeter_run_state", state="running") == 1
    assert _get(s, "trainmeter_run_state", state="finished") == 0


def test_a_run_that_ended_without_a_close_is_state_ended_not_none():
    # core.records.RUN_STATES is the one list: a replayed log with no run_end is "ended"
    s = _scrape({**SNAP, "run": {**SNAP["run"], "state": "ended"}})
    assert _get(s, "trainmeter_run_state", state="ended") == 1
    assert sum(_get(s, "trainmeter_run_state", state=st) for st in records.RUN_STATES) == 1


def test_run_info_names_the_job():
    s = _scrape(SNAP, job_id="slurm:77")
    (labels,) = [dict(k[1]) for k in s if k[0] == "trainmeter_run_info"]
    assert labels == {
        "node": "gpu-017",
        "run_id": "20260101-000000-abcd",
        "name": "pretrain",
        "job_id": "slurm:77",
        "convention": "titan",
        "version": "0.1.0",
    }


def test_gpu_samples_are_in_base_units_with_gpu_and_name_labels():
    s = _scrape(SNAP)
    g0 = {"gpu": "0", "gpu_name": H100}
    assert _get(s, "trainmeter_gpu_utilization_ratio", **g0) == 0.97
    assert _get(s, "trainmeter_gpu_sm_clock_hertz", **g0) == 1980e6  # 1980 MHz
    assert _get(s, "trainmeter_gpu_power_watts", **g0) == 612.5
    assert _get(s, "trainmeter_gpu_energy_joules_total", **g0) == 3600.0
    assert _get(s, "trainmeter_gpu_memory_used_bytes", **g0) == 7.5e10
    assert _get(s, "trainmeter_gpu_throttle", reason="sw_power_cap", **g0) == 1
    assert _get(s, "trainmeter_gpu_lost", **g0) == 0
    assert _get(s, "trainmeter_gpu_lost", gpu="1", gpu_name=H100) == 1
    assert _get(s, "trainmeter_gpu_utilization_ratio", gpu="1", gpu_name=H100) == 0.5
    assert not [k for k in s if k[0] == "trainmeter_gpu_sm_occupancy_ratio"]  # null: left out
    assert _get(s, "trainmeter_host_cpu_utilization_ratio") == 0.25
    assert _get(s, "trainmeter_training_resident_memory_bytes") == 4e9


def test_a_merged_runs_gpus_carry_their_own_node_and_their_index_there():
    """A merged run (tm merge) renumbers GPUs: node-b's GPU 0 is the run's GPU 2. Its samples
    are labelled as node-b's own tm labelled them live (node "node-b", gpu "0"), so the two
    series line up; the run's other samples keep the supervisor's node label."""
    gpus = [_gpu(0, node="node-a", node_index=0, power_w=500.0),
            _gpu(2, node="node-b", node_index=0, power_w=650.0)]  # fmt: skip
    snap = {**SNAP, "hardware": {**SNAP["hardware"], "gpus": gpus, "lost": [2]}}
    s = _scrape(snap)
    assert _get(s, "trainmeter_gpu_power_watts", node="node-a", gpu="0", gpu_name=H100) == 500.0
    assert _get(s, "trainmeter_gpu_power_watts", node="node-b", gpu="0", gpu_name=H100) == 650.0
    assert _get(s, "trainmeter_gpu_lost", node="node-b", gpu="0", gpu_name=H100) == 1
    assert _get(s, "trainmeter_gpu_lost", node="node-a", gpu="0", gpu_name=H100) == 0
    power = [dict(k[1]) for k in s if k[0] == "trainmeter_gpu_power_watts"]
    assert len(power) == 2 and not [p for p in power if p["node"] == "gpu-017"]
    assert _get(s, "trainmeter_step") == 120  # the run's own figures: the supervisor's node


def test_ranks_have_steps_step_time_and_the_straggler_flag():
    s = _scrape(SNAP)
    assert _get(s, "trainmeter_rank_steps_total", rank="1") == 118
    assert _get(s, "trainmeter_rank_step_time_seconds", rank="1") == 0.33
    assert _get(s, "trainmeter_rank_straggler", rank="1") == 1
    assert _get(s, "trainmeter_rank_straggler", rank="0") == 0


def test_each_rank_has_its_arrival_lag_the_jobs_wait_on_it_and_its_time_per_bucket():
    """The synchronous straggler figures (docs/spec.md "Stragglers"), as the snapshot has them:
    a null lag (rank 0: not in a synchronous group) is left out, never exported as 0."""
    split = {"0": None, "1": {"compute": 40.0, "data": 12.5, "wait": 0.0}}
    snap = {**SNAP, "rank_lag_s": {"0": None, "1": 0.031}, "straggler_cost_s": {"1": 0.029},
            "rank_time_split": split}  # fmt: skip
    s = _scrape(snap)
    assert _get(s, "trainmeter_rank_lag_seconds", rank="1") == 0.031
    assert not [k for k in s if k[0] == "trainmeter_rank_lag_seconds" and ("rank", "0") in k[1]]
    assert _get(s, "trainmeter_rank_job_wait_seconds", rank="1") == 0.029
    assert _get(s, "trainmeter_rank_time_split_seconds", rank="1", bucket="data") == 12.5
    assert _get(s, "trainmeter_rank_time_split_seconds", rank="1", bucket="wait") == 0.0
    assert not [k for k in s if k[0] == "trainmeter_rank_time_split_seconds"
                and ("rank", "0") in k[1]]  # fmt: skip


def test_a_merged_runs_ranks_carry_their_own_node():
    """``rank_nodes`` (a merged log's): each rank's families carry that rank's node, as its
    node's own ``tm`` labels them live; a rank with no node keeps the supervisor's."""
    snap = {**SNAP, "rank_nodes": {"0": "node-a", "1": "node-b"}, "rank_lag_s": {"1": 0.031},
            "rank_time_split": {"1": {"compute": 40.0}}}  # fmt: skip
    s = _scrape(snap)
    assert _get(s, "trainmeter_rank_steps_total", rank="1", node="node-b") == 118
    assert _get(s, "trainmeter_rank_lag_seconds", rank="1", node="node-b") == 0.031
    assert _get(s, "trainmeter_rank_time_split_seconds", rank="1", node="node-b",
                bucket="compute") == 40.0  # fmt: skip
    assert _get(s, "trainmeter_rank_straggler", rank="0", node="node-a") == 0
    plain = _scrape(SNAP)
    assert {dict(k[1])["node"] for k in plain if k[0] == "trainmeter_rank_steps_total"} == {
        "gpu-017"
    }


def test_a_node_without_rank_0_exports_its_ranks_and_gpus_but_no_job_wide_figures():
    snap = {**SNAP, "ranks": {"8": 40, "9": 40}, "rank_step_time_s": {"8": 0.2, "9": 0.2},
            "stragglers": None, "step": 0, "tokens": 0}  # fmt: skip
    s = _scrape(snap)
    names = {k[0] for k in s}
    assert not names & {"trainmeter_step", "trainmeter_tokens_total", "trainmeter_mfu_ratio",
                        "trainmeter_tokens_per_second"}  # fmt: skip
    assert _get(s, "trainmeter_rank_steps_total", rank="9") == 40
    assert "trainmeter_gpu_power_watts" in names and "trainmeter_rank_straggler" not in names


def test_every_numeric_gpu_field_has_a_metric_named_by_its_unit():
    numeric = set(counters.GPU_KEYS) - {"index", "name", "throttle", "missing"}
    assert numeric | {"train_mem_bytes"} == set(prometheus.GPU_FIELDS)
    suffix = {"fraction": "_ratio", "bytes": "_bytes", "W": "_watts", "J": "_joules",
              "MHz": "_hertz", "FLOP/s": "_flops_per_second", "bytes/s": "_bytes_per_second",
              "FLOP/byte": "_flops_per_byte"}  # fmt: skip
    for field in prometheus.GPU_FIELDS:
        name, _ = prometheus.gpu_metric_name(field)
        assert name.endswith(suffix[prometheus.GPU_UNITS[field]]), field


def test_a_real_engine_snapshot_exports_every_gpu_figure_it_has():
    eng = Engine()
    devices = [{"index": i, "name": H100, "mem_total_bytes": 80 << 30, "power_limit_w": 700.0,
                "mig": False} for i in (0, 1)]  # fmt: skip
    gpus = [{"index": i, "time_s": 5.0, "gpu_util": 0.9, "sm_active": 0.8, "sm_occupancy": 0.3,
             "tensor_active": 0.5, "dram_active": 0.4, "power_w": 500.0, "energy_mj": 10**6,
             "sm_clock_mhz": 1980, "mem_clock_mhz": 2619, "mem_used_bytes": 10**10,
             "process_mem_bytes": {"7": 5 * 10**9}} for i in (0, 1)]  # fmt: skip
    for rec in (
        records.make("run_start", 1.0, id="r", name="n", argv=[], version="0", host="gpu-017",
                     opts={"dtype": "bf16"}),
        records.make("gpu_devices", 1.0, backend="nvml", devices=devices, reason=None),
        records.make("agent_hello", 1.0, pid=7, rank=0, world_size=1),
        records.make("gpu", 5.0, gpus=gpus, host=None),
        records.make("step", 6.0, step=1, rank=0, tokens=64),
        records.make("step", 7.0, step=2, rank=0, tokens=64),
    ):  # fmt: skip
        eng.apply(rec)
    snap = eng.snapshot()
    s = _scrape(snap)
    for entry in snap["hardware"]["gpus"]:
        for field in prometheus.GPU_FIELDS:
            name, factor = prometheus.gpu_metric_name(field)
            name = prometheus.PREFIX + name + ("_total" if field in prometheus.GPU_COUNTERS else "")
            labels = {"gpu": str(entry["index"]), "gpu_name": H100}
            if entry[field] is None:
                assert not [k for k in s if k[0] == name and ("gpu", labels["gpu"]) in k[1]]
            else:
                assert _get(s, name, **labels) == pytest.approx(entry[field] * factor), field
    assert _get(s, "trainmeter_tokens_total") == 128 and _get(s, "trainmeter_step") == 2


def test_samples_per_second_is_the_engines_rate_worked_out_by_hand():
    """Rank 0 alone, 8 samples of 4 tokens a step: steps at t = 10, 11, 11.5 and 12.5 s are
    three timed intervals (the first step is not timed) of 1 + 0.5 + 1 = 2.5 s holding 3 x 8 =
    24 samples, so 24 / 2.5 = 9.6 samples/s (and 96 / 2.5 = 38.4 tokens/s); 32 samples in all."""
    eng = Engine()
    eng.apply(records.make("run_start", 1.0, id="r", name="n", argv=[], version="0",
                           host="gpu-017", opts={}))  # fmt: skip
    eng.apply(records.make("agent_hello", 1.0, pid=7, rank=0, world_size=1))
    for step, t in enumerate((10.0, 11.0, 11.5, 12.5), start=1):
        eng.apply(records.make("step", t, step=step, rank=0, tokens=32, samples=8))
    s = _scrape(eng.snapshot())
    assert _get(s, "trainmeter_samples_per_second") == pytest.approx(9.6)
    assert _get(s, "trainmeter_tokens_per_second") == pytest.approx(38.4)
    assert _get(s, "trainmeter_samples_total") == 32


def test_a_run_without_samples_exports_no_samples_per_second():
    s = _scrape({**SNAP, "samples_per_s": None})
    assert not [k for k in s if k[0] == "trainmeter_samples_per_second"]
    assert _get(_scrape({**SNAP, "samples_per_s": 3.5}), "trainmeter_samples_per_second") == 3.5


def test_a_snapshot_it_cannot_read_is_one_line_and_an_error_count(capsys):
    collector = SnapshotCollector(lambda: {**SNAP, "ranks": {"0": 120, "x": 1}})
    for _ in range(2):
        registry = CollectorRegistry()
        registry.register(collector)
        s = _samples(generate_latest(registry).decode())
    assert _get(s, "trainmeter_scrape_errors_total") == 2
    assert _get(s, "trainmeter_step") == 120  # what was read before the fault is still there
    err = capsys.readouterr().err
    assert err.count("[trainmeter] Prometheus: a metric could not be read") == 1


def test_the_endpoint_serves_the_text_format_over_http():
    exporter = start_exporter(lambda: SNAP, "127.0.0.1", 0)
    try:
        assert exporter.port > 0 and exporter.url == f"http://127.0.0.1:{exporter.port}/metrics"
        with urllib.request.urlopen(exporter.url, timeout=10) as resp:
            s = _samples(resp.read().decode())
        assert _get(s, "trainmeter_step") == 120
    finally:
        exporter.close()


@pytest.mark.parametrize(("text", "want"), [
    ("9400", ("0.0.0.0", 9400)), ("0", ("0.0.0.0", 0)), ("127.0.0.1:9400", ("127.0.0.1", 9400)),
    ("[::1]:9400", ("::1", 9400)), ("gpu-017:80", ("gpu-017", 80)),
])  # fmt: skip
def test_an_address_is_a_port_or_host_and_port(text, want):
    assert parse_address(text) == want


@pytest.mark.parametrize("text", ["", "x", ":9400", "9400:", "65536", "-1", "host:port"])
def test_a_bad_address_is_refused(text):
    with pytest.raises(ValueError, match="PORT"):
        parse_address(text)


def test_without_prometheus_client_tm_exits_2_before_starting_the_child(tmp_path, monkeypatch,
                                                                         capsys):  # fmt: skip
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # import raises ImportError
    code = "open('started', 'w')"
    assert cli.main(["--prometheus", "9400", "--", sys.executable, "-c", code]) == 2
    err = capsys.readouterr().err
    assert err == 'tm: --prometheus needs prometheus-client: pip install "trainmeter[prometheus]"\n'
    assert not (tmp_path / "started").exists() and not (tmp_path / ".trainmeter").exists()


def test_a_bad_prometheus_flag_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["--prometheus", "http", "--", "true"])
    assert exc.value.code == 2
    assert "--prometheus: 'http' is not [HOST:]PORT" in capsys.readouterr().err


def test_a_taken_port_is_one_line_and_the_run_goes_on(capsys):
    from trainmeter.commands import serve

    class _Live:
        def snapshot(self):
            return SNAP

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        assert serve._start_metrics(_Live(), ("127.0.0.1", port)) is None
    err = capsys.readouterr().err
    assert err.startswith(f"[trainmeter] no Prometheus endpoint on 127.0.0.1:{port} (")
    assert err.endswith("; the run goes on\n") and err.count("\n") == 1
