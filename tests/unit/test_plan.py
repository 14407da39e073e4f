"""Planned throughput and ETA at an assumed MFU, and the core of ``tm plan`` (presets, Hugging
Face config.json, GPU names, ``plan_run``). Every expected number is worked out by hand in the
comment beside it."""

import dataclasses
import inspect
import json
from pathlib import Path

import pytest

from trainmeter.core import flops, peaks, plan, presets


def test_default_mfu_is_the_cited_forty_percent():
    assert plan.DEFAULT_PLAN_MFU == 0.40
    # the constant's documentation names its source and the figures it sits between
    source = inspect.getsource(plan)
    assert "Chowdhery et al. 2022" in source and "Table 3" in source
    assert "30.2 %" in source and "46.2 %" in source


def test_planned_tokens_per_s_on_eight_a100s():
    # 0.40 x 312e12 FLOP/s x 8 GPUs / 6e9 FLOP/token = 998.4e12 / 6e9 = 166,400 tokens/s
    assert plan.planned_tokens_per_s(0.40, 312e12, 8, 6e9) == pytest.approx(166_400)


def test_planned_tokens_per_s_reference_model_on_one_h100():
    # titan 6,282,473,472 FLOP/token, H100 SXM BF16 989.5e12, MFU 0.5:
    # 494.75e12 / 6,282,473,472 = 78,750.83 tokens/s
    rate = plan.planned_tokens_per_s(0.5, 989.5e12, 1, 6_282_473_472)
    assert rate == pytest.approx(78_750.83, rel=1e-6)


def test_plan_gives_rate_and_eta_for_the_remaining_tokens():
    # rate 166,400 tokens/s (above); remaining 20e9 - 3.36e9 = 16.64e9 tokens;
    # 16.64e9 / 166,400 = 100,000 s
    p = plan.plan(312e12, 8, 6e9, done_tokens=3.36e9, budget_tokens=20e9)
    assert p == plan.Plan(0.40, pytest.approx(166_400), pytest.approx(100_000), "default")
    assert p.as_dict() == {
        "mfu": 0.40,
        "tokens_per_s": pytest.approx(166_400),
        "eta_s": pytest.approx(100_000),
        "source": "default",
    }


def test_a_declared_mfu_is_labelled_declared():
    # 0.25 x 312e12 x 8 / 6e9 = 104,000 tokens/s; 20e9 / 104,000 = 192,307.6923 s
    p = plan.plan(312e12, 8, 6e9, budget_tokens=20e9, mfu=0.25)
    assert p.source == "declared" and p.mfu == 0.25
    assert p.tokens_per_s == pytest.approx(104_000)
    assert p.eta_s == pytest.approx(192_307.6923, rel=1e-9)


def test_eta_is_zero_past_the_budget_and_none_without_one():
    assert plan.plan(312e12, 8, 6e9, done_tokens=30e9, budget_tokens=20e9).eta_s == 0.0
    assert plan.plan(312e12, 8, 6e9).eta_s is None


def test_no_peak_no_flops_per_token_or_no_device_gives_no_plan():
    assert plan.plan(None, 8, 6e9) is None
    assert plan.plan(312e12, 8, None) is None
    assert plan.plan(312e12, 0, 6e9) is None
    assert plan.planned_tokens_per_s(0.4, 312e12, 8, 0) is None


@pytest.mark.parametrize(
    "args",
    [
        (0.0, 312e12, 8, 6e9),  # MFU must be > 0
        (1.5, 312e12, 8, 6e9),  # a fraction, not 150 %
        (40, 312e12, 8, 6e9),  # a percent typed as a fraction
        (0.4, -1.0, 8, 6e9),
        (0.4, float("inf"), 8, 6e9),
        (0.4, 312e12, 2.5, 6e9),
        (0.4, 312e12, True, 6e9),
        (0.4, 312e12, 8, float("nan")),
    ],
)
def test_bad_inputs_are_refused(args):
    with pytest.raises(ValueError):
        plan.planned_tokens_per_s(*args)


