"""`kubectl explain` documents the ScrapeJob fields a kubectl user meets first: the REASON and
MESSAGE columns' status fields, the schedule's time zone and last schedule, resource blocking."""

from __future__ import annotations

import pytest

from tests.e2e.operator.operator_parts import Kubectl
from tests.waiting import eventually_blocking

pytestmark = [pytest.mark.controlplane, pytest.mark.timeout(120)]


@pytest.mark.parametrize(
    "field",
    [
        "scrapejob.status.reason",
        "scrapejob.status.message",
        "scrapejob.spec.timeZone",
        "scrapejob.spec.suspend",
        "scrapejob.status.lastScheduleTime",
        "scrapejob.spec.blockResources",
    ],
)
def test_kubectl_explain_describes_the_field(kubectl: Kubectl, field: str) -> None:
    # The API server publishes a new CRD's OpenAPI schema a few seconds after it is served.
    result = eventually_blocking(
        lambda: (answer := kubectl.run("explain", field, check=False)).returncode == 0 and answer,
        within=60,
        what=f"kubectl explain {field}",
        every=1,
    )
    description = result.stdout.split("DESCRIPTION:", 1)[1].strip()
    assert len(description.split()) >= 4, f"{field} has no real description:\n{result.stdout}"


def test_kubectl_explain_says_what_a_site_s_limit_counts(kubectl: Kubectl) -> None:
    field = "scrapejob.spec.politeness.maxConcurrentPerSite"
    result = eventually_blocking(
        lambda: (answer := kubectl.run("explain", field, check=False)).returncode == 0 and answer,
        within=60,
        what=f"kubectl explain {field}",
        every=1,
    )
    description = " ".join(result.stdout.split("DESCRIPTION:", 1)[1].split())
    assert "one site" in description
    assert "across every worker of the cluster (1-1000)" in description
    assert "A site is a registrable domain" in description
    # The field's name before 0.1.0 is no field: the API server prunes it from a ScrapeJob, and
    # kubectl explains only the name above.
    former = kubectl.run("explain", "scrapejob.spec.politeness.maxConcurrentPerHost", check=False)
    assert former.returncode != 0, former.stdout
