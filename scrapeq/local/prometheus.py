"""A real Prometheus server on loopback that scrapes chosen targets, and a PromQL client.

Targets live in a file_sd file that Prometheus watches, so tests and the demo can add the
operator and workers after the server has started.
"""

from __future__ import annotations

import json
import shutil
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scrapeq.local.processes import LocalPartError, LoggedPart, free_port, wait_until

# Fast enough that a test sees a fresh sample within a couple of seconds.
SCRAPE_INTERVAL = "1s"


def find_prometheus() -> Path:
    binary = shutil.which("prometheus") or "/usr/bin/prometheus"
    if not Path(binary).exists():
        raise LocalPartError(
            "the prometheus binary was not found; install it with `apt-get install prometheus`"
        )
    return Path(binary)


@dataclass
class LocalPrometheus(LoggedPart):
    """One Prometheus server scraping `targets` (host:port strings) every second."""

    log_name = "prometheus"
    targets: Sequence[str] = ()
    rule_files: Sequence[Path] = ()
    port: int = 0
    _targets: list[str] = field(default_factory=list, init=False)
    _labels: dict[str, str] = field(default_factory=dict, init=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        binary = find_prometheus()
        base_dir = self._working_dir()
        self.port = self.port or free_port()
        targets_file = base_dir / "targets.json"
        self._targets = list(self.targets)
        self._write_targets()
        config = {
            "global": {"scrape_interval": SCRAPE_INTERVAL, "evaluation_interval": SCRAPE_INTERVAL},
            "rule_files": [str(path) for path in self.rule_files],
            "scrape_configs": [
                {
                    "job_name": "scrapeq",
                    "file_sd_configs": [{"files": [str(targets_file)], "refresh_interval": "1s"}],
                }
            ],
        }
        config_file = base_dir / "prometheus.yml"
        config_file.write_text(json.dumps(config, indent=2))
        self._spawn(
            [
                str(binary),
                f"--config.file={config_file}",
                f"--storage.tsdb.path={base_dir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--web.enable-lifecycle",
                "--log.level=warn",
            ]
        )
        wait_until(
            lambda: _get_ok(f"{self.url}/-/ready"),
            timeout=60,
            what="Prometheus to become ready",
            failed=self._exit_reason,
        )

    def set_targets(self, targets: Sequence[str], *, labels: dict[str, str] | None = None) -> None:
        """Replace the scraped targets; Prometheus picks the change up within a second."""
        self._targets = list(targets)
        self._labels = dict(labels or {})
        self._write_targets()

    def _write_targets(self) -> None:
        assert self.base_dir is not None
        groups = [{"targets": self._targets, "labels": self._labels}]
        # Write then rename, so Prometheus never reads a half-written file.
        partial = self.base_dir / "targets.json.partial"
        partial.write_text(json.dumps(groups))
        partial.replace(self.base_dir / "targets.json")

    def query(self, promql: str) -> list[dict[str, Any]]:
        """Run an instant query; return the result vector (raises on a PromQL error)."""
        url = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                body = json.load(response)
        except urllib.error.HTTPError as error:
            detail = error.read().decode(errors="replace")
            raise LocalPartError(f"PromQL query {promql!r} failed: {detail}") from error
        if body.get("status") != "success":
            raise LocalPartError(f"PromQL query {promql!r} failed: {body}")
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def wait_for_sample(self, promql: str, *, timeout: float = 30.0) -> list[dict[str, Any]]:
        """Poll `promql` until it returns at least one sample; return the samples."""
        deadline = time.monotonic() + timeout
        while True:
            samples = self.query(promql)
            if samples:
                return samples
            if time.monotonic() >= deadline:
                raise LocalPartError(f"no sample for {promql!r} within {timeout:.0f}s")
            time.sleep(0.2)


def _get_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False