# =============================================================================================
# tm plan: presets, Hugging Face config.json, GPU names, plan_run.
# Every expected count below is derived by hand in the comment beside it, from the layout the
# model's own code creates (huggingface/transformers models/llama/modeling_llama.py and
# models/gpt2/modeling_gpt2.py), never copied from the implementation's output.
# =============================================================================================

DATA = Path(__file__).resolve().parents[1] / "data" / "hf"

# Llama 3 8B (meta-llama/Meta-Llama-3-8B config.json: 32 layers, hidden 4096, 32 query heads,
# 8 KV heads, head_dim 4096/32 = 128, intermediate 14336, vocab 128256, untied, no biases,
# RMSNorm weights only, rotary positions: no position table).
#   embed_tokens 128256 x 4096                           =   525,336,576
#   lm_head      128256 x 4096 (untied)                  =   525,336,576
#   per layer: q_proj 4096 x 4096                        =    16,777,216
#              k_proj + v_proj 2 x 4096 x (8 x 128)      =     8,388,608
#              o_proj 4096 x 4096                        =    16,777,216
#              gate/up/down 3 x 4096 x 14336             =   176,160,768
#              input + post-attention RMSNorm 2 x 4096   =         8,192
#              layer total                               =   218,112,000
#   32 layers                                            = 6,979,584,000
#   final norm                                           =         4,096
#   params = 2 x 525,336,576 + 6,979,584,000 + 4,096     = 8,030,261,248
LLAMA3_LAYER = 4096 * 4096 + 2 * 4096 * 1024 + 4096 * 4096 + 3 * 4096 * 14336 + 2 * 4096
LLAMA3_TABLE = 128256 * 4096
LLAMA3_PARAMS = 2 * LLAMA3_TABLE + 32 * LLAMA3_LAYER + 4096

# GPT-2 small (openai-community/gpt2 config.json: n_layer 12, n_embd 768, n_head 12,
# n_positions 1024, vocab 50257, n_inner unset = 3072, tied head; GPT2Block has biases on
# every Linear and LayerNorm weight + bias):
#   wte 50257 x 768 = 38,597,376; wpe 1024 x 768 = 786,432
#   per layer: ln_1 2 x 768 = 1,536; c_attn 768 x 2304 + 2304 = 1,771,776;
#              attn c_proj 768 x 768 + 768 = 590,592; ln_2 1,536;
#              c_fc 768 x 3072 + 3072 = 2,362,368; mlp c_proj 3072 x 768 + 768 = 2,360,064
#              layer total 7,087,872; 12 layers 85,054,464; ln_f 2 x 768 = 1,536
#   params = 38,597,376 + 786,432 + 85,054,464 + 1,536 = 124,439,808 (lm_head is wte: tied)
GPT2_LAYER = 2 * 768 + (768 * 2304 + 2304) + (768 * 768 + 768) + 2 * 768
GPT2_LAYER += (768 * 3072 + 3072) + (3072 * 768 + 768)
GPT2_PARAMS = 50257 * 768 + 1024 * 768 + 12 * GPT2_LAYER + 2 * 768


def test_llama3_8b_preset_has_the_hand_counted_8_030_261_248_parameters():
    assert LLAMA3_LAYER == 218_112_000
    assert LLAMA3_PARAMS == 8_030_261_248  # Meta's "8B"; the checkpoint's published count
    arch = presets.preset("llama3-8b").arch
    assert arch.params == 8_030_261_248
    # embed_tokens is the only nn.Embedding; lm_head is a Linear (untied)
    assert arch.embedding_params == arch.token_embedding_params == 525_336_576
    assert arch.params - arch.embedding_params == 7_504_924_672


