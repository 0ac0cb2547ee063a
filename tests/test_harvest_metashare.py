"""META-SHARE harvesting protocol 1.0: full sync cycles against the strict local node, through
the real pipeline, HTTP client and on-disk store."""

from __future__ import annotations

import io
import json
import shutil
import ssl
import subprocess
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aggregator.config import HarvestSettings, HttpSettings, Settings, load_settings
from aggregator.core.errors import ConfigError
from aggregator.demo.peers.metashare import (
    MetaShareNode,
    ascii_xml,
    bundled_node,
    sample_xml,
    storage_id,
    zip_of,
)
from aggregator.demo.peers.server import PeerServer
from aggregator.harvest.base import HarvestRequest, Listing
from aggregator.harvest.metashare import MetaShareHarvester
from aggregator.jobs.deadletter import rejections, revalidate
from aggregator.jobs.pipeline import RunOptions, run_source
from aggregator.net.client import HttpClient
from aggregator.store.records import RecordStore

BASE = "http://agg.example/"
ENV = {"MS_USER": "syncuser", "MS_PASSWORD": "sync-secret"}


def config(tmp: Path, url: str, extra: str = "") -> Path:
    path = tmp / "aggregator.toml"
    path.write_text(
        "[sources.node]\ntype = 'meta-share'\n"
        f"url = '{url}'\npublisher = 'ELRA'\n"
        "secrets = { username = 'MS_USER', password = 'MS_PASSWORD' }\n"
        "validation = ['meta-share', 'shacl']\n" + extra,
        encoding="utf-8",
    )
    return path


class Env:
    def __init__(
        self, tmp: Path, url: str, env: dict[str, str] | None = None, extra: str = ""
    ) -> None:
        loaded = load_settings(config(tmp, url, extra), environ=ENV if env is None else env)
        self.settings = Settings(
            config_path=loaded.config_path,
            store_path=tmp / "store",
            base_iri=BASE,
            http=HttpSettings(allow_private=True, retries=0),
            harvest=HarvestSettings(workers=0, batch_size=3),
            sources=loaded.sources,
        )
        self.store = RecordStore(self.settings.store_path, BASE)
        self.http = HttpClient(self.settings.http)

    def run(self, **opts: Any) -> Any:
        return run_source(self.settings, self.store, "node", RunOptions(**opts), http=self.http)

    def statuses(self) -> dict[str, str]:
        return {r.local_id: r.status for r in self.store.db.iter_records("node")}

    def close(self) -> None:
        self.store.close()
        self.http.close()


@pytest.fixture
def node() -> Iterator[tuple[MetaShareNode, list[str], str]]:
    peer, ids = bundled_node(8)
    with PeerServer(peer) as server:
        peer.source_url = server.url.rstrip("/")
        yield peer, ids, server.url.rstrip("/")


@pytest.fixture
def env(tmp_path: Path, node: tuple[MetaShareNode, list[str], str]) -> Iterator[Env]:
    e = Env(tmp_path, node[2])
    yield e
    e.close()


def counts(job: Any) -> dict[str, int]:
    return {k: v for k, v in job.counters.items() if v}


def test_first_sync_then_only_changed_lrs_are_fetched(
    env: Env, node: tuple[MetaShareNode, list[str], str]
) -> None:
    peer, ids, _ = node
    job = env.run()
    assert job.status == "succeeded", job.message
    assert counts(job) == {"added": 8}
    assert peer.requests["lr"] == 8
    row = env.store.db.record("node", ids[0])
    assert row is not None and row.source_datestamp is not None
    # an unchanged node: nothing fetched, nothing written
    job = env.run()
    assert counts(job) == {"skipped": 8}
    assert peer.requests["lr"] == 8
    # one LR changes, one is deleted, one disappears
    peer.put(ids[1], sample_xml("lexicon").replace(b"4,200 concepts", b"4,300 concepts"))
    peer.delete(ids[2])
    peer.remove(ids[3])
    job = env.run()
    assert job.status == "succeeded", job.message
    assert counts(job) == {"updated": 1, "withdrawn": 2, "skipped": 5}
    assert peer.requests["lr"] == 8 + 2  # the changed and the deleted LR, nothing else
    statuses = env.statuses()
    assert statuses[ids[2]] == statuses[ids[3]] == "withdrawn"
    assert sum(s == "active" for s in statuses.values()) == 6
    found = env.store.graphs.query(
        "ASK { GRAPH ?g { ?d <http://purl.org/dc/terms/description> ?t"
        " FILTER(CONTAINS(?t, '4,300 concepts')) } }"
    )
    assert bool(found)
    # a deleted LR still in the inventory at the checksum of its deletion is not fetched
    # again: it stays withdrawn (counted skipped); nothing else is fetched
    job = env.run()
    assert counts(job) == {"skipped": 7}
    assert peer.requests["lr"] == 10


