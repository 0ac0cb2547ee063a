"""ISO Schematron run as compiled lxml XPath expressions over the already-parsed tree.

lxml.isoschematron compiles a ``.sch`` file to XSLT and each run walks the whole document once
per pattern, builds an SVRL report and has us read it back, most of a record's validation
time (docs/benchmarks.md#validation). This module compiles the same ``.sch`` file (still the
one source of truth) into one
XPath per assertion that selects the context nodes the assertion fails on::

    (/descendant::ctx-1 | /abs/ctx-2)[not(test)]          # sch:assert
    (/descendant::ctx-1 | /abs/ctx-2)[boolean(test)]      # sch:report

A record that passes costs one XPath call for the whole schema: each rule's context once,
its assertions' tests or-ed (``(ctx)[not(t1) or not(t2) or boolean(r3)]``), all rules
or-ed; a relative context of child steps with name tests (``a:b/c:d``, ``gmd:*[not(*)]``)
is read by the descendant axis (``/descendant::c:d[parent::a:b]``), which libxml2 walks
without first collecting every node of the document. Only when that call is true are the
rules, and then the assertions of a rule that fires, evaluated one by one. The
findings are those the XSLT gives, in the same order, with the same rule ids, messages,
SVRL locations and lines (tests/test_schematron_xpath.py and tests/test_schematron_golden.py
compare both on every failing fixture and on broken real records):

* a context pattern ``a/b`` matches what ``//a/b`` selects (an absolute ``/a/b`` stays as it
  is); as in the XSLT's walk, a node is checked only by the first rule of its pattern whose
  context matches it (checked only for the nodes an assertion fails on);
* a rule's ``sch:let`` is put in place (``$level`` -> ``(string(...))``) when the variable is
  used outside any predicate, where it has the same context node; messages evaluate the
  lets per node as XPath variables;
* ``sch:name`` and ``sch:value-of`` give ``name()`` and ``string()`` in place, white space
  is normalised as the SVRL is read; the location is the skeleton's full path
  (``/*[local-name()='MD_Metadata' and namespace-uri()='...']/...``, positions counted by
  local name) and the line that of the node it selects, quirks included.

Anything outside that subset (phases, abstract patterns or rules, includes, diagnostics,
``subject``, pattern- or schema-level lets, XSLT-only functions such as ``current()``, a let
used inside a predicate, rich message markup) makes :func:`compile_schema` return ``None``
and the validator keeps lxml.isoschematron for that file. A context that selects a comment
or a processing instruction, or an XPath error at run time, raises :class:`Unsupported` and
the validator runs the XSLT for that record.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from lxml import etree

SCH = "{http://purl.oclc.org/dsdl/schematron}"
_XSLT_ONLY = re.compile(
    r"\b(current|document|key|generate-id|format-number|system-property|element-available|"
    r"function-available|unparsed-entity-uri|position|last)\s*\("
)
_VARIABLE = re.compile(r"\$([A-Za-z_][\w.\-]*)")


class Unsupported(Exception):
    """This record (or file) needs the XSLT implementation."""


@dataclass(frozen=True, slots=True)
class Assertion:
    kind: str  # "assert" or "report"
    id: str | None
    test: str
    role: str | None
    flag: str | None
    failing: etree.XPath  # the context nodes this assertion fires on
    message: tuple[str | etree.XPath, ...]  # text, or an XPath giving a string


@dataclass(frozen=True, slots=True)
class Rule:
    context: etree.XPath
    lets: tuple[tuple[str, etree.XPath], ...]
    assertions: tuple[Assertion, ...]
    fires: etree.XPath | None  # true if some assertion may fire: (context)[p1 or p2 ...]
    fires_text: str


@dataclass(frozen=True, slots=True)
class Pattern:
    rules: tuple[Rule, ...]


@dataclass(frozen=True, slots=True)
class Patterns:
    """A schema's patterns, and one XPath that is false when no assertion of any fires."""

    patterns: tuple[Pattern, ...]
    fires: etree.XPath | None  # all rules' fires_text or-ed: false, every assertion holds

    def __iter__(self) -> Iterator[Pattern]:
        return iter(self.patterns)


@dataclass(frozen=True, slots=True)
class Hit:
    """A failed assert or successful report, as the SVRL would give it."""

    kind: str
    id: str | None
    test: str
    role: str | None
    flag: str | None
    message: str
    location: str  # the line is that of the node this path selects, as for the XSLT


