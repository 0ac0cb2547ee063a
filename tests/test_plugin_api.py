"""The public plugin API (``aggregator.plugin``) and the example plugin built on it.

The example (``examples/plugin-example/``) is a distribution of its own: the test installs
it with pip (offline: no build isolation, no index) into a directory of its own, and runs a
real ``aggregator harvest`` through its entry points against a local JSON-lines server.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

import aggregator.plugin
from aggregator.demo.peers.server import PeerServer
from aggregator.store.records import RecordStore

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "plugin-example"
BASE = "https://data.example.org/"


def test_every_public_name_resolves() -> None:
    names = aggregator.plugin.__all__
    assert len(names) == len(set(names))
    missing = [n for n in names if not hasattr(aggregator.plugin, n)]
    assert not missing
    # the contracts a plugin implements, and what it hands back, are all there
    for name in ("Harvester", "Mapper", "Validator", "RawRecord", "MappedDataset", "Finding"):
        assert isinstance(getattr(aggregator.plugin, name), type), name


def _aggregator_imports(path: Path) -> Iterator[tuple[str, list[str]]]:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "aggregator":
                    yield alias.name, []
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "aggregator":
            yield node.module or "", [alias.name for alias in node.names]


def test_the_example_imports_only_the_public_api() -> None:
    sources = sorted(EXAMPLE.rglob("*.py"))
    assert len(sources) >= 2
    seen: set[str] = set()
    for path in sources:
        for module, names in _aggregator_imports(path):
            assert module == "aggregator.plugin", f"{path.name} imports {module}"
            unknown = set(names) - set(aggregator.plugin.__all__)
            assert not unknown, f"{path.name} imports {unknown} not in __all__"
            seen.update(names)
    assert {"Harvester", "Mapper"} <= seen


def _jsonl_app(lines: Iterable[bytes]) -> Any:
    body = b"".join(line + b"\n" for line in lines)

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        if environ["PATH_INFO"] != "/datasets.jsonl":
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"no such file"]
        start_response("200 OK", [("Content-Type", "application/x-ndjson")])
        return [body]

    return app


def _item(i: int) -> bytes:
    return json.dumps(
        {
            "id": f"ds-{i}",
            "title": f"Dataset {i}",
            "description": f"The example dataset number {i}.",
            "language": "en",
            "keywords": ["example", f"k{i}"],
            "modified": f"2024-05-0{i}T10:00:00+00:00",
        }
    ).encode()


@pytest.fixture(scope="module")
def plugin_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example installed with pip into a directory of its own (a build writes build/ and
    egg-info next to its input: install from a copy)."""
    src = tmp_path_factory.mktemp("example-src") / "plugin-example"
    shutil.copytree(EXAMPLE, src, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    site = tmp_path_factory.mktemp("example-site")
    done = subprocess.run(
        [
            *(sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"),
            *("--no-build-isolation", "--no-deps", "--no-index", "--target", str(site)),
            str(src),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert list(site.glob("aggregator_jsonl_example-*.dist-info"))
    return site


def _aggregator(site: Path, config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), str(ROOT)]))
    return subprocess.run(
        [sys.executable, "-c", "from aggregator.cli import main; main()", "-c", str(config), *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=env,
        cwd=config.parent,
    )


@pytest.mark.slow
def test_installed_example_plugin_harvests_into_the_store(
    plugin_site: Path, tmp_path: Path
) -> None:
    config = tmp_path / "aggregator.toml"
    with PeerServer(_jsonl_app([_item(1), _item(2), b"", _item(3)])) as server:
        config.write_text(
            f'[store]\npath = "data"\nbase_iri = "{BASE}"\n'
            "[http]\nallow_private = true\nretries = 0\n[harvest]\nworkers = 0\n"
            f'[sources.feed]\ntype = "jsonl"\nurl = "{server.url}datasets.jsonl"\n'
            'options = { id_field = "id" }\n',
            encoding="utf-8",
        )
        checked = _aggregator(plugin_site, config, "config", "check")
        assert checked.returncode == 0, checked.stdout + checked.stderr
        assert "source feed: jsonl -> jsonl-dataset" in checked.stdout
        done = _aggregator(plugin_site, config, "harvest", "feed")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "succeeded" in done.stdout and "added=3" in done.stdout, done.stdout
    with RecordStore(tmp_path / "data", BASE) as store:
        rows = store.records("feed", ["ds-1", "ds-2", "ds-3"])
        assert sorted(rows) == ["ds-1", "ds-2", "ds-3"]
        assert {r.status for r in rows.values()} == {"active"}
        graph = store.dataset_ntriples(rows["ds-2"]).decode()
        assert '"Dataset 2"@en' in graph and '"k2"' in graph


@pytest.mark.slow
def test_the_example_refuses_bad_options_at_config_check(plugin_site: Path, tmp_path: Path) -> None:
    config = tmp_path / "aggregator.toml"
    config.write_text(
        '[store]\npath = "data"\n[sources.feed]\ntype = "jsonl"\n'
        'url = "http://127.0.0.1:9/x.jsonl"\noptions = { id_feld = "id" }\n',
        encoding="utf-8",
    )
    checked = _aggregator(plugin_site, config, "config", "check")
    assert checked.returncode != 0
    assert "unknown option(s) id_feld" in checked.stdout + checked.stderr


def test_the_plugin_page_shows_the_example_as_it_is() -> None:
    page = (ROOT / "docs" / "plugins.md").read_text(encoding="utf-8")
    for path in (
        EXAMPLE / "pyproject.toml",
        EXAMPLE / "aggregator_jsonl" / "harvester.py",
        EXAMPLE / "aggregator_jsonl" / "mapper.py",
    ):
        shown = f"`{path.relative_to(ROOT).as_posix()}`:\n\n```"
        assert shown in page, f"docs/plugins.md does not show {path.name}"
        assert "\n" + path.read_text(encoding="utf-8") + "```" in page, (
            f"docs/plugins.md shows a stale {path.name}"
        )