def test_llama3_8b_flops_per_token_under_every_convention_by_hand():
    # N without embeddings = 8,030,261,248 - 525,336,576 = 7,504,924,672
    # hf         6 x 7,504,924,672                                   = 45,029,548,032
    # titan      45,029,548,032 + 12 x 32 x 32 x 128 x 8192
    #          = 45,029,548,032 + 12,884,901,888                     = 57,914,449,920
    # embeddings 6 x 8,030,261,248 + 12,884,901,888
    #          = 48,181,567,488 + 12,884,901,888                     = 61,066,469,376
    # megatron   q = 4096, kv = 8 x 128 = 1024, T 8192, vocab 128256 = 1002 x 128 (no padding)
    #   attention/layer 6 x (4096 x (4096 + 2 x 1024) + 4096 x 8192 + 4096 x 4096)
    #                 = 6 x (25,165,824 + 33,554,432 + 16,777,216)    =    452,984,832
    #   MLP/layer     6 x 4096 x 14336 x 3                            =  1,056,964,608
    #   32 layers     32 x 1,509,949,440                              = 48,318,382,080
    #   logits        6 x 4096 x 128256                               =  3,152,019,456
    #   total                                                         = 51,470,401,536
    assert 12 * 32 * 32 * 128 * 8192 == 12_884_901_888
    assert flops.all_conventions(presets.preset("llama3-8b").arch.shape()) == {
        "hf": 45_029_548_032,
        "megatron": 51_470_401_536,
        "titan": 57_914_449_920,
        "embeddings": 61_066_469_376,
    }


def test_gpt2_124m_preset_has_the_hand_counted_tied_124_439_808_parameters():
    assert GPT2_LAYER == 7_087_872
    assert GPT2_PARAMS == 124_439_808  # GPT2LMHeadModel("gpt2").num_parameters(), published
    arch = presets.preset("gpt2-124m").arch
    assert arch.params == 124_439_808
    assert arch.token_embedding_params == 38_597_376  # 50257 x 768
    assert arch.embedding_params == 38_597_376 + 786_432  # wte + wpe (1024 x 768)
    assert arch.tied_embeddings


def test_gpt2_124m_flops_per_token_under_every_convention_by_hand():
    # hf         6 x (124,439,808 - 38,597,376 - 786,432) = 6 x 85,056,000   = 510,336,000
    # titan      6 x (85,056,000 + 38,597,376) + 12 x 12 x 12 x 64 x 1024
    #          = 741,920,256 + 113,246,208 = 855,166,464 (nanoGPT estimate_mfu's N and 6N+12LHQT)
    # embeddings 6 x (124,439,808 + 38,597,376) + 113,246,208                = 1,091,469,312
    # megatron   vocab 50257 -> 50304 (= 393 x 128); attention/layer 6 x (768 x 2304 +
    #            768 x 1024 + 768 x 768) = 18,874,368; MLP/layer 6 x 768 x 3072 x 2 =
    #            28,311,552; 12 x 47,185,920 = 566,231,040; logits 6 x 768 x 50304 =
    #            231,800,832; total 798,031,872
    assert flops.all_conventions(presets.preset("gpt2-124m").arch.shape()) == {
        "hf": 510_336_000,
        "megatron": 798_031_872,
        "titan": 855_166_464,
        "embeddings": 1_091_469_312,
    }


def test_reference_1b_preset_is_the_pinned_reference_model():
    # 18 x (4 x 2048^2 + 2 x 2048 x 8192 + 2 x 2048) + 2 x 32000 x 2048 + 2048 = 1,037,117,440
    # (docs/spec.md "FLOPs per token"); its FLOPs are pinned in tests/unit/test_flops.py.
    arch = presets.preset("reference-1b").arch
    assert arch.params == 18 * (4 * 2048**2 + 2 * 2048 * 8192 + 2 * 2048) + 2 * 32000 * 2048 + 2048
    assert arch.shape() == flops.reference_model()
    assert flops.all_conventions(arch.shape()) == {
        "hf": 5_829_488_640,
        "megatron": 6_055_526_400,
        "titan": 6_282_473_472,
        "embeddings": 6_675_689_472,
    }


def test_presets_are_found_by_name_or_alias_in_any_case():
    assert [p.name for p in presets.presets()] == ["gpt2-124m", "llama3-8b", "reference-1b"]
    assert presets.preset("GPT2").name == "gpt2-124m"
    assert presets.preset("Meta-Llama-3-8B").name == "llama3-8b"
    assert presets.preset("reference").name == "reference-1b"
    assert presets.preset("llama3") is None
    for p in presets.presets():
        assert "config.json" in p.source or "reference" in p.source
        assert f"{p.arch.params:,}" in p.source  # the source states the count it gives


