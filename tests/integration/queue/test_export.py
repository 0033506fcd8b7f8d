"""Export on a real PostgreSQL: a ScrapeJob's completed pages leave as JSON Lines or CSV."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
import scrapeq_queue as queue
from scrapeq_queue import kubectl_context
from scrapeq_queue.output_files import AtomicFile

from tests.integration.queue.test_commands import run

pytestmark = pytest.mark.postgres

Connection = psycopg.AsyncConnection[Any]

LAPTOPS = queue.Owner(uid="uid-laptops", namespace="shop", name="laptops")
PHONES = queue.Owner(uid="uid-phones", namespace="shop", name="phones")

# Peak RSS allowed for exporting 10,000 results of ~10 KB each (~100 MB of JSON). The CLI
# alone peaks near 50 MB (Python, psycopg, the scrapeq command tree); holding the whole export
# in memory would add at least the 100 MB of text on top, so staying under 150 MB is only
# possible when rows stream through in bounded batches.
PEAK_RSS_LIMIT_MB = 150
BIG_EXPORT_ROWS = 10_000
BIG_FIELD_BYTES = 10_000


@pytest.fixture(autouse=True)
def current_namespace_is_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No kubeconfig and no pod: a NAME alone means `default`, whatever machine runs this."""
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setattr(kubectl_context, "SERVICE_ACCOUNT_NAMESPACE", tmp_path / "no-pod")


async def cli(*argv: str) -> int:
    """Run `scrapeq ARGV` the way a shell would: in a thread with no event loop of its own."""
    return await asyncio.to_thread(run, *argv)


async def completed_row(
    connection: Connection,
    url: str,
    result: dict[str, Any],
    *,
    owner: queue.Owner | None = LAPTOPS,
    queue_name: str = "default",
) -> datetime:
    """Enqueue, claim and complete one URL with `result`; return its finished_at."""
    (job_id,) = await queue.enqueue_many(connection, [url], queue=queue_name, owner=owner)
    (job,) = await queue.claim_jobs(
        connection, worker_id="w", queues=[queue_name], limit=1, lease_seconds=30
    )
    assert job.id == job_id
    assert await queue.complete_job(
        connection, job.id, job.attempt, result=result, duration_seconds=0.1
    )
    cursor = await connection.execute(
        "SELECT finished_at FROM scraping_jobs WHERE id = %s", (job_id,)
    )
    row = await cursor.fetchone()
    assert row is not None
    finished_at: datetime = row[0]
    return finished_at


async def laptop_pages(connection: Connection) -> list[str]:
    """Three completed pages of shop/laptops in queue default and one in queue other, plus rows
    that are never exported (another owner's, a failed one); returns their finished_at."""
    first = await completed_row(
        connection,
        "https://e.test/p/1",
        {"status": 200, "fields": {"title": "Laptop A", "price": "999.00"}},
    )
    second = await completed_row(
        connection,
        "https://e.test/p/2",
        {"status": 200, "fields": {"title": 'Laptop "B", 14"', "tags": ["new", "sale"]}},
    )
    third = await completed_row(
        connection, "https://e.test/p/3", {"title": "flat result", "price": None}
    )
    await completed_row(connection, "https://e.test/phone", {"fields": {"x": 1}}, owner=PHONES)
    elsewhere = await completed_row(
        connection, "https://e.test/p/other-queue", {"fields": {}}, queue_name="other"
    )
    (failing,) = await queue.enqueue_many(connection, ["https://e.test/p/broken"], owner=LAPTOPS)
    (job,) = await queue.claim_jobs(
        connection, worker_id="w", queues=["default"], limit=1, lease_seconds=30
    )
    assert job.id == failing
    await queue.fail_job(
        connection, job.id, job.attempt, error="gone", reason="http_404", duration_seconds=0.1
    )
    return [moment.isoformat() for moment in (first, second, third, elsewhere)]


async def test_export_jsonl_writes_one_object_per_completed_page_of_the_owner(
    database_url: str, async_connection: Connection, capsys: pytest.CaptureFixture[str]
) -> None:
    first, second, third, elsewhere = await laptop_pages(async_connection)

    assert (
        await cli(
            "export", "--database-url", database_url, "--owner", "shop/laptops", "--format", "jsonl"
        )
        == 0
    )

    captured = capsys.readouterr()
    assert captured.out == (
        f'{{"url": "https://e.test/p/1", "status": "completed", "finished_at": "{first}",'
        ' "fields": {"price": "999.00", "title": "Laptop A"}}\n'
        f'{{"url": "https://e.test/p/2", "status": "completed", "finished_at": "{second}",'
        ' "fields": {"tags": ["new", "sale"], "title": "Laptop \\"B\\", 14\\""}}\n'
        f'{{"url": "https://e.test/p/3", "status": "completed", "finished_at": "{third}",'
        ' "fields": {"price": null, "title": "flat result"}}\n'
        f'{{"url": "https://e.test/p/other-queue", "status": "completed",'
        f' "finished_at": "{elsewhere}", "fields": {{}}}}\n'
    )
    assert "exported 4 result(s) of shop/laptops" in captured.err


