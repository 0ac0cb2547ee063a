"""The dashboard's source preview says what a harvest would do: the same mapping context
(categorisation included) and the same store/reject rule (processing.decide) as the harvest
of the same records through a local WAF peer."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from aggregator.config import (
    HarvestSettings,
    HttpSettings,
    Settings,
    SourceConfig,
    ValidationSettings,
    ValidationStep,
)
from aggregator.config.profiles import profile_steps
from aggregator.core.models import Severity
from aggregator.demo.peers.gemini_samples import bundled_gemini_records, generate_gemini_record
from aggregator.demo.peers.server import PeerServer
from aggregator.demo.peers.waf import WafApp
from aggregator.jobs.pipeline import RunOptions, run_source
from aggregator.net.client import HttpClient
from aggregator.serve.dashboard.preview import preview_source
from aggregator.store.records import RecordStore

BASE = "http://127.0.0.1:8000/"


def test_preview_findings_and_verdicts_are_the_harvests(tmp_path: Path) -> None:
    app = WafApp()
    files = dict(bundled_gemini_records())
    files["bad-language.xml"] = generate_gemini_record(1).replace(
        b'codeListValue="eng"', b'codeListValue="en"', 1
    )
    for name, data in files.items():
        app.put(name, data, datetime(2026, 1, 1, tzinfo=UTC))
    http = HttpSettings(allow_private=True, retries=0, timeout=20)
    with PeerServer(app) as server:
        src = SourceConfig(
            name="w",
            type="waf",
            url=server.url + "waf/",
            format="iso19139",
            lenient=True,
            validation=(*profile_steps("gemini", ValidationSettings()), ValidationStep("shacl")),
        )
        settings = Settings(
            config_path=None, store_path=tmp_path / "store", base_iri=BASE, http=http,
            harvest=HarvestSettings(workers=0), sources={"w": src},
        )  # fmt: skip
        preview = preview_source(settings, src)
        with RecordStore(settings.store_path, BASE) as store, HttpClient(http) as client:
            run_source(settings, store, src, RunOptions(), http=client)
            rows = {row.dataset_iri: row for row in store.db.iter_records("w")}
    shown = {d.iri: d for r in preview.records for d in r.datasets}
    assert set(shown) == set(rows) and len(shown) == len(files)
    for iri, dataset in shown.items():
        stored = {f["rule"] for f in json.loads(rows[iri].findings)}  # infos are not stored
        shown_rules = {f.rule for f in dataset.findings if f.severity is not Severity.INFO}
        assert shown_rules == stored, iri
        assert dataset.conforms == (rows[iri].status == "active")  # "would be stored"
    assert any(f.rule == "eu-theme-assigned" for d in shown.values() for f in d.findings)
    assert any(f.rule == "gemini-metadata-language" for d in shown.values() for f in d.findings)
    assert preview.stored == len(files)  # lenient: the GEMINI failure is stored, flagged
