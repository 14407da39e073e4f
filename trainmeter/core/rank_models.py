"""Every rank's model record combined into the job's model, and the devices the ranks use
(docs/spec.md "Counts from every rank"). Pure; the engine calls it once per model record.

The rule, shown as the combined record's ``rule`` and ``rule_text``:

- ``one``: one rank described its model;
- ``same``: every rank describes the same model (data parallel, and FSDP or ZeRO-3, whose
  agents describe the unsharded model): the job trains one model;
- ``stages``: ranks describe different models (pipeline stages, mixed hosts). The ranks are
  grouped by model; the smallest group's size is taken as the data-parallel degree ``d`` (each
  stage replicated ``d`` times) and the job's model is the sum of the stages: ``params``,
  ``embedding_params``, ``token_embedding_params`` and ``layers`` are ``Σ_groups value × size /
  d``; width, heads, head sizes, FFN, context are kept where the stages agree (else absent);
  the vocabulary is the largest. FLOPs per token then mean the whole pipeline's per token:
  every token passes through every stage once.
"""

from __future__ import annotations

from typing import Any

SIGNATURE = ("name", "params", "embedding_params", "token_embedding_params", "layers", "width",
             "heads", "kv_heads", "head_dim", "ffn", "gated_mlp", "vocab",
             "tied_embeddings")  # fmt: skip
SUMMED = ("params", "embedding_params", "token_embedding_params", "layers")
AGREED = ("width", "heads", "kv_heads", "head_dim", "ffn", "gated_mlp", "context")
_TEXT = {
    "one": "model: one rank's",
    "same": "model: every rank's is the same (data parallel, or sharded and described whole)",
}


def combine(models: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """The job's model from ``{rank: bounded model record}`` (at least one), with ``rule``,
    ``rule_text`` and ``ranks`` (how many ranks described one) added."""
    ranks = sorted(models)
    first = models[ranks[0]]
    groups: dict[tuple, list[int]] = {}
    for r in ranks:
        groups.setdefault(tuple(models[r].get(k) for k in SIGNATURE), []).append(r)
    if len(groups) == 1:
        rule = "one" if len(ranks) == 1 else "same"
        return {**first, "rule": rule, "rule_text": _TEXT[rule], "ranks": len(ranks)}
    return _stages(models, list(groups.values()), first, len(ranks))


def _stages(models: dict, groups: list[list[int]], first: dict, n: int) -> dict[str, Any]:
    degree = min(len(g) for g in groups)
    heads = [models[g[0]] for g in groups]  # one record per group, in rank order
    out = dict(first)
    for k in SUMMED:
        values = [(h.get(k), len(g)) for h, g in zip(heads, groups, strict=True)]
        ok = all(_index(v) for v, _ in values)  # a stage without embeddings has 0
        out[k] = sum(v * size for v, size in values) // degree if ok else None
    for k in AGREED:
        seen = {h.get(k) for h in heads} - {None}
        if len(seen) == 1:
            out[k] = seen.pop()
        else:  # the stages disagree, or none gives it: absent (a convention says so)
            out.pop(k, None)
    vocabs = [h["vocab"] for h in heads if _count(h.get("vocab"))]
    out["vocab"] = max(vocabs) if vocabs else None
    out["tied_embeddings"] = all(h.get("tied_embeddings") for h in heads)
    out["name"] = "+".join(dict.fromkeys(str(h.get("name")) for h in heads))[:200]
    stages = sum(len(g) for g in groups) // degree
    text = (f"model: {len(groups)} different models over {n} ranks, taken as {stages} "
            f"pipeline stages x {degree} data-parallel replica(s): parameters and layers are "
            "the stages' sum, FLOPs per token the whole pipeline's")  # fmt: skip
    return {**out, "rule": "stages", "rule_text": text, "ranks": n, "stages": stages,
            "replicas": degree}  # fmt: skip


def devices(models: dict[int, dict], hosts: dict[int, str], world: int) -> int:
    """Distinct devices the ranks use: each described rank's device is (its host or node, the
    device type, the CUDA or other index; a CPU rank is one device of its own), counted once
    however many ranks share it, with ``gpus`` per process; a rank of the ``world`` that
    described no model yet counts one device."""
    seen: dict[tuple, int] = {}
    for r, m in models.items():
        kind, index = m.get("device") or "cpu", m.get("device_index")
        where = m.get("node") or hosts.get(r) or ""
        key = (where, kind, index if kind != "cpu" and _index(index) else f"rank{r}")
        per = m.get("gpus") if kind != "cpu" and _count(m.get("gpus")) else 1
        seen[key] = max(seen.get(key, 0), per)
    return sum(seen.values()) + max(0, world - len(models))


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _index(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
