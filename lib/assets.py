"""Offline assets of the course, kept in one cache directory.

The one asset so far is GPT-2's vocabulary: tiktoken's `r50k_base` rank file, 50,256 lines of
`base64(token bytes) rank`. tiktoken downloads it at run time, which fails without a network.
The `openai-whisper` source distribution on PyPI ships a byte-identical copy
(`whisper/assets/gpt2.tiktoken`), so `python -m lib.assets fetch` asks pip for that sdist (no
install, no dependencies), takes the one file out, checks its sha256 and keeps it in the cache.

Cache directory: `$GPT2_COURSE_CACHE` if set, else `~/.cache/gpt2-course/`.
"""
import hashlib
import os
import subprocess
import sys
import tarfile
import tempfile
import urllib.request
from pathlib import Path

GPT2_VOCAB_FILE = "gpt2.tiktoken"
GPT2_VOCAB_SHA256 = "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930"
WHISPER_SDIST = "openai-whisper==20250625"  # pinned: the sdist we checked holds the file above
WHISPER_MEMBER = "whisper/assets/gpt2.tiktoken"  # path inside the sdist, below its top folder
TIKTOKEN_URL = "https://openaipublic.blob.core.windows.net/encodings/r50k_base.tiktoken"
FIX = "run `python -m lib.assets fetch` (it needs the package registry, not the internet)"


class AssetError(RuntimeError):
    """An offline asset is missing or corrupt; the message says how to fix it."""


def cache_dir() -> Path:
    """The course's cache directory (created if missing)."""
    path = Path(os.environ.get("GPT2_COURSE_CACHE") or Path.home() / ".cache" / "gpt2-course")
    path.mkdir(parents=True, exist_ok=True)
    return path


def sha256_file(path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_atomic(path, data: bytes) -> Path:
    """Write a file so that readers see either nothing or all of it (write aside, then rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")  # unique: other processes may write it too
    tmp.write_bytes(data)
    tmp.replace(path)
    return path


def _store_verified(data: bytes, what: str) -> Path:
    """Check `data` against the known hash and write it into the cache."""
    got = hashlib.sha256(data).hexdigest()
    if got != GPT2_VOCAB_SHA256:
        raise AssetError(f"{what} has sha256 {got}, expected {GPT2_VOCAB_SHA256}; not stored")
    return write_atomic(cache_dir() / GPT2_VOCAB_FILE, data)


def _download_from_openai() -> Path:
    """tiktoken's usual source; works only where the internet is reachable (Colab)."""
    with urllib.request.urlopen(TIKTOKEN_URL, timeout=30) as response:
        return _store_verified(response.read(), TIKTOKEN_URL)


def gpt2_vocab_path(download: bool = True) -> Path:
    """Path of the verified GPT-2 rank file in the cache.

    If it is missing (or corrupt) and `download` is true, try tiktoken's usual URL once; if
    that fails too, raise AssetError saying how to fetch it from the package registry.
    """
    path = cache_dir() / GPT2_VOCAB_FILE
    if path.exists():
        got = sha256_file(path)
        if got == GPT2_VOCAB_SHA256:
            return path
        problem = f"{path} is corrupt (sha256 {got}, expected {GPT2_VOCAB_SHA256})"
    else:
        problem = f"GPT-2's vocabulary file is missing: {path} does not exist"
    if download:
        try:
            return _download_from_openai()
        except (OSError, AssetError) as e:  # URLError is an OSError: no network here
            problem += f"; downloading {TIKTOKEN_URL} failed too ({e})"
    raise AssetError(f"{problem}. To fix it, {FIX}.")


def fetch_gpt2_vocab(force: bool = False) -> Path:
    """Fetch the rank file from the `openai-whisper` sdist on PyPI into the cache (idempotent)."""
    path = cache_dir() / GPT2_VOCAB_FILE
    if not force and path.exists() and sha256_file(path) == GPT2_VOCAB_SHA256:
        return path
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
               "--no-binary", ":all:", WHISPER_SDIST, "--dest", tmp]
        done = subprocess.run(cmd, capture_output=True, text=True)
        sdists = sorted(Path(tmp).glob("*.tar.gz"))
        if done.returncode != 0 or not sdists:
            raise AssetError(f"`{' '.join(cmd)}` failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
        with tarfile.open(sdists[0]) as tar:
            members = [m for m in tar.getmembers() if m.name.endswith("/" + WHISPER_MEMBER)]
            if not members:
                raise AssetError(f"{sdists[0].name} has no {WHISPER_MEMBER}")
            data = tar.extractfile(members[0]).read()
        return _store_verified(data, f"{sdists[0].name}:{WHISPER_MEMBER}")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv not in (["fetch"], ["fetch", "--force"]):
        sys.exit(f"usage: python -m lib.assets fetch [--force]; got {' '.join(argv) or 'nothing'}")
    path = fetch_gpt2_vocab(force="--force" in argv)
    print(f"GPT-2 vocabulary ready: {path} (sha256 {GPT2_VOCAB_SHA256[:12]}..., verified)")


if __name__ == "__main__":
    main()
