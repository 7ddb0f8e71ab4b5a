"""Weights as plain numpy arrays, shared by both twins (no framework here).

- `init_state(config, seed)`: GPT-2's initialisation, so that one seed gives the same weights
  in the numpy twin and the torch twin; `normal_rows` draws extra rows the same way.
- `save_state` / `load_state`: the course's own checkpoint, a folder with `config.json` and
  `model.safetensors` (keys as in `lib.config.param_shapes`); both twins read and write it.
- `load_hf_gpt2(folder)`: a Hugging Face GPT-2 folder (`config.json` + `model.safetensors`),
  in either key layout, converted to the course's names and shapes.
- `save_hf_gpt2(folder, config, state)`: the inverse, a folder that `transformers`'
  `GPT2LMHeadModel.from_pretrained` reads (`to_hf_state` / `to_hf_config` do the renaming).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from .atomic import atomic_folder
from .config import GPTConfig, param_shapes

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"


def init_state(config: GPTConfig, seed: int = 0, dtype=np.float32) -> dict[str, np.ndarray]:
    """GPT-2's initialisation: N(0, 0.02) for weights and embeddings, zero biases, unit
    LayerNorm gains, and N(0, 0.02 / sqrt(2 * n_layer)) for the two projections that write
    into the residual stream (attn.c_proj, mlp.c_proj), so its variance does not grow with depth."""
    rng = np.random.default_rng(seed)
    resid_std = 0.02 / np.sqrt(2 * config.n_layer)
    state = {}
    for name, shape in param_shapes(config).items():
        if name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")):
            value = np.ones(shape, dtype)
        elif name.endswith("bias"):
            value = np.zeros(shape, dtype)
        else:
            std = resid_std if name.endswith("c_proj.weight") else 0.02
            value = rng.standard_normal(shape, dtype=np.float32)
            value *= std
            value = value.astype(dtype, copy=False)
        state[name] = value
    return state


def normal_rows(n: int, width: int, seed: int) -> np.ndarray:
    """(n, width) float32 values drawn N(0, 0.02), GPT-2's init scale: new embedding rows and the
    head's weights, the same in both twins for the same seed."""
    return (np.random.default_rng(seed).standard_normal((n, width)) * 0.02).astype(np.float32)


def check_state(config: GPTConfig, state: dict[str, np.ndarray], source: str = "state dict") -> None:
    """Raise a ValueError naming every missing or unexpected tensor, or the first shape mismatch."""
    expected = param_shapes(config)
    missing = [k for k in expected if k not in state]
    unexpected = [k for k in state if k not in expected]
    if missing or unexpected:
        raise ValueError(f"{source}: missing tensors {missing[:8]}{' ...' if len(missing) > 8 else ''}, "
                         f"unexpected tensors {unexpected[:8]}{' ...' if len(unexpected) > 8 else ''}")
    for name, shape in expected.items():
        if tuple(state[name].shape) != shape:
            raise ValueError(f"{source}: tensor {name!r} has shape {tuple(state[name].shape)}, "
                             f"expected {shape} for this config")


# ---- the course's own checkpoint ------------------------------------------------------------
def save_state(path, config: GPTConfig, state: dict[str, np.ndarray], extra: dict | None = None) -> None:
    """Write `path/config.json` and `path/model.safetensors`. The files are written into a
    temporary folder beside `path` and moved in only when complete, so a failed save never
    destroys an earlier checkpoint at `path`."""
    from safetensors.numpy import save_file

    check_state(config, state, source=f"saving to {path}")
    with atomic_folder(path) as tmp:
        save_file({k: np.ascontiguousarray(v) for k, v in state.items()}, str(tmp / WEIGHTS_FILE))
        (tmp / CONFIG_FILE).write_text(json.dumps({"format": "gpt2-course", "config": config.to_dict(),
                                                   **(extra or {})}, indent=2))


def load_state(path) -> tuple[GPTConfig, dict[str, np.ndarray]]:
    """Read a folder written by `save_state`, checking every tensor's name and shape."""
    from safetensors.numpy import load_file

    path = Path(path)
    for f in (CONFIG_FILE, WEIGHTS_FILE):
        if not (path / f).is_file():
            raise FileNotFoundError(f"no {f} in {path}: expected a checkpoint folder written by model.save()")
    meta = json.loads((path / CONFIG_FILE).read_text())
    if meta.get("format") != "gpt2-course":
        raise ValueError(f"{path / CONFIG_FILE} is not a checkpoint of this course "
                         f"(for a Hugging Face GPT-2 folder use GPT.from_pretrained)")
    config = GPTConfig.from_dict(meta["config"])
    state = load_file(str(path / WEIGHTS_FILE))
    check_state(config, state, source=str(path / WEIGHTS_FILE))
    return config, state


# ---- Hugging Face GPT-2 folders ---------------------------------------------------------------
_HF_ACTIVATIONS = {"gelu_new": "gelu", "gelu_pytorch_tanh": "gelu", "gelu": "gelu_exact", "relu": "relu"}
_HF_CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
_HF_BUFFERS = (".attn.bias", ".attn.masked_bias")  # causal-mask buffers in the published file


