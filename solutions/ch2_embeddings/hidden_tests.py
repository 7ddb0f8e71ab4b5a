"""Hidden tests of exercise 2.1 (the embeddings and the tied head, forward and backward).

Reference: float64, written out below: the lookup wte[idx] + wpe[:T], the head hidden @ wte^T,
and the backward passes by explicit loops over the positions (a repeated id adds each of its
rows), which tests/test_grader.py checks against lib's Embedding and GPT.
- embed_forward, head_forward: exact lookups and one matrix product, within 1e-12 + 1e-10 |ref|
  (float64); float32 inputs must give float32, within 1e-5 + 1e-5 |ref|.
- embed_backward, head_backward: driven by `accumulate` (grader/drivers.py), which calls
  the function twice on the same `grads`, as gradient accumulation does, and returns what the
  first call returned with the gradients after one call and after two. The first call's gradients
  must match, within 1e-10 + 1e-10 |ref|; a separate test per function asks that the second call
  adds (twice the first's), so = where += is needed loses only that test.
Edge tests: bad ids or too many positions (ValueError), and dx = 0 (all gradients 0, which an
answer that adds nothing gets right).
"""
import numpy as np

from grader.spec import Exercise, Test, close

EXERCISE = Exercise(
    notebook="ch2_embeddings", title="Embeddings and the tied head",
    functions=("embed_forward", "embed_backward", "head_forward", "head_backward"),
    blocked=("lib.numpy_twin.model:Embedding.forward", "lib.numpy_twin.model:Embedding.backward",
             "lib.numpy_twin.model:GPT.forward_outputs", "lib.numpy_twin.model:GPT.lm_head",
             "lib.numpy_twin.model:GPT.backward",
             # a Linear without bias whose weight, stored (out, in), is wte computes the tied head
             "lib.numpy_twin.model:Linear.forward", "lib.numpy_twin.model:Linear.backward"),
)


def embed_forward(idx, wte, wpe):
    idx = np.asarray(idx)
    return np.asarray(wte, np.float64)[idx] + np.asarray(wpe, np.float64)[:idx.shape[1]]


def embed_backward(dx, idx, grads):
    B, T = idx.shape
    for b in range(B):
        for t in range(T):
            grads["wte"][idx[b, t]] += dx[b, t]
            grads["wpe"][t] += dx[b, t]


def head_forward(hidden, wte):
    return np.einsum("btc,vc->btv", np.asarray(hidden, np.float64), np.asarray(wte, np.float64))


def head_backward(dlogits, hidden, wte, grads):
    grads["wte"] += np.einsum("btv,btc->vc", dlogits, hidden)
    return np.einsum("btv,vc->btc", dlogits, wte)


REFERENCE = {"embed_forward": embed_forward, "embed_backward": embed_backward,
             "head_forward": head_forward, "head_backward": head_backward}

F64 = dict(rtol=1e-10, atol=1e-12)
F32 = dict(rtol=1e-5, atol=1e-5)
GRAD = dict(rtol=1e-10, atol=1e-10)


def accumulated(returned, grads, twice=False):
    """Check for the `accumulate` driver's [returned, grads after one call, after two]: what the
    first call returned (None, or dhidden) and the gradients after one call, or (`twice`) after
    two, which must be twice one call's."""
    returned_check = None if returned is None else close(returned, dtype=np.float64, **GRAD)

    def check(got):
        if not isinstance(got, list) or len(got) != 3 or not all(isinstance(g, dict) for g in got[1:]):
            return False, "the result could not be read"
        if returned_check is not None and not twice:
            verdict = returned_check(got[0])
            if not verdict[0]:
                return False, f"the returned gradient: {verdict[1]}"
        for name, want in grads.items():
            verdict = close(2 * want if twice else want, **GRAD)(got[2 if twice else 1].get(name))
            if not verdict[0]:
                when = " after a second call (it must add to the first's)" if twice else ""
                return False, f"grads[{name!r}]{when}: {verdict[1]}"
        return True, "twice one call's gradients" if twice else "the gradients match"
    return check


