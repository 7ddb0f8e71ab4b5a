"""From a language model to an assistant (chapter 9): instruction data, the chat template,
masked instruction tuning, LoRA and DPO, measured.

- `instructions`: instructions with checkable answers built from the 38 plays (`TASKS`), offline.
  Tasks that depend on the play (who speaks a line, who speaks next) are split by lines within
  the training plays: a held-out play's characters were never seen. Tasks that do not (capitals,
  counting words, the first word) are split by whole plays: they are tested on the plays no
  model here pre-trained on (`lib.evaluate.held_out_plays`).
- `template`: `<|user|>instruction\\ninput<|assistant|>response<|end|>`, the three markers new
  token ids after the 256 bytes (`SPECIAL`); the prompt ends at `<|assistant|>` and a response
  ends with `<|end|>`, where sampling (`chat`) stops. `chat_batch` gives inputs, targets and the
  loss mask (1 on the response's tokens only, or on every real token without the mask).
- `scores`: evaluation with chapter 6b's machinery: choice accuracy by
  `lib.evaluate.score_questions`, and exact match of greedy decoding, computed in one pass
  (`exact_match`), right or wrong per item so that `lib.evaluate.mcnemar` can pair two models.
- `loops`: `sft` and `dpo`, the same for both twins, and their settings; each twin's step,
  `LoRALinear` and DPO loss live in `lib/numpy_twin/posttrain.py` and
  `lib/torch_twin/posttrain.py`. `dpo_loss` computes DPO's loss with the twin of its inputs.
- `experiment`: instruction tuning with and without the mask, LoRA against full fine-tuning,
  then DPO with its reference, without it and with a small beta, from the course's small
  Shakespeare model; run once (the install step does) and cached as JSON under a digest of its
  settings and the plays, as chapter 7's experiment is.
- `alpaca`: a published instruction dataset in the common JSON format (records with
  "instruction", "input", "output"; a JSON list or JSON lines), in Alpaca's text template for
  GPT-2's tokenizer: the GPU branch of the chapter fine-tunes GPT-2 Small on it.
"""