def hf_config(hf: dict) -> GPTConfig:
    """GPTConfig from a Hugging Face GPT-2 `config.json` dictionary."""
    act = hf.get("activation_function", "gelu_new")
    if act not in _HF_ACTIVATIONS:
        raise ValueError(f"unsupported activation_function {act!r}; expected one of {sorted(_HF_ACTIVATIONS)}")
    return GPTConfig(vocab_size=hf["vocab_size"], n_ctx=hf.get("n_positions", hf.get("n_ctx")),
                     n_layer=hf["n_layer"], n_head=hf["n_head"], n_embd=hf["n_embd"],
                     activation=_HF_ACTIVATIONS[act], layer_norm_eps=hf.get("layer_norm_epsilon", 1e-5))


def load_hf_gpt2(folder) -> tuple[GPTConfig, dict[str, np.ndarray]]:
    """Load a Hugging Face GPT-2 folder into the course's names and shapes.

    Two layouts exist: the published file (keys `h.0.attn.c_attn.weight`, plus mask buffers
    `h.N.attn.bias` / `h.N.attn.masked_bias` to ignore) and what `save_pretrained` writes
    (keys `transformer.h.0...`, `lm_head.weight` possibly present, no buffers). HF's Conv1D
    stores weights (in, out); the course stores (out, in) like nn.Linear, so those transpose.
    """
    from safetensors.numpy import load_file

    folder = Path(folder)
    for f in (CONFIG_FILE, WEIGHTS_FILE):
        if not (folder / f).is_file():
            raise FileNotFoundError(f"no {f} in {folder}: expected a Hugging Face GPT-2 folder "
                                    f"(config.json + model.safetensors, as save_pretrained writes)")
    config = hf_config(json.loads((folder / CONFIG_FILE).read_text()))
    raw = load_file(str(folder / WEIGHTS_FILE))
    state = {}
    for key, value in raw.items():
        name = key.removeprefix("transformer.")
        if name.endswith(_HF_BUFFERS) or name == "lm_head.weight":
            continue  # mask buffers carry no parameters; the head is tied to wte (checked below)
        if name.endswith(_HF_CONV1D):
            value = value.T
        state[name] = np.ascontiguousarray(value, dtype=np.float32)
    if "lm_head.weight" in raw and "wte.weight" in state and not np.array_equal(raw["lm_head.weight"], state["wte.weight"]):
        raise ValueError(f"{folder}: lm_head.weight differs from wte.weight; this course ties the head to the embedding")
    check_state(config, state, source=str(folder / WEIGHTS_FILE))
    return config, state


def _check_gpt2_architecture(config: GPTConfig) -> None:
    """Hugging Face's GPT-2 has learned positions, LayerNorm, the plain MLP, biases and one K/V
    head per query head; a config beyond GPT-2 (chapter 8) has no GPT-2 file to become."""
    got = dict(norm=config.norm, position=config.position, mlp=config.mlp, hidden_dim=config.hidden_dim,
               kv_heads=config.kv_heads, bias=config.bias, sliding_window=config.sliding_window)
    gpt2 = dict(norm="layernorm", position="learned", mlp="mlp", hidden_dim=4 * config.n_embd,
                kv_heads=config.n_head, bias=True, sliding_window=None)
    if got != gpt2:
        raise ValueError(f"a Hugging Face GPT-2 file needs GPT-2's architecture {gpt2}; this config has {got}")


def to_hf_config(config: GPTConfig) -> dict:
    """The Hugging Face `config.json` dictionary of a GPTConfig (inverse of `hf_config`)."""
    _check_gpt2_architecture(config)
    activation = {"gelu": "gelu_new", "gelu_exact": "gelu", "relu": "relu"}[config.activation]
    eot = 50256 if config.vocab_size > 50256 else None      # GPT-2's <|endoftext|>, if the vocab has it
    return {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": config.vocab_size,
            "n_positions": config.n_ctx, "n_embd": config.n_embd, "n_layer": config.n_layer,
            "n_head": config.n_head, "activation_function": activation,
            "layer_norm_epsilon": config.layer_norm_eps, "tie_word_embeddings": True,
            "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0,
            "bos_token_id": eot, "eos_token_id": eot}


def to_hf_state(config: GPTConfig, state: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The course's names and shapes -> `save_pretrained`'s keys (`transformer.` prefix, Conv1D
    weights stored (in, out)); the tied head `lm_head.weight` is left out, as HF leaves it out."""
    _check_gpt2_architecture(config)
    check_state(config, state)
    return {"transformer." + name: np.ascontiguousarray(value.T if name.endswith(_HF_CONV1D) else value)
            for name, value in state.items()}


def to_gpt2_layout(config: GPTConfig, state) -> dict[str, np.ndarray]:
    """The course's names and shapes ({name: array} or (name, array) pairs) -> GPT-2's checkpoint
    names without the `transformer.` prefix and its (in, out) matrices, each array a copy: the
    `params` that exercises 4.4 and 6.3 build their model on."""
    return {name.removeprefix("transformer."): np.array(value)
            for name, value in to_hf_state(config, dict(state)).items()}


def save_hf_gpt2(folder, config: GPTConfig, state: dict[str, np.ndarray]) -> None:
    """Write a Hugging Face GPT-2 folder (`config.json` + `model.safetensors`)."""
    from safetensors.numpy import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    save_file(to_hf_state(config, state), str(folder / WEIGHTS_FILE), metadata={"format": "pt"})
    (folder / CONFIG_FILE).write_text(json.dumps(to_hf_config(config), indent=2))