async def test_export_csv_has_the_fixed_columns_then_every_field_seen_in_stored_order(
    database_url: str, async_connection: Connection, tmp_path: Path
) -> None:
    first, second, third, _ = await laptop_pages(async_connection)
    output = tmp_path / "laptops.csv"

    assert (
        await cli(
            "export",
            "--database-url",
            database_url,
            "--owner",
            "shop/laptops",
            "--format",
            "csv",
            "--output",
            str(output),
            "--queue",
            "default",
        )
        == 0
    )

    assert output.read_text(encoding="utf-8") == (
        "url,status,finished_at,price,title,tags\n"
        f"https://e.test/p/1,completed,{first},999.00,Laptop A,\n"
        f'https://e.test/p/2,completed,{second},,"Laptop ""B"", 14""","[""new"", ""sale""]"\n'
        f"https://e.test/p/3,completed,{third},,flat result,\n"
    )


async def test_export_of_another_queue_or_an_owner_without_results_is_empty(
    database_url: str, async_connection: Connection, tmp_path: Path
) -> None:
    await laptop_pages(async_connection)
    rows = [
        row.url
        async for row in queue.export_results(
            async_connection, owner_namespace="shop", owner_name="laptops", queue="other"
        )
    ]
    assert rows == ["https://e.test/p/other-queue"]
    output = tmp_path / "none.csv"
    assert (
        await cli(
            "export",
            "--database-url",
            database_url,
            "--owner",
            "shop/nobody",
            "--format",
            "csv",
            "--output",
            str(output),
        )
        == 0
    )
    assert output.read_text(encoding="utf-8") == "url,status,finished_at\n"


def test_export_rejects_an_owner_that_is_not_namespace_slash_name(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        run(
            "export",
            "--database-url",
            "postgresql://x@127.0.0.1:1/x",
            "--owner",
            "laptops",
            "--format",
            "jsonl",
        )
    assert "expected NAMESPACE/NAME" in capsys.readouterr().err


# Runs a command and prints the peak RSS (KiB) of it. A process started straight from this test
# process would report this process's size: Linux carries a process's peak RSS over its exec,
# and at fork (or vfork) the child's peak is the parent's. The command is started by this small
# interpreter instead, so its peak is its own.
PEAK_RSS_OF = (
    "import resource, subprocess, sys; "
    "code = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode; "
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, code)"
)


def export_peak_rss_mb(database_url: str, owner: str, output: Path) -> tuple[float, int]:
    """Run `python -m scrapeq export` as a child process; return its peak RSS (MB), exit code."""
    measured = subprocess.run(
        [
            sys.executable,
            "-c",
            PEAK_RSS_OF,
            sys.executable,
            "-m",
            "scrapeq",
            "export",
            "--database-url",
            database_url,
            "--owner",
            owner,
            "--format",
            "jsonl",
            "--output",
            str(output),
        ],
        capture_output=True,
        text=True,
        timeout=110,
        check=True,
    )
    peak_kib, code = measured.stdout.split()
    return int(peak_kib) / 1024, int(code)  # ru_maxrss is in KiB on Linux