def _split_top(text: str, sep: str) -> list[str]:
    """``text`` split on ``sep`` outside brackets, parentheses and string literals."""
    parts, depth, quote, start = [], 0, "", 0
    for i, ch in enumerate(text):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        elif ch == sep and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def _inline(expr: str, lets: dict[str, str]) -> str:
    """``expr`` with each let variable replaced by its parenthesised value; Unsupported when
    one is used inside a predicate (where the context node is another)."""
    out, depth, quote, i = [], 0, "", 0
    while i < len(expr):
        ch = expr[i]
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        elif ch == "$":
            m = _VARIABLE.match(expr, i)
            if m is None or m.group(1) not in lets:
                raise Unsupported(f"variable {expr[i : i + 20]!r} is not a rule's let")
            if depth:
                raise Unsupported(f"variable ${m.group(1)} used inside a predicate")
            out.append(f"({lets[m.group(1)]})")
            i = m.end()
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def _context_path(context: str) -> str:
    branches = []
    for branch in _split_top(context, "|"):
        branch = branch.strip()
        if not branch or branch == "/" or branch.startswith(("id(", "key(")):
            raise Unsupported(f"context {context!r}")
        branches.append(branch if branch.startswith("/") else "//" + branch)
    return " | ".join(branches)


_NAME_TEST = re.compile(r"(?:\*|[A-Za-z_][\w.\-]*:\*|[A-Za-z_][\w.\-]*(?::[A-Za-z_][\w.\-]*)?)")
_BOOLEAN_CALL = re.compile(r"(?:not|boolean|contains|starts-with)\s*\(")


def _predicates(text: str) -> list[str] | None:
    """``[p1][p2]...`` split into its predicates; None if ``text`` is anything else."""
    out, depth, quote, start = [], 0, "", 0
    for i, ch in enumerate(text):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "[":
            if depth == 0:
                start = i + 1
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth == 0:
                out.append(text[start:i])
        elif depth == 0 and not ch.isspace():
            return None
    return out if depth == 0 and not quote else None


def _close(text: str, opening: int) -> int:
    """The index of the parenthesis that closes the one at ``opening`` (-1 if none)."""
    depth, quote = 0, ""
    for i in range(opening, len(text)):
        ch = text[i]
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                return i
    return -1


def _boolean_call(predicate: str) -> bool:
    """Whether the predicate is one call of a boolean function (never a position)."""
    text = predicate.strip()
    call = _BOOLEAN_CALL.match(text)
    return call is not None and _close(text, call.end() - 1) == len(text) - 1


def _by_descent(branch: str) -> str | None:
    """A relative branch of child steps with name tests, the last one with predicates that
    are calls of boolean functions (``a:b/*/c:d[not(x)]``), read by the descendant axis
    with the steps before the last as parent tests (``/descendant::c:d[parent::*[parent::
    a:b]][not(x)]``): the nodes ``//a:b/*/c:d[not(x)]`` selects (no predicate counts a
    position among a parent's children), without collecting every node of the document and
    then their children; None for any other branch, which stays ``//branch``."""
    steps = _split_top(branch, "/")
    parents = ""
    for step in steps[:-1]:
        if _NAME_TEST.fullmatch(step) is None:
            return None
        parents = f"parent::{step}[{parents}]" if parents else f"parent::{step}"
    last = steps[-1]
    name = _NAME_TEST.match(last)
    predicates = None if name is None else _predicates(last[name.end() :])
    if name is None or predicates is None or not all(map(_boolean_call, predicates)):
        return None
    step = name.group()
    if parents:
        step += f"[{parents}]"
    return "/descendant::" + step + "".join(f"[{p}]" for p in predicates)


def _fires_context(context: str) -> str:
    """The rule context as ``fires`` and the assertions read it: the nodes
    :func:`_context_path` selects, a relative branch by the descendant axis where
    :func:`_by_descent` can."""
    branches = []
    for branch in _split_top(context, "|"):
        branch = branch.strip()
        by_descent = None if branch.startswith("/") else _by_descent(branch)
        branches.append(by_descent or _context_path(branch))
    return " | ".join(branches)


def _check(expr: str) -> str:
    if _XSLT_ONLY.search(expr):
        raise Unsupported(f"XSLT-only or positional function in {expr!r}")
    return expr


