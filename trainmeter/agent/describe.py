"""Describe a model for the FLOPs conventions: parameter counts and transformer shape.

Runs once per run, after the first optimizer step, never on the hot path. It reads only
Python metadata (``numel``, module attributes, the config object): no tensor values, so no
device synchronization (the no-device-sync invariant). The result feeds ``core.flops.ModelShape``.

Shape fields come from the model's ``config`` when it has one (read by
``core.hfconfig.read``: each Hugging Face model type's own keys and null defaults, else the
generic spellings, nanoGPT's among them), else are inferred from the modules (``nn.Linear``
and Hugging Face's ``Conv1D``); docs/spec.md "Model shape" lists the rules.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from trainmeter.core.hfconfig import MODULE_HEADS
from trainmeter.core.hfconfig import read as read_config

# Wrappers that hold the user's model in an attribute and add no parameters of their own:
# DistributedDataParallel and DataParallel (``module``), torch.compile's OptimizedModule
# (``_orig_mod``). FSDP keeps ``module`` too, but its parameters are flattened shards.
# FSDP1 (FullyShardedDataParallel) keeps ``module`` too; its parameters are flat shards, counted
# whole from the flat parameters' metadata (:func:`_flat_counts`).
_WRAPPED = (("DistributedDataParallel", "module"), ("DataParallel", "module"),
            ("OptimizedModule", "_orig_mod"), ("FullyShardedDataParallel", "module"))  # fmt: skip


def unwrap(model):
    """The user's model inside data-parallel and ``torch.compile`` wrappers (its name, config
    and shape are the model's; a wrapper's are not), else ``model`` itself."""
    for _ in range(4):  # DDP(compile(model)) and the like: a few levels at most
        attr = dict(_WRAPPED).get(type(model).__name__)
        inner = getattr(model, attr, None) if attr else None
        if inner is None:
            return model
        model = inner
    return model


def describe(torch, model, seq_len: int | None) -> dict[str, Any]:
    """Counts and shape of ``model`` (a ``torch.nn.Module``) as a ``model`` record's fields.

    Args:
        torch: the imported torch module (the agent never imports it itself).
        model: the root module the optimizer trains (a data-parallel or compiled wrapper is
            looked through: :func:`unwrap`).
        seq_len: tokens per sequence seen in the first training batch, or None.
    Returns:
        A dict with ``params``, ``embedding_params``, ``token_embedding_params`` and the
        optional shape fields of ``ModelShape`` plus ``name`` (the class name) and
        ``context`` (the configured maximum sequence length).
    """
    nn = torch.nn
    flat_total, managed = _flat_counts(model)
    model = unwrap(model)
    params = {id(p): p for p in model.parameters() if id(p) not in managed}  # tied: once
    embeddings = [m for m in model.modules() if isinstance(m, nn.Embedding)]
    config = read_config(getattr(model, "config", None))
    cfg = config.values
    vocab = cfg.get("vocab")
    token_emb = _token_embedding(embeddings, vocab)
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    tied = token_emb is not None and any(lin.weight is token_emb.weight for lin in linears)
    width = cfg.get("width") or (token_emb.embedding_dim if token_emb is not None else None)
    layers = cfg.get("layers") or _longest_module_list(model, nn)
    out: dict[str, Any] = {
        "name": type(model).__name__,
        "params": flat_total + sum(p.numel() for p in params.values()),
        "embedding_params": sum(_rows(m) for m in {id(e): e for e in embeddings}.values()),
        "token_embedding_params": _rows(token_emb) if token_emb is not None else 0,
        "layers": layers,
        "width": width,
        "heads": cfg.get("heads") or _heads(model),
        "kv_heads": cfg.get("kv_heads"),
        "head_dim": cfg.get("head_dim"),
        "vocab": vocab or (token_emb.num_embeddings if token_emb is not None else None),
        "seq_len": seq_len,
        "context": cfg.get("context"),
        "tied_embeddings": tied,
    }
    blocks = _block_list(model, nn, layers)
    scope = blocks.modules() if blocks is not None else model.modules()
    ffn, gated = _mlp(_projections(scope, nn), width, out["vocab"], layers, blocks is None)
    out["ffn"] = cfg.get("ffn") or ffn
    out["gated_mlp"] = config.gated if config.gated is not None else gated
    if managed:
        out["sharding"] = "fsdp1"  # counted whole: every rank describes the same model
    return out


def _flat_counts(model) -> tuple[int, set[int]]:
    """FSDP1's flat parameters under ``model``: the unsharded parameters' total (each flat
    parameter's ``_numels``, the original parameters' sizes without padding; a shared one
    appears once, torch/distributed/fsdp/_flat_param.py) and the ids of what they cover (the
    flat parameters, and the original parameters they view with ``use_orig_params=True``),
    whose local shard sizes are not counted. Metadata only: no tensor value, no sync."""
    total, managed = 0, set()
    for m in model.modules():
        flat = getattr(getattr(m, "_handle", None), "flat_param", None)
        numels = getattr(flat, "_numels", None)
        if numels is None or id(flat) in managed:
            continue
        managed.add(id(flat))
        managed.update(id(p) for p in (getattr(flat, "_params", None) or []))
        total += sum(int(n) for n in numels)
    return total, managed


def _rows(emb) -> int:
    """An embedding's parameters from its sizes (its weight may be a flat parameter's shard)."""
    return emb.num_embeddings * emb.embedding_dim


def _token_embedding(embeddings: list, vocab: int | None):
    """The input token table: the embedding whose rows match the vocabulary, else the largest."""
    if not embeddings:
        return None
    if vocab:
        for emb in embeddings:
            if emb.num_embeddings >= vocab and emb.num_embeddings - vocab < 1024:
                return emb
    return max(embeddings, key=lambda e: e.num_embeddings)


def _longest_module_list(model, nn) -> int | None:
    lengths = [len(m) for m in model.modules() if isinstance(m, nn.ModuleList)]
    return max(lengths) if lengths else None


def _block_list(model, nn, layers: int | None):
    """The transformer's block stack: the first ``nn.ModuleList`` of ``layers`` modules."""
    if not layers:
        return None
    return next(
        (m for m in model.modules() if isinstance(m, nn.ModuleList) and len(m) == layers), None
    )


