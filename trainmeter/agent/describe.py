"""Describe a model for the FLOPs conventions: parameter counts and transformer shape.

Runs once per run, after the first optimizer step, never on the hot path. It reads only
Python metadata (``numel``, module attributes, the config object): no tensor values, so no
device synchronization (invariant 8). The result feeds ``core.flops.ModelShape``.

Shape fields come from the model's ``config`` when it has one (Hugging Face and nanoGPT
spellings), else are inferred from the modules; docs/spec.md "Model shape" lists the rules.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

_CONFIG_KEYS = {
    "layers": ("num_hidden_layers", "n_layer", "n_layers", "num_layers"),
    "width": ("hidden_size", "n_embd", "d_model", "dim"),
    "heads": ("num_attention_heads", "n_head", "n_heads", "num_heads"),
    "kv_heads": ("num_key_value_heads", "n_kv_head", "n_kv_heads", "num_kv_heads"),
    "head_dim": ("head_dim",),
    "ffn": ("intermediate_size", "n_inner", "ffn_dim", "ffn_hidden_size"),
    "vocab": ("vocab_size", "n_vocab"),
    "context": ("max_position_embeddings", "block_size", "n_positions", "max_seq_len"),
}
_GATED_ACTS = ("silu", "swiglu", "swish", "geglu")


# Wrappers that hold the user's model in an attribute and add no parameters of their own:
# DistributedDataParallel and DataParallel (``module``), torch.compile's OptimizedModule
# (``_orig_mod``). FSDP keeps ``module`` too, but its parameters are flattened shards.
_WRAPPED = (("DistributedDataParallel", "module"), ("DataParallel", "module"),
            ("OptimizedModule", "_orig_mod"))  # fmt: skip


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
    model = unwrap(model)
    params = {id(p): p for p in model.parameters()}  # tied weights counted once
    embeddings = [m for m in model.modules() if isinstance(m, nn.Embedding)]
    cfg = _from_config(getattr(model, "config", None))
    vocab = cfg.get("vocab")
    token_emb = _token_embedding(embeddings, vocab)
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    tied = token_emb is not None and any(lin.weight is token_emb.weight for lin in linears)
    width = cfg.get("width") or (token_emb.embedding_dim if token_emb is not None else None)
    out: dict[str, Any] = {
        "name": type(model).__name__,
        "params": sum(p.numel() for p in params.values()),
        "embedding_params": sum(m.weight.numel() for m in {id(e): e for e in embeddings}.values()),
        "token_embedding_params": token_emb.weight.numel() if token_emb is not None else 0,
        "layers": cfg.get("layers") or _longest_module_list(model, nn),
        "width": width,
        "heads": cfg.get("heads") or _heads(model),
        "kv_heads": cfg.get("kv_heads"),
        "head_dim": cfg.get("head_dim"),
        "vocab": vocab or (token_emb.num_embeddings if token_emb is not None else None),
        "seq_len": seq_len,
        "context": cfg.get("context"),
        "tied_embeddings": tied,
    }
    ffn, gated = _mlp(linears, width, out["vocab"], out["layers"])
    out["ffn"] = cfg.get("ffn") or ffn
    out["gated_mlp"] = cfg.get("gated", gated)
    return out


def _from_config(config: Any) -> dict[str, Any]:
    if config is None:
        return {}
    get = config.get if isinstance(config, dict) else lambda k: getattr(config, k, None)
    out: dict[str, Any] = {}
    for field, keys in _CONFIG_KEYS.items():
        for key in keys:
            value = get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                out[field] = value
                break
    act = get("hidden_act") or get("activation_function") or get("mlp_type")
    if isinstance(act, str):
        out["gated"] = any(g in act.lower() for g in _GATED_ACTS)
    return out


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


def _heads(model) -> int | None:
    for m in model.modules():
        for attr in ("n_head", "num_heads", "num_attention_heads", "n_heads", "nhead"):
            value = getattr(m, attr, None)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
    return None


def _mlp(linears: list, width: int | None, vocab: int | None, layers: int | None):
    """MLP hidden size and gating from the Linear layers fed by the residual stream.

    The hidden size is the most common output width of ``Linear(width -> n)`` excluding the
    residual width, the vocabulary and the fused-QKV width; two such layers per block (gate
    and up projections) mean a gated MLP.
    """
    if not width:
        return None, False
    outs = Counter(
        lin.out_features
        for lin in linears
        if lin.in_features == width and lin.out_features not in (width, 3 * width, vocab)
    )
    if not outs:
        return None, False
    ffn, count = outs.most_common(1)[0]
    gated = bool(layers) and count >= 2 * layers
    return ffn, gated
