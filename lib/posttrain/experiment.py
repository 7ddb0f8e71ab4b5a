"""Chapter 9's experiment: instruction tuning, LoRA and DPO from the small Shakespeare model, cached.

Instruction tuning with and without the mask, LoRA against full fine-tuning, then DPO with its
reference, without it and with a small beta; run once (the install step does) and cached as
JSON under a digest of its settings and the plays, as chapter 7's experiment is.
"""
from __future__ import annotations

import copy
import json
import time
from dataclasses import asdict, dataclass, replace

import numpy as np

from ..assets import digest_path
from ..atomic import write_atomic
from ..cached import shifted
from ..settings import check_fields
from ..twins import twin_module
from .instructions import DATA, LINE_CHARS, TASKS, TEST_LINES, instruction_data, pairs_of, preference_pairs
from .loops import DPOSettings, SFTSettings, dpo, reference_logps, sft
from .scores import kl_to, task_scores
from .template import add_chat_tokens


@dataclass(frozen=True)
class LoRASettings:
    """LoRA's adapters (`add_lora`: rank, and alpha, whose ratio to the rank scales them) and the
    learning rate they train at."""
    rank: int
    alpha: float
    lr: float

    def __post_init__(self):
        check_fields(self, counts=("rank",), positive=("alpha", "lr"))


# The experiment's settings (sized to run in a few minutes on a 2-core CPU, once, then cached).
SFT = SFTSettings(steps=300, batch_size=16, lr=2e-3, grad_clip=1.0, seed=0, weight_decay=0.0)
LORA = LoRASettings(rank=8, alpha=16, lr=5e-3)
DPO = DPOSettings(steps=80, batch_size=8, lr=3e-4, grad_clip=1.0, seed=0, beta=0.1, small_beta=0.01)


def _settings():
    """The experiment's settings as it runs them: the seeds of its trainings shifted by the course
    seed (`lib.cached.shifted`; the small model it starts from is shifted where it is trained)."""
    return dict(data=DATA, sft=asdict(replace(SFT, seed=shifted(SFT.seed))), lora=asdict(LORA),
                dpo=asdict(replace(DPO, seed=shifted(DPO.seed))), tasks=TASKS, line_chars=LINE_CHARS,
                test_lines=TEST_LINES)


def experiment_file():
    """Where `experiment` caches its result (the file exists once it has run): the name carries a
    digest of the settings and of the plays' text."""
    from ..shakespeare import shakespeare_text

    return digest_path("posttrain/experiment", _settings(), shakespeare_text().encode(), suffix=".json")


def _scores(model, data):
    scores = task_scores(model.eval(), data["test"])
    return {k: v.tolist() if isinstance(v, np.ndarray) else v for k, v in scores.items()}


def sft_folder():
    """The folder of the experiment's instruction-tuned model ("sft"), saved when it runs."""
    return experiment_file().with_name(experiment_file().stem.replace("experiment", "sft"))


def sft_model(twin="torch"):
    """The experiment's instruction-tuned model (run `experiment()` first) in either twin."""
    return twin_module(twin).GPT.load(sft_folder())


def experiment(progress=True, device="cpu"):
    """Chapter 9's measurements, from the small Shakespeare model with the markers added ("base"),
    on the held-out items (right or wrong per item, so that tests can be paired):

    - "sft": instruction-tuned (SFT), loss on the responses only; "sft_no_mask": on every token;
    - "lora": LoRA (LORA's rank, alpha and rate) on the same data, then merged;
    - "dpo": DPO from "sft" with "sft" as its frozen reference; "dpo_no_ref": without the
      reference (its log-probabilities taken as 0); "dpo_small_beta": with DPO's small_beta.

    Each has "exact", "choice" and "preference" (lists of bools over the test items),
    "response_loss" (nats per response token), and its training's "loss", "trainable" parameters,
    "optimizer_bytes" and "seconds"; DPO runs have "kl", their drift from the reference
    (`kl_to`). The "sft" model is saved (`sft_model`). Runs with the torch twin on `device`; cached
    as JSON (`experiment_file`)."""
    path = experiment_file()
    if path.is_file():
        return json.loads(path.read_text())
    from ..pretrained import shakespeare_small

    began = time.perf_counter()
    settings = _settings()
    tuning, preference = SFTSettings(**settings["sft"]), DPOSettings(**settings["dpo"])
    data = instruction_data(**DATA)
    train_pairs, test_pairs = pairs_of(data["train"]), pairs_of(data["test"])
    train_triples = preference_pairs(data["train"], DATA["seed"])
    base = add_chat_tokens(shakespeare_small("torch"), tuning.seed).to(device)
    runs = {"base": _scores(base, data)}
    for name, mask_prompt, lora in (("sft", True, False), ("sft_no_mask", False, False), ("lora", True, True)):
        model = copy.deepcopy(base).train()
        twin = twin_module("torch", "posttrain")
        if lora:
            twin.add_lora(model, LORA.rank, LORA.alpha)
        trainable = sum(p.numel() for _, p in twin.trainable_parameters(model))
        start = time.perf_counter()
        history = sft(model, train_pairs, replace(tuning, lr=LORA.lr) if lora else tuning, mask_prompt,
                      progress=progress)
        runs[name] = dict(loss=history["loss"], trainable=trainable, optimizer_bytes=history["optimizer_bytes"],
                          seconds=time.perf_counter() - start)
        if lora:
            twin.merge_lora(model)
        runs[name].update(_scores(model, data))
        if name == "sft":
            reference = model
            model.save(sft_folder())                        # for sampling; atomic
    ref_logp = reference_logps(reference, train_triples)
    for name, beta, with_ref in (("dpo", preference.beta, True), ("dpo_no_ref", preference.beta, False),
                                 ("dpo_small_beta", preference.small_beta, True)):
        model = copy.deepcopy(reference).train()
        start = time.perf_counter()
        history = dpo(model, train_triples, ref_logp if with_ref else np.zeros_like(ref_logp),
                      replace(preference, beta=beta), progress=progress)
        runs[name] = dict(loss=history["loss"], seconds=time.perf_counter() - start, beta=beta, reference=with_ref)
        runs[name].update(_scores(model, data), kl=kl_to(model.eval(), reference, test_pairs))
    result = {"settings": settings, "tasks": [it["task"] for it in data["test"]], "runs": runs,
              "seconds": time.perf_counter() - began}
    write_atomic(path, json.dumps(result))
    return json.loads(path.read_text())                      # as a later call reads it
