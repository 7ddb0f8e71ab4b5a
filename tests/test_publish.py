"""Publishing the course (book/running.md, "Publishing the book"): the workflow that builds the
student version's book and serves it on GitHub Pages, and the two repositories. The student
version names the public repository (its _config.yml, so the launch buttons, and every setup
cell, so Colab) and holds no answer. Instructors' repository only: the release leaves this file out."""
import shutil
import sys
from pathlib import Path

import nbformat
import pytest
import yaml

from grader.release import main as release_main
from grader.release import release

ROOT = Path(__file__).resolve().parent.parent
WORKFLOW = ROOT / ".github" / "workflows" / "book.yml"
sys.path.insert(0, str(ROOT / "tools"))
import actionlint  # noqa: E402  (tools/ is a folder of scripts)
import setup_cell  # noqa: E402
from setup_cell import MARKER, repository  # noqa: E402

PRIVATE, PUBLIC = repository(ROOT / "_config.yml"), repository(ROOT / "_config.yml", "release")


@pytest.fixture(scope="module")
def released(tmp_path_factory):
    out = tmp_path_factory.mktemp("release")
    release(out)
    return out


def test_the_workflow_passes_actionlint(tmp_path):
    code, output = actionlint.lint([WORKFLOW])
    assert code == 0, output
    broken = tmp_path / "broken.yml"                 # the linter does find problems
    broken.write_text(WORKFLOW.read_text().replace("if: github.ref_name", "if: github.no_such_field", 1))
    assert broken.read_text() != WORKFLOW.read_text()
    code, output = actionlint.lint([broken])
    assert code == 1 and "no_such_field" in output, output


def test_the_workflow_releases_builds_and_publishes_on_the_configured_branch(capsys):
    flow = yaml.safe_load(WORKFLOW.read_text())
    jobs, steps = flow["jobs"], [step.get("run", "") for step in flow["jobs"]["build"]["steps"]]
    assert "push" in flow[True]                               # YAML 1.1 reads the key `on` as true
    assert "python tools/setup_cell.py --github-output" in jobs["config"]["steps"][-1]["run"]
    assert jobs["build"]["if"] == "github.ref_name == needs.config.outputs.branch"
    assert any("python -m grader.release release" in run for run in steps)
    assert any("python tools/build_book.py" in run for run in steps)
    assert any("python -m grader.release --check release/_build/html" in run for run in steps)
    assert [s["uses"].split("@")[0] for s in jobs["deploy"]["steps"]] == ["actions/deploy-pages"]
    assert jobs["deploy"]["permissions"] == {"pages": "write", "id-token": "write"}
    setup_cell.main(["--github-output"])
    assert capsys.readouterr().out.split() == [f"url={PRIVATE[0]}", f"branch={PRIVATE[1]}", f"release_url={PUBLIC[0]}",
                      f"release_branch={PUBLIC[1]}"]


def test_the_release_names_the_public_repository(released):
    from jupyter_book.config import get_final_config

    assert PUBLIC[0] != PRIVATE[0]
    config = yaml.safe_load((released / "_config.yml").read_text())
    assert "release" not in config and repository(released / "_config.yml") == PUBLIC
    sphinx_config = get_final_config(user_yaml=released / "_config.yml", cli_config={"latex_individualpages": False},
                                     sourcedir=released)[0]
    assert sphinx_config["html_theme_options"]["repository_url"] == PUBLIC[0]          # the launch buttons
    assert sphinx_config["html_theme_options"]["launch_buttons"]["colab_url"]
    notebooks = sorted(released.glob("*/*.ipynb"))
    assert {p.parent.name for p in notebooks} == {"chapters", "exercises"}
    for path in notebooks:
        setup = next(c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code")
        assert MARKER in setup.source and f'"{PUBLIC[0]}", "{PUBLIC[1]}"' in setup.source, path
    named = [p for p in released.rglob("*") if p.is_file() and PRIVATE[0] in p.read_text(errors="ignore")]
    assert not named, f"the release names the instructors' repository: {named}"


def test_the_release_holds_no_answer_and_the_check_finds_one(released, tmp_path, capsys):
    assert release_main(["--check", str(released)]) == 0, capsys.readouterr().err
    (tmp_path / "copy").mkdir()
    shutil.copy(ROOT / "solutions" / "ch4_gelu.ipynb", tmp_path / "copy" / "page.ipynb")   # an answer
    assert release_main(["--check", str(tmp_path / "copy")]) == 1
    assert "page.ipynb contains text of solutions/ch4_gelu.ipynb" in capsys.readouterr().err