@pytest.mark.parametrize(
    ("folder", "name"), [("Meta-Llama-3-8B", "llama3-8b"), ("gpt2", "gpt2-124m")]
)
def test_a_real_hf_config_json_gives_the_same_figures_as_its_preset(folder, name):
    arch = presets.read_hf_config(DATA / folder / "config.json")
    assert arch == presets.preset(name).arch
    assert arch.params == presets.preset(name).arch.params
    assert flops.all_conventions(arch.shape()) == flops.all_conventions(
        presets.preset(name).arch.shape()
    )
    assert presets.read_hf_config(DATA / folder) == arch  # a folder holding config.json


def test_gpt2_config_defaults_are_hugging_faces():
    # openai-community/gpt2's config.json has neither n_inner nor tie_word_embeddings:
    # GPT2Config's n_inner None means 4 x n_embd, PretrainedConfig ties by default.
    config = json.loads((DATA / "gpt2" / "config.json").read_text())
    assert "n_inner" not in config and "tie_word_embeddings" not in config
    arch = presets.from_hf_config(config)
    assert arch.ffn == 4 * 768 and arch.tied_embeddings and not arch.gated_mlp
    assert arch.position_table == 1024 and arch.context == 1024


def test_transformers_own_default_gpt2_config_plans_as_the_gpt2_preset():
    # GPT2Config() is GPT-2 small (n_layer 12, n_embd 768, n_head 12, n_positions 1024,
    # vocab 50257, n_inner None = 4 x 768, tied): its to_dict(), what save_pretrained writes,
    # plans to the preset's 124,439,808 parameters through the shared table (core/hfconfig.py)
    import transformers  # a test dependency (pyproject's test extra)

    config = transformers.GPT2Config().to_dict()
    assert config["n_inner"] is None
    assert presets.from_hf_config(config) == presets.preset("gpt2-124m").arch


def test_a_config_read_by_its_model_types_own_keys():
    # Falcon (FalconConfig): ffn_hidden_size null means 4 x hidden_size, and multi_query without
    # new_decoder_architecture means one key/value head; 2 layers, width 64, 4 heads, vocab 100
    falcon = {"model_type": "falcon", "num_hidden_layers": 2, "hidden_size": 64,
              "num_attention_heads": 4, "vocab_size": 100, "max_position_embeddings": 32,
              "ffn_hidden_size": None, "multi_query": True}  # fmt: skip
    arch = presets.from_hf_config(falcon)
    assert (arch.ffn, arch.kv_heads, arch.gated_mlp) == (256, 1, False)
    # a Llama config lacking its FFN key names that key alone (no GPT-2 spelling offered)
    config = _llama_config()
    del config["intermediate_size"]
    with pytest.raises(presets.ConfigError, match=r"missing field intermediate_size$"):
        presets.from_hf_config(config)


def _llama_config() -> dict:
    return json.loads((DATA / "Meta-Llama-3-8B" / "config.json").read_text())


@pytest.mark.parametrize(
    "field",
    [
        "hidden_size",
        "num_hidden_layers",
        "num_attention_heads",
        "intermediate_size",
        "vocab_size",
        "max_position_embeddings",
        "hidden_act",
    ],
)
def test_a_config_missing_a_field_names_the_field(field):
    config = _llama_config()
    del config[field]
    if field == "hidden_act":
        config["model_type"] = "my_llama"  # not a known family: only the activation can tell
    with pytest.raises(presets.ConfigError, match=f"missing field {field}"):
        presets.from_hf_config(config)


def test_a_missing_context_can_be_given_and_a_given_context_replaces_the_configs():
    config = _llama_config()
    del config["max_position_embeddings"]
    with pytest.raises(presets.ConfigError, match="--context"):
        presets.from_hf_config(config)
    assert presets.from_hf_config(config, context=4096).context == 4096
    assert presets.from_hf_config(_llama_config(), context=2048).context == 2048


