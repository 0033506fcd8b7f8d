"""`scrapeq migrate`, `enqueue` and `jobs` as the people running scrapeq use them."""

from __future__ import annotations

import argparse
from datetime import timedelta

import psycopg
import pytest
from scrapeq_queue import commands

from scrapeq.local.processes import free_port

pytestmark = pytest.mark.postgres


def run(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="scrapeq")
    commands.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    result: int = args.handler(args)
    return result


def test_migrate_then_enqueue_then_jobs_shows_the_backlog(
    empty_database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    url = ("--database-url", empty_database_url)
    assert run("migrate", *url) == 0
    assert "applied 0001_initial" in capsys.readouterr().out
    assert run("migrate", *url) == 0
    assert "nothing to do" in capsys.readouterr().out

    assert (
        run(
            "enqueue",
            *url,
            "https://e.test/1",
            "https://e.test/2",
            "--queue",
            "shop",
            "--priority",
            "3",
            "--payload",
            '{"render": false}',
        )
        == 0
    )
    assert "enqueued 2 job(s) on queue 'shop'" in capsys.readouterr().err

    assert run("jobs", *url) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == [
        "QUEUE",
        "DUE",
        "DELAYED",
        "PROCESSING",
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "OLDEST",
        "DUE",
    ]
    assert table[1].split()[:7] == ["shop", "2", "0", "0", "0", "0", "0"]


def test_enqueue_rejects_a_bad_payload_before_touching_the_database(
    capsys: pytest.CaptureFixture[str],
) -> None:
    unreachable = f"postgresql://x@127.0.0.1:{free_port()}/x"
    assert run("enqueue", "--database-url", unreachable, "https://e.test", "--payload", "{") == 1
    assert "--payload is not valid JSON" in capsys.readouterr().err
    assert (
        run("enqueue", "--database-url", unreachable, "https://e.test", "--payload", '{"x": 1}')
        == 1
    )
    assert "unknown payload option 'x'" in capsys.readouterr().err


def test_an_unreachable_database_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    port = free_port()
    assert run("jobs", "--database-url", f"postgresql://x@127.0.0.1:{port}/x") == 2
    assert f"cannot connect to 127.0.0.1:{port}/x" in capsys.readouterr().err


def test_a_schema_behind_the_code_is_a_clear_error(
    empty_database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run("jobs", "--database-url", empty_database_url) == 3
    assert "run `scrapeq migrate`" in capsys.readouterr().err


def test_no_database_given_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("DATABASE_URL", raising=False)
    assert run("jobs", "--database-url", "") == 1
    assert "pass --database-url or set DATABASE_URL" in capsys.readouterr().err


def test_prune_deletes_old_finished_jobs_and_keeps_the_rest(
    empty_database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    url = ("--database-url", empty_database_url)
    assert run("migrate", *url) == 0
    assert (
        run(
            "enqueue",
            *url,
            "https://e.test/old",
            "https://e.test/classic",
            "https://e.test/pending",
        )
        == 0
    )
    with psycopg.connect(empty_database_url, autocommit=True) as connection:
        connection.execute(
            "UPDATE scraping_jobs SET status = 'completed', finished_at = now() - interval '8 days'"
            " WHERE url_to_scrape IN ('https://e.test/old', 'https://e.test/classic')"
        )
        # The old row is a ScrapeJob's; the classic one, without an owner, is a SQL producer's.
        connection.execute(
            "UPDATE scraping_jobs SET owner_uid = 'uid', owner_namespace = 'default',"
            " owner_name = 'shop' WHERE url_to_scrape = 'https://e.test/old'"
        )
    capsys.readouterr()

    assert run("prune", *url) == 0

    assert "deleted 1 finished job(s)" in capsys.readouterr().out
    with psycopg.connect(empty_database_url) as connection:
        remaining = connection.execute(
            "SELECT url_to_scrape FROM scraping_jobs ORDER BY id"
        ).fetchall()
    assert remaining == [("https://e.test/classic",), ("https://e.test/pending",)]


def test_enqueue_gives_rows_a_retention_and_the_finished_signal_when_asked(
    empty_database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    url = ("--database-url", empty_database_url)
    assert run("migrate", *url) == 0
    assert run("enqueue", *url, "https://e.test/plain") == 0
    assert (
        run("enqueue", *url, "https://e.test/asked", "--retain-days", "2", "--notify-finished") == 0
    )
    with pytest.raises(SystemExit):
        run("enqueue", *url, "https://e.test/never", "--retain-days", "-1")
    assert "expected 0 or more days" in capsys.readouterr().err

    with psycopg.connect(empty_database_url) as connection:
        rows = connection.execute(
            "SELECT url_to_scrape, retain_for, notify_finished FROM scraping_jobs ORDER BY id"
        ).fetchall()
    assert rows == [
        ("https://e.test/plain", None, False),
        ("https://e.test/asked", timedelta(days=2), True),
    ]
