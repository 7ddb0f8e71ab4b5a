"""Exercise ch2_embeddings's wrong, trivial and tampering answers (see solutions/fixtures.py)."""
WRONG = [
    ("fancy_index_add", "grads[\"wte\"][idx] += dx: a repeated id keeps one of its rows",
     (("np.add.at(grads[\"wte\"], idx.reshape(-1), dx.reshape(-1, C))", "grads[\"wte\"][idx.reshape(-1)] += dx.reshape(-1, C)"),)),
    ("wpe_first_sequence", "wpe's gradient from the first sequence only, not summed over the batch",
     (("grads[\"wpe\"][:idx.shape[1]] += dx.sum(axis=0)", "grads[\"wpe\"][:idx.shape[1]] += dx[0]"),)),
    ("no_positions", "the position vectors left out of the forward pass",
     (("return wte[idx] + wpe[:T]", "return wte[idx]"),)),
    ("no_id_check", "ids outside [0, V) accepted: -1 silently reads the last row",
     (("    if idx.size and (idx.min() < 0 or idx.max() >= len(wte)):\n"
       "        raise ValueError(f\"ids must lie in [0, {len(wte)}); got {idx.min()} to \"\n"
       "                         f\"{idx.max()}\")\n", ""),)),
    ("head_gradient_missing", "the head's part of wte's gradient never added: tying loses it",
     (("    grads[\"wte\"] += dlogits.reshape(-1, V).T @ hidden.reshape(-1, C)", "    pass"),)),
    ("head_assigns", "the head's gradient assigned (=), not added (+=): the lookup's or an earlier pass's is lost",
     (("    grads[\"wte\"] += dlogits.reshape(-1, V).T @ hidden.reshape(-1, C)",
       "    grads[\"wte\"] = dlogits.reshape(-1, V).T @ hidden.reshape(-1, C)"),)),
]

TRIVIAL = {
    "zeros": '''
import numpy as np


def embed_forward(idx, wte, wpe):
    if idx.shape[1] > len(wpe) or idx.min() < 0 or idx.max() >= len(wte):
        raise ValueError(idx)
    return np.zeros((*idx.shape, wte.shape[1]), wte.dtype)


def embed_backward(dx, idx, grads):
    pass


def head_forward(hidden, wte):
    return np.zeros((*hidden.shape[:2], len(wte)), wte.dtype)


def head_backward(dlogits, hidden, wte, grads):
    return np.zeros_like(hidden)
''',
}

IMPORT_REFERENCE = '''
import numpy as np
from lib.numpy_twin import Embedding, GPT


def embed_forward(idx, wte, wpe):
    tok, pos = Embedding(*wte.shape), Embedding(*wpe.shape)
    tok.weight, pos.weight = wte, wpe
    return tok.forward(idx)[0] + pos.forward(np.arange(idx.shape[1])[None])[0]


def embed_backward(dx, idx, grads):
    tok, pos = Embedding(*grads["wte"].shape), Embedding(*grads["wpe"].shape)
    tok.grads, pos.grads = {"weight": grads["wte"]}, {"weight": grads["wpe"]}
    tok.backward(dx, idx)
    pos.backward(dx.sum(axis=0, keepdims=True), np.arange(idx.shape[1])[None])


class _Tied:
    def __init__(self, wte):
        self.wte = Embedding(*wte.shape)
        self.wte.weight = wte


def head_forward(hidden, wte):
    return GPT.lm_head(_Tied(wte), hidden)


def head_backward(dlogits, hidden, wte, grads):
    grads["wte"] += np.einsum("btv,btc->vc", dlogits, hidden)
    return GPT.lm_head(_Tied(wte.T.copy()), dlogits)
'''


LIB_ROUTE = '''
import numpy as np
from lib.numpy_twin.model import Linear


def embed_forward(idx, wte, wpe):
    raise NotImplementedError("this route answers the head only")


def embed_backward(dx, idx, grads):
    raise NotImplementedError("this route answers the head only")


def _head(wte):
    """lib's Linear without bias stores its weight (out, in): (V, C), wte itself."""
    layer = Linear(wte.shape[1], wte.shape[0], bias=False)
    layer.weight = wte
    return layer


def head_forward(hidden, wte):
    return _head(wte).forward(hidden)[0]


def head_backward(dlogits, hidden, wte, grads):
    layer = _head(wte)
    layer.grads = {"weight": grads["wte"]}
    return layer.backward(dlogits, hidden)
'''
