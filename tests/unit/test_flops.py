"""FLOPs per token under each named convention, pinned against hand counts.

Every expected number below is computed by hand in the comments (or taken from an independent
source that the comment names), never copied from the implementation's output.
"""

from __future__ import annotations

import ast
import dataclasses
import pathlib
import sys

import pytest

from trainmeter.core.flops import (
    CONVENTIONS,
    DEFAULT_CONVENTION,
    ModelShape,
    all_conventions,
    flops_per_token,
    missing_fields,
    reference_model,
)

# ---------------------------------------------------------------------------------------------
# The brief's reference model: d 2048, 18 layers, ctx 1024, vocab 32000, untied, 16 heads,
# MLP 4d, no biases, 2 norm weight vectors per layer + a final norm.
#
#   per layer: attention Q,K,V,O   4 * 2048^2        = 16,777,216
#              MLP up + down       2 * 2048 * 8192   = 33,554,432
#              two norms           2 * 2048          =      4,096
#              total                                  = 50,335,744
#   18 layers: 18 * 50,335,744                        = 906,043,392
#   token table 32000 * 2048 = 65,536,000; untied lm_head 65,536,000; final norm 2,048
#   params = 906,043,392 + 65,536,000 + 65,536,000 + 2,048 = 1,037,117,440
#   attention term 12 * L * H * Q * T = 12 * 18 * 16 * 128 * 1024 = 452,984,832
# ---------------------------------------------------------------------------------------------
REF_PARAMS = 18 * (4 * 2048**2 + 2 * 2048 * 8192 + 2 * 2048) + 2 * 32000 * 2048 + 2048
REF_ATTENTION = 12 * 18 * 16 * 128 * 1024


def test_reference_model_has_the_briefs_parameter_count():
    assert REF_PARAMS == 1_037_117_440  # the brief's stated count, recomputed above by hand
    shape = reference_model()
    assert shape.params == 1_037_117_440
    assert shape.embedding_params == shape.token_embedding_params == 32000 * 2048
    assert not shape.tied_embeddings


def test_reference_model_under_hf_is_6_times_non_embedding_parameters():
    # 6 * (1,037,117,440 - 65,536,000) = 6 * 971,581,440 = 5,829,488,640  (5.8295 G)
    assert flops_per_token(reference_model(), "hf") == 5_829_488_640


def test_reference_model_under_megatron_halves_causal_attention():
    # q = kv = 2048, s = 1024, ffn = 8192, vocab 32000 = 250 * 128 (no padding needed)
    # attention/layer: 6 * (2048*(2048 + 2*2048) + 2048*1024 + 2048*2048)
    #                = 6 * (12,582,912 + 2,097,152 + 4,194,304) = 6 * 18,874,368 = 113,246,208
    # MLP/layer:       6 * 2048 * 8192 * 2                                   = 201,326,592
    # 18 layers:       18 * 314,572,800                                      = 5,662,310,400
    # logits:          6 * 2048 * 32000                                      =   393,216,000
    # total                                                                  = 6,055,526,400
    value = flops_per_token(reference_model(), "megatron")
    assert value == 6_055_526_400
    # Independent check: the brief's closed form of Megatron-LM's formula,
    # 12 L d^2 [(1 + kv/h + (s/d)/2) (h*hd/d) + (ffn/d) + V/(2 L d)]
    closed = 12 * 18 * 2048**2 * ((1 + 1 + (1024 / 2048) / 2) * 1 + 4 + 32000 / (2 * 18 * 2048))
    assert value == pytest.approx(closed, rel=1e-12)


def test_reference_model_under_titan_adds_full_attention():
    # 5,829,488,640 + 12 * 18 * 16 * 128 * 1024 = 5,829,488,640 + 452,984,832 = 6,282,473,472
    assert REF_ATTENTION == 452_984_832
    assert flops_per_token(reference_model(), "titan") == 6_282_473_472


def test_reference_model_under_embeddings_counts_every_weight():
    # 6 * 1,037,117,440 + 452,984,832 = 6,222,704,640 + 452,984,832 = 6,675,689,472 (6.676 G)
    assert flops_per_token(reference_model(), "embeddings") == 6_675_689_472