def test_a_deleted_lr_is_fetched_again_only_when_its_checksum_changes(
    env: Env, node: tuple[MetaShareNode, list[str], str]
) -> None:
    peer, ids, _ = node
    peer.delete(ids[5])  # deleted before we ever held it
    job = env.run()
    assert counts(job) == {"added": 7, "skipped": 1}
    assert peer.requests["lr"] == 8
    assert ids[5] not in env.statuses()
    job = env.run()
    assert counts(job) == {"skipped": 8}
    assert peer.requests["lr"] == 8  # neither the deleted LR nor the others
    peer.delete(ids[6])
    job = env.run()
    assert counts(job) == {"withdrawn": 1, "skipped": 7}
    assert peer.requests["lr"] == 9
    for _ in range(2):
        job = env.run()
        assert counts(job) == {"skipped": 8}
        assert peer.requests["lr"] == 9
    # undeleted (a new revision, a new checksum): fetched and reinstated
    peer.put(ids[6], sample_xml("grammar"))
    peer.put(ids[5], sample_xml("tool-service"))
    job = env.run()
    assert counts(job) == {"added": 1, "updated": 1, "skipped": 6}
    assert peer.requests["lr"] == 11
    assert env.statuses()[ids[5]] == env.statuses()[ids[6]] == "active"


def test_an_lr_withdrawn_for_absence_comes_back_at_the_same_checksum(
    env: Env, node: tuple[MetaShareNode, list[str], str]
) -> None:
    peer, ids, _ = node
    env.run()
    checksum = peer.checksum(ids[7])
    peer.remove(ids[7])
    job = env.run()
    assert counts(job) == {"withdrawn": 1, "skipped": 7}
    peer.restore(ids[7])  # the very same LR (same checksum) is back in the inventory
    assert peer.checksum(ids[7]) == checksum
    before = peer.requests["lr"]
    job = env.run()
    assert counts(job) == {"updated": 1, "skipped": 7}
    assert peer.requests["lr"] == before + 1
    assert env.statuses()[ids[7]] == "active"


def test_a_record_failing_validation_is_rejected_and_kept_out_by_a_strict_source(
    tmp_path: Path, node: tuple[MetaShareNode, list[str], str]
) -> None:
    peer, ids, url = node
    broken = sample_xml("corpus").replace(b"<metadataInfo>", b"<metadataInfoX>")
    broken = broken.replace(b"</metadataInfo>", b"</metadataInfoX>")
    peer.put(ids[0], broken)
    env = Env(tmp_path, url, extra="strict = true\n")
    job = env.run()
    assert counts(job) == {"added": 7, "rejected": 1}
    errors = env.store.jobs.errors(job.id)
    assert {e["stage"] for e in errors} == {"meta-share"}
    assert "ms-metadata" in {e["rule"] for e in errors}
    assert env.statuses()[ids[0]] == "rejected"
    # unchanged checksum: not fetched again; fixed: taken
    before = peer.requests["lr"]
    env.run()
    assert peer.requests["lr"] == before
    peer.put(ids[0], sample_xml("corpus"))
    job = env.run()
    assert counts(job) == {"added": 1, "skipped": 7}
    assert env.statuses()[ids[0]] == "active"
    env.close()


def test_by_default_a_record_failing_the_structure_rules_is_stored_flagged(
    env: Env, node: tuple[MetaShareNode, list[str], str]
) -> None:
    peer, ids, _ = node
    broken = sample_xml("corpus").replace(b"<metadataInfo>", b"<metadataInfoX>")
    peer.put(ids[0], broken.replace(b"</metadataInfo>", b"</metadataInfoX>"))
    job = env.run()
    assert counts(job) == {"added": 8, "flagged": 1}
    assert env.statuses()[ids[0]] == "active"
    assert {e["local_id"] for e in env.store.jobs.errors(job.id)} == {ids[0]}


