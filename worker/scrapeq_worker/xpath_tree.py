"""XPath for the static engine: an lxml copy of lexbor's HTML5 tree, and compiled expressions.

libxml2's own HTML parser does not build the tree a browser builds; XPath runs instead over a
copy of lexbor's tree (the one CSS selectors see), so that an expression matches the same nodes
in both engines (extraction.py says what a match gives).
"""

from __future__ import annotations

import contextlib
import functools
import re
from typing import Any, Final

from lxml import etree
from selectolax.lexbor import LexborHTMLParser, LexborNode

from .errors import BadInput


def check_xpath(expression: str) -> None:
    """Raise BadInput(reason="bad_selector") if `expression` is not an XPath 1.0 expression."""
    compiled_xpath(expression)


@functools.lru_cache(maxsize=256)
def compiled_xpath(expression: str) -> etree.XPath:
    try:
        return etree.XPath(expression)
    except etree.XPathError as error:
        raise BadInput(f"invalid XPath {expression!r}: {error}", reason="bad_selector") from error


_SVG_NAMESPACE: Final = "http://www.w3.org/2000/svg"
_MATHML_NAMESPACE: Final = "http://www.w3.org/1998/Math/MathML"
# Characters XML (and so lxml) cannot hold; a copy for XPath shows them as U+FFFD.
_NOT_XML: Final = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")

# What an XPath match is in the static engine: an element of lexbor's tree, or the value of an
# attribute, text or comment node (a str as the document has it, with whether it is an
# attribute's), or None.
XPathMatch = LexborNode | tuple[str, bool] | None


class XPathTree:
    """An lxml copy of lexbor's tree for XPath: the same elements (SVG and MathML ones in their
    namespaces, as in the DOM, so `//svg` matches neither here nor in Chromium), attributes,
    text and comments, and a map between the two trees' elements. `<template>` contents are
    not in either tree. Built once per page, and only for a job that uses XPath."""

    def __init__(self, document: LexborHTMLParser) -> None:
        self.to_lexbor: dict[Any, LexborNode] = {}
        self.to_lxml: dict[int, Any] = {}
        self.comments: dict[Any, str] = {}
        root = document.root
        if root is None:
            # lexbor makes an <html> of any text; nothing to copy otherwise.
            self.root = etree.Element("html")
            return
        self.root = self._element(root, None, None)
        pending: list[tuple[LexborNode, Any, str | None]] = [
            (root, self.root, self._namespace_of(root, None))
        ]
        while pending:
            node, element, namespace = pending.pop()
            last: Any = None
            for child in node.iter(include_text=True):
                tag = child.tag or ""
                if tag == "-text":
                    text = xml_safe(child.text_content or "")
                    if last is None:
                        element.text = (element.text or "") + text
                    else:
                        last.tail = (last.tail or "") + text
                elif tag == "-comment":
                    # XML comments cannot hold "--": the text a match gives is lexbor's.
                    content = child.comment_content or ""
                    last = etree.Comment(xml_safe(content).replace("--", "- -") + " ")
                    self.comments[last] = content
                    element.append(last)
                elif not tag.startswith(("-", "!")):
                    child_namespace = self._namespace_of(child, namespace)
                    last = self._element(child, element, child_namespace)
                    pending.append((child, last, child_namespace))

    @staticmethod
    def _namespace_of(node: LexborNode, parent_namespace: str | None) -> str | None:
        """An element's namespace as the HTML parser gives it: SVG below `<svg>`, MathML below
        `<math>`, HTML again inside an SVG `foreignObject`."""
        if node.tag == "svg":
            return _SVG_NAMESPACE
        if node.tag == "math":
            return _MATHML_NAMESPACE
        parent = node.parent
        if (
            parent_namespace == _SVG_NAMESPACE
            and parent is not None
            and parent.tag == "foreignObject"
        ):
            return None
        return parent_namespace

    def _element(self, node: LexborNode, parent: Any, namespace: str | None) -> Any:
        name = node.tag or "unknown"
        tag = f"{{{namespace}}}{name}" if namespace else name
        try:
            element = etree.Element(tag) if parent is None else etree.SubElement(parent, tag)
        except ValueError:
            # A name XML cannot hold (`<a:b>`): no XPath name test can reach it anyway.
            element = etree.Element("-") if parent is None else etree.SubElement(parent, "unnamed")
        for key, value in node.attributes.items():
            # An attribute name XML cannot hold is only reachable as `@*`: left out.
            with contextlib.suppress(ValueError):
                element.set(key, xml_safe(value or ""))
        self.to_lexbor[element] = node
        self.to_lxml[node.mem_id] = element
        return element

    def select(
        self, expression: str, context: LexborNode | None, *, first: bool
    ) -> list[XPathMatch]:
        """The nodes `expression` selects inside `context` (the document when None), in
        document order. Raises BadInput when the result is not a node-set."""
        start = self.root.getroottree() if context is None else self.to_lxml[context.mem_id]
        try:
            result = compiled_xpath(expression)(start)
        except etree.XPathError as error:
            raise BadInput(
                f"invalid XPath {expression!r}: {error}", reason="bad_selector"
            ) from error
        if not isinstance(result, list):
            raise BadInput(
                f"invalid XPath {expression!r}: it must select nodes, not compute a "
                f"{type(result).__name__}",
                reason="bad_selector",
            )
        matches: list[XPathMatch] = []
        for found in result:
            matches.append(self._match(found))
            if first:
                break
        return matches

    def _match(self, found: Any) -> XPathMatch:
        if isinstance(found, etree._Comment):
            return (self.comments.get(found, found.text or ""), False)
        if isinstance(found, etree._Element):
            return self.to_lexbor.get(found)
        if isinstance(found, str):
            attribute = bool(getattr(found, "is_attribute", False))
            return (str(found), attribute)
        return None


def xml_safe(text: str) -> str:
    return _NOT_XML.sub("\ufffd", text)