def test_embeddings_differs_from_the_published_6_69_only_through_an_unstated_position_table():
    # The brief's published figure is 6.69 G; the formula gives 6.676 G. The head count cannot
    # explain it here: with H * Q = d the attention term 12 L H Q T does not depend on H (32 heads
    # of 64 give the same 452,984,832). Chinchilla's appendix F count (softmax included) gives
    # 3 * [2*V*d*2 + L*(6d^2 + 4Td + 3HT + 2d^2 + 4d*ffn)] = 3 * 2,225,963,008 = 6,677,889,024,
    # still 6.68. A learned 1024 x 2048 position table counted as a matmul does explain it:
    # 6 * 1024 * 2048 = 12,582,912 more, 6,675,689,472 + 12,582,912 = 6,688,272,384 -> 6.69 G.
    ref = reference_model()
    with_positions = dataclasses.replace(  # the same model plus a learned 1024 x 2048 table
        ref,
        params=ref.params + 1024 * 2048,
        embedding_params=ref.embedding_params + 1024 * 2048,
    )
    assert round(flops_per_token(ref, "embeddings") / 1e9, 2) == 6.68
    assert flops_per_token(with_positions, "embeddings") == 6_688_272_384
    assert round(flops_per_token(with_positions, "embeddings") / 1e9, 2) == 6.69
    # ... and a position table leaves hf and titan unchanged (both drop embedding tables).
    for name in ("hf", "titan"):
        assert flops_per_token(with_positions, name) == flops_per_token(ref, name)
    more_heads = ModelShape(
        params=ref.params,
        embedding_params=ref.embedding_params,
        token_embedding_params=ref.token_embedding_params,
        layers=18,
        width=2048,
        heads=32,
        ffn=8192,
        vocab=32000,
        seq_len=1024,
    )
    assert flops_per_token(more_heads, "embeddings") == flops_per_token(ref, "embeddings")


# ---------------------------------------------------------------------------------------------
# GPT-2 124M: tied wte/lm_head, learned wpe, 12 layers, 768 wide, 12 heads, ctx 1024,
# vocab 50257, biases on every Linear and LayerNorm.
#
#   wte 50257 * 768 = 38,597,376        wpe 1024 * 768 = 786,432
#   per layer: ln_1 2*768 = 1,536; c_attn 768*2304 + 2304 = 1,771,776; attn c_proj
#              768*768 + 768 = 590,592; ln_2 1,536; c_fc 768*3072 + 3072 = 2,362,368;
#              mlp c_proj 3072*768 + 768 = 2,360,064; total 7,087,872
#   12 layers = 85,054,464; ln_f 1,536
#   params = 38,597,376 + 786,432 + 85,054,464 + 1,536 = 124,439,808
# ---------------------------------------------------------------------------------------------
GPT2_WTE = 50257 * 768
GPT2_WPE = 1024 * 768
GPT2_LAYER = 2 * 768 + (768 * 2304 + 2304) + (768 * 768 + 768) + 2 * 768
GPT2_LAYER += (768 * 3072 + 3072) + (3072 * 768 + 768)
GPT2_PARAMS = GPT2_WTE + GPT2_WPE + 12 * GPT2_LAYER + 2 * 768


def gpt2() -> ModelShape:
    return ModelShape(
        params=GPT2_PARAMS,
        embedding_params=GPT2_WTE + GPT2_WPE,
        token_embedding_params=GPT2_WTE,
        layers=12,
        width=768,
        heads=12,
        ffn=3072,
        vocab=50257,
        seq_len=1024,
        tied_embeddings=True,
    )


def test_gpt2_hand_count_gives_hf_6_times_non_embedding_parameters():
    assert GPT2_LAYER == 7_087_872
    # non-embedding = 124,439,808 - 38,597,376 - 786,432 = 85,056,000; x6 = 510,336,000
    assert flops_per_token(gpt2(), "hf") == 510_336_000


def test_gpt2_hf_matches_hf_formula_applied_to_the_published_parameter_count():
    # Independent source: GPT-2 small's published count (GPT2LMHeadModel.num_parameters() on
    # the "gpt2" checkpoint) is 124,439,808. HF's floating_point_ops = 6 * num_parameters(
    # exclude_embeddings=True), which drops wte (the tied head shares it) and wpe:
    # 6 * (124,439,808 - 50257*768 - 1024*768) = 6 * 85,056,000 = 510,336,000
    published = 124_439_808
    assert published == GPT2_PARAMS
    assert flops_per_token(gpt2(), "hf") == 6 * (published - 50257 * 768 - 1024 * 768)


