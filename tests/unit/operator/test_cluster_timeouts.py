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
from kubernetes.client.rest import ApiException
from scrapeq_operator import cluster as cluster_module
from scrapeq_operator.cluster import Cluster, api_unanswered

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
        # A read (retried by the client on fresh connections) and a write (never retried),
        # each an ApiException of status 0 that says what happened.
        with pytest.raises(ApiException, match=r"(?i)no answer from the API server.*timed out"):
            await cluster.read_scrapejob("shop", "prices")
        read_seconds = time.monotonic() - started
        started = time.monotonic()
        with pytest.raises(ApiException, match=r"(?i)timed out") as unanswered:
            await cluster.patch_scrapejob_status(
                "shop", "prices", uid="u", resource_version=None, status={"phase": "Running"}
            )
        write_seconds = time.monotonic() - started
    finally:
        cluster.close()

    assert unanswered.value.status == 0
    assert api_unanswered(unanswered.value)

    # One second per attempt: the read's four attempts, the write's one.
    assert read_seconds < 10, read_seconds
    assert write_seconds < 5, write_seconds


async def test_a_call_to_a_port_nobody_listens_on_is_an_unanswered_api_exception() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    listener.close()
    configuration = kubernetes.client.Configuration()
    configuration.host = f"http://127.0.0.1:{port}"
    cluster = Cluster(kubernetes.client.ApiClient(configuration))
    try:
        with pytest.raises(ApiException, match="no answer from the API server") as refused:
            await cluster.list_queue_policies()
    finally:
        cluster.close()

    assert refused.value.status == 0
    assert api_unanswered(refused.value)


@pytest.mark.parametrize(
    ("status", "unanswered"),
    [
        (0, True),
        (429, True),
        (500, True),
        (503, True),
        (403, False),
        (404, False),
        (409, False),
        (None, False),
    ],
)
def test_which_api_errors_say_try_again_later(status: int | None, unanswered: bool) -> None:
    assert api_unanswered(ApiException(status=status)) is unanswered