def test_a_malformed_field_is_named():
    config = _llama_config()
    config["hidden_size"] = "4096"
    with pytest.raises(presets.ConfigError, match="field hidden_size must be a whole number"):
        presets.from_hf_config(config)
    config = _llama_config()
    config["tie_word_embeddings"] = "no"
    with pytest.raises(presets.ConfigError, match="tie_word_embeddings"):
        presets.from_hf_config(config)


def test_a_mixture_of_experts_config_is_refused():
    config = _llama_config()
    config["num_local_experts"] = 8
    with pytest.raises(presets.ConfigError, match=r"num_local_experts.*mixture-of-experts"):
        presets.from_hf_config(config)


def test_a_bad_file_is_named(tmp_path):
    with pytest.raises(presets.ConfigError, match="cannot read"):
        presets.read_hf_config(tmp_path / "nope.json")
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    with pytest.raises(presets.ConfigError, match="not valid JSON"):
        presets.read_hf_config(bad)
    bad.write_text("{}")
    with pytest.raises(presets.ConfigError, match=r"config.json: missing field num_hidden_layers"):
        presets.read_hf_config(tmp_path)


@pytest.mark.parametrize(
    ("model_type", "act", "gated"),
    [
        ("llama", "silu", True),
        ("gemma", "gelu_pytorch_tanh", True),  # GemmaMLP is gated with a gelu activation
        ("gpt_neox", "gelu", False),
        ("my_model", "silu", True),  # unknown family: the activation decides
        ("my_model", "swiglu", True),
        ("my_model", "gelu", False),
        ("my_model", "relu", False),
    ],
)
def test_the_mlp_activation_tells_gated_from_plain(model_type, act, gated):
    config = {**_llama_config(), "model_type": model_type, "hidden_act": act}
    assert presets.from_hf_config(config).gated_mlp is gated


def test_gated_mlp_has_three_matrices_and_plain_two():
    # per layer MLP: gated 3 x 4096 x 14336 = 176,160,768; plain 2 x 4096 x 14336 = 117,440,512;
    # 32 layers x 58,720,256 difference = 1,879,048,192
    arch = presets.preset("llama3-8b").arch
    plain = dataclasses.replace(arch, gated_mlp=False)
    assert arch.params - plain.params == 32 * 4096 * 14336 == 1_879_048_192


def test_biases_and_layernorm_as_the_config_says():
    # attention_bias on Llama adds q 4096 + k,v 2 x 1024 + o 4096 = 10,240 per layer;
    # mlp_bias adds gate 14336 + up 14336 + down 4096 = 32,768 per layer
    base = presets.from_hf_config(_llama_config())
    with_bias = presets.from_hf_config({**_llama_config(), "attention_bias": True})
    assert with_bias.params - base.params == 32 * 10_240
    with_mlp = presets.from_hf_config({**_llama_config(), "mlp_bias": True})
    assert with_mlp.params - base.params == 32 * 32_768


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"heads": 12, "kv_heads": 8}, "kv_heads"),
        ({"width": 100, "heads": 3}, "head_dim"),
        ({"context": 2048, "position_table": 1024}, "position table"),
        ({"layers": 0}, "layers"),
        ({"gated_mlp": 1}, "gated_mlp"),
    ],
)
def test_an_inconsistent_architecture_is_refused(kwargs, message):
    base = {"layers": 2, "width": 96, "heads": 12, "vocab": 100, "context": 64, "ffn": 384}
    with pytest.raises(presets.ConfigError, match=message):
        presets.Architecture(**{**base, **kwargs})


