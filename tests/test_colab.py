"""The Colab path: what the package declares, and the setup cell every notebook opens with.

- requirements.txt and pyproject.toml name the same packages, and each line of requirements.txt
  is one of the metadata's requirements, the stricter one where two name a package;
- the `course` extra accepts the versions a Colab GPU runtime ships (COLAB_GPU_RUNTIME), so
  installing the course there upgrades none of them (ipywidgets above all: book/running.md);
- every notebook's setup cell is the one tools/setup_cell.py writes from _config.yml, and a
  new address in _config.yml reaches every notebook;
- the setup cell fails loudly, naming the step, when the clone fails.
"""
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import setup_cell  # noqa: E402  (tools/ is a folder of scripts)

tomllib = pytest.importorskip("tomllib")                 # Python 3.11+

# What a Colab GPU runtime has installed, for the packages the course uses: from Colab's own
# published `pip freeze`, https://github.com/googlecolab/backend-info/blob/03a89033b7dd106f98e45f7c6090d467134330e8/pip-freeze.gpu.txt
# (Python 3.12; the file says it reflects the image when it was last generated).
COLAB_GPU_RUNTIME = {"numpy": "2.0.2", "safetensors": "0.7.0", "regex": "2025.11.3", "tqdm": "4.67.3",
                     "matplotlib": "3.10.0", "torch": "2.11.0", "tiktoken": "0.13.0", "transformers": "5.9.0",
                     "huggingface-hub": "1.17.0", "ipywidgets": "7.7.1"}


def canonical(name):
    return name.lower().replace("_", "-")


def metadata_requirements():
    """{package: [Requirement, ...]} over the dependencies and the `course` and `dev` extras."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    found = {}
    for line in project["dependencies"] + extras["course"] + extras["dev"]:
        requirement = Requirement(line)
        found.setdefault(canonical(requirement.name), []).append(requirement)
    return found


def requirements_txt():
    lines = [line.strip() for line in (ROOT / "requirements.txt").read_text().splitlines()]
    return [Requirement(line) for line in lines if line and not line.startswith("#")]


def boundary_versions(requirements):
    """Every version a specifier names, and the next major version of each: where ranges differ."""
    versions = {Version(spec.version) for r in requirements for spec in r.specifier}
    return versions | {Version(f"{v.major + 1}") for v in versions}


def test_requirements_txt_and_the_package_metadata_agree():
    metadata, lines = metadata_requirements(), requirements_txt()
    names = [canonical(r.name) for r in lines]
    assert len(names) == len(set(names)), f"a package named twice in requirements.txt: {sorted(names)}"
    assert set(names) == set(metadata), (f"only in requirements.txt: {sorted(set(names) - set(metadata))}; "
                                         f"only in pyproject.toml: {sorted(set(metadata) - set(names))}")
    for line in lines:
        declared = metadata[canonical(line.name)]
        assert str(line) in {str(r) for r in declared}, f"requirements.txt says {line}, pyproject.toml {declared}"
        for version in boundary_versions(declared):                # the line admits no version another forbids
            if line.specifier.contains(version, prereleases=True):
                assert all(r.specifier.contains(version, prereleases=True) for r in declared), (line, version)


def test_installing_the_course_extra_in_colab_keeps_colabs_packages():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    course = project["optional-dependencies"]["course"]
    for requirement in map(Requirement, project["dependencies"] + course):
        version = COLAB_GPU_RUNTIME[canonical(requirement.name)]
        assert requirement.specifier.contains(version), f"{requirement} would replace Colab's {version}"
    names = {canonical(Requirement(r).name) for r in course}
    assert not names & {"notebook", "jupyterlab", "jupyterlab-widgets", "widgetsnbextension", "ipykernel"}


def test_every_notebook_opens_with_the_setup_cell_of_config_yml():
    assert setup_cell.stale_notebooks() == []
    url, branch = setup_cell.repository()
    source = setup_cell.setup_source()
    assert f'"{url}", "{branch}"' in source and "|| true" not in source and "lib.assets" in source


def test_a_new_address_in_config_yml_reaches_every_notebook(tmp_path):
    config = tmp_path / "_config.yml"
    text = (ROOT / "_config.yml").read_text()
    url, _ = setup_cell.repository()
    config.write_text(text.replace(url, "https://example.org/someone/gpt2-course"))
    assert "https://example.org/someone/gpt2-course" in setup_cell.setup_source(config)
    notebooks = sorted(p for folder in setup_cell.FOLDERS for p in (ROOT / folder).glob("*.ipynb"))
    assert len(notebooks) >= 18 and setup_cell.stale_notebooks(config) == notebooks


def test_book_running_page_clones_the_configured_address():
    url, _ = setup_cell.repository()
    assert f"git clone {url}.git" in (ROOT / "book" / "running.md").read_text()


def test_a_failed_clone_stops_the_setup_cell_with_gits_reason(tmp_path):
    source = setup_cell.TEMPLATE.format(url=str(tmp_path / "no-such-repository"), branch="main",
                                        course=str(tmp_path / "course"))
    program = ("import sys, types\nsys.modules['google.colab'] = types.ModuleType('google.colab')\n"
               + source)
    run = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60)
    assert run.returncode != 0
    assert "RuntimeError: setup failed: git clone" in run.stderr
    assert "does not exist" in run.stderr                 # git's own words, not a later error
    assert not (tmp_path / "course").exists()


def test_the_setup_cell_does_nothing_outside_colab():
    run = subprocess.run([sys.executable, "-c", setup_cell.setup_source() + "\nprint(sorted(dir()))"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert "COURSE" not in run.stdout and run.stderr == ""

