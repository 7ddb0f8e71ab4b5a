"""`python -m lib.bench tokenizer`: the from-scratch BPE against tiktoken, the two trainers, and
the memory of streamed tokenization, in one run on this machine.

1. Encoding: the whole embedded Shakespeare text with GPT-2's merges, single-threaded
   (tiktoken's `encode_ordinary`, best of --reps; ours cold, i.e. with an empty chunk cache,
   then warm). Target: ours within 20x of tiktoken's MB/s (cold).
2. Training a 512-token vocabulary on the first 1 MB of the corpus: fast trainer against naive
   trainer (same merges checked). Targets: fast >= 20x faster than naive, and under 3 s.
3. Memory: `lib.data.tokenize_file` on a 100 MB text file (the corpus repeated) in a child
   process; its peak resident memory. Target: under 300 MB.

Wall-clock seconds are the figures; CPU seconds and the load average are printed beside them
because a busy machine stretches wall time. Last line: one JSON object.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ..shakespeare import shakespeare_text
from ..tokenizer import BPETokenizer, gpt2_tiktoken, gpt2_tokenizer

TARGETS = {"encode_ratio_max": 20.0, "train_speedup_min": 20.0, "fast_train_s_max": 3.0, "peak_rss_mb_max": 300.0}
# The child reads its peak from /proc (VmHWM: this process's own high-water mark); getrusage's
# ru_maxrss would not do, as Linux carries the parent's peak into a forked and exec'd child.
CHILD = """
import json, sys, time
from lib.data import tokenize_file, _resolve_tokenizer
def peak_mb():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmHWM:"))
path, tokenizer, out = sys.argv[1:]
_resolve_tokenizer(tokenizer)  # load the tokenizer first: its own memory is reported apart
before = peak_mb()
t0 = time.perf_counter()
n = tokenize_file(path, tokenizer, out)
print(json.dumps({"tokens": n, "seconds": time.perf_counter() - t0, "rss_before_mb": before,
                  "peak_rss_mb": peak_mb()}))
