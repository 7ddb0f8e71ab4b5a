"""lib.allocator: with glibc's defaults a numpy training step faults in fresh pages for most of
its temporaries; once the numpy twin's Trainer has tuned the allocator (keep_freed_memory), a
repeated step reuses freed memory. `import lib` alone tunes nothing. Counted as page faults, not
timed: each run is a fresh process."""
import json
import os
import platform
import subprocess
import sys

import pytest

STEP_FAULTS = """
import json, resource, sys
import numpy as np
import lib
from lib import numpy_twin as nt
from lib.allocator import keep_freed_memory
from lib.config import GPTConfig, TrainConfig
from lib.data import get_batch
cfg = GPTConfig.small()
model = nt.GPT(cfg)
if sys.argv[1] == "trainer":
    trainer = nt.Trainer(model, TrainConfig(lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1, grad_clip=1.0))
    step = lambda batch: trainer.step([batch], 1e-3)
else:                                  # the same step without the Trainer: lib imported, nothing tuned
    optimizer = nt.AdamW(model.named_parameters(), 1e-3, (0.9, 0.95), weight_decay=0.1)
    step = lambda batch: nt.train_step(model, optimizer, [batch], 1e-3, 1.0)
data = np.random.default_rng(0).integers(0, cfg.vocab_size, 10_000)
rng = np.random.default_rng(1)
faults = []
for _ in range(4):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    step(get_batch(data, 12, cfg.n_ctx, rng))
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(json.dumps({"tunable": keep_freed_memory(), "faults": faults}))
"""


def warm_faults(path, **env):
    """Page faults of training steps 3 and 4 (warm) in a fresh process, and whether the tuning
    is available there. path: "trainer" (the numpy Trainer) or "import only" (lib imported)."""
    out = subprocess.run([sys.executable, "-c", STEP_FAULTS, path], capture_output=True, text=True, check=True,
                         env={**os.environ, **env})
    result = json.loads(out.stdout.strip().splitlines()[-1])
    return {"tunable": result["tunable"], "warm": sum(result["faults"][2:]), "faults": result["faults"]}


pytestmark = pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
                                reason="glibc only")


@pytest.fixture(scope="module")
def untuned():
    """The Trainer with the opt-out: glibc's defaults."""
    return warm_faults("trainer", GPT2_COURSE_MALLOC="default")


def test_trainer_steps_reuse_freed_memory(untuned):
    tuned = warm_faults("trainer")
    assert tuned["tunable"] and not untuned["tunable"]
    # A step's temporaries total tens of MB (thousands of 4 KB pages); with the defaults they
    # fault in again every step, kept they mostly do not.
    assert untuned["warm"] > 2000, untuned
    assert tuned["warm"] < untuned["warm"] / 4, (tuned, untuned)


def test_import_lib_leaves_the_allocator_alone(untuned):
    imported = warm_faults("import only")
    assert imported["warm"] > untuned["warm"] / 2, (imported, untuned)