def _message(node: etree._Element, ns: dict[str, str], var_names: list[str]) -> tuple[Any, ...]:
    parts: list[str | etree.XPath] = [node.text or ""]
    for child in node:
        if child.tag == SCH + "name":
            path = child.get("path") or "."
            parts.append(etree.XPath(f"string(name({_check(path)}))", namespaces=ns))
        elif child.tag == SCH + "value-of":
            select = _check(child.get("select") or "")
            parts.append(etree.XPath(f"string({select})", namespaces=ns))
        elif isinstance(child.tag, str):
            raise Unsupported(f"message markup {child.tag}")
        parts.append(child.tail or "")
    del var_names  # variables resolve when the message is made (XPath keyword arguments)
    return tuple(parts)


def _rule(node: etree._Element, ns: dict[str, str]) -> Rule:
    if node.get("abstract") == "true" or node.find(SCH + "extends") is not None:
        raise Unsupported("abstract rule")
    context = node.get("context")
    if not context:
        raise Unsupported("rule without context")
    context_path = _context_path(_check(context))
    fires_context = _fires_context(context)
    lets: dict[str, str] = {}
    let_xpaths: list[tuple[str, etree.XPath]] = []
    assertions: list[Assertion] = []
    predicates: list[str] = []
    for child in node:
        if not isinstance(child.tag, str):
            continue
        if child.tag == SCH + "let":
            if assertions or child.get("value") is None:
                raise Unsupported("let after an assertion, or without value")
            name, value = str(child.get("name")), _check(str(child.get("value")))
            let_xpaths.append((name, etree.XPath(value, namespaces=ns)))
            lets[name] = _inline(value, lets)
        elif child.tag in (SCH + "assert", SCH + "report"):
            if child.get("diagnostics") or child.get("subject"):
                raise Unsupported("diagnostics or subject")
            test = str(child.get("test"))
            inlined = _inline(_check(test), lets)
            kind = "assert" if child.tag == SCH + "assert" else "report"
            # boolean(), as xsl:if reads a test: a bare number in a predicate is a position
            predicate = f"not({inlined})" if kind == "assert" else f"boolean({inlined})"
            predicates.append(predicate)
            assertions.append(
                Assertion(
                    kind=kind,
                    id=child.get("id"),
                    test=test,
                    role=child.get("role"),
                    flag=child.get("flag"),
                    failing=etree.XPath(f"({fires_context})[{predicate}]", namespaces=ns),
                    message=_message(child, ns, list(lets)),
                )
            )
        elif child.tag != SCH + "title" and child.tag != SCH + "p":
            raise Unsupported(f"rule child {child.tag}")
    fires = f"boolean(({fires_context})[{' or '.join(predicates)}])" if predicates else ""
    return Rule(
        etree.XPath(context_path, namespaces=ns),
        tuple(let_xpaths),
        tuple(assertions),
        etree.XPath(fires, namespaces=ns) if fires else None,
        fires,
    )


def _or(texts: list[str], ns: dict[str, str]) -> etree.XPath | None:
    texts = [t for t in texts if t]
    return etree.XPath(" or ".join(texts), namespaces=ns) if texts else None


def compile_schema(tree: etree._ElementTree, phase: str | None) -> Patterns | None:
    """The patterns of a Schematron schema as compiled XPath rules, or None when the schema
    uses something this subset does not cover (the caller then uses the XSLT)."""
    root = tree.getroot()
    if root.tag != SCH + "schema" or phase is not None:
        return None
    if root.get("queryBinding", "xslt").lower() not in ("xslt", "xslt1", "xpath"):
        return None
    ns = {str(n.get("prefix")): str(n.get("uri")) for n in root.iterfind(SCH + "ns")}
    allowed = {SCH + t for t in ("ns", "pattern", "title", "p")}
    patterns: list[Pattern] = []
    try:
        for child in root:
            if not isinstance(child.tag, str):
                continue
            if child.tag not in allowed:
                raise Unsupported(f"schema child {child.tag}")
            if child.tag != SCH + "pattern":
                continue
            if child.get("abstract") == "true" or child.get("is-a"):
                raise Unsupported("abstract pattern")
            rules = []
            for item in child:
                if not isinstance(item.tag, str) or item.tag in (SCH + "title", SCH + "p"):
                    continue
                if item.tag != SCH + "rule":
                    raise Unsupported(f"pattern child {item.tag}")
                rules.append(_rule(item, ns))
            patterns.append(Pattern(tuple(rules)))
        fires = _or([r.fires_text for pattern in patterns for r in pattern.rules], ns)
    except (Unsupported, etree.XPathSyntaxError):
        return None
    return Patterns(tuple(patterns), fires)


