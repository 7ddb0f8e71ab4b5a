"""Benchmarks: `python -m lib.bench NAME` (see __main__.py), and the timing they share."""
import time

BLOCK = 5                            # timed runs of one contender in a row


def time_in_blocks(runs, reps, block=BLOCK, pause=0.5):
    """{name: function()} -> {name: [seconds of each timed call]}, at least `reps` per name.
    The contenders alternate in blocks of `block` calls, each block after a pause and one
    untimed call: the BLAS threads of one library spin for a while after its last call
    (OpenBLAS's and OpenMP's busy-wait), and timing another library inside that window
    measured torch 2.2x slower than it runs alone. Alternating still lets machine noise hit
    every contender alike."""
    times = {name: [] for name in runs}
    for _ in range(-(-reps // block)):
        for name, run in runs.items():
            time.sleep(pause)
            for i in range(block + 1):                       # the first: untimed warm-up
                t0 = time.perf_counter()
                run()
                if i:
                    times[name].append(time.perf_counter() - t0)
    return times