def test_checksum_mismatch_rejects_the_lr_and_keeps_the_last_good_version(
    env: Env, node: tuple[MetaShareNode, list[str], str]
) -> None:
    peer, ids, _ = node
    env.run()
    peer.put(ids[4], sample_xml("corpus").replace(b"39000000", b"39500000"))
    good = peer.checksum(ids[4])
    body = zip_of(
        [("metadata.xml", b"<resourceInfo xmlns='http://www.ilsp.gr/META-XMLSchema'/>"),
         ("storage-global.json", b"{}")]
    )  # fmt: skip
    peer.serve_raw(ids[4], body)
    job = env.run()
    assert job.status == "succeeded"
    assert counts(job) == {"rejected": 1, "skipped": 7}
    [error] = env.store.jobs.errors(job.id)
    assert error["rule"] == "checksumMismatch" and good in error["message"]
    assert env.statuses()[ids[4]] == "active"  # the last good version, not withdrawn
    dead = env.store.db.conn.execute("SELECT stage FROM rejections").fetchall()
    assert dead == [("fetch",)]
    peer.serve_raw(ids[4], None)
    job = env.run()
    assert counts(job) == {"updated": 1, "skipped": 7}


def test_revalidation_rejects_a_checksum_mismatch_again(
    env: Env, node: tuple[MetaShareNode, list[str], str]
) -> None:
    peer, ids, _ = node
    env.run()
    peer.put(ids[4], sample_xml("corpus").replace(b"39000000", b"39500000"))
    # a valid description, but not the one the inventory's checksum stands for
    tampered = ascii_xml(sample_xml("corpus").replace(b"39000000", b"39900000"))
    peer.serve_raw(ids[4], zip_of([("metadata.xml", tampered), ("storage-global.json", b"{}")]))
    job = env.run()
    assert counts(job) == {"rejected": 1, "skipped": 7}
    [open_before] = rejections(env.store, source="node")
    assert open_before.stage == "fetch"
    [job] = revalidate(env.settings, env.store, source="node")
    assert counts(job) == {"rejected": 1}
    [error] = env.store.jobs.errors(job.id)
    assert error["rule"] == "checksumMismatch"
    [still_open] = rejections(env.store, source="node")
    assert still_open.cause().startswith("checksumMismatch")
    assert env.statuses()[ids[4]] == "active"  # the last good version, not the tampered one
    tampered_stored = env.store.graphs.query(
        "ASK { GRAPH ?g { ?s ?p ?o FILTER(CONTAINS(STR(?o), '39900000')) } }"
    )
    assert not bool(tampered_stored)


