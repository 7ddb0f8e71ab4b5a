"""The GPT family as data: GPT-1, GPT-2's four sizes and GPT-3's eight, each a GPTConfig with what its paper published.

Sources: GPT-1 [radford2018improving], GPT-2 [radford2019language, Table 2], GPT-3
[brown2020language, Table 2.1 for the shapes, batch sizes and learning rates; Appendix D,
Table D.1 for the training compute]. A figure a paper does not state is None here, never a guess.

What a GPTConfig cannot say is recorded beside it: GPT-1's LayerNorm after each residual sum
(post-LN) and its missing final LayerNorm (`norm_placement`, `final_norm`), and free-text `notes`
(GPT-3's alternating dense and locally banded sparse attention, two entries of Table 2.1 that do not
multiply out). None of these changes the parameter count but the final LayerNorm.

Training compute is C = 6 N D floating-point operations for N parameters and D tokens: 2 N per
token for the forward pass (a multiply and an add per parameter) and twice that for the backward
pass, attention's own products left out. Table D.1 of the GPT-3 paper computes it so, with N the
total parameter count, embeddings included (its "Params" column matches `param_count` to 0.4%).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..config import GPTConfig, param_counts

PF_DAY = 1e15 * 86400              # FLOPs: a petaFLOP/s sustained for a day


@dataclass(frozen=True)
class Published:
    """One model of the family: its config and the figures its paper states (None: not stated)."""
    name: str
    config: GPTConfig
    params: float | None           # the paper's parameter count
    tokens: float | None           # training tokens
    data: str                      # the training data, as the paper describes it
    batch_tokens: float | None     # tokens per optimizer step
    lr: float | None               # peak learning rate
    source: str                    # bib key
    norm_placement: str = "pre"    # "pre": LayerNorm at each sub-block's input; "post": after the residual sum
    final_norm: bool = True        # a LayerNorm after the last block (ln_f)
    notes: tuple[str, ...] = ()


_WEBTEXT = "WebText: slightly over 8 million documents, 40 GB of text; training tokens not stated"
_GPT3_DATA = ("300B tokens sampled from filtered Common Crawl, WebText2, Books1, Books2 and Wikipedia "
              "(Table 2.2)")
_SPARSE = "attention alternates dense and locally banded sparse layers, as in the Sparse Transformer"


def _gpt2(name, params, n_layer, n_embd):
    return Published(name, GPTConfig(n_layer=n_layer, n_embd=n_embd, n_head=n_embd // 64), params, None,
                     _WEBTEXT, 512 * 1024, None, "radford2019language",
                     notes=("batch of 512 sequences of 1,024 tokens; learning rate tuned per size, not stated",))


def _gpt3(name, params, n_layer, n_embd, n_head, batch_tokens, lr, notes=()):
    return Published(name, GPTConfig(n_ctx=2048, n_layer=n_layer, n_embd=n_embd, n_head=n_head), params,
                     300e9, _GPT3_DATA, batch_tokens, lr, "brown2020language", notes=(_SPARSE, *notes))


GPT1 = Published(
    "GPT-1", GPTConfig(vocab_size=40478, n_ctx=512, n_layer=12, n_head=12, n_embd=768, dropout=0.1),
    None, None, "BooksCorpus: over 7,000 unique unpublished books; training tokens not stated",
    64 * 512, 2.5e-4, "radford2018improving", norm_placement="post", final_norm=False,
    notes=("vocabulary: BPE with 40,000 merges (40,478 tokens in the released model)",
           "100 epochs over minibatches of 64 sequences of 512 tokens"))

GPT2 = (_gpt2("GPT-2 Small", 117e6, 12, 768), _gpt2("GPT-2 Medium", 345e6, 24, 1024),
        _gpt2("GPT-2 Large", 762e6, 36, 1280), _gpt2("GPT-2 XL", 1542e6, 48, 1600))

GPT3 = (
    _gpt3("GPT-3 Small", 125e6, 12, 768, 12, 0.5e6, 6.0e-4),
    _gpt3("GPT-3 Medium", 350e6, 24, 1024, 16, 0.5e6, 3.0e-4),
    _gpt3("GPT-3 Large", 760e6, 24, 1536, 16, 0.5e6, 2.5e-4),
    _gpt3("GPT-3 XL", 1.3e9, 24, 2048, 16, 1e6, 2.0e-4,
          ("Table 2.1 lists 24 heads of 128 (3,072 wide) for d_model 2,048; a GPTConfig splits d_model "
           "among its heads, so this one keeps d_model and d_head: 16 heads of 128. The head count does "
           "not change the parameter count",)),
    _gpt3("GPT-3 2.7B", 2.7e9, 32, 2560, 32, 1e6, 1.6e-4),
    _gpt3("GPT-3 6.7B", 6.7e9, 32, 4096, 32, 2e6, 1.2e-4),
    _gpt3("GPT-3 13B", 13.0e9, 40, 5120, 40, 2e6, 1.0e-4,
          ("Table 2.1 prints d_model 5,140, but 40 heads of 128 are 5,120 wide, and only 5,120 gives "
           "Table D.1's 12,850M parameters",)),
    _gpt3("GPT-3 175B", 175.0e9, 96, 12288, 96, 3.2e6, 0.6e-4),
)

FAMILY = (GPT1, *GPT2, *GPT3)

# Table D.1 of the GPT-3 paper: the parameter count it multiplies by, and total training compute in PF-days.
GPT3_TABLE_D1_PARAMS = {"GPT-3 Small": 125e6, "GPT-3 Medium": 356e6, "GPT-3 Large": 760e6, "GPT-3 XL": 1320e6,
                        "GPT-3 2.7B": 2650e6, "GPT-3 6.7B": 6660e6, "GPT-3 13B": 12850e6, "GPT-3 175B": 174600e6}
GPT3_TRAIN_PF_DAYS = {"GPT-3 Small": 2.60, "GPT-3 Medium": 7.42, "GPT-3 Large": 15.8, "GPT-3 XL": 27.5,
                      "GPT-3 2.7B": 55.2, "GPT-3 6.7B": 139.0, "GPT-3 13B": 268.0, "GPT-3 175B": 3640.0}

# Why a published count differs from `param_count`, by family.
COUNT_DIFFERENCES = {
    "radford2018improving": "GPT-1's paper states no count (GPT-2's calls its 117M model the original GPT's size)",
    "radford2019language": (
        "the paper does not say how it counted; each of its four figures equals the count with a "
        "40,478-row token embedding (GPT-1's vocabulary) in place of 50,257 rows, to the paper's rounding"),
    "brown2020language": ("Table 2.1 rounds; its counts include the embeddings, as Table D.1's more precise "
                          "ones (GPT3_TABLE_D1_PARAMS) show"),
}


def member(name: str) -> Published:
    """The family member called `name` ("GPT-1", "GPT-2 Medium", "GPT-3 175B", ...)."""
    for model in FAMILY:
        if model.name == name:
            return model
    raise ValueError(f"no model named {name!r} in the family; expected one of {[m.name for m in FAMILY]}")


def param_count(model: Published) -> int:
    """All parameters by lib's formula (`lib.config.param_counts`), less ln_f where the model has none."""
    counts = param_counts(model.config)
    return counts["total"] - (0 if model.final_norm else counts["ln_f"])


