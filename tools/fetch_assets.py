"""Fetch the JavaScript the built book serves itself, so it loads nothing from a CDN.

    python tools/fetch_assets.py          # fetch what is missing or of another version
    python tools/fetch_assets.py --force  # fetch again

Each package is downloaded from the npm registry with `npm pack` (a tarball, no install,
no dependencies) into .cache/npm/, and the files the pages load are copied into
.cache/book_static/vendor/ (git-ignored: no copy of them is committed). tools/book_ext.py
runs this at the start of every `jb build` and adds .cache/book_static to Sphinx's static
path, so the files are served from _build/html/_static/vendor/; _config.yml points Sphinx at
them (`mathjax_path`, `nb_ipywidgets_js`). They are kept out of the book's own _static/
folder on purpose: Jupyter Book would add every .js file found there to every page.
"""
import argparse
import json
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path, PurePosixPath

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / ".cache" / "npm"
STATIC = ROOT / ".cache" / "book_static"  # one more html_static_path entry
VENDOR = STATIC / "vendor"
STAMP = VENDOR / "versions.json"

# package -> (exact version, file or folder inside the package tarball, destination under vendor/).
# html-manager 1.0.x is the embedder of ipywidgets 8 (`ipywidgets.embed.__html_manager_version__`).
PACKAGES = {
    "requirejs": ("2.3.8", "require.js", "require.js"),
    "@jupyter-widgets/html-manager": ("1.0.15", "dist", "html-manager"),
    "mathjax": ("3.2.2", "es5", "mathjax"),
}
# Our own file, copied beside them at every build (see its comment).
LOCAL_FILES = [Path(__file__).resolve().parent / "widgets_require_config.js"]
# Files not copied: source maps (only developer tools read them) and html-manager's other
# bundles (embed.js with its chunks, libembed-amd.js): pages load embed-amd.js, which is
# self-contained apart from the font files beside it.
SKIP = ("*.map", "html-manager/embed.js", "html-manager/*.embed.js", "html-manager/libembed-amd.js")


def wanted_versions():
    return {name: version for name, (version, _, _) in PACKAGES.items()}


def is_current():
    if not STAMP.exists():
        return False
    if json.loads(STAMP.read_text()) != wanted_versions():
        return False
    return all((VENDOR / dest).exists() for _, _, dest in PACKAGES.values())


def npm_pack(name, version):
    """Download name@version's tarball into CACHE (once) and return its path."""
    CACHE.mkdir(parents=True, exist_ok=True)
    tarball = CACHE / f"{name.lstrip('@').replace('/', '-')}-{version}.tgz"
    if not tarball.exists():
        if shutil.which("npm") is None:
            sys.exit("fetch_assets: `npm` is not on PATH; install it (Debian: apt-get install -y npm)")
        proc = subprocess.run(
            ["npm", "pack", f"{name}@{version}", "--pack-destination", str(CACHE)],
            capture_output=True, text=True,
        )
        if proc.returncode != 0 or not tarball.exists():
            sys.exit(f"fetch_assets: `npm pack {name}@{version}` failed:\n{proc.stderr}")
    return tarball


def extract(tarball, inner, dest):
    """Copy package/<inner> (a file or a folder) from tarball to dest, less SKIP."""
    prefix = f"package/{inner}"
    with tarfile.open(tarball) as tar:
        members = [m for m in tar.getmembers()
                   if m.isfile() and (m.name == prefix or m.name.startswith(prefix + "/"))]
        if not members:
            sys.exit(f"fetch_assets: {tarball.name} has no {prefix}")
        for m in members:
            rel = m.name[len(prefix):].lstrip("/")
            if ".." in PurePosixPath(rel).parts:
                sys.exit(f"fetch_assets: {tarball.name} has a path outside its package: {m.name}")
            target = dest / rel if rel else dest
            if any(PurePosixPath(target.relative_to(VENDOR).as_posix()).match(p) for p in SKIP):
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(tar.extractfile(m).read())


def fetch(force=False):
    """Make VENDOR current; return whether anything was downloaded."""
    fetched = force or not is_current()
    if fetched:
        shutil.rmtree(VENDOR, ignore_errors=True)
        VENDOR.mkdir(parents=True)
        for name, (version, inner, dest) in PACKAGES.items():
            extract(npm_pack(name, version), inner, VENDOR / dest)
        STAMP.write_text(json.dumps(wanted_versions(), indent=2) + "\n")
    for path in LOCAL_FILES:
        shutil.copyfile(path, VENDOR / path.name)
    return fetched


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--force", action="store_true", help="fetch even if up to date")
    args = parser.parse_args(argv)
    fetched = fetch(force=args.force)
    print(f"fetch_assets: {'fetched' if fetched else 'up to date'}: {wanted_versions()} in {VENDOR.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
