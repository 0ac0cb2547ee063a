"""META-SHARE harvesting protocol 1.0: synchronise the language resources (LRs) of a node.

See docs/protocols/meta-share.md. The source's URL is the node's base URL; its credentials
are two of its secrets (environment variables)::

    [sources.elra]
    type = "meta-share"
    url = "https://metashare.example.org"
    secrets = { username = "ELRA_SYNC_USER", password = "ELRA_SYNC_PASSWORD" }
    validation = ["meta-share", "shacl"]

One run: log in (``csrftoken`` cookie, POST of the login form, ``sessionid`` cookie and a
page saying ``Logout``), fetch the inventory ZIP (``/sync/?sync_protocol=1.0``: storage id
-> MD5 checksum), then fetch ``/sync/<id>/metadata/`` only for LRs whose checksum differs from
the one the store holds for this source (``HarvestRequest.held_versions``); the others are
listed without their payload. Each resource ZIP must hold ``metadata.xml`` then
``storage-global.json``; the MD5 of their bytes as received must equal the inventory's
checksum, else the LR is rejected (kept in the dead-letter store with the finding). An LR
marked ``deleted`` is withdrawn, and the checksum of its deletion noted: while the inventory
lists it at that checksum it is yielded as deleted without being fetched
(``HarvestRequest.deleted_versions``). LRs missing from a complete inventory are withdrawn by
the pipeline. An LR another source already holds is not taken over: the job notes it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, ClassVar

from aggregator.config import SourceConfig
from aggregator.core.errors import ConfigError, HarvestError, ParseError, UnsafeInputError
from aggregator.core.models import Finding, RawRecord, Severity, Stage
from aggregator.harvest.base import Harvester, HarvestRequest, Listing
from aggregator.harvest.safe_zip import ZipLimits, read_members
from aggregator.net.client import Response

log = logging.getLogger(__name__)

STORAGE_ID = re.compile(r"^[0-9a-f]{64}$")
CHECKSUM = re.compile(r"^[0-9a-f]{32}$")
STORAGE_KEYS = (
    "created",
    "deleted",
    "identifier",
    "metashare_version",
    "modified",
    "publication_status",
    "revision",
    "source_url",
)
STORAGE_DATE = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}$")
PAGE = 500  # storage ids looked up in the store at a time
_NOTES = 20  # LRs named one by one in the job's notes, per kind


@dataclass(frozen=True, slots=True)
class MetaShareOptions:
    user_secret: str = "username"  # noqa: S105  (the name of the source's secret holding it)
    password_secret: str = "password"  # noqa: S105  (likewise: a name, not a password)
    parallel: int = 4  # LR requests in flight
    max_member_bytes: int = 32 * 1024 * 1024  # inflated size of one ZIP member
    max_ratio: float = 200.0  # inflated / compressed size of one ZIP member

    def __post_init__(self) -> None:
        if not 1 <= self.parallel <= 32:
            raise ValueError("parallel must be between 1 and 32")
        ZipLimits(max_member_bytes=self.max_member_bytes, max_ratio=self.max_ratio)


@dataclass(frozen=True, slots=True)
class StorageGlobal:
    """The checked members of an LR's ``storage-global.json``."""

    created: datetime
    deleted: bool
    identifier: str
    modified: datetime
    revision: int
    source_url: str


