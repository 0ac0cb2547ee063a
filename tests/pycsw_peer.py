"""A real CSW 2.0.2 server for the tests: pycsw (PyPI, dev extra) on 127.0.0.1.

Its SQLite repository is loaded from our own GEMINI records with pycsw's admin functions
(``setup_db``, ``load_records``); each request goes to ``pycsw.server.Csw`` through a small
WSGI wrapper run by our :class:`~aggregator.demo.peers.server.PeerServer`.
"""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

# pycsw 2.x runs on SQLAlchemy 1.4, which warns about its 2.0 deprecations; and imports
# pkg_resources, which warns too: neither is ours to fix
os.environ.setdefault("SQLALCHEMY_SILENCE_UBER_WARNING", "1")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from pycsw import server as pycsw_server  # type: ignore[import-untyped]
    from pycsw.core import admin, config  # type: ignore[import-untyped]

from aggregator.demo.peers.server import PeerServer

TABLE = "records"


def _config(database: str, url: str) -> dict[str, dict[str, str]]:
    return {
        "server": {
            "home": ".",
            "url": url,
            "mimetype": "application/xml; charset=UTF-8",
            "encoding": "UTF-8",
            "language": "en-US",
            "maxrecords": "10",
            "pretty_print": "false",
            "gzip_compresslevel": "0",
            "domainquerytype": "list",
            "domaincounts": "false",
            "profiles": "apiso",
        },
        "manager": {"transactions": "false", "allowed_ips": "127.0.0.1"},
        "metadata:main": {
            "identification_title": "pycsw test catalogue",
            "identification_abstract": "GEMINI fixture records",
            "identification_keywords": "test",
            "identification_keywords_type": "theme",
            "identification_fees": "None",
            "identification_accessconstraints": "None",
            "provider_name": "Test",
            "provider_url": "http://127.0.0.1/",
            "contact_name": "Test",
            "contact_position": "Test",
            "contact_address": "1 Test Street",
            "contact_city": "Test",
            "contact_stateorprovince": "Test",
            "contact_postalcode": "T1",
            "contact_country": "United Kingdom",
            "contact_phone": "+44",
            "contact_fax": "+44",
            "contact_email": "test@example.org",
            "contact_url": "http://127.0.0.1/",
            "contact_hours": "always",
            "contact_instructions": "none",
            "contact_role": "pointOfContact",
        },
        "repository": {"database": database, "table": TABLE},
        "metadata:inspire": {"enabled": "false"},
    }


class PycswApp:
    """WSGI: every request answered by a fresh ``pycsw.server.Csw`` (as pycsw's own wsgi)."""

    def __init__(self, database: str) -> None:
        self.database = database
        self.url = "http://127.0.0.1/"

    def __call__(
        self, environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            csw = pycsw_server.Csw(_config(self.database, self.url), environ)
            status, contents = csw.dispatch_wsgi()
        headers = [("Content-Length", str(len(contents))), ("Content-Type", str(csw.contenttype))]
        start_response(status, headers)
        return [contents]


def load_repository(folder: Path, documents: Iterable[tuple[str, bytes]]) -> str:
    """A SQLite pycsw repository in ``folder`` holding ``documents``; its SQLAlchemy URL."""
    records = folder / "xml"
    records.mkdir()
    for name, data in documents:
        (records / name).write_bytes(data)
    database = f"sqlite:///{folder / 'pycsw.db'}"
    logging.getLogger("pycsw").setLevel(logging.ERROR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        admin.setup_db(database, TABLE, str(folder))
        loaded = admin.load_records(config.StaticContext(), database, TABLE, str(records))
    if len(loaded) != len(list(records.iterdir())):
        raise RuntimeError(f"pycsw loaded {len(loaded)} of the fixture records")
    return database


def start_pycsw(folder: Path, documents: Iterable[tuple[str, bytes]]) -> PeerServer:
    app = PycswApp(load_repository(folder, documents))
    running = PeerServer(app)
    app.url = running.url + "csw"
    return running
