"""The portal's web pages that the local MDR service (:mod:`aggregator.demo.peers.mdr`) serves: the
page model with its publishing events, the bundled sample pages and the benchmark's
generated ones, and the service's time format."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import resources
from typing import Any


def iso(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str) -> datetime:
    value = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    return value if value.tzinfo else value.replace(tzinfo=UTC)


@dataclass(slots=True)
class MdrPage:
    """One web page of the portal and its publishing events."""

    identifier: str
    metadata: dict[str, Any]  # MetadataVO fields; relation and subjectClasification lists
    published: datetime
    modified: datetime | None = None
    exited: datetime | None = None
    #: attributes the service's own validation flags (sent as mdValidationErrVO)
    service_errors: tuple[str, ...] = ()


def load_sample_pages() -> list[MdrPage]:
    """The bundled sample pages (``aggregator/demo/peers/data/mdr/pages.json``)."""
    text = (resources.files("aggregator.demo.peers") / "data" / "mdr" / "pages.json").read_text(
        encoding="utf-8"
    )
    pages = []
    for item in json.loads(text)["pages"]:
        pages.append(
            MdrPage(
                identifier=item["identifier"],
                metadata=dict(item["metadata"]),
                published=parse_time(item["published"]),
            )
        )
    return pages


def generate_page(i: int, published: datetime) -> MdrPage:
    """A synthetic, valid page number ``i`` (the benchmark's)."""
    depts = ("Agriculture", "Health and Family Welfare", "Revenue", "Transport", "Education")
    dept = f"Department of {depts[i % len(depts)]}"
    return MdrPage(
        identifier=f"https://portal.example.gov.in/pages/{i:07d}.html",
        published=published,
        metadata={
            "creatorDeptName": dept,
            "creatorEmail": f"web{i % len(depts)}@example.gov.in",
            "coverageJurisdiction": "State of Andhra Pradesh",
            "description": f"Information page {i} of the {dept}: services, contacts and forms.",
            "datePublished": iso(published),
            "format": "text/html",
            "language": ("eng", "hin", "tel")[i % 3],
            "publisherDeptName": "Department of Information Technology",
            "publisherEmail": "portal-admin@example.gov.in",
            "publisherAddress": "Secretariat, Block 4, Hyderabad 500022",
            "publisherPhone": "+91-40-23450000",
            "title": f"Page {i}: {dept}",
            "subjectKeywords": f"page {i}; {dept.lower()}; services",
            "subjectClasification": ["Citizens"],
            "type": ("SERVICES", "DOCUMENTS", "FORMS")[i % 3],
        },
    )
