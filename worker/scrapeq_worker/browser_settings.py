"""How the browser engine runs Chromium: `BrowserSettings`, read by the pool (browser.py), the
tab pool (tab_pool.py) and the process side (chromium_process.py) alike.

It sits below all three so that none of them imports another for its settings. The command
line's options (settings.py) are mapped onto it by the worker.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from .egress_proxy import UpstreamProxy
from .extraction import DEFAULT_MAX_LINKS
from .user_agent import DEFAULT_USER_AGENT

# Switches that would open another way out or change where names resolve; refused in
# extra_args (a clear error beats a silent hole).
FORBIDDEN_EXTRA_ARGS: Final = (
    "--proxy",
    "--no-proxy-server",
    "--host-resolver-rules",
    "--host-rules",
    "--webrtc-ip-handling-policy",
    "--force-webrtc-ip-handling-policy",
    "--enable-quic",
    "--origin-to-force-quic-on",
    # The renderer's JavaScript heap limit is `js_heap_mb`, not a free-form switch.
    "--js-flags",
)


@dataclass(frozen=True)
class BrowserSettings:
    """How the pool runs Chromium. The 15 s timeouts follow Crawlee's pool (docs/worker.md)."""

    executable: str | None = None
    # Chromium leaks a little with every page; a fresh browser now and then keeps it bounded
    # (see WorkerSettings.browser_recycle_pages for the cost/benefit of the default).
    recycle_after_pages: int = 500
    # Sum of the proportional memory (PSS) of every process of the browser.
    max_memory_mb: int = 1500
    launch_timeout_seconds: float = 15.0
    # New tab, close tab, health probe: these take milliseconds when the browser is healthy.
    operation_timeout_seconds: float = 15.0
    # A fresh context for every job (~370 ms and ~51 MB per page: docs/worker.md, "Measured
    # browser costs") instead of the owner's warm one.
    isolate_pages: bool = False
    # Jobs one tab serves before it is closed. A new tab costs a renderer process (~200 ms of
    # wall time, ~360 ms CPU: docs/worker.md); navigating a warm tab costs ~80 ms.
    # A tab is only reused after a clean success, and never with isolate_pages. 1 = a new tab
    # for every job.
    tab_reuse_pages: int = 100
    # Everything one page downloads (document plus sub-resources).
    max_response_bytes: int = 10 * 1024 * 1024
    max_links: int = DEFAULT_MAX_LINKS
    health_interval_seconds: float = 10.0
    # Chromium's own sandbox cannot run as root and needs user namespaces otherwise.
    no_sandbox: bool = False
    # Sent by every tab (and navigator.userAgent) unless a job's headers set User-Agent; the
    # same string as the plain-HTTP engine's (user_agent.py).
    user_agent: str = DEFAULT_USER_AGENT
    extra_args: tuple[str, ...] = ()
    # Browser contexts kept warm (with their tab) for later jobs of the same owner.
    idle_contexts: int = 16
    # The largest stored result (JSON bytes): the page script cuts every value to it before
    # anything is copied out of the page (the exact cut is the result cap's, cap_result).
    max_result_bytes: int = 256 * 1024
    # What one renderer process (a page, its frames and workers) may use (PSS); past it the
    # renderer is killed and its job fails `page_memory`. The memory watch looks every
    # `memory_watch_seconds`; the browser as a whole is held under `max_memory_mb` the same
    # way (its largest renderer goes first). Figures: docs/worker.md, "Containment".
    renderer_max_memory_mb: int = 384
    memory_watch_seconds: float = 0.25
    # The JavaScript heap (V8's old space) of one renderer; past it V8 stops the renderer at
    # once (a watch that samples could be outrun by a fast allocation).
    js_heap_mb: int = 512
    # An HTTP proxy the egress proxy chains to after its checks (the pool's, if any).
    upstream_proxy: UpstreamProxy | None = None

    def __post_init__(self) -> None:
        for arg in self.extra_args:
            if arg.split("=", 1)[0].startswith(FORBIDDEN_EXTRA_ARGS):
                raise ValueError(
                    f"Chromium argument {arg!r} is not allowed: the worker's egress proxy must "
                    "stay the browser's only way out, and the renderer's limits are the pool's"
                )


__all__ = ["FORBIDDEN_EXTRA_ARGS", "BrowserSettings"]


# What a kept screenshot or PDF may be (payload keep; docs/worker.md, "Artifacts"). A
# screenshot is the whole page down to 16,384 CSS pixels (Chromium's largest texture) and at
# most 2,048 wide (a page wider than any screen is cut on the right, so one capture's raw
# bitmap stays under 128 MiB), at most 10 MiB of PNG; a PDF at most 20 MiB. A capture over its
# cap is left out and named under the result's `truncated` (`artifacts.screenshot`).
SCREENSHOT_MAX_HEIGHT_PX: Final = 16_384
SCREENSHOT_MAX_WIDTH_PX: Final = 2_048
CAPTURE_MAX_BYTES: Final = {"screenshot": 10 * 1024 * 1024, "pdf": 20 * 1024 * 1024}
