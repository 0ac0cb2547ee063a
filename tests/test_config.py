"""Configuration loading, validation against the registries, secrets, and plugin discovery."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from aggregator.cli import main
from aggregator.config import ValidationStep, load_settings
from aggregator.core.errors import ConfigError, RegistryError
from aggregator.core.registry import Registry

SRC = "[sources.a]\ntype = 'oai-pmh'\nurl = 'http://e.org/'\n"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "aggregator.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults_and_paths_relative_to_the_file(tmp_path: Path) -> None:
    s = load_settings(write(tmp_path, '[store]\npath = "store"\n'))
    assert s.store_path == tmp_path / "store"
    assert s.http.allow_private is False  # the SSRF guard is on unless switched off
    assert s.harvest.withdraw_brake == 0.2


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[stor]\n", "unknown section"),
        ("[http]\ntimeout = 'soon'\n", "http.timeout"),
        ("[http]\ntimout = 3\n", "unknown key"),
        ("[store]\nbase_iri = 'urn:x'\n", "base_iri"),
        ("[harvest]\nwithdraw_brake = 2.0\n", "withdraw_brake"),
        ("[harvest]\noptimize_share = 1.5\n", "harvest.optimize_share = 1.5: must be at most 1"),
        ("[harvest]\noptimize_after = -1\n", "harvest.optimize_after = -1: must be at least 0"),
        ("[sources.A]\ntype = 'oai-pmh'\nurl = 'http://e.org/'\n", "name must match"),
        ("[sources.a]\nurl = 'http://e.org/'\n", "'type' is required"),
        ("[sources.a]\ntype = 'oai-pmh'\nurl = 'http://e.org/'\nformat = 'x'\n", "unknown format"),
        (
            "[sources.a]\ntype = 'oai-pmh'\nurl = 'http://e.org/'\nvalidation = ['x']\n",
            "unknown validator",
        ),
        (
            "[sources.a]\ntype = 'oai-pmh'\nurl = 'http://e.org/'\nschedule = 'sometimes'\n",
            "schedule",
        ),
        ("[sources.a]\ntype = 'oai-pmh'\nurl = 'http://e.org/'\ncolour = 1\n", "unknown key"),
        (  # a harvester's typed options: the source, the option and what was expected
            "[sources.a]\ntype = 'oai-pmh'\nurl = 'http://e.org/'\noptions = { set = 3 }\n",
            r"sources\.a\.options\.set: expected a string, got 3",
        ),
        (
            "[sources.a]\ntype = 'oai-pmh'\nurl = 'http://e.org/'\noptions = { sett = 'x' }\n",
            r"\[sources\.a\.options\]: unknown option\(s\) sett \(known: metadata_prefix, me",
        ),
        ("not toml [", "aggregator.toml"),
        (SRC + "headers = { 'X Key' = 'v' }\n", "not an HTTP header name"),
        (SRC + 'headers = { X-Key = "a\\r\\nInjected: 1" }\n', "must be a string or"),
        (SRC + "headers = { 'X-Key' = 3 }\n", "must be a string or"),
        (SRC + "headers = { 'X-Key' = { secret = 'nope' } }\n", "names secret 'nope'"),
        (SRC + "headers = 'X-Key: v'\n", "headers must be a table"),
    ],
)
def test_invalid_configuration_is_refused_with_a_clear_message(
    tmp_path: Path, text: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        load_settings(write(tmp_path, text))


def test_secrets_come_from_the_environment_and_are_never_shown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PORTAL_KEY", "s3cr3t-value")
    path = write(
        tmp_path,
        "[sources.a]\ntype = 'oai-pmh'\nurl = 'http://e.org/oai'\n"
        "secrets = { api_key = 'PORTAL_KEY' }\n"
        "headers = { 'X-API-Key' = { secret = 'api_key' }, 'Accept-Language' = 'en' }\n",
    )
    s = load_settings(path)
    secret = s.source("a").secrets["api_key"]
    assert secret.reveal() == "s3cr3t-value"
    assert s.source("a").headers == {"X-API-Key": secret, "Accept-Language": "en"}
    assert "s3cr3t" not in repr(secret) and "s3cr3t" not in str(s)
    for args in (["config", "check"], ["source", "show", "a"]):
        out = CliRunner().invoke(main, ["-c", str(path), *args]).output
        assert "s3cr3t" not in out
    assert (
        "$PORTAL_KEY" in CliRunner().invoke(main, ["-c", str(path), "source", "show", "a"]).output
    )


def test_a_third_party_plugin_is_found_through_its_entry_point(tmp_path: Path) -> None:
    """An installed distribution declaring an entry point in our group is discovered."""
    pkg = tmp_path / "acme_harvester.py"
    pkg.write_text(
        "from aggregator.harvest.base import Harvester\n"
        "class AcmeHarvester(Harvester):\n    name = 'acme'\n"
    )
    dist = tmp_path / "acme_harvester-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-harvester\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        "[aggregator.harvesters]\nacme = acme_harvester:AcmeHarvester\n"
    )
    sys.path.insert(0, str(tmp_path))
    try:
        registry: Registry[object] = Registry("aggregator.harvesters", "harvester")
        assert "acme" in registry.names()
        assert registry.get("acme").__name__ == "AcmeHarvester"
        assert "oai-pmh" in registry.names()  # built-ins come through the same mechanism
        with pytest.raises(RegistryError, match="unknown harvester 'nope'"):
            registry.get("nope")
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("acme_harvester", None)


def test_the_built_in_plugins_are_listed_once_in_pyproject() -> None:
    """No second, hand-kept list: the registries find exactly what pyproject.toml declares
    (a stale install, made before an entry point was added, fails here)."""
    import importlib
    import tomllib

    doc = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text("utf-8"))
    groups = {g: t for g, t in doc["project"]["entry-points"].items() if g.startswith("aggr")}
    assert set(groups) == {"aggregator.harvesters", "aggregator.mappers", "aggregator.validators"}
    for group, table in groups.items():
        registry: Registry[object] = Registry(group, group.rsplit(".", 1)[1])
        assert set(table) <= set(registry.names()), "reinstall: pip install -e ."
        for name, ref in table.items():
            module, _, attr = ref.partition(":")
            assert registry.get(name) is getattr(importlib.import_module(module), attr)
            assert getattr(registry.get(name), "name", name) == name


def test_without_entry_points_the_error_says_to_install_the_package() -> None:
    registry: Registry[object] = Registry("aggregator.not-installed", "harvester")
    assert registry.names() == []
    with pytest.raises(RegistryError, match=r"is the package installed\? \(pip install -e \.\)"):
        registry.get("oai-pmh")


def test_operator_shapes_are_configured_checked_and_applied(tmp_path: Path) -> None:
    """A national profile added by configuration rejects what the bundled shapes accept."""
    from aggregator.core.models import RawRecord
    from aggregator.demo.peers.sample_data import generate_dataset
    from aggregator.jobs.processing import process
    from aggregator.mapping.base import MappingContext

    profile = tmp_path / "national.ttl"
    profile.write_text(
        "@prefix sh: <http://www.w3.org/ns/shacl#> .\n"
        "@prefix dcat: <http://www.w3.org/ns/dcat#> .\n"
        "<https://example.org/national#DatasetVersion> a sh:NodeShape ;\n"
        "  sh:targetClass dcat:Dataset ;\n"
        "  sh:property [ sh:path <https://example.org/national#mustHave> ; sh:minCount 1 ;\n"
        "    sh:message 'national profile: mustHave is required' ] .\n"
    )
    with pytest.raises(ConfigError, match="no such file"):
        load_settings(write(tmp_path, "[validation.shacl]\nextra_shapes = ['nope.ttl']\n"))
    with pytest.raises(ConfigError, match="unknown validator"):
        load_settings(write(tmp_path, "[validation.nope]\nx = 1\n"))
    s = load_settings(write(tmp_path, "[validation.shacl]\nextra_shapes = ['national.ttl']\n"))
    raw = RawRecord("s", "id1", "dcat", generate_dataset(1), "application/rdf+xml")
    ctx = MappingContext("http://127.0.0.1:8000/", "s")
    plain = process(raw, ctx, (ValidationStep("shacl"),))
    assert all(c.conforms for c in plain.checked)
    national = process(raw, ctx, (s.validation.step("shacl"),))
    assert not national.checked[0].conforms
    assert any("mustHave" in f.message for f in national.checked[0].findings)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[http]\ntimeout = -1\n", "http.timeout = -1: must be greater than 0"),
        ("[http]\ntimeout = 0\n", "http.timeout = 0: must be greater than 0"),
        ("[http]\nconnect_timeout = 0.0\n", "http.connect_timeout"),
        ("[http]\nmax_bytes = 0\n", "http.max_bytes"),
        ("[http]\nretries = -1\n", "http.retries = -1: must be at least 0"),
        ("[http]\nbackoff = -0.5\n", "http.backoff"),
        ("[http]\nmax_backoff = -1\n", "http.max_backoff"),
        ("[http]\nmax_redirects = -2\n", "http.max_redirects"),
        ("[http]\nper_host_concurrency = 0\n", "http.per_host_concurrency = 0: must be at least 1"),
        ("[harvest]\nbatch_size = 0\n", "harvest.batch_size"),
        ("[harvest]\nworkers = -1\n", "harvest.workers"),
        ("[harvest]\nwithdraw_brake = -0.1\n", "harvest.withdraw_brake"),
        ("[serve]\nport = 0\n", "serve.port = 0: must be at least 1"),
        ("[serve]\nport = 70000\n", "serve.port = 70000: must be at most 65535"),
        ("[serve]\nsparql_timeout = 0\n", "serve.sparql_timeout"),
        ("[serve]\nsparql_max_rows = 0\n", "serve.sparql_max_rows"),
        ("[serve]\nsparql_concurrency = 0\n", "serve.sparql_concurrency"),
        ("[serve]\noai_page_size = 0\n", "serve.oai_page_size"),
        ("[serve]\ncatalog_page_size = -5\n", "serve.catalog_page_size"),
        ("[serve]\noai_token_ttl = 0\n", "serve.oai_token_ttl"),
        ("[serve]\nprocesses = -1\n", "serve.processes"),
    ],
)
def test_numeric_settings_out_of_range_are_refused(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        load_settings(write(tmp_path, text))


def test_numeric_settings_at_their_bounds_load(tmp_path: Path) -> None:
    s = load_settings(
        write(
            tmp_path,
            "[http]\nretries = 0\nbackoff = 0\nmax_redirects = 0\n"
            "[harvest]\nworkers = 0\nbatch_size = 1\nwithdraw_brake = 1.0\n"
            "[serve]\nport = 65535\nprocesses = 0\n",
        )
    )
    assert (s.http.retries, s.harvest.workers, s.serve.port) == (0, 0, 65535)


@pytest.mark.parametrize(
    "url",
    [
        "file:///srv/catalogue.ttl",
        "/srv/catalogue.ttl",
        "ftp://portal.example.org/catalogue.ttl",
        "portal.example.org/oai",
        "http:///no-host",
        "http://[::1/oai",
    ],
)
def test_source_urls_must_be_http_or_https(tmp_path: Path, url: str) -> None:
    for kind in ("oai-pmh", "rdf-dump", "sparql"):
        with pytest.raises(ConfigError, match=r"url must be an http\(s\) URL with a host"):
            load_settings(write(tmp_path, f"[sources.a]\ntype = '{kind}'\nurl = '{url}'\n"))


def test_a_source_may_set_its_workers_within_the_harvest_range(tmp_path: Path) -> None:
    head = (
        "[harvest]\nworkers = 1\n[sources.iso]\ntype = 'csw'\nurl = 'https://csw.example.org/csw'\n"
    )
    s = load_settings(write(tmp_path, head + "workers = 2\n"))
    assert (s.harvest.workers, s.sources["iso"].workers) == (1, 2)
    assert load_settings(write(tmp_path, head)).sources["iso"].workers is None
    for bad in ("-1", "257", "1.5", "true", "'2'"):
        with pytest.raises(ConfigError, match=r"\[sources\.iso\]: workers must be a whole number"):
            load_settings(write(tmp_path, head + f"workers = {bad}\n"))


def test_a_missing_configuration_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such configuration file"):
        load_settings(tmp_path / "aggregator.toml")
    assert list(tmp_path.iterdir()) == []


def test_an_unset_secret_does_not_stop_loading(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "[sources.a]\ntype = 'oai-pmh'\nurl = 'http://e.org/oai'\n"
        "secrets = { api_key = 'AGG_TEST_UNSET_VAR' }\n"
        "[sources.b]\ntype = 'oai-pmh'\nurl = 'http://e.org/oai'\n",
    )
    s = load_settings(path, environ={})
    a = s.source("a")
    assert a.missing_secrets() == ["api_key"] and s.source("b").missing_secrets() == []
    with pytest.raises(ConfigError, match="'AGG_TEST_UNSET_VAR', which is not set"):
        a.require_secrets()
    with pytest.raises(ConfigError, match="AGG_TEST_UNSET_VAR"):
        a.secrets["api_key"].reveal()
    s.source("b").require_secrets()
    with pytest.raises(ConfigError, match="must name an environment variable"):
        load_settings(
            write(tmp_path, "[sources.a]\ntype='oai-pmh'\nurl='http://e.org/'\nsecrets={k='a b'}\n")
        )