# --- GPU names -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "label"),
    [
        ("h100-sxm", "H100 SXM"),
        ("H100 SXM", "H100 SXM"),
        ("h100_sxm", "H100 SXM"),
        ("NVIDIA H100 80GB HBM3", "H100 SXM"),  # an NVML name, as match_device
        ("h100-pcie", "H100 PCIe"),
        ("h200", "H200 SXM"),  # NVML "NVIDIA H200" is the SXM board
        ("h200-nvl", "H200 NVL"),
        ("a100-80gb", "A100 80GB SXM"),
        ("a100-80gb-pcie", "A100 80GB PCIe"),
        ("a100-40gb", "A100 40GB SXM"),
        ("b200", "B200 (HGX)"),
        ("gb200", "GB200 (per GPU)"),
        ("gh200-144gb", "GH200 (144 GB HBM3e)"),
        ("rtx-4090", "GeForce RTX 4090"),
        ("nvidia-l40s", "L40S"),
        ("t4", "T4"),
        ("mi300x", "MI300X"),  # AMD Instinct rows: declared devices and plans (no NVML)
        ("MI325X", "MI325X"),
        ("AMD Instinct MI355X", "MI355X"),  # the name torch reports on ROCm
    ],
)
def test_friendly_gpu_names_resolve_to_their_row(name, label):
    assert peaks.find_gpu(name).label == label


@pytest.mark.parametrize("name", ["h100", "gh200", "a100", "a10g", "mi300", "mi250x", "", None])
def test_ambiguous_or_unknown_gpu_names_resolve_to_nothing(name):
    assert peaks.find_gpu(name) is None


def test_every_short_name_names_one_existing_row_and_aliases_are_listed():
    labels = {row.label for row in peaks.rows()}
    short = peaks.gpu_short_names()
    assert set(short.values()) == labels  # every row has at least its label's slug
    for name, label in short.items():
        assert peaks.find_gpu(name).label == label
    for name, label in peaks._GPU_ALIASES.items():
        assert short[name] == label


def test_close_gpu_names_list_the_variants_of_a_family():
    assert peaks.close_gpu_names("h100") == ["h100-nvl", "h100-pcie", "h100-sxm"]
    assert peaks.close_gpu_names("gh200") == ["gh200-96-gb-hbm3", "gh200-96gb",
                                             "gh200-144-gb-hbm3e", "gh200-144gb"]  # fmt: skip
    assert peaks.close_gpu_names("h100sxm")[0] == "h100-sxm"  # look-alikes, closest first
    assert peaks.close_gpu_names("mi300") == ["mi300x"]
    assert peaks.close_gpu_names("tpu-v5e") == []


# --- plan_run --------------------------------------------------------------------------------


def _llama_plan(**kwargs):
    shape = presets.preset("llama3-8b").arch.shape()
    return plan.plan_run(shape, 20_000_000_000, "h100-sxm", 8, **kwargs)


def test_plan_run_llama3_8b_on_eight_h100s_by_hand():
    # titan 57,914,449,920 FLOP/token; 0.40 x 989.5e12 x 8 = 3.1664e15 FLOP/s
    # tokens/s 3.1664e15 / 57,914,449,920 = 54,673.747; wall 20e9 / 54,673.747 = 365,806.28 s
    # GPU-hours 8 x 365,806.28 / 3600 = 812.903; energy 812.903 GPU-h x 0.700 kW = 569.032 kWh
    # cost 812.903 x 2.49 = 2,024.13
    r = _llama_plan(price=2.49)
    assert r.params == 8_030_261_248 and r.params_without_embeddings == 7_504_924_672
    assert r.convention == "titan" and list(r.flops_per_token) == list(flops.CONVENTIONS)
    assert r.training_flops["titan"] == 57_914_449_920 * 20_000_000_000
    assert r.tokens_per_s["titan"] == pytest.approx(54_673.747, rel=1e-7)
    assert r.wall_s["titan"] == pytest.approx(365_806.28, rel=1e-7)
    assert r.gpu_hours["titan"] == pytest.approx(812.903, rel=1e-6)
    assert r.energy_kwh["titan"] == pytest.approx(569.032, rel=1e-6)
    assert r.cost["titan"] == pytest.approx(2_024.13, rel=1e-6)
    assert (r.gpu, r.dtype, r.peak_flops, r.peak_source) == ("H100 SXM", "bf16", 989.5e12, "table")
    assert (r.board_power_w, r.mfu, r.mfu_source) == (700.0, 0.40, "default")
    # hf: 45,029,548,032 FLOP/token -> 3.1664e15 / 45,029,548,032 = 70,318.272 tokens/s
    assert r.tokens_per_s["hf"] == pytest.approx(70_318.272, rel=1e-7)


