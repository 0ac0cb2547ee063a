"""Refusing ``SERVICE``: pyoxigraph executes federated clauses by fetching the named endpoint,
so a query that reached the engine with one would make our server a proxy to any host.

pyoxigraph exposes no query algebra and no service hook, so the decision is taken in layers:

1. :func:`service_tokens` lexes the query left to right (comments, the four string forms,
   IRIs, variables, prefixed names, words) and reports a bare ``SERVICE`` word: the clear
   message for ordinary queries. No other bare word ``SERVICE`` is valid SPARQL.
2. The engine itself is the authority. SPARQL lexing has one ambiguity (``<`` opens an IRI or
   is the less-than operator: ``FILTER(?a<?b)SERVICE?x#>`` is one IRI to a naive lexer), so
   a query in which the letters "service" occur anywhere (any case, including the Unicode
   letters that case-fold to them) is first parsed with every such occurrence renamed
   (:func:`neutralised`: the last ``e`` becomes ``f``). The renamed text contains no
   ``SERVICE`` at all, so parsing it is harmless; a renamed keyword is a syntax error while a
   renamed string, IRI, comment, variable or name is not. If the renamed query does not parse,
   the query is refused without running. The worker process does this check (under the
   query deadline, on an empty in-memory store, without iterating results).
3. Codepoint escapes (``\\u0053ERVICE``) that would spell the word only after unescaping are
   refused outright (:func:`escaped_service`): a parser that unescapes before lexing
   (as the SPARQL grammar allows) would otherwise see a keyword the rename did not touch.
4. The worker processes deny themselves IP sockets at start-up (seccomp, see
   :mod:`aggregator.serve.sparql_sandbox`): even a clause that got through could not connect.
"""

from __future__ import annotations

import re

# re.IGNORECASE with Unicode patterns also folds 'ſ' (U+017F) to 's' and 'ı'/'İ' to 'i'.
_SERVICE_LETTERS = re.compile(r"servic(e)", re.IGNORECASE)
_ESCAPE = re.compile(r"\\u([0-9A-Fa-f]{4})|\\U([0-9A-Fa-f]{8})")
_TOKEN = re.compile(
    r"""
    (?P<ws>\s+)
  | (?P<comment>\#[^\n\r]*)
  | (?P<string>\"\"\"(?:[^"\\]|\\[\s\S]|"(?!""))*(?:\"\"\"|$)
             |'''(?:[^'\\]|\\[\s\S]|'(?!''))*(?:'''|$)
             |"(?:[^"\\\n\r]|\\.)*"?
             |'(?:[^'\\\n\r]|\\.)*'?)
  | (?P<iri><[^<>"{}|^`\\\x00-\x20]*>)
  | (?P<var>[?$][\w\u00b7\u0300-\u036f\u203f-\u2040]+)
  | (?P<pname>[^\W\d][\w.\-]*:(?:[\w.:%\-]|\\.)*|:(?:[\w.:%\-]|\\.)*)
  | (?P<word>[^\W\d]\w*)
  | (?P<other>.)
    """,
    re.VERBOSE | re.DOTALL,
)


def mentions_service(query: str) -> bool:
    """True when the letters "service" occur anywhere (any case): the engine check is needed."""
    return _SERVICE_LETTERS.search(query) is not None


def service_tokens(query: str) -> int:
    """How many bare ``SERVICE`` words the lexer finds outside comments, strings and IRIs."""
    found = 0
    for m in _TOKEN.finditer(query):
        if m.lastgroup == "word" and _SERVICE_LETTERS.fullmatch(m.group()) is not None:
            found += 1
    return found


def unescape_codepoints(text: str) -> str:
    """Replace ``\\uXXXX`` and ``\\UXXXXXXXX`` everywhere, as SPARQL 1.1 section 19.2 allows."""

    def one(m: re.Match[str]) -> str:
        code = int(m.group(1) or m.group(2), 16)
        return chr(code) if code <= 0x10FFFF and not 0xD800 <= code <= 0xDFFF else m.group()

    return _ESCAPE.sub(one, text)


def escaped_service(query: str) -> bool:
    """True when codepoint escapes spell "service" where the plain text does not."""
    if "\\u" not in query and "\\U" not in query:
        return False
    plain = len(_SERVICE_LETTERS.findall(query))
    return len(_SERVICE_LETTERS.findall(unescape_codepoints(query))) > plain


def neutralised(query: str) -> str:
    """The query with every "service" (any case) renamed to "servicf": same length, same
    positions, and no way left to spell the keyword."""
    return _SERVICE_LETTERS.sub(
        lambda m: m.group()[:-1] + ("F" if m.group(1) == "E" else "f"), query
    )
