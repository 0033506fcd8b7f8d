"""The operator's own API calls against an API server that accepts connections and never
answers (a connection that died without a word, a stalled server): each call fails within its
bound instead of holding one of the operator's API threads, and the handler waiting on it,
for good."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import kubernetes
import pytest
import urllib3
from scrapeq_operator import cluster as cluster_module
from scrapeq_operator.cluster import Cluster

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A loopback TCP server that takes every connection and reads what comes, never a word
    back."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stopping = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stopping.is_set():
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            held.append(connection)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stopping.set()
        thread.join(5)
        for connection in held:
            connection.close()
        listener.close()


async def test_a_call_the_api_server_never_answers_fails_within_its_bound(
    silent_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cluster_module, "API_REQUEST_TIMEOUT", (1.0, 1.0))
    configuration = kubernetes.client.Configuration()
    configuration.host = silent_server
    cluster = Cluster(kubernetes.client.ApiClient(configuration))
    try:
        started = time.monotonic()
        # A read (retried by the client on fresh connections) and a write (never retried).
        with pytest.raises(urllib3.exceptions.HTTPError, match=r"(?i)timed out"):
            await cluster.read_scrapejob("shop", "prices")
        read_seconds = time.monotonic() - started
        started = time.monotonic()
        with pytest.raises(urllib3.exceptions.HTTPError, match=r"(?i)timed out"):
            await cluster.patch_scrapejob_status(
                "shop", "prices", uid="u", resource_version=None, status={"phase": "Running"}
            )
        write_seconds = time.monotonic() - started
    finally:
        cluster.close()

    # One second per attempt: the read's four attempts, the write's one.
    assert read_seconds < 10, read_seconds
    assert write_seconds < 5, write_seconds
