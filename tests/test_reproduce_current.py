"""The committed reproduction pages are current: the commit each page records holds the configs
its runs read and the reproduce modules that compute its claims as HEAD has them (a change to
any of them since could change the page's numbers: run `fleetcast reproduce KEY` again)."""

import ast
import pathlib
import re
import subprocess

import pytest

from pipelines.reproduce import KEYS
from pipelines.reproduce.registry import PAPERS

REPO = pathlib.Path(__file__).resolve().parent.parent
REPRODUCE = REPO / "pipelines" / "reproduce"
# The reproduce modules that draw a page or list the papers rather than compute its numbers.
DRAWING = {"__init__", "page", "paper", "registry"}
COMMIT_ROW = re.compile(r"^\| commit \| (.+?) \|$", re.MULTILINE)


def git(repo, *args) -> str:
    """git's output in `repo`; CalledProcessError when it fails."""
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                          check=True).stdout


def changed_since(repo, commit: str, paths) -> list:
    """The files of `paths` (relative to `repo`) that differ between `commit` and HEAD."""
    return git(repo, "diff", "--name-only", commit, "HEAD", "--", *paths).split()


def imported_modules(name: str, directory=REPRODUCE) -> set:
    """The modules of pipelines.reproduce that module `name` imports, itself and transitively,
    as their names (from the source files in `directory`, as HEAD's checkout has them)."""
    found, todo = set(), [name]
    while todo:
        module = todo.pop()
        if module in found:
            continue
        found.add(module)
        for node in ast.walk(ast.parse((directory / f"{module}.py").read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "pipelines.reproduce":
                todo += [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                    "pipelines.reproduce."):
                todo.append(node.module.rsplit(".", 1)[1])
    return found


def claim_sources(key: str) -> list:
    """What page `key`'s numbers come from: the configs its runs read and the reproduce
    modules its paper's module (pipelines/reproduce/<key, lower case>.py) computes them with,
    relative to the repository."""
    configs = {spec.path for spec in PAPERS[key].runs}
    modules = {f"pipelines/reproduce/{m}.py" for m in imported_modules(key.lower()) - DRAWING}
    return sorted(configs | modules)


@pytest.fixture(scope="module")
def history():
    """Skips unless the repository is a git checkout of its own with its history."""
    try:
        top = git(REPO, "rev-parse", "--show-toplevel").strip()
        git(REPO, "rev-parse", "--verify", "HEAD")
    except (OSError, subprocess.CalledProcessError):
        top = None
    if top is None or pathlib.Path(top).resolve() != REPO:
        pytest.skip("no git history here (not a git checkout, or no git): the pages' "
                    "commits cannot be compared with HEAD")


def _commit(repo, message, **files):
    for name, text in files.items():
        (repo / name).write_text(text)
    git(repo, "add", *files)
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "--short", "HEAD").strip()


def test_a_page_is_stale_once_a_file_its_numbers_come_from_changes(tmp_path, history):
    git(tmp_path, "init", "-q")
    written = _commit(tmp_path, "code", **{"claims.py": "1", "a.textproto": "x",
                                           "page.py": "draw"})
    _commit(tmp_path, "the page", **{"page.md": f"| commit | {written} |"})
    _commit(tmp_path, "drawing only", **{"page.py": "draw better"})
    assert changed_since(tmp_path, written, ["claims.py", "a.textproto"]) == []
    _commit(tmp_path, "a config", **{"a.textproto": "y"})
    assert changed_since(tmp_path, written, ["claims.py", "a.textproto"]) == ["a.textproto"]


def test_the_sources_are_the_configs_and_the_modules_that_compute_the_claims():
    sources = claim_sources("Ling25")
    assert {"configs/google_2011_placement.textproto", "configs/azure_placement.textproto",
            "pipelines/reproduce/ling25.py", "pipelines/reproduce/google_2011.py",
            "pipelines/reproduce/lava_limits.py", "pipelines/reproduce/placement.py",
            "pipelines/reproduce/claims.py", "pipelines/reproduce/runs.py"} <= set(sources)
    assert not {"pipelines/reproduce/page.py", "pipelines/reproduce/registry.py"} & set(sources)
    assert "configs/shaping_002.textproto" not in sources
    assert all((REPO / source).is_file() for key in KEYS for source in claim_sources(key))


@pytest.mark.parametrize("key", KEYS)
def test_a_committed_page_is_newer_than_what_its_numbers_come_from(key, history):
    name = f"docs/reproduce/{key}.md"
    found = COMMIT_ROW.search((REPO / name).read_text(encoding="utf-8"))
    assert found, f"{name} records no commit"
    commit = found.group(1)
    assert re.fullmatch(r"[0-9a-f]{7,40}", commit), (
        f"{name} was written at {commit!r}, not at a commit: run `fleetcast reproduce {key}` "
        "from a clean checkout")
    known = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--verify", "--quiet",
                            f"{commit}^{{commit}}"], capture_output=True).returncode == 0
    if not known and git(REPO, "rev-parse", "--is-shallow-repository").strip() == "true":
        pytest.skip(f"{name}'s commit {commit} is older than this shallow clone's history")
    assert known, f"{name} was written at {commit}, which is not in the history"
    changed = changed_since(REPO, commit, claim_sources(key))
    assert not changed, (
        f"{name} was written at {commit}; since then {', '.join(changed)} changed "
        f"(`git log --oneline {commit}..HEAD -- {' '.join(changed)}`): run `fleetcast "
        f"reproduce {key}` again")