def test_gpt2_titan_equals_nanogpt_estimate_mfu():
    # Independent source: nanoGPT model.py estimate_mfu uses N = get_num_params() (all params
    # minus wpe; the tied wte counts) and 6N + 12LHQT:
    # 6 * 123,653,376 + 12*12*12*64*1024 = 741,920,256 + 113,246,208 = 855,166,464
    assert flops_per_token(gpt2(), "titan") == 855_166_464


def test_gpt2_megatron_pads_the_vocabulary_to_a_multiple_of_128():
    # 50257 -> 50304 (= 393 * 128).
    # attention/layer 6 * (768*2304 + 768*1024 + 768*768) = 6 * 3,145,728 = 18,874,368
    # MLP/layer 6 * 768 * 3072 * 2 = 28,311,552; 12 layers * 47,185,920 = 566,231,040
    # logits 6 * 768 * 50304 = 231,800,832; total 798,031,872
    assert flops_per_token(gpt2(), "megatron") == 798_031_872


def test_gpt2_embeddings_counts_the_tied_table_twice():
    # 6 * (124,439,808 + 38,597,376) + 113,246,208 = 978,223,104 + 113,246,208 = 1,091,469,312
    assert flops_per_token(gpt2(), "embeddings") == 1_091_469_312


# ---------------------------------------------------------------------------------------------
# A tiny model where every convention is worked out by hand: 2 layers, d 8, 2 query heads of 4,
# 1 KV head (GQA), gated MLP ffn 16, vocab 100, seq 4, tied embeddings, no biases, no positions.
#
#   token table 100*8 = 800 (also the head)
#   per layer: q 8*8 = 64, k 8*4 = 32, v 8*4 = 32, o 8*8 = 64 -> 192; gated MLP 3*8*16 = 384;
#              norms 2*8 = 16 -> 592;  2 layers = 1,184;  final norm 8
#   params = 800 + 1,184 + 8 = 1,992
# ---------------------------------------------------------------------------------------------
def tiny() -> ModelShape:
    return ModelShape(
        params=1992,
        embedding_params=800,
        token_embedding_params=800,
        layers=2,
        width=8,
        heads=2,
        kv_heads=1,
        ffn=16,
        gated_mlp=True,
        vocab=100,
        seq_len=4,
        tied_embeddings=True,
    )


def test_tiny_model_every_convention_by_hand():
    # hf:         6 * (1992 - 800)                                       = 7,152
    # titan:      6 * (1992 - 800 + 800) + 12*2*2*4*4 = 11,952 + 768     = 12,720
    # embeddings: 6 * (1992 + 800) + 768 = 16,752 + 768                  = 17,520
    # megatron:   q = 8, kv = 4, vocab 100 -> 128
    #   attention/layer 6 * (8*(8 + 2*4) + 8*4 + 8*8) = 6 * 224 = 1,344
    #   MLP/layer 6 * 8 * 16 * 3 = 2,304; 2 layers * 3,648 = 7,296
    #   logits 6 * 8 * 128 = 6,144; total 13,440
    assert all_conventions(tiny()) == {
        "hf": 7152.0,
        "megatron": 13440.0,
        "titan": 12720.0,
        "embeddings": 17520.0,
    }


def test_conventions_that_need_the_architecture_give_none_without_it():
    counts_only = ModelShape(params=1992, embedding_params=800, token_embedding_params=800)
    assert all_conventions(counts_only) == {
        "hf": 7152.0,  # 6 * (1992 - 800), needs no architecture
        "megatron": None,
        "titan": None,
        "embeddings": None,
    }


def test_megatron_gives_none_without_a_vocabulary():
    shape = ModelShape(
        params=1992,
        embedding_params=800,
        token_embedding_params=800,
        layers=2,
        width=8,
        heads=2,
        ffn=16,
        seq_len=4,
    )
    assert flops_per_token(shape, "megatron") is None
    assert flops_per_token(shape, "titan") is not None