def _step(el: etree._Element) -> str:
    """One step of the ISO skeleton's ``schematron-get-full-path``: a name test (by
    ``name()`` without a namespace, by local name and namespace with one) and the position
    among the element siblings of the same name (same local name, any namespace), given
    when there is more than one."""
    qname = etree.QName(el)
    local, namespace = qname.localname, qname.namespace
    if namespace is None:
        step = f"/{local}"
        same = f"{{}}{local}"  # lxml's tag filter: this local name, no namespace
    else:
        step = f"/*[local-name()='{local}' and namespace-uri()='{namespace}']"
        same = f"{{*}}{local}"  # this local name, any namespace or none
    before = sum(1 for _ in el.itersiblings(same, preceding=True))
    if before or next(el.itersiblings(same), None) is not None:
        step += f"[{before + 1}]"
    return step


def full_path(node: etree._Element) -> str:
    """The SVRL location of an element, as the ISO skeleton writes it."""
    return "".join(_step(el) for el in [*reversed(list(node.iterancestors())), node])


def _text(
    parts: tuple[str | etree.XPath, ...], node: etree._Element, variables: dict[str, Any]
) -> str:
    out = []
    for part in parts:
        out.append(part if isinstance(part, str) else str(part(node, **variables)))
    return " ".join("".join(out).split())


def _first_rule_only(
    rules: tuple[Rule, ...], root: etree._Element, fired: list[tuple[etree._Element, int, int]]
) -> list[tuple[etree._Element, int, int]]:
    """``fired`` without the nodes an earlier rule of the pattern matches (the XSLT's walk
    checks a node with the first rule whose context matches it)."""
    claimed: dict[int, set[Any]] = {}

    def earlier(node: etree._Element, r: int) -> bool:
        for j in range(r):
            if j not in claimed:
                found = rules[j].context(root)
                claimed[j] = set(found) if isinstance(found, list) else set()
            if node in claimed[j]:
                return True
        return False

    return [f for f in fired if not earlier(f[0], f[1])]


def _hit(rule: Rule, a: int, node: etree._Element) -> Hit:
    variables: dict[str, Any] = {}
    for name, value in rule.lets:
        variables[name] = value(node, **variables)
    assertion = rule.assertions[a]
    return Hit(
        kind=assertion.kind,
        id=assertion.id,
        test=assertion.test,
        role=assertion.role,
        flag=assertion.flag,
        message=_text(assertion.message, node, variables),
        location=full_path(node),
    )


def run(patterns: Patterns, root: etree._Element) -> list[Hit]:
    """Every failed assert and successful report, in SVRL order (pattern by pattern, document
    order, assertion order). Raises Unsupported for what the XSLT must do.

    A record that passes costs one XPath call (``patterns.fires``: every rule's context
    once, its assertions' tests or-ed). Only when that is true is each rule asked the same,
    and only the assertions of a rule that fires are evaluated one by one."""
    hits: list[Hit] = []
    order: dict[Any, int] = {}
    try:
        if patterns.fires is None or not patterns.fires(root):
            return hits  # the common case: every assertion holds
        for pattern in patterns:
            rules = pattern.rules
            fired: list[tuple[etree._Element, int, int]] = []
            for r, rule in enumerate(rules):
                if rule.fires is None or (len(rule.assertions) > 1 and not rule.fires(root)):
                    continue  # (one assertion: its own XPath answers as fast)
                for a, assertion in enumerate(rule.assertions):
                    found = assertion.failing(root)
                    for node in found if isinstance(found, list) else ():
                        if not isinstance(node, etree._Element):
                            continue  # an attribute or text: the walk never visits it
                        if not isinstance(node.tag, str):
                            raise Unsupported("a context selects a comment or instruction")
                        fired.append((node, r, a))
            if not fired:
                continue
            kept = _first_rule_only(rules, root, fired)
            if len({id(node) for node, _, _ in kept}) <= 1:
                kept.sort(key=lambda f: f[2])  # one node: assertion order
            else:
                if not order:
                    order = {el: i for i, el in enumerate(root.iter())}
                kept.sort(key=lambda f: (order[f[0]], f[2]))
            hits.extend(_hit(rules[r], a, node) for node, r, a in kept)
    except etree.XPathError as err:
        raise Unsupported(str(err)) from err
    return hits
