"""The XML pieces of OAI-PMH 2.0 responses, written as bytes (no tree is ever built).

Everything variable goes through :func:`esc`, which also drops the characters XML 1.0 forbids
(a request argument or a stored literal may carry them; one of them would make the whole page
unparseable for every harvester).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

OAI_NS = "http://www.openarchives.org/OAI/2.0/"
XSI_NS = "http://www.w3.org/2001/XMLSchema-instance"
OAI_SCHEMA = "http://www.openarchives.org/OAI/2.0/OAI-PMH.xsd"
_BAD_CHARS = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")
_CONTROL_BYTES = bytes([*range(0x09), 0x0B, 0x0C, *range(0x0E, 0x20)])
_XML_DECL = re.compile(rb"^\s*<\?xml[^>]*\?>\s*")


def esc(text: str) -> str:
    """Escape text or a double-quoted attribute value; drop characters XML 1.0 forbids."""
    if _BAD_CHARS.search(text):
        text = _BAD_CHARS.sub("", text)
    return (
        text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
    )


def clean_bytes(data: bytes) -> bytes:
    """Drop XML 1.0-forbidden characters from UTF-8 XML made by another writer.

    Control bytes never occur inside a multi-byte UTF-8 sequence, so deleting them is safe;
    U+FFFE and U+FFFF are the only other forbidden characters a writer can let through.
    """
    data = data.translate(None, _CONTROL_BYTES)
    if b"\xef\xbf\xbe" in data or b"\xef\xbf\xbf" in data:
        data = data.replace(b"\xef\xbf\xbe", b"").replace(b"\xef\xbf\xbf", b"")
    return data


def strip_declaration(data: bytes) -> bytes:
    """An XML document without its XML declaration (and the whitespace around it)."""
    if data.lstrip()[:5] == b"<?xml":
        return _XML_DECL.sub(b"", data, count=1)
    return data


def head(response_date: str, base_url: str, echo: Sequence[tuple[str, str]] | None) -> bytes:
    """The start of every response, up to and including ``<request>``.

    ``echo`` is the request's arguments, given only when the request was valid (no badVerb
    or badArgument), as the protocol says.
    """
    attrs = "".join(f' {k}="{esc(v)}"' for k, v in (echo or ()))
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f'<OAI-PMH xmlns="{OAI_NS}" xmlns:xsi="{XSI_NS}" '
        f'xsi:schemaLocation="{OAI_NS} {OAI_SCHEMA}">\n'
        f"<responseDate>{response_date}</responseDate>\n"
        f"<request{attrs}>{esc(base_url)}</request>\n"
    ).encode()


TAIL = b"</OAI-PMH>\n"


def error(code: str, message: str) -> bytes:
    return f'<error code="{code}">{esc(message)}</error>\n'.encode()


def header(identifier: str, datestamp: str, specs: Iterable[str], deleted: bool) -> bytes:
    status = ' status="deleted"' if deleted else ""
    sets = "".join(f"<setSpec>{esc(s)}</setSpec>" for s in specs)
    return (
        f"<header{status}><identifier>{esc(identifier)}</identifier>"
        f"<datestamp>{datestamp}</datestamp>{sets}</header>"
    ).encode()


def record(head_xml: bytes, metadata: bytes | None) -> bytes:
    if metadata is None:
        return b"<record>" + head_xml + b"</record>\n"
    return b"<record>" + head_xml + b"<metadata>" + metadata + b"</metadata></record>\n"


def resumption_token(token: str, total: int, cursor: int, expires: str | None) -> bytes:
    when = f' expirationDate="{expires}"' if expires else ""
    return (
        f'<resumptionToken{when} completeListSize="{total}" cursor="{cursor}">'
        f"{esc(token)}</resumptionToken>\n"
    ).encode()