def test_exporting_ten_thousand_large_results_stays_in_bounded_memory(
    database_url: str, tmp_path: Path
) -> None:
    with psycopg.connect(database_url, autocommit=True) as connection:
        connection.execute(
            "INSERT INTO scraping_jobs (url_to_scrape, parser_type, status, finished_at, result,"
            " owner_uid, owner_namespace, owner_name)"
            " SELECT 'https://e.test/p/' || i, 'product', 'completed', now(),"
            " jsonb_build_object('fields', jsonb_build_object('title', 'Product ' || i,"
            " 'description', repeat(md5(i::text), %(repeats)s))),"
            " 'uid-big', 'shop', 'big'"
            " FROM generate_series(1, %(rows)s) AS i",
            {"rows": BIG_EXPORT_ROWS, "repeats": BIG_FIELD_BYTES // 32},
        )
    empty_mb, empty_code = export_peak_rss_mb(database_url, "shop/nobody", tmp_path / "e.jsonl")
    output = tmp_path / "big.jsonl"

    peak_mb, code = export_peak_rss_mb(database_url, "shop/big", output)

    assert (empty_code, code) == (0, 0)
    size_mb = output.stat().st_size / 1024 / 1024
    with output.open(encoding="utf-8") as lines:
        count = 0
        for count, line in enumerate(lines, start=1):
            if count == BIG_EXPORT_ROWS:
                assert json.loads(line)["fields"]["title"] == f"Product {BIG_EXPORT_ROWS}"
    figures = (
        f"export of {count} results ({size_mb:.0f} MB of JSON Lines): peak RSS {peak_mb:.1f} MB"
        f" (an empty export peaks at {empty_mb:.1f} MB), limit {PEAK_RSS_LIMIT_MB} MB"
    )
    assert count == BIG_EXPORT_ROWS, figures
    assert size_mb > 90, figures
    assert peak_mb < PEAK_RSS_LIMIT_MB, figures
    print(figures)


def file_names(directory: Path) -> list[str]:
    return sorted(path.name for path in directory.iterdir())


async def test_export_by_scrapejob_name_takes_the_most_recent_scrapejob_of_that_name(
    database_url: str, async_connection: Connection, capsys: pytest.CaptureFixture[str]
) -> None:
    # shop/laptops was deleted and created again: two uids, the old rows still in the table.
    await completed_row(async_connection, "https://e.test/old", {"fields": {"v": 1}})
    await async_connection.execute(
        "UPDATE scraping_jobs SET created_at = now() - interval '1 day' WHERE owner_uid = %s",
        (LAPTOPS.uid,),
    )
    again = queue.Owner(uid="uid-laptops-again", namespace="shop", name="laptops")
    await completed_row(async_connection, "https://e.test/new", {"fields": {"v": 2}}, owner=again)
    url = ("--database-url", database_url)

    for target in (
        ("laptops", "-n", "shop"),
        ("shop/laptops",),
        ("--namespace", "shop", "laptops"),
    ):
        assert await cli("export", *url, *target, "--format", "jsonl") == 0
        captured = capsys.readouterr()
        assert [json.loads(line)["url"] for line in captured.out.splitlines()] == [
            "https://e.test/new"
        ]
        assert "shop/laptops names 2 ScrapeJobs" in captured.err
        assert "the most recent one, uid uid-laptops-again" in captured.err
        assert "older uids: uid-laptops" in captured.err

    # --owner keeps its meaning: every ScrapeJob that ever had the name.
    assert await cli("export", *url, "--owner", "shop/laptops", "--format", "jsonl") == 0
    assert len(capsys.readouterr().out.splitlines()) == 2


async def test_a_scrapejob_name_without_a_namespace_is_looked_up_in_the_current_namespace(
    database_url: str, async_connection: Connection, capsys: pytest.CaptureFixture[str]
) -> None:
    owner = queue.Owner(uid="uid-default-laptops", namespace="default", name="laptops")
    await completed_row(async_connection, "https://e.test/d", {"fields": {"v": 1}}, owner=owner)
    await completed_row(async_connection, "https://e.test/shop", {"fields": {"v": 2}})

    assert await cli("export", "--database-url", database_url, "laptops", "--format", "csv") == 0

    captured = capsys.readouterr()
    assert captured.out.splitlines()[1].startswith("https://e.test/d,completed,")
    assert len(captured.out.splitlines()) == 2
    assert "names 2" not in captured.err
    assert "exported 1 result(s) of default/laptops" in captured.err


async def test_the_current_namespace_is_the_kubeconfig_context_s(
    database_url: str,
    async_connection: Connection,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    owner = queue.Owner(uid="uid-default-laptops", namespace="default", name="laptops")
    await completed_row(async_connection, "https://e.test/d", {"fields": {"v": 1}}, owner=owner)
    await completed_row(async_connection, "https://e.test/shop", {"fields": {"v": 2}})
    config = tmp_path / "kubeconfig"
    config.write_text(
        json.dumps(
            {
                "current-context": "shop",
                "contexts": [{"name": "shop", "context": {"cluster": "c", "namespace": "shop"}}],
            }
        )
    )
    monkeypatch.setenv("KUBECONFIG", str(config))

    assert await cli("export", "--database-url", database_url, "laptops", "--output", "-") == 0

    captured = capsys.readouterr()
    assert [json.loads(line)["url"] for line in captured.out.splitlines()] == [
        "https://e.test/shop"
    ]
    assert "exported 1 result(s) of shop/laptops" in captured.err


async def test_a_name_only_in_another_namespace_is_not_found_and_the_error_says_where_it_is(
    database_url: str, async_connection: Connection, capsys: pytest.CaptureFixture[str]
) -> None:
    await completed_row(async_connection, "https://e.test/shop", {"fields": {"v": 2}})

    assert await cli("export", "--database-url", database_url, "laptops") == 1

    captured = capsys.readouterr()
    assert captured.out == ""
    assert "no rows of a ScrapeJob default/laptops" in captured.err
    assert "ScrapeJobs named laptops have rows in namespaces shop" in captured.err
    assert "--all-namespaces" in captured.err


async def test_all_namespaces_takes_the_only_namespace_that_has_the_name(
    database_url: str, async_connection: Connection, capsys: pytest.CaptureFixture[str]
) -> None:
    await completed_row(async_connection, "https://e.test/shop", {"fields": {"v": 2}})

    # No --format: JSON Lines; `--output -` is stdout.
    arguments = ("laptops", "--all-namespaces", "--output", "-")
    assert await cli("export", "--database-url", database_url, *arguments) == 0

    captured = capsys.readouterr()
    (line,) = captured.out.splitlines()
    assert json.loads(line)["url"] == "https://e.test/shop"
    assert "exported 1 result(s) of shop/laptops" in captured.err


async def test_all_namespaces_refuses_a_name_found_in_several_namespaces(
    database_url: str, async_connection: Connection, capsys: pytest.CaptureFixture[str]
) -> None:
    news = queue.Owner(uid="uid-news-laptops", namespace="news", name="laptops")
    await completed_row(async_connection, "https://e.test/news", {"fields": {"v": 1}}, owner=news)
    await completed_row(async_connection, "https://e.test/shop", {"fields": {"v": 2}})

    assert await cli("export", "--database-url", database_url, "laptops", "-A") == 1

    captured = capsys.readouterr()
    assert captured.out == ""
    assert "ScrapeJobs named laptops have rows in namespaces news, shop" in captured.err


async def test_exporting_a_scrapejob_with_no_rows_is_an_error_and_writes_no_file(
    database_url: str,
    async_connection: Connection,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    await laptop_pages(async_connection)
    output = tmp_path / "out.jsonl"

    code = await cli(
        "export",
        "--database-url",
        database_url,
        "shop/desktops",
        "--format",
        "jsonl",
        "--output",
        str(output),
    )

    assert code == 1
    assert "no rows of a ScrapeJob shop/desktops" in capsys.readouterr().err
    assert file_names(tmp_path) == []


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (("laptops", "--owner", "shop/laptops"), "either SCRAPEJOB or --owner"),
        ((), "name the ScrapeJob to export"),
        (("shop/laptops", "-n", "news"), "is in namespace shop, not news"),
        (("a/b/c",), "expected NAME or NAMESPACE/NAME"),
        (("--owner", "shop/laptops", "-n", "shop"), "--owner already names the namespace"),
        (("--owner", "shop/laptops", "-A"), "--owner already names the namespace"),
        (("shop/laptops", "--all-namespaces"), "--all-namespaces goes with NAME alone"),
        (("laptops", "-n", "shop", "-A"), "--all-namespaces goes with NAME alone"),
    ],
)
def test_export_refuses_an_unclear_target(
    arguments: tuple[str, ...], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = run(
        "export", "--database-url", "postgresql://x@127.0.0.1:1/x", *arguments, "--format", "csv"
    )

    assert code == 1
    assert message in capsys.readouterr().err


async def test_an_export_that_fails_leaves_the_previous_file_untouched_and_no_partial_file(
    database_url: str,
    async_connection: Connection,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    await laptop_pages(async_connection)
    output = tmp_path / "laptops.jsonl"
    output.write_text("yesterday's export\n", encoding="utf-8")

    # Nothing listens on port 1: the database is unreachable (exit code 2).
    unreachable = "postgresql://scrapeq@127.0.0.1:1/scrapeq?connect_timeout=2"
    code = await cli(
        "export",
        "--database-url",
        unreachable,
        "shop/laptops",
        "--format",
        "jsonl",
        "--output",
        str(output),
    )

    assert code == 2
    assert output.read_text(encoding="utf-8") == "yesterday's export\n"
    assert file_names(tmp_path) == ["laptops.jsonl"]
    capsys.readouterr()

    assert (
        await cli(
            "export",
            "--database-url",
            database_url,
            "shop/laptops",
            "--format",
            "jsonl",
            "--output",
            str(output),
        )
        == 0
    )
    assert len(output.read_text(encoding="utf-8").splitlines()) == 4
    assert file_names(tmp_path) == ["laptops.jsonl"]


def test_an_export_interrupted_while_writing_removes_its_partial_file(tmp_path: Path) -> None:
    output = tmp_path / "laptops.csv"

    class Interrupted(Exception):
        pass

    def write_then_stop() -> None:
        # Stopped mid-write, after rows already reached the temporary file.
        with AtomicFile(output) as file:
            file.write("url,status\n")
            file.flush()
            assert len(file_names(tmp_path)) == 1
            raise Interrupted

    with pytest.raises(Interrupted):
        write_then_stop()

    assert file_names(tmp_path) == []