def _zip_entries(entries: list[tuple[zipfile.ZipInfo | str, bytes]]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for info, data in entries:
            zf.writestr(info, data)
    return buf.getvalue()


@pytest.mark.parametrize(
    ("body", "rule", "words"),
    [
        (  # 64 MB of zeros in a few kB: stops at the cap / ratio while inflating
            _zip_entries([("metadata.xml", b"\0" * 64_000_000), ("storage-global.json", b"{}")]),
            "unsafeZip",
            "declares",
        ),
        (
            _zip_entries([("../metadata.xml", b"<x/>"), ("storage-global.json", b"{}")]),
            "unsafeZip",
            "'..'",
        ),
        (
            _zip_entries([("/etc/metadata.xml", b"<x/>"), ("storage-global.json", b"{}")]),
            "unsafeZip",
            "absolute",
        ),
        (b"<html>Internal error</html>", "badResourceZip", "not a ZIP"),
        (
            _zip_entries([("storage-global.json", b"{}"), ("metadata.xml", b"<x/>")]),
            "badResourceZip",
            "in this order",
        ),
    ],
    ids=["zip-bomb", "traversal", "absolute", "not-zip", "wrong-order"],
)
def test_hostile_resource_zips_reject_only_their_lr(
    env: Env, node: tuple[MetaShareNode, list[str], str], body: bytes, rule: str, words: str
) -> None:
    peer, ids, _ = node
    peer.serve_raw(ids[5], body)
    job = env.run()
    assert job.status == "succeeded"
    assert counts(job) == {"added": 7, "rejected": 1}
    [error] = env.store.jobs.errors(job.id)
    assert error["rule"] == rule and words in error["message"], error
    assert not (env.settings.store_path / "metadata.xml").exists()


def test_a_symlink_member_is_refused(env: Env, node: tuple[MetaShareNode, list[str], str]) -> None:
    peer, ids, _ = node
    link = zipfile.ZipInfo("metadata.xml")
    link.create_system = 3
    link.external_attr = 0o120777 << 16
    peer.serve_raw(ids[0], _zip_entries([(link, b"/etc/passwd"), ("storage-global.json", b"{}")]))
    job = env.run()
    [error] = env.store.jobs.errors(job.id)
    assert error["rule"] == "unsafeZip" and "link" in error["message"]


@pytest.mark.parametrize("status", [200, 403])
def test_a_wrong_password_is_a_clear_login_failure(tmp_path: Path, status: int) -> None:
    peer, _ = bundled_node(2)
    peer.wrong_password_status = status
    with PeerServer(peer) as server:
        env = Env(tmp_path, server.url, {"MS_USER": "syncuser", "MS_PASSWORD": "nope"})
        try:
            job = env.run()
        finally:
            env.close()
    assert job.status == "failed"
    assert "login" in job.message and "MS_USER" in job.message
    assert peer.requests.get("inventory") is None


def test_a_node_answering_501_fails_the_job_and_withdraws_nothing(
    env: Env, node: tuple[MetaShareNode, list[str], str]
) -> None:
    peer, _, _ = node
    env.run()
    peer.protocol_supported = False
    job = env.run()
    assert job.status == "failed"
    assert "501" in job.message and "protocol 1.0" in job.message
    assert set(env.statuses().values()) == {"active"}


def test_a_user_without_sync_rights_gets_403(tmp_path: Path) -> None:
    peer = MetaShareNode(users={"syncuser": "sync-secret"}, sync_users=())
    with PeerServer(peer) as server:
        env = Env(tmp_path, server.url)
        try:
            job = env.run()
        finally:
            env.close()
    assert job.status == "failed" and "not a synchronisation user" in job.message


def test_an_lr_held_from_another_node_is_not_taken_over(tmp_path: Path) -> None:
    first, ids = bundled_node(3)
    second = MetaShareNode()
    second.put(ids[0], sample_xml("corpus"))  # the same LR, copied to a second node
    second.put(storage_id(99), sample_xml("grammar"))
    with PeerServer(first) as one, PeerServer(second) as two:
        path = config(tmp_path, one.url)
        text = path.read_text().replace("[sources.node]", "[sources.first]")
        text += text.replace("[sources.first]", "[sources.second]").replace(one.url, two.url)
        path.write_text(text)
        loaded = load_settings(path, environ=ENV)
        settings = Settings(
            config_path=path, store_path=tmp_path / "store", base_iri=BASE,
            http=HttpSettings(allow_private=True, retries=0),
            harvest=HarvestSettings(workers=0), sources=loaded.sources,
        )  # fmt: skip
        with RecordStore(settings.store_path, BASE) as store, HttpClient(settings.http) as http:
            assert counts(run_source(settings, store, "first", RunOptions(), http=http)) == {
                "added": 3
            }
            job = run_source(settings, store, "second", RunOptions(), http=http)
            assert counts(job) == {"added": 1}
            notes = " ".join(store.jobs.get(job.id).listing["notes"])
            assert f"LR {ids[0]} is held from source first" in notes
            assert store.db.record("second", ids[0]) is None
            assert second.requests["lr"] == 1


def test_invalid_inventory_members_are_reported_and_nothing_is_withdrawn(
    env: Env, node: tuple[MetaShareNode, list[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    peer, ids, _ = node
    env.run()
    members = {ids[0]: peer.checksum(ids[0]), "NOT-AN-ID": "abc", ids[1]: "XYZ"}
    body = zip_of([("inventory.json", json.dumps(members).encode())])
    monkeypatch.setattr(peer, "_inventory_zip", lambda: body)
    job = env.run()
    assert job.status == "partial"
    notes = " ".join(env.store.jobs.get(job.id).listing["notes"])
    assert "'NOT-AN-ID' is not a 64-character" in notes and "'XYZ' is not a 32-character" in notes
    assert set(env.statuses().values()) == {"active"}


def test_the_metadata_is_stored_as_received_ascii_with_character_references(
    env: Env, node: tuple[MetaShareNode, list[str], str]
) -> None:
    _, ids, _ = node
    env.run()
    row = env.store.db.record("node", ids[0])
    assert row is not None and row.payload_sha is not None
    payload = env.store.db.payload(row.payload_sha)
    assert payload is not None
    assert payload[1].isascii() and b"&#931;" in payload[1]  # the Greek capital sigma


# a stand-in for the official v3.0 schema (written here; the real one is a local copy the
# operator points to): resourceInfo must open with identificationInfo
XSD = """<xs:schema xmlns:xs="http://www.w3.org/2001/XMLSchema"
  targetNamespace="http://www.ilsp.gr/META-XMLSchema" elementFormDefault="qualified">
  <xs:element name="resourceInfo"><xs:complexType><xs:sequence>
    <xs:element name="identificationInfo"><xs:complexType><xs:sequence>
      <xs:any processContents="skip" maxOccurs="unbounded"/></xs:sequence></xs:complexType>
    </xs:element>
    <xs:any processContents="skip" maxOccurs="unbounded"/>
  </xs:sequence></xs:complexType></xs:element>
</xs:schema>"""


def test_an_xsd_step_with_a_local_schema_runs_before_the_structure_rules(
    tmp_path: Path, node: tuple[MetaShareNode, list[str], str]
) -> None:
    peer, ids, url = node
    (tmp_path / "META-SHARE-Resource.xsd").write_text(XSD)
    xml = sample_xml("grammar")
    start, end = xml.index(b"  <identificationInfo>"), xml.index(b"  <distributionInfo>")
    moved = xml[:start] + xml[end : xml.index(b"  <contactPerson>")] + xml[start:end]
    moved += xml[xml.index(b"  <contactPerson>") :]
    peer.put(ids[2], moved)
    strict = config(tmp_path, url, "strict = true\n").read_text()
    path = strict.replace("validation = ['meta-share', 'shacl']\n", "")
    path += (
        "[[sources.node.validation]]\nvalidator = 'xsd'\nschema = 'META-SHARE-Resource.xsd'\n"
        "[[sources.node.validation]]\nvalidator = 'meta-share'\n"
        "[[sources.node.validation]]\nvalidator = 'shacl'\n"
    )
    (tmp_path / "aggregator.toml").write_text(path)
    loaded = load_settings(tmp_path / "aggregator.toml", environ=ENV)
    assert [s.label for s in loaded.sources["node"].validation] == ["xsd", "meta-share", "shacl"]
    settings = Settings(
        config_path=loaded.config_path, store_path=tmp_path / "store", base_iri=BASE,
        http=HttpSettings(allow_private=True, retries=0), harvest=HarvestSettings(workers=0),
        sources=loaded.sources,
    )  # fmt: skip
    with RecordStore(settings.store_path, BASE) as store, HttpClient(settings.http) as http:
        job = run_source(settings, store, "node", RunOptions(), http=http)
        assert counts(job) == {"added": 7, "rejected": 1}
        [error] = store.jobs.errors(job.id)
        assert error["local_id"] == ids[2] and error["stage"] == "xsd"


def test_a_node_without_credentials_is_a_configuration_error(tmp_path: Path) -> None:
    path = tmp_path / "aggregator.toml"
    path.write_text("[sources.node]\ntype = 'meta-share'\nurl = 'https://metashare.example.org'\n")
    with pytest.raises(ConfigError, match="needs the secret 'username'"):
        load_settings(path, environ={})


def test_unset_credential_variables_fail_only_that_job(
    tmp_path: Path, node: tuple[MetaShareNode, list[str], str]
) -> None:
    env = Env(tmp_path, node[2], {})
    try:
        job = env.run()
    finally:
        env.close()
    assert job.status == "failed" and "MS_USER" in job.message
    assert node[0].requests.get("login") is None


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
def test_the_protocol_runs_over_https(tmp_path: Path) -> None:
    """A node behind TLS (a self-signed certificate made here, trusted by the session)."""
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
         "-out", str(cert), "-days", "1", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True,
    )  # fmt: skip
    peer, ids = bundled_node(4)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    with PeerServer(peer, tls=context) as server:
        url = server.url.rstrip("/")
        assert url.startswith("https://")
        source = load_settings(config(tmp_path, url), environ=ENV).sources["node"]
        with HttpClient(HttpSettings(allow_private=True, retries=0)) as http:
            session = http.session(source)
            session.session.verify = str(cert)
            listing = Listing(incremental=False)
            records = list(
                MetaShareHarvester(source, session).list_records(
                    HarvestRequest(full=True, checkpoint=None), listing
                )
            )
    assert sorted(r.local_id for r in records) == sorted(ids)
    assert listing.complete and all(r.findings == () for r in records)
    assert peer.requests == {"login": 2, "inventory": 1, "lr": 4}


def test_new_checksums_with_unchanged_content_are_noted_without_rewriting(
    env: Env, node: tuple[MetaShareNode, list[str], str]
) -> None:
    peer, _, _ = node
    env.run()
    generation = env.store.db.generation()
    peer.upgrade("3.1.0")  # every checksum changes, no description does
    job = env.run()
    assert counts(job) == {"unchanged": 8}
    assert peer.requests["lr"] == 16
    assert env.store.db.generation() == generation  # no record was written again
    job = env.run()  # the new checksums were noted: nothing is fetched
    assert counts(job) == {"skipped": 8}
    assert peer.requests["lr"] == 16
