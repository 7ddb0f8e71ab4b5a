"""lib.allocator: with glibc's defaults a numpy training step faults in fresh pages for most of
its temporaries; after `import lib` (keep_freed_memory) a repeated step reuses freed memory.
Counted as page faults, not timed: each run is a fresh process, with and without the opt-out."""
import json
import os
import platform
import subprocess
import sys

import pytest

STEP_FAULTS = """
import json, resource
import numpy as np
import lib
from lib import numpy_twin as nt
from lib.config import GPTConfig
from lib.data import get_batch
cfg = GPTConfig.small()
trainer = nt.Trainer(nt.GPT(cfg), 1e-3, (0.9, 0.95), 0.1, 1.0)
data = np.random.default_rng(0).integers(0, cfg.vocab_size, 10_000)
rng = np.random.default_rng(1)
faults = []
for _ in range(4):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    trainer.step([get_batch(data, 12, cfg.n_ctx, rng)], 1e-3)
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(json.dumps({"kept": lib.keep_freed_memory(), "faults": faults}))
"""


def step_faults(**env):
    out = subprocess.run([sys.executable, "-c", STEP_FAULTS], capture_output=True, text=True, check=True,
                         env={**os.environ, **env})
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_repeated_training_steps_reuse_freed_memory():
    tuned, default = step_faults(), step_faults(GPT2_COURSE_MALLOC="default")
    assert tuned["kept"] and not default["kept"]
    # Steps 3 and 4: warm. A step's temporaries total tens of MB (thousands of 4 KB pages); with
    # the defaults they fault in again every step, kept they mostly do not.
    warm_tuned, warm_default = sum(tuned["faults"][2:]), sum(default["faults"][2:])
    assert warm_default > 2000, default
    assert warm_tuned < warm_default / 4, (tuned, default)
