"""When the operator holds a ScrapeJob back for its parser (docs/parsers.md, "Publication")."""

from __future__ import annotations

import pytest
from scrapeq_operator.parser_coverage import MAX_LISTED_PARSERS, named_parser, unknown_parser
from scrapeq_queue import QueueParsers

pytestmark = pytest.mark.timeout(10)


def test_only_a_registered_parsers_name_counts_as_naming_a_parser() -> None:
    assert named_parser({"parser": "shop.product"}) == "shop.product"
    assert named_parser({"parser": "default"}) is None
    assert named_parser({"render": False}) is None
    assert named_parser(None) is None


def test_a_parser_some_worker_of_the_queue_published_is_known() -> None:
    published = QueueParsers(2, frozenset({"shop.product", "shop.listing"}))
    assert unknown_parser("shop.product", "shop", published) is None


def test_a_queue_no_worker_ever_published_for_holds_nothing_back() -> None:
    assert unknown_parser("shop.product", "shop", QueueParsers(0, frozenset())) is None


def test_a_parser_no_publishing_worker_has_is_unknown_and_names_what_they_have() -> None:
    names = frozenset(f"p{number:02}" for number in range(MAX_LISTED_PARSERS + 2))

    error = unknown_parser("shop.product", "shop", QueueParsers(3, names))

    assert error is not None
    assert (error.reason, error.permanent) == ("UnknownParser", False)
    assert "no worker of queue shop has parser 'shop.product'" in error.message
    assert "p00, p01" in error.message
    assert "and 2 more" in error.message


def test_workers_that_published_no_parsers_make_every_named_parser_unknown() -> None:
    error = unknown_parser("shop.product", "shop", QueueParsers(1, frozenset()))
    assert error is not None
    assert "they have: none" in error.message
