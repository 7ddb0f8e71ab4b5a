"""Exercise ch10_flash's wrong, trivial and tampering answers (see solutions/fixtures.py)."""
WRONG = [
    ("unshifted_exp", "the tile's weights exp(s) without subtracting the running max: overflow",
     (("p = np.exp(s - m_new[..., None])", "p = np.exp(s)"),)),
    ("no_rescale", "the sums so far not rescaled by exp(m - m_new) when the maximum rises",
     (("l_new = rescale * l + p.sum(axis=-1)", "l_new = l + p.sum(axis=-1)"),
      ("acc_new = rescale[..., None] * acc + p @ v_tile", "acc_new = acc + p @ v_tile"))),
    ("tile_max_only", "each tile's own maximum instead of the running one: exp(m - m_new) overflows",
     (("m_new = np.maximum(m, s.max(axis=-1))", "m_new = s.max(axis=-1)"),)),
    ("no_causal_mask", "the diagonal tile left unmasked: queries see keys after them",
     (("        s[..., :b, :] = np.where(future, -np.inf, s[..., :b, :])\n", ""),)),
    ("no_sqrt_d", "scores not divided by sqrt(D)",
     (("@ kt / math.sqrt(D)", "@ kt"),)),
    ("whole_matrix", "block_size ignored: one tile of all T keys, the (T, T) matrix after all",
     (("for start in range(0, T, block_size):\n        stop = min(start + block_size, T)",
       "for start in range(0, T, T):\n        stop = T"),)),
]

TRIVIAL = {
    "returns_v": '''
def online_softmax_update(m, l, acc, s, v_tile):
    return m, l, acc


def flash_attention(q, k, v, block_size=64):
    return v
''',
}

IMPORT_REFERENCE = '''
from lib.numpy_twin.flash import flash_attention, online_softmax_update
'''