def parse_storage_global(data: bytes, storage_id: str) -> StorageGlobal:
    """Check ``storage-global.json`` as protocol 1.0 defines it; ParseError if it is not."""
    try:
        text = data.decode("utf-8")
        obj = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as err:
        raise ParseError(f"storage-global.json is not UTF-8 JSON: {err}") from err
    if not isinstance(obj, dict) or tuple(obj) != STORAGE_KEYS:
        keys = ", ".join(obj) if isinstance(obj, dict) else type(obj).__name__
        raise ParseError(
            f"storage-global.json must have exactly the members {', '.join(STORAGE_KEYS)}"
            f" in this order; it has {keys}"
        )
    if text != json.dumps(obj, separators=(",", ":"), ensure_ascii=False) and text != json.dumps(
        obj, separators=(",", ":")
    ):
        raise ParseError("storage-global.json holds whitespace the protocol does not allow")
    if obj["identifier"] != storage_id:
        raise ParseError(f"storage-global.json names {obj['identifier']!r}, not {storage_id}")
    if not isinstance(obj["deleted"], bool):
        raise ParseError("storage-global.json: deleted must be true or false")
    revision = obj["revision"]
    if isinstance(revision, bool) or not isinstance(revision, int) or revision < 1:
        raise ParseError("storage-global.json: revision must be a positive integer")
    if obj["publication_status"] not in ("g", "p"):
        raise ParseError("storage-global.json: publication_status must be 'g' or 'p'")
    for key in ("metashare_version", "source_url"):
        if not isinstance(obj[key], str):
            raise ParseError(f"storage-global.json: {key} must be a string")
    dates = []
    for key in ("created", "modified"):
        value = obj[key]
        # fromisoformat once the pattern is checked: strptime is far slower
        # (docs/benchmarks.md#date-parsing-in-harvesters)
        try:
            if not isinstance(value, str) or not STORAGE_DATE.match(value):
                raise ValueError(value)
            dates.append(datetime.fromisoformat(value).replace(tzinfo=UTC))
        except ValueError as err:
            raise ParseError(
                f"storage-global.json: {key} {value!r} is not YYYY-MM-DD hh:mm:ss"
            ) from err
    return StorageGlobal(
        dates[0], obj["deleted"], storage_id, dates[1], revision, obj["source_url"]
    )


class _Pairs(list[tuple[str, Any]]):
    """A JSON object's members in order, duplicates kept (json's ``object_pairs_hook``)."""


def parse_inventory(data: bytes) -> tuple[dict[str, str], list[str]]:
    """``inventory.json``: the valid (storage id -> checksum) members and the problems of the
    invalid ones. ParseError when it is not a JSON object at all."""
    try:
        pairs = json.loads(data.decode("utf-8"), object_pairs_hook=_Pairs)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as err:
        raise ParseError(f"inventory.json is not UTF-8 JSON: {err}") from err
    if not isinstance(pairs, _Pairs):
        raise ParseError("inventory.json must be one JSON object of storage id -> checksum")
    valid: dict[str, str] = {}
    problems: list[str] = []
    for key, value in pairs:
        if not STORAGE_ID.match(key):
            problems.append(f"{key!r} is not a 64-character lower-case hex storage id")
        elif not isinstance(value, str) or not CHECKSUM.match(value):
            problems.append(f"{key}: {value!r} is not a 32-character lower-case hex MD5")
        elif key in valid:
            problems.append(f"{key} is listed twice")
        else:
            valid[key] = value
    return valid, problems


