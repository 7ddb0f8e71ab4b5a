"""lib.scaling: the GPT family's figures, training compute, the power-law fit and its command line,
and the two in-context-learning measures."""
import json
import subprocess
import sys

import numpy as np
import pytest

from lib.config import GPTConfig, param_counts
from lib.scaling import (FAMILY, GPT1, GPT2, GPT3, GPT3_TRAIN_PF_DAYS, count_check, member, non_embedding_params,
                         param_count, pf_days, train_compute, train_flops)


# ---- the family -------------------------------------------------------------------------

def test_the_family_is_thirteen_models_in_order_of_publication():
    assert [m.name for m in FAMILY][:5] == ["GPT-1", "GPT-2 Small", "GPT-2 Medium", "GPT-2 Large", "GPT-2 XL"]
    assert len(GPT2) == 4 and len(GPT3) == 8 and len(FAMILY) == 13


def test_gpt2_sizes_are_the_released_models():
    """GPT-2 Small and Medium are lib's own presets; the four released models count 124M, 355M, 774M
    and 1,558M parameters (the sizes of Hugging Face's gpt2 ... gpt2-xl)."""
    assert GPT2[0].config == GPTConfig.gpt2() and GPT2[1].config == GPTConfig.gpt2_medium()
    assert [param_count(m) for m in GPT2] == [124_439_808, 354_823_168, 774_030_080, 1_557_611_200]


def test_gpt2s_published_counts_are_lib_counts_with_gpt1s_vocabulary():
    """The explanation COUNT_DIFFERENCES gives, checked: swap 50,257 embedding rows for 40,478 and
    every count rounds to the paper's millions."""
    for model in GPT2:
        with_gpt1_vocab = param_counts(GPTConfig(**{**model.config.to_dict(), "vocab_size": 40478}))["total"]
        assert round(with_gpt1_vocab / 1e6) * 1e6 == model.params, model.name
        assert count_check(model)["ratio"] > 1                # and the paper's figure is below the true count


def test_gpt1_differs_from_gpt2_small_as_its_paper_says():
    """Post-LN, no final LayerNorm, 512 positions, 40,478 tokens; 116.5M parameters, which GPT-2's
    paper rounds to 117M."""
    assert (GPT1.norm_placement, GPT1.final_norm, GPT1.config.n_ctx, GPT1.config.vocab_size) == ("post", False, 512, 40478)
    assert param_count(GPT1) == 40478 * 768 + 512 * 768 + 12 * param_counts(GPT1.config)["per_block"]
    assert round(param_count(GPT1) / 1e6) == 117
    assert count_check(GPT1)["published"] is None and count_check(GPT1)["ratio"] is None


def test_gpt3_shapes_follow_table_2_1():
    """Context 2,048 and 300B tokens for all; d_head = d_model / n_heads but for XL (see its note)."""
    assert all(m.config.n_ctx == 2048 and m.tokens == 300e9 for m in GPT3)
    assert [m.config.n_layer for m in GPT3] == [12, 24, 24, 24, 32, 32, 40, 96]
    assert [m.config.n_embd for m in GPT3] == [768, 1024, 1536, 2048, 2560, 4096, 5120, 12288]
    assert [m.config.head_dim for m in GPT3] == [64, 64, 96, 128, 80, 128, 128, 128]
    assert [m.batch_tokens for m in GPT3] == [0.5e6, 0.5e6, 0.5e6, 1e6, 1e6, 2e6, 2e6, 3.2e6]
    assert any("5,140" in note for note in member("GPT-3 13B").notes)


def test_gpt3_counts_match_table_2_1_within_its_rounding():
    """Table 2.1 gives two significant figures at most (1.3B, 6.7B): 2% covers its rounding; embeddings
    included (without them GPT-3 Small would be 85M, 32% short)."""
    for model in GPT3:
        assert count_check(model)["ratio"] == pytest.approx(1, rel=0.02), model.name
    assert non_embedding_params(member("GPT-3 Small")) / 125e6 < 0.7


def test_non_embedding_params_is_about_12_layers_width_squared():
    """Kaplan et al.'s approximation drops biases, norms and the MLP's bias terms: within 1%."""
    for model in GPT3:
        c = model.config
        assert non_embedding_params(model) == pytest.approx(12 * c.n_layer * c.n_embd ** 2, rel=0.01)


def test_an_unknown_member_is_named():
    with pytest.raises(ValueError, match="no model named 'GPT-5'"):
        member("GPT-5")


# ---- training compute -------------------------------------------------------------------

def test_gpt3_compute_matches_table_d1():
    """6 N D with N = lib's count (embeddings included, as Table D.1's Params column) and D = 300B is
    within 5% of Table D.1's PF-days for every size: the table rounds to three figures and lists N
    to three figures (its XL: 1,320M against 1,316M counted, 0.3%)."""
    for model in GPT3:
        assert train_compute(model)["pf_days"] == pytest.approx(GPT3_TRAIN_PF_DAYS[model.name], rel=0.05)


def test_table_d1_counts_embeddings():
    """With the non-embedding N instead, the small models miss Table D.1 by far more than 5%: the
    table's N is the total."""
    small = member("GPT-3 Small")
    assert pf_days(train_flops(non_embedding_params(small), 300e9)) < 0.7 * GPT3_TRAIN_PF_DAYS["GPT-3 Small"]


def test_pf_day_arithmetic():
    assert pf_days(8.64e19) == pytest.approx(1.0, rel=1e-12)
    assert train_flops(175e9, 300e9) == pytest.approx(3.15e23, rel=1e-12)


@pytest.mark.parametrize("n, d", [(0, 1e9), (1e6, -1), (float("nan"), 1e9)])
def test_train_flops_refuses_nonpositive_sizes(n, d):
    with pytest.raises(ValueError, match="positive n_params and tokens"):
        train_flops(n, d)


def test_compute_without_published_tokens_is_refused():
    with pytest.raises(ValueError, match="GPT-2 XL: its paper states no training token count"):
        train_compute(member("GPT-2 XL"))
