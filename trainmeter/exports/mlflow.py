"""``tm export mlflow``: the run as an MLflow run, through MLflow's own client.

Where: ``--out`` is a tracking URI (``http://host:5000``, ``sqlite:///mlflow.db``, ``file:DIR``)
or a folder (a local file store there); the default is the file store ``<run folder>/mlruns``,
which needs no server (``mlflow ui --backend-store-uri file:<run folder>/mlruns`` shows it).
MLflow 3 refuses a file store unless ``MLFLOW_ALLOW_FILE_STORE`` is true; for a ``file:``
target this process sets it, unless it is already set.

- **Metrics**: every series at full resolution (:mod:`trainmeter.exports.points`), each point
  at its optimizer step and the wall-clock time it was recorded (GPU counters at the step
  count of their reading: MLflow charts them against time too). MLflow allows letters, digits
  and ``_ - . / space`` in a name; any other character becomes ``_``.
- **Passport**: its figures as metrics under ``passport/`` (``passport/flops_spent/hf``,
  ``passport/mfu_avg/titan``: each FLOPs and MFU figure names its convention), its facts as
  params (``convention``, ``conventions``, ``dtype``, ...), and ``passport.md`` and
  ``passport.json`` as artifacts (:func:`trainmeter.core.passport.flat`).
- The MLflow run starts and ends when the training run did, with its state (``FINISHED``,
  ``FAILED``, ``KILLED`` for an interrupted run; an open run stays ``RUNNING``).
"""

from __future__ import annotations

import calendar
import os
import re
import time
from itertools import islice
from pathlib import Path

from trainmeter.core.passport import flat
from trainmeter.core.passport_md import markdown
from trainmeter.exports import require
from trainmeter.exports.run import RunData

BATCH = 1000  # metrics per log_batch call (MLflow's MAX_METRICS_PER_BATCH)
PARAM_BATCH = 100  # params per call (MAX_PARAMS_TAGS_PER_BATCH)
MAX_KEY = 250  # characters of a metric or param name (MAX_ENTITY_KEY_LENGTH)
MAX_PARAM = 6000  # characters of a param value (MAX_PARAM_VAL_LENGTH)
_STATUS = {"finished": "FINISHED", "failed": "FAILED", "interrupted": "KILLED"}
_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+:")  # a scheme of 2+ letters: not a drive letter


def export(run: RunData, out: str | None = None, experiment: str = "trainmeter") -> str:
    """Log the run to MLflow; returns ``<tracking URI> run <run id>``.

    Raises:
        MissingPackage: mlflow is not installed.
        mlflow.exceptions.MlflowException: the store refused something (the message says what).
    """
    require("mlflow", "mlflow")
    from mlflow.entities import Metric, Param
    from mlflow.tracking import MlflowClient

    uri = tracking_uri(out, run.folder)
    if uri.startswith("file:"):
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(experiment)
    exp_id = exp.experiment_id if exp else client.create_experiment(experiment)
    p = run.passport
    config, summary = flat(p)
    start_ms = _ms(p.get("started"))
    mlrun = client.create_run(
        exp_id,
        start_time=start_ms,
        run_name=run.name,
        tags={"trainmeter.convention": str(p.get("convention"))},
    )
    rid = mlrun.info.run_id
    try:
        params = [Param(k[:MAX_KEY], str(v)[:MAX_PARAM]) for k, v in config.items()]
        for i in range(0, len(params), PARAM_BATCH):
            client.log_batch(rid, params=params[i : i + PARAM_BATCH])
        points = (
            Metric(metric_name(q.series), q.value, int(q.time * 1000), q.step) for q in run.points()
        )
        end_ms = _ms(p.get("ended"))
        when = end_ms or int(time.time() * 1000)
        figures = (Metric(metric_name(f"passport/{k}"), v, when, 0) for k, v in summary.items())
        for chunk in _chunks(points, figures):
            client.log_batch(rid, metrics=chunk)
        client.log_text(rid, markdown(p), "passport.md")
        client.log_dict(rid, p, "passport.json")
    except BaseException:
        client.set_terminated(rid, "FAILED")
        raise
    status = _STATUS.get((p.get("run") or {}).get("state"))
    if status:
        client.set_terminated(rid, status, end_time=end_ms)
    return f"{uri} run {rid}"


def tracking_uri(out: str | None, folder: Path) -> str:
    """``out`` when it is a URI, else ``file:`` + its absolute path; default the run folder's
    ``mlruns``."""
    if out and _URI.match(out):
        return out
    return "file:" + str(Path(out or folder / "mlruns").resolve())


def metric_name(series: str) -> str:
    """``series`` as a valid MLflow name: characters outside ``[/\\w.\\- ]`` become ``_``,
    empty, ``.`` and ``..`` path parts are dropped or renamed (MLflow refuses names that are
    not a normalized relative path), cut to ``MAX_KEY`` characters."""
    name = re.sub(r"[^/\w.\- ]", "_", series)
    parts = [s if s not in (".", "..") else s.replace(".", "_") for s in name.split("/") if s]
    return "/".join(parts)[:MAX_KEY].strip("/") or "_"


def _ms(iso: str | None) -> int | None:
    """ISO 8601 UTC (``2023-11-14T22:13:20Z``, as the passport writes it) to epoch ms."""
    if not iso:
        return None
    return calendar.timegm(time.strptime(iso, "%Y-%m-%dT%H:%M:%SZ")) * 1000


def _chunks(*streams):
    """Lists of at most ``BATCH`` items from the streams, in order."""
    for stream in streams:
        it = iter(stream)
        while chunk := list(islice(it, BATCH)):
            yield chunk