def _zeros(V, n_ctx, C):
    """{name: zeros} shaped like the two tables."""
    return dict(wte=np.zeros((V, C)), wpe=np.zeros((n_ctx, C)))


def tests():
    rng = np.random.default_rng(2121)
    out = []
    V, n_ctx, C = 13, 9, 5
    wte, wpe = rng.standard_normal((V, C)), rng.standard_normal((n_ctx, C))
    cases = {"B=2 T=6, ids 0 and 3 repeated": np.array([[3, 0, 7, 0, 3, 12], [0, 0, 1, 2, 3, 4]]),
             "B=1 T=9 (the whole context), one id throughout": np.full((1, 9), 4),
             "B=3 T=1": np.array([[5], [5], [11]])}
    for label, idx in cases.items():
        out.append(Test(f"embed_forward: {label}", "embed_forward", (idx, wte, wpe),
                        close(embed_forward(idx, wte, wpe), dtype=np.float64, **F64), points=2))
        dx = rng.standard_normal((*idx.shape, C))
        grads = _zeros(V, n_ctx, C)
        embed_backward(dx, idx, grads)
        args = (dx, idx, _zeros(V, n_ctx, C))
        out.append(Test(f"embed_backward: {label}", "embed_backward", args, accumulated(None, grads),
                        driver="accumulate", points=2))
    idx32 = np.array([[1, 2, 2]])
    w32, p32 = wte.astype(np.float32), wpe.astype(np.float32)
    out.append(Test("embed_forward: float32 tables", "embed_forward", (idx32, w32, p32),
                    close(embed_forward(idx32, w32, p32), dtype=np.float32, **F32)))
    idx = cases["B=2 T=6, ids 0 and 3 repeated"]
    dx = rng.standard_normal((*idx.shape, C))
    grads = _zeros(V, n_ctx, C)
    embed_backward(dx, idx, grads)
    out.append(Test("embed_backward called twice: the gradients add up", "embed_backward",
                    (dx, idx, _zeros(V, n_ctx, C)), accumulated(None, grads, twice=True), driver="accumulate",
                    points=2))
    zero = np.zeros((*idx.shape, C))
    out.append(Test("embed_backward: dx = 0", "embed_backward", (zero, idx, _zeros(V, n_ctx, C)),
                    accumulated(None, _zeros(V, n_ctx, C)), driver="accumulate", edge=True))
    for label, bad in {"an id equal to V": np.array([[1, V]]), "a negative id": np.array([[-1, 2]]),
                       "10 positions for n_ctx = 9": np.zeros((1, 10), int)}.items():
        out.append(Test(f"embed_forward: {label} raises ValueError", "embed_forward", (bad, wte, wpe),
                        expect_error="ValueError", edge=True))

    for label, (B, T) in {"B=2 T=4": (2, 4), "B=1 T=7": (1, 7)}.items():
        hidden = rng.standard_normal((B, T, C))
        out.append(Test(f"head_forward: {label}", "head_forward", (hidden, wte),
                        close(head_forward(hidden, wte), dtype=np.float64, **F64), points=2))
        dlogits = rng.standard_normal((B, T, V))
        grads = {"wte": np.zeros((V, C))}
        dhidden = head_backward(dlogits, hidden, wte, grads)
        args = (dlogits, hidden, wte, {"wte": np.zeros((V, C))})
        out.append(Test(f"head_backward: {label}", "head_backward", args, accumulated(dhidden, grads),
                        driver="accumulate", points=2))
        if B == 2:
            out.append(Test("head_backward called twice: the gradients add up", "head_backward", args,
                            accumulated(dhidden, grads, twice=True), driver="accumulate", points=2))
    h32 = rng.standard_normal((1, 3, C)).astype(np.float32)
    out.append(Test("head_forward: float32", "head_forward", (h32, w32),
                    close(head_forward(h32, w32), dtype=np.float32, **F32)))
    return out