def _heads(model) -> int | None:
    for m in model.modules():
        for attr in MODULE_HEADS:
            value = getattr(m, attr, None)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
    return None


def _projections(modules, nn) -> list[tuple[int, int]]:
    """(in features, out features) of every matrix projection among ``modules``.

    ``nn.Linear`` (``in_features``, ``out_features``) and Hugging Face's ``Conv1D`` (GPT-2 and
    its kin: a Linear with a transposed weight; ``nx`` in, ``nf`` out, weight ``(nx, nf)``;
    transformers ``pytorch_utils.py``), found by its class name: the agent never imports
    transformers.
    """
    out = []
    for m in modules:
        if isinstance(m, nn.Linear):
            out.append((m.in_features, m.out_features))
        elif type(m).__name__ == "Conv1D":
            pair = _conv1d_features(m)
            if pair is not None:
                out.append(pair)
    return out


def _conv1d_features(m) -> tuple[int, int] | None:
    nx, nf = getattr(m, "nx", None), getattr(m, "nf", None)
    if _count(nx) and _count(nf):
        return nx, nf
    shape = tuple(getattr(getattr(m, "weight", None), "shape", ()))
    return (shape[0], shape[1]) if len(shape) == 2 and all(map(_count, shape)) else None


def _count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _mlp(projections: list, width: int | None, vocab: int | None, layers: int | None,
         whole_model: bool) -> tuple[int | None, bool]:  # fmt: skip
    """MLP hidden size and gating from the projections fed by the residual stream.

    ``projections`` are (in, out) pairs from the block stack, or from the whole model when
    there is none (``whole_model``): then one projection of the vocabulary's width is the
    output head and is not counted (a vocabulary of 4 x width keeps the MLP's 4 x width).
    Candidates are ``width -> n`` other than the residual width and the fused QKV (3 x width);
    the up projection is the candidate wider than width (grouped-query k/v projections are
    narrower), then the most frequent, then the widest; searching the whole model, only one
    wider than width (a narrower one is a head, such as a classifier's). As many as two per
    block (gate and up: at least 2 x layers) mean a gated MLP.
    """
    if not width:
        return None, False
    outs = Counter(o for i, o in projections if i == width and o not in (width, 3 * width))
    if whole_model and vocab in outs:
        outs[vocab] -= 1  # the output head
        if not outs[vocab]:
            del outs[vocab]
    if whole_model:  # with no block stack, a narrower projection is a head (a classifier's
        outs = Counter({o: n for o, n in outs.items() if o > width})  # D -> classes), no MLP
    if not outs:
        return None, False
    ffn = max(outs, key=lambda o: (o > width, outs[o], o))
    return ffn, bool(layers) and outs[ffn] >= 2 * layers