def non_embedding_params(model: Published) -> int:
    """The parameters outside the token and position embeddings: Kaplan et al.'s N [kaplan2020scaling],
    about 12 n_layer n_embd^2."""
    counts = param_counts(model.config)
    return param_count(model) - counts["wte"] - counts["wpe"]


def count_check(model: Published) -> dict:
    """lib's count beside the published one: {"counted", "published", "ratio", "why"} (published and
    ratio None where the paper states no count; why: COUNT_DIFFERENCES's line for its paper)."""
    counted = param_count(model)
    published = model.params
    return {"counted": counted, "published": published,
            "ratio": None if published is None else counted / published,
            "why": COUNT_DIFFERENCES[model.source]}


def train_flops(n_params: float, tokens: float) -> float:
    """C = 6 N D: training FLOPs for N parameters over D tokens (the forward pass's 2 N per token and
    the backward pass's 4 N)."""
    if not (n_params > 0 and tokens > 0):
        raise ValueError(f"train_flops needs positive n_params and tokens, got {n_params!r} and {tokens!r}")
    return 6.0 * n_params * tokens


def pf_days(flops: float) -> float:
    """FLOPs in PF-days (1 PF-day = 1e15 FLOP/s for 86,400 s = 8.64e19 FLOPs)."""
    return flops / PF_DAY


def train_compute(model: Published) -> dict:
    """{"params", "tokens", "flops", "pf_days"} of training `model`, N being `param_count` (embeddings
    included, as Table D.1 counts). A model whose paper states no token count raises ValueError."""
    if model.tokens is None:
        raise ValueError(f"{model.name}: its paper states no training token count ({model.data})")
    flops = train_flops(param_count(model), model.tokens)
    return {"params": param_count(model), "tokens": model.tokens, "flops": flops, "pf_days": pf_days(flops)}
