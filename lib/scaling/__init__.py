"""Chapter 11's library (scale): the GPT family as data, training compute, a fitted scaling law and
in-context learning's measures.

- `family`: GPT-1, GPT-2's four sizes and GPT-3's eight as GPTConfigs with their published figures;
  parameter counts beside the papers'; training compute C = 6 N D in FLOPs and PF-days.
- `fit`: L(N) = E + A N^-alpha fitted to a ladder of runs, and the next run's predicted loss with
  an interval; `python -m lib.scaling fit RUNS.csv [--predict N] [--json]` on the command line
  (__main__.py).
- `ladder`: the chapter's cached trainings on the plays: a ladder of six sizes, an isoFLOP sweep,
  and an exact-answer task scored on the ladder (imported as `lib.scaling.ladder`, it trains).
- `in_context`: Olsson et al.'s prefix-matching score of each attention head, and the in-context
  score (late loss minus early loss).
- `induction`: the induction-head experiment (a 2-layer model and a 1-layer control, their scores
  over training and the phase change's step), cached.
- `few_shot`: a rule shown by k examples in the prompt (a letter's capital), scored by the answer's
  next-token probability with any twin and tokenizer (imported as `lib.scaling.few_shot`).
- `shards_ladder`: the ladder at larger sizes on GPT-2-token shards for a GPU, trained, fitted and
  predicted with `ladder`'s code (imported as `lib.scaling.shards_ladder`).
"""
from .family import (FAMILY, GPT1, GPT2, GPT3, GPT3_TABLE_D1_PARAMS, GPT3_TRAIN_PF_DAYS, Published, count_check, member,
                     non_embedding_params, param_count, pf_days, train_compute, train_flops)
from .fit import PowerLawFit, fit_power_law, predict, standard_errors, t_quantile
from .in_context import in_context_positions, in_context_score, prefix_matching_score