class MetaShareHarvester(Harvester):
    name: ClassVar[str] = "meta-share"
    formats: ClassVar[tuple[str, ...]] = ("meta-share",)
    Options: ClassVar[type[Any] | None] = MetaShareOptions

    @classmethod
    def check_config(cls, source: SourceConfig) -> None:
        opts: MetaShareOptions = cls.options_of(source)
        for key in (opts.user_secret, opts.password_secret):
            if key not in source.secrets:
                raise ConfigError(
                    f"[sources.{source.name}]: a META-SHARE node needs the secret {key!r}"
                    f' (secrets = {{ {key} = "ENV_VAR_NAME", ... }})'
                )

    @property
    def base(self) -> str:
        return self.source.url.rstrip("/")

    # -- protocol steps ---------------------------------------------------------------------
    def login(self) -> None:
        """Authenticate; HarvestError (code ``loginFailed``) when the node does not accept us."""
        opts: MetaShareOptions = self.options_of(self.source)
        url = f"{self.base}/login/"
        page = self.http.get(url, raise_for_status=False)
        if page.status != 200:
            raise HarvestError(f"login page {url} answered HTTP {page.status}", code="loginFailed")
        token = self.http.session.cookies.get("csrftoken")
        if not token:
            raise HarvestError(f"login page {url} set no csrftoken cookie", code="loginFailed")
        form = {
            "username": self.source.secrets[opts.user_secret].reveal(),
            "password": self.source.secrets[opts.password_secret].reveal(),
            "this_is_the_login_form": "1",
            "csrfmiddlewaretoken": token,
        }
        answer = self.http.post(url, data=form, headers={"Referer": url}, raise_for_status=False)
        user = self.source.secrets[opts.user_secret].env_name
        if answer.status == 403:
            raise HarvestError(
                f"login to {self.base} refused (HTTP 403): check the user name and password"
                f" (environment variables {user} and"
                f" {self.source.secrets[opts.password_secret].env_name})",
                code="loginFailed",
            )
        if answer.status != 200:
            raise HarvestError(
                f"login to {self.base} answered HTTP {answer.status}", code="loginFailed"
            )
        if "sessionid" not in self.http.session.cookies or b"Logout" not in answer.content:
            raise HarvestError(
                f"login to {self.base} failed: the node answered with its login form again"
                f" (wrong user name or password? see environment variable {user})",
                code="loginFailed",
            )

    def inventory(self, limits: ZipLimits) -> tuple[dict[str, str], list[str]]:
        url = f"{self.base}/sync/"
        resp = self.http.get(url, params={"sync_protocol": "1.0"}, raise_for_status=False)
        if resp.status == 403:
            raise HarvestError(
                f"{url} answered 403: the user is not a synchronisation user of this node",
                code="forbidden",
            )
        if resp.status == 501:
            raise HarvestError(
                f"{url} answered 501: the node does not speak harvesting protocol 1.0",
                code="protocolNotSupported",
            )
        if resp.status != 200:
            raise resp.status_error(f"GET {resp.url}")
        if resp.headers.get("sync-protocol", "").strip() != "1.0":
            raise HarvestError(
                f"{url} did not answer with Sync-Protocol: 1.0", code="protocolNotSupported"
            )
        try:
            (data,) = read_members(
                resp.content, ["inventory.json"], what=f"the inventory of {self.base}",
                limits=limits,
            )  # fmt: skip
            return parse_inventory(data)
        except (ParseError, UnsafeInputError) as err:
            raise HarvestError(err.message, code="badInventory") from err

    def lr_url(self, storage_id: str) -> str:
        return f"{self.base}/sync/{storage_id}/metadata/"

    def fetch(self, storage_id: str) -> Response:
        resp = self.http.get(self.lr_url(storage_id), raise_for_status=False)
        if resp.status == 403:
            raise HarvestError(
                f"{resp.url} answered 403: the session is no longer accepted", code="forbidden"
            )
        return resp

    def record(
        self, storage_id: str, checksum: str, resp: Response, limits: ZipLimits
    ) -> RawRecord:
        """The raw record of one fetched LR: its ``metadata.xml`` as received, or the body
        with the finding that rejects it."""
        base = RawRecord(
            source=self.source.name,
            local_id=storage_id,
            format="meta-share",
            payload=resp.content,
            media_type=resp.media_type or "application/zip",
            url=self.lr_url(storage_id),
            version=checksum,
        )

        def rejected(rule: str, message: str, **changes: Any) -> RawRecord:
            finding = Finding(Stage.FETCH, Severity.VIOLATION, rule, message, base.url)
            return replace(base, findings=(finding,), **changes)

        try:
            xml, storage = read_members(
                resp.content, ["metadata.xml", "storage-global.json"],
                what=f"the resource ZIP of {storage_id}", limits=limits,
            )  # fmt: skip
        except UnsafeInputError as err:
            return rejected("unsafeZip", err.message)
        except ParseError as err:
            return rejected("badResourceZip", err.message)
        digest = hashlib.md5(xml + storage, usedforsecurity=False).hexdigest()
        as_xml: dict[str, Any] = {"payload": xml, "media_type": "application/xml"}
        if digest != checksum:
            return rejected(
                "checksumMismatch",
                f"MD5 of metadata.xml and storage-global.json is {digest}; the inventory"
                f" says {checksum}",
                **as_xml,
            )
        try:
            facts = parse_storage_global(storage, storage_id)
        except ParseError as err:
            return rejected("badStorageGlobal", err.message, **as_xml)
        return replace(base, datestamp=facts.modified, deleted=facts.deleted, **as_xml)

    # -- the listing ------------------------------------------------------------------------
    def list_records(self, request: HarvestRequest, listing: Listing) -> Iterator[RawRecord]:
        opts: MetaShareOptions = self.options_of(self.source)
        limits = ZipLimits(max_member_bytes=opts.max_member_bytes, max_ratio=opts.max_ratio)
        self.login()
        inventory, problems = self.inventory(limits)
        listing.pages = 1
        listing.expected_total = len(inventory) + len(problems)
        for problem in problems[:_NOTES]:
            listing.note(f"inventory: {problem}")
        if problems:
            listing.mark_truncated(f"the inventory has {len(problems)} invalid member(s)")
        ids = sorted(inventory)
        elsewhere_count = 0
        with ThreadPoolExecutor(opts.parallel, thread_name_prefix="meta-share") as pool:
            for start in range(0, len(ids), PAGE):
                if request.cancel.is_set():
                    listing.mark_truncated("cancelled")
                    return
                page = ids[start : start + PAGE]
                held = dict(request.held_versions(page)) if request.held_versions else {}
                gone = dict(request.deleted_versions(page)) if request.deleted_versions else {}
                others = request.held_elsewhere(page) if request.held_elsewhere else {}
                todo: list[str] = []
                for storage_id in page:
                    if storage_id in others and storage_id not in held:
                        if elsewhere_count < _NOTES:
                            listing.note(
                                f"LR {storage_id} is held from source {others[storage_id]}:"
                                " not taken over"
                            )
                        elsewhere_count += 1
                    elif held.get(storage_id) == inventory[storage_id]:
                        listing.seen += 1
                        yield self._unchanged(storage_id, inventory[storage_id])
                    elif gone.get(storage_id) == inventory[storage_id]:
                        listing.seen += 1  # deleted still: the checksum of its deletion
                        yield self._unchanged(storage_id, inventory[storage_id], deleted=True)
                    else:
                        todo.append(storage_id)
                yield from self._fetch_all(pool, todo, inventory, limits, listing)
        if elsewhere_count:
            listing.note(f"{elsewhere_count} LR(s) held from other sources were not taken over")
        listing.mark_complete()

    def _unchanged(self, storage_id: str, checksum: str, *, deleted: bool = False) -> RawRecord:
        return RawRecord(
            source=self.source.name,
            local_id=storage_id,
            format="meta-share",
            payload=b"",
            media_type="application/xml",
            url=self.lr_url(storage_id),
            payload_omitted=True,
            version=checksum,
            deleted=deleted,
        )

    def _fetch_all(
        self,
        pool: ThreadPoolExecutor,
        todo: Sequence[str],
        inventory: Mapping[str, str],
        limits: ZipLimits,
        listing: Listing,
    ) -> Iterator[RawRecord]:
        for storage_id, resp in zip(todo, pool.map(self.fetch, todo), strict=True):
            if resp.status == 404:  # gone since the inventory: the next run will tell
                listing.note(f"LR {storage_id} is in the inventory but answered 404")
                listing.mark_truncated("an LR of the inventory could not be fetched (404)")
                continue
            if resp.status != 200:
                raise resp.status_error(f"GET {resp.url}")
            listing.seen += 1
            yield self.record(storage_id, inventory[storage_id], resp, limits)