def test_plan_run_uses_the_live_plan_function_for_every_convention(monkeypatch):
    calls = []
    real = plan.plan

    def spy(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(plan, "plan", spy)
    r = _llama_plan(mfu=0.5)
    assert len(calls) == len(flops.CONVENTIONS)
    for (peak, gpus, fpt, done, budget, mfu), name in zip(calls, flops.CONVENTIONS, strict=True):
        assert (peak, gpus, fpt, done, budget, mfu) == (989.5e12, 8, r.flops_per_token[name], 0,
                                                        20_000_000_000, 0.5)  # fmt: skip
        assert r.tokens_per_s[name] == real(peak, gpus, fpt, 0, budget, mfu).tokens_per_s
    assert r.mfu_source == "declared"


def test_no_price_no_cost_and_a_declared_peak_on_an_unknown_gpu_has_no_energy():
    assert _llama_plan().cost is None and _llama_plan().price_per_gpu_hour is None
    shape = presets.preset("reference-1b").arch.shape()
    r = plan.plan_run(shape, 10**9, "gaudi3", 2, peak_flops=1307.4e12)
    assert (r.gpu, r.peak_source, r.board_power_w) == ("gaudi3", "declared", None)
    assert all(v is None for v in r.energy_kwh.values())
    # 0.40 x 1307.4e12 x 2 = 1.04592e15; / 6,282,473,472 = 166,482.20 tokens/s
    assert r.tokens_per_s["titan"] == pytest.approx(166_482.20, rel=1e-6)
    # a declared peak on a known GPU keeps the table's board power
    assert plan.plan_run(shape, 10**9, "h100-sxm", 1, peak_flops=900e12).board_power_w == 700.0
    assert plan.plan_run(shape, 10**9, "mi300x", 1, peak_flops=1e15).board_power_w == 750.0


def test_plan_run_on_amd_instinct_uses_the_dense_table_peak_and_board_power():
    shape = presets.preset("reference-1b").arch.shape()
    r = plan.plan_run(shape, 10**9, "mi355x", 8)
    # MI355X: 256 CUs x 4096 FLOP/clock x 2.4 GHz = 2516.6 TFLOP/s dense BF16, 1,400 W
    assert (r.gpu, r.peak_flops, r.peak_source, r.board_power_w) == ("MI355X", 2516.6e12,
                                                                      "table", 1400.0)  # fmt: skip
    # 0.40 x 2516.6e12 x 8 = 8.05312e15 FLOP/s; / 6,282,473,472 FLOP/token = 1,281,839.08/s
    assert r.tokens_per_s["titan"] == pytest.approx(1_281_839.08, rel=1e-6)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"tokens": 0}, "token budget must be .* > 0"),
        ({"tokens": -20_000_000_000}, "token budget must be .* > 0"),
        ({"gpu": "h100"}, "unknown GPU 'h100'.*--peak"),
        ({"gpu": None}, "no GPU.*--peak"),
        ({"gpu": "a100-80gb", "dtype": "fp8"}, "A100 80GB SXM has no dense fp8 rate.*--peak"),
        ({"gpus": 0}, "GPU count"),
        ({"mfu": 40}, "fraction in \\(0, 1\\]"),
        ({"price": -1.0}, "price"),
        ({"price": float("nan")}, "price"),
    ],
)
def test_plan_run_refuses_bad_inputs_in_one_line(kwargs, message):
    args = {"tokens": 10**9, "gpu": "h100-sxm", "gpus": 8, **kwargs}
    shape = presets.preset("gpt2-124m").arch.shape()
    with pytest.raises(plan.PlanError, match=message) as info:
        plan.plan_run(shape, args.pop("tokens"), args.pop("gpu"), args.pop("gpus"), **args)
    assert "\n" not in str(info.value)


def test_run_plan_is_frozen_and_as_dict_has_every_field():
    r = _llama_plan()
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.tokens = 1
    assert list(r.as_dict()) == [f.name for f in dataclasses.fields(plan.RunPlan)]
