"""The documentation site as CI and a reader get it: `mkdocs build --strict` from the
repository root, the generated configuration page against the config schema, and the built
pages opened in a real headless Chromium (Debian's chromium + chromium-driver, driven by
selenium, as tests/test_report.py does)."""

import importlib.util
import pathlib
import re
import subprocess
import sys
import time
import urllib.parse

import pytest
import yaml

from configs import fleetcast_pb2
from tests.helpers import headless_chromium, needs_chromium

REPO = pathlib.Path(__file__).resolve().parent.parent
MKDOCS = pathlib.Path(sys.executable).parent / "mkdocs"
# The pages the browser test opens, with their first heading.
OPENED_PAGES = {"index.html": "fleetcast", "stages/placement.html": "Placement replay"}

needs_mkdocs = pytest.mark.skipif(not MKDOCS.exists(), reason="no mkdocs next to the "
                                  "interpreter: pip install -e '.[docs]' (run_tests.sh does)")


def docs_hooks():
    """docs/hooks.py, the MkDocs hooks that generate the reference pages."""
    spec = importlib.util.spec_from_file_location("docs_hooks", REPO / "docs" / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """(the built site's directory, the build's result): the command CI runs."""
    site_dir = tmp_path_factory.mktemp("site")
    built = subprocess.run([str(MKDOCS), "build", "--strict", "--site-dir", str(site_dir)],
                           cwd=REPO, capture_output=True, text=True, timeout=600)
    return site_dir, built


def nav_titles(items=None) -> list:
    """The page titles of mkdocs.yml's nav, in order (sections flattened; a section whose
    first page is an index.md shows that page under the section's title, the Material
    theme's navigation.indexes)."""
    if items is None:
        items = yaml.safe_load((REPO / "mkdocs.yml").read_text(encoding="utf-8"))["nav"]
    titles = []
    for item in items:
        ((title, target),) = item.items()
        if not isinstance(target, list):
            titles.append(title)
            continue
        children = nav_titles(target)
        if next(iter(target[0].values())).endswith("index.md"):
            children[0] = title
        titles += children
    return titles


def run_config_fields(descriptor=fleetcast_pb2.RunConfig.DESCRIPTOR, seen=None) -> dict:
    """{message full name: its field names} of every message reachable from RunConfig."""
    seen = {} if seen is None else seen
    seen[descriptor.full_name] = [field.name for field in descriptor.fields]
    for field in descriptor.fields:
        inner = field.message_type
        if inner is not None and not inner.GetOptions().map_entry and (
                inner.full_name not in seen):
            run_config_fields(inner, seen)
    return seen


def test_the_configuration_reference_has_every_run_config_field():
    hooks = docs_hooks()
    reference = hooks.config_reference()
    sections = reference.split("\n### ")
    for full_name, fields in run_config_fields().items():
        name = full_name.split(".", 1)[1]
        (section,) = [s for s in sections if s.startswith(f"`{name}` ")]
        for field in fields:
            assert f"\n| `{field}` |" in section, (name, field)
    # A field's comment in the proto, its default and the enum it names.
    assert ("| `warmup_s` | int64 | `172800` | Metrics start this long after the replay "
            "start ([Ling25ext] App. F: two days). |") in reference
    assert "| `warm_start` | [PlacementConfig.WarmStart](#placementconfig-warmstart) (enum)" \
        in reference
    assert "### `PlacementConfig.WarmStart` {#placementconfig-warmstart}" in reference
    assert "`LAVA_SCORING`" not in reference  # deprecated: validation rejects it


@needs_mkdocs
def test_the_site_builds_strictly(site):
    site_dir, built = site
    assert built.returncode == 0, built.stderr[-3000:]
    assert not re.search(r"^WARNING\s+-", built.stderr, re.M), built.stderr[-3000:]
    for title in ("Getting started", "Configuration", "Overcommit", "Lifetime models",
                  "Placement replay", "Resource shaping", "Table reference", "References"):
        assert title in nav_titles()
    configuration = (site_dir / "configuration.html").read_text(encoding="utf-8")
    assert 'id="runconfig"' in configuration and "lava_class_target_recall" in configuration
    assert "fleetcast: configuration reference" not in configuration
    tables = (site_dir / "tables.html").read_text(encoding="utf-8")
    assert 'id="placement_summary"' in tables and "empty_hosts_pct_vs_best_fit_pp" in tables
    api = (site_dir / "api" / "policies.html").read_text(encoding="utf-8")
    assert "PlacementPolicy" in api and "select" in api


@pytest.mark.browser
@needs_mkdocs
@needs_chromium
def test_the_built_pages_open_in_headless_chromium_with_every_page_in_the_nav(site, tmp_path):
    site_dir, built = site
    assert built.returncode == 0, built.stderr[-3000:]
    expected = nav_titles()
    with headless_chromium() as driver:
        for page, heading in OPENED_PAGES.items():
            driver.get((site_dir / page).as_uri())
            title = driver.execute_script(
                "const h = document.querySelector('article h1');"
                "return h && h.offsetParent !== null ? h.textContent : null;")
            assert title is not None and title.rstrip("¶") == heading, (page, title)
            # The site navigation (not the page's own table of contents), as shown.
            links = driver.execute_script(
                "return Array.from(document.querySelectorAll('nav.md-nav--primary "
                "a.md-nav__link')).filter(a => !a.closest('nav.md-nav--secondary'))"
                ".map(a => [a.textContent.trim(), a.href, a.offsetParent !== null]);")
            assert [text for text, _, _ in links] == expected, page
            for text, href, shown in links:
                assert shown, (page, text)
                assert href.startswith("file://"), (page, text, href)
                path = pathlib.Path(urllib.parse.unquote(href[len("file://"):]))
                assert path.is_file(), (page, text, href)
            screenshot = tmp_path / (page.replace("/", "_") + ".png")
            driver.save_screenshot(str(screenshot))
            assert screenshot.stat().st_size > 20_000, page


@pytest.mark.browser
@needs_mkdocs
@needs_chromium
def test_the_search_finds_pages_from_file_urls_with_nothing_fetched(site):
    from selenium.webdriver.common.by import By
    site_dir, built = site
    assert built.returncode == 0, built.stderr[-3000:]
    assert "unpkg.com" not in (site_dir / "index.html").read_text(encoding="utf-8")
    with headless_chromium() as driver:
        driver.get((site_dir / "stages" / "placement.html").as_uri())
        box = driver.find_element(By.CSS_SELECTOR, "input.md-search__input")
        box.click()
        box.send_keys("overcommit")
        deadline, found = time.time() + 20, []
        while not found and time.time() < deadline:
            found = driver.execute_script(
                "return Array.from(document.querySelectorAll('.md-search-result__item a'))"
                ".map(a => a.href);")
            time.sleep(0.2)
        assert any(href.endswith("stages/overcommit.html") for href in found), found
        assert all(href.startswith("file://") for href in found), found
        fetched = [entry["message"] for entry in driver.get_log("browser")
                   if entry["source"] == "network"]
        assert fetched == [], fetched
