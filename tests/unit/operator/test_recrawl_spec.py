"""spec.recrawl and a schedule's runs become the rows' crawl memory options."""

from __future__ import annotations

import pytest
from scrapeq_operator.errors import JobNotRunnableError
from scrapeq_operator.job_spec import crawl_payload, recrawl_after_seconds

RUN_META = {
    "name": "prices-1764806400",
    "labels": {"scrapeq.io/schedule": "prices"},
    "ownerReferences": [
        {"kind": "ScrapeJob", "name": "prices", "uid": "u-1", "controller": True},
    ],
}


def test_a_schedules_runs_share_a_crawl_key_made_of_the_schedules_namespace_name_and_uid() -> None:
    assert crawl_payload({}, RUN_META, "shop") == {"crawlKey": "schedule/shop/prices/u-1"}


def test_a_job_that_is_neither_a_run_nor_names_a_key_has_no_crawl() -> None:
    assert crawl_payload({"urls": ["https://a.example/"]}, {"name": "once"}, "shop") == {}


def test_a_named_key_is_namespaced_and_wins_over_the_schedule() -> None:
    spec = {"recrawl": {"key": "catalogue", "after": "1d12h"}}
    assert crawl_payload(spec, RUN_META, "shop") == {
        "crawlKey": "shop/catalogue",
        "recrawlAfterSeconds": 129_600.0,
    }
    assert crawl_payload(spec, {}, "other")["crawlKey"] == "other/catalogue"


def test_recrawl_after_needs_a_crawl_and_a_duration() -> None:
    with pytest.raises(JobNotRunnableError, match="needs a crawl"):
        crawl_payload({"recrawl": {"after": "6h"}}, {"name": "once"}, "shop")
    with pytest.raises(JobNotRunnableError, match="duration such as 30m"):
        recrawl_after_seconds("six hours")
    with pytest.raises(JobNotRunnableError, match="duration such as 30m"):
        recrawl_after_seconds("")
    assert recrawl_after_seconds("30m") == 1800.0
    assert recrawl_after_seconds("90s") == 90.0