def test_missing_fields_names_what_each_convention_lacks():
    counts_only = ModelShape(params=1992, embedding_params=800, token_embedding_params=800)
    assert missing_fields(counts_only, "hf") == ()
    assert missing_fields(counts_only, "megatron") == (
        "layers", "width", "heads", "ffn", "vocab", "seq_len",
    )  # fmt: skip
    # titan's per-head size is width / heads, so with neither head_dim nor width it is named
    assert missing_fields(counts_only, "titan") == ("layers", "heads", "head_dim", "seq_len")
    assert missing_fields(counts_only, "embeddings") == ("layers", "heads", "head_dim", "seq_len")
    no_ffn = dataclasses.replace(tiny(), ffn=None)
    assert missing_fields(no_ffn, "megatron") == ("ffn",)  # width, heads, vocab are there
    assert missing_fields(no_ffn, "titan") == ()
    with pytest.raises(ValueError, match="hf, megatron, titan, embeddings"):
        missing_fields(tiny(), "kaplan")


@pytest.mark.parametrize("convention", CONVENTIONS)
def test_missing_fields_is_empty_exactly_when_the_convention_has_a_figure(convention):
    # every subset of the optional dimensions dropped from the tiny model (2^8 = 256 shapes): the
    # function must agree with the formula itself on whether a figure exists
    optional = ("layers", "width", "heads", "kv_heads", "head_dim", "ffn", "vocab", "seq_len")
    base = dataclasses.replace(tiny(), head_dim=4)  # 8 / 2: explicit, so width may go alone
    for mask in range(2 ** len(optional)):
        drop = {name: None for i, name in enumerate(optional) if mask >> i & 1}
        shape = dataclasses.replace(base, **drop)
        lacks = missing_fields(shape, convention)
        assert (flops_per_token(shape, convention) is None) == bool(lacks), (drop, lacks)
        assert all(getattr(shape, name) is None for name in lacks), (drop, lacks)


def test_unknown_convention_is_an_error_that_lists_the_known_ones():
    with pytest.raises(ValueError, match="hf, megatron, titan, embeddings"):
        flops_per_token(reference_model(), "kaplan")


def test_conventions_are_the_four_named_with_titan_the_default():
    assert CONVENTIONS == ("hf", "megatron", "titan", "embeddings")
    assert DEFAULT_CONVENTION == "titan"
    assert list(all_conventions(reference_model())) == list(CONVENTIONS)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"params": -1, "embedding_params": 0, "token_embedding_params": 0}, "params"),
        ({"params": 10, "embedding_params": 20, "token_embedding_params": 0}, "exceeds params"),
        ({"params": 10, "embedding_params": 4, "token_embedding_params": 5}, "token_embedding"),
        ({"params": 10.0, "embedding_params": 0, "token_embedding_params": 0}, "params"),
        ({"params": True, "embedding_params": 0, "token_embedding_params": 0}, "params"),
        ({"params": 10, "embedding_params": 0, "token_embedding_params": 0, "layers": 0}, "layers"),
        (
            {
                "params": 10,
                "embedding_params": 0,
                "token_embedding_params": 0,
                "heads": 6,
                "kv_heads": 4,
            },
            "kv_heads",
        ),
        (
            {
                "params": 10,
                "embedding_params": 0,
                "token_embedding_params": 0,
                "width": 10,
                "heads": 3,
            },
            "head_dim",
        ),
        (
            {
                "params": 10,
                "embedding_params": 0,
                "token_embedding_params": 0,
                "tied_embeddings": 1,
            },
            "tied_embeddings",
        ),
    ],
)
def test_an_inconsistent_model_shape_is_rejected_with_a_clear_message(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ModelShape(**kwargs)


def test_explicit_head_dim_is_used_when_width_is_not_a_multiple_of_heads():
    # titan attention term 12 * L * H * Q * T = 12 * 1 * 3 * 4 * 2 = 288; 6 * (10 - 0) = 60
    shape = ModelShape(
        params=10,
        embedding_params=0,
        token_embedding_params=0,
        layers=1,
        width=10,
        heads=3,
        head_dim=4,
        seq_len=2,
    )
    assert flops_per_token(shape, "titan") == 348


def test_core_numbers_modules_import_only_the_standard_library():
    core = pathlib.Path(__file__).resolve().parents[2] / "trainmeter" / "core"
    for name in ("flops", "peaks", "metrics", "units"):
        tree = ast.parse((core / f"{name}.py").read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                modules = [node.module or ""]
            else:
                continue
            for module in modules:
                top = module.split(".")[0]
                assert top in sys.stdlib_module_names or module.startswith("trainmeter.core"), (
                    f"trainmeter/core/{name}.py imports {module}"
                )
