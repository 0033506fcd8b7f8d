"""The chart gives the operator the workers' object store (bucket, endpoint, credentials Secret)
and operator.outputDefault, which become the operator's output settings; the schema refuses an
output default the operator could not use (docs/chart.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from scrapeq_operator.settings import OperatorSettings

from tests.e2e.helm_chart import STABLE_PASSWORD, find, render, render_error

pytestmark = [pytest.mark.helm, pytest.mark.timeout(120)]


def operator_container(helm_binary: Path, values: dict[str, Any]) -> dict[str, Any]:
    manifests = render(helm_binary, {**STABLE_PASSWORD, **values})
    deployment = find(manifests, "Deployment", "scrapeq-operator")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return dict(container)


def test_the_operator_writes_output_to_the_workers_bucket_with_their_secret(
    helm_binary: Path,
) -> None:
    values = {
        "workers": {
            "objectStore": {
                "bucket": "results",
                "endpoint": "http://minio.storage:9000",
                "pathStyle": True,
                "credentials": {"existingSecret": {"name": "s3-keys"}},
            }
        },
        "operator": {"outputDefault": {"format": "csv", "batchRows": 200}},
    }

    container = operator_container(helm_binary, values)
    environment = {item["name"]: item["value"] for item in container["env"] if "value" in item}
    settings = OperatorSettings.from_environment(environment, validate=False)

    assert settings.object_store_bucket == "results"
    assert settings.object_store_endpoint == "http://minio.storage:9000"
    assert settings.object_store_path_style is True
    assert settings.output_default == {"format": "csv", "batchRows": 200}
    secrets = {
        item["name"]: item["valueFrom"]["secretKeyRef"]
        for item in container["env"]
        if "valueFrom" in item and "secretKeyRef" in item["valueFrom"]
    }
    assert secrets["AWS_ACCESS_KEY_ID"] == {"name": "s3-keys", "key": "AWS_ACCESS_KEY_ID"}
    assert secrets["AWS_SECRET_ACCESS_KEY"]["name"] == "s3-keys"


def test_without_a_bucket_the_operator_has_no_object_store_and_no_output_default(
    helm_binary: Path,
) -> None:
    container = operator_container(helm_binary, {})
    names = {item["name"] for item in container["env"]}
    assert "SCRAPEQ_OBJECT_STORE_BUCKET" not in names
    assert "SCRAPEQ_OPERATOR_OUTPUT_DEFAULT" not in names


def test_the_schema_refuses_an_output_default_the_operator_could_not_use(
    helm_binary: Path,
) -> None:
    error = render_error(
        helm_binary, {**STABLE_PASSWORD, "operator": {"outputDefault": {"bucket": "x"}}}
    )
    assert "additional properties 'bucket' not allowed" in error
    error = render_error(
        helm_binary, {**STABLE_PASSWORD, "operator": {"outputDefault": {"format": "xml"}}}
    )
    assert "outputDefault" in error