"""


def timed(fn, *args, **kwargs):
    """(result, wall seconds, CPU seconds of this process)."""
    c0, t0 = time.process_time(), time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - t0, time.process_time() - c0


def bench_encode(text, reps):
    mb = len(text.encode("utf-8")) / 1e6
    enc, gpt2 = gpt2_tiktoken(), gpt2_tokenizer()
    enc.encode_ordinary("warm up")
    tik = min((timed(enc.encode_ordinary, text) for _ in range(reps)), key=lambda r: r[1])
    fresh = BPETokenizer(gpt2.merge_list(), gpt2.special_tokens, gpt2.pattern, gpt2.byte_ids)  # empty cache
    cold = timed(fresh.encode_ordinary, text)
    warm = timed(fresh.encode_ordinary, text)
    if not cold[0] == warm[0] == tik[0]:
        raise AssertionError("from-scratch ids differ from tiktoken's")
    rows = {"tiktoken": tik, "from scratch, cold cache": cold, "from scratch, warm cache": warm}
    print(f"\n1. encoding {mb:.2f} MB of Shakespeare with GPT-2's merges ({len(tik[0]):,} tokens, ids identical)")
    print(f"   {'':<26} {'wall s':>8} {'CPU s':>8} {'MB/s':>8}")
    for name, (_, wall, cpu) in rows.items():
        print(f"   {name:<26} {wall:8.2f} {cpu:8.2f} {mb / wall:8.2f}")
    ratio = cold[1] / tik[1]
    print(f"   tiktoken is {ratio:.1f}x faster than ours cold (target <= {TARGETS['encode_ratio_max']:.0f}x), "
          f"{warm[1] / tik[1]:.1f}x warm")
    return {"mb": mb, "tiktoken_mb_s": mb / tik[1], "scratch_cold_mb_s": mb / cold[1],
            "scratch_warm_mb_s": mb / warm[1], "encode_ratio": ratio}


def bench_train(text, vocab_size):
    mb = len(text.encode("utf-8")) / 1e6
    fast = timed(BPETokenizer.train, text, vocab_size, trainer="fast")
    print(f"\n2. training a {vocab_size}-token vocabulary on the first {mb:.2f} MB (naive takes minutes)")
    naive = timed(BPETokenizer.train, text, vocab_size, trainer="naive")
    if fast[0].merges != naive[0].merges:
        raise AssertionError("the fast and naive trainers learned different merges")
    print(f"   {'':<8} {'wall s':>8} {'CPU s':>8}")
    for name, (_, wall, cpu) in (("fast", fast), ("naive", naive)):
        print(f"   {name:<8} {wall:8.2f} {cpu:8.2f}")
    speedup = naive[1] / fast[1]
    print(f"   same merges; fast is {speedup:.0f}x faster (target >= {TARGETS['train_speedup_min']:.0f}x) "
          f"and takes {fast[1]:.2f} s (target < {TARGETS['fast_train_s_max']:.0f} s)")
    return {"train_mb": mb, "fast_s": fast[1], "fast_cpu_s": fast[2], "naive_s": naive[1],
            "naive_cpu_s": naive[2], "train_speedup": speedup}


def bench_memory(text, target_mb):
    copies = max(1, round(target_mb * 1e6 / len(text.encode("utf-8"))))
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "big.txt"
        with open(path, "w", encoding="utf-8") as f:
            for _ in range(copies):
                f.write(text)
        size_mb = path.stat().st_size / 1e6
        print(f"\n3. streaming tokenize_file on a {size_mb:.0f} MB file (the corpus {copies}x), in a child process")
        print(f"   {'tokenizer':<10} {'tokens':>12} {'wall s':>8} {'MB/s':>6} {'RSS before':>11} {'peak RSS':>9}")
        for tokenizer in ("byte", "gpt2"):
            done = subprocess.run([sys.executable, "-c", CHILD, str(path), tokenizer, str(Path(tmp) / "out.bin")],
                                  capture_output=True, text=True, check=True)
            r = json.loads(done.stdout.strip().splitlines()[-1])
            results[tokenizer] = r
            print(f"   {tokenizer:<10} {r['tokens']:12,} {r['seconds']:8.1f} {size_mb / r['seconds']:6.2f} "
                  f"{r['rss_before_mb']:8.0f} MB {r['peak_rss_mb']:6.0f} MB")
    peak = max(r["peak_rss_mb"] for r in results.values())
    print(f"   peak resident memory {peak:.0f} MB (target < {TARGETS['peak_rss_mb_max']:.0f} MB)")
    return {"file_mb": size_mb, "peak_rss_mb": peak,
            **{f"{k}_{t}": r[k] for t, r in results.items() for k in ("seconds", "peak_rss_mb")}}


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m lib.bench tokenizer", description=__doc__.split("\n")[0])
    p.add_argument("--reps", type=int, default=3, help="timed runs of tiktoken (best is kept)")
    p.add_argument("--train-mb", type=float, default=1.0, help="MB of the corpus to train on")
    p.add_argument("--vocab", type=int, default=512, help="vocabulary size to train")
    p.add_argument("--memory-mb", type=float, default=100.0, help="size of the file for the memory test")
    args = p.parse_args(argv)

    load_before = os.getloadavg()[0]
    print(f"{os.cpu_count()} CPUs, load average {load_before:.1f}, Python {sys.version.split()[0]}")
    text = shakespeare_text()
    result = {**bench_encode(text, args.reps),
              **bench_train(text.encode("utf-8")[:int(args.train_mb * 1e6)].decode("utf-8", "ignore"), args.vocab),
              **bench_memory(text, args.memory_mb)}
    met = {"encode_within_20x": result["encode_ratio"] <= TARGETS["encode_ratio_max"],
           "train_speedup_20x": result["train_speedup"] >= TARGETS["train_speedup_min"],
           "fast_train_under_3s": result["fast_s"] < TARGETS["fast_train_s_max"],
           "peak_rss_under_300mb": result["peak_rss_mb"] < TARGETS["peak_rss_mb_max"]}
    load_after = os.getloadavg()[0]
    print(f"\ntargets met: {met}; load average {load_before:.1f} before, {load_after:.1f} after")
    print(json.dumps({"benchmark": "tokenizer", **{k: round(v, 4) for k, v in result.items()},
                      "targets": TARGETS, "met": met, "load_average": [load_before, load_after]}))
