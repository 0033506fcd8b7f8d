"""The operator's own calls to the Kubernetes API (kopf makes the rest): status patches,
ConfigMap reads, worker Deployment scaling, pod deletion costs and Events.

The official client is synchronous, so every call runs in a worker thread; callers await it.
Errors come back as ApiException; `is_conflict`/`is_not_found` classify them.
"""

from __future__ import annotations

import asyncio
import base64
import logging
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import Any, TypeVar

import kubernetes
import urllib3  # type: ignore[import-untyped]  # (1.x, through the kubernetes client)
from kubernetes.client.rest import ApiException

from scrapeq_operator.vocabulary import (
    GROUP,
    PLURAL,
    QUEUE_POLICY_PLURAL,
    SITE_POLICY_PLURAL,
    VERSION,
)

logger = logging.getLogger(__name__)

T = TypeVar("T")

# Threads for the (blocking) client calls. The calls wait on the API server, not on the CPU,
# so more of them than cores keep status patches flowing when the API server is slow.
API_THREADS = 16

# A call the API server does not answer (a connection that died without a word, a stalled
# server) fails after this long instead of holding one of those threads, and the handler or
# loop that waits on it, for good: (connect, read) seconds. A read is one wait for data, not
# the whole answer: a long list that keeps arriving is never cut; the API server itself ends a
# request after 60 s. The client tries a GET again on a fresh connection (urllib3's default
# retries): a pooled connection that went dead costs one read timeout, not the call.
API_REQUEST_TIMEOUT: tuple[float, float] = (5.0, 30.0)


def api_unanswered(error: ApiException) -> bool:
    """The call got no answer (Cluster._call), or one that says to try again later: the
    API server is away, overloaded or throttling, and the same call may well succeed soon."""
    return error.status in (0, 429) or (error.status or 0) >= 500


# Events are written under this component name (kubectl describe shows it as "From").
EVENT_SOURCE = "scrapeq-operator"


def is_conflict(error: BaseException) -> bool:
    """True for 409 Conflict (stale resourceVersion or uid precondition)."""
    return isinstance(error, ApiException) and error.status == 409


def is_not_found(error: BaseException) -> bool:
    return isinstance(error, ApiException) and error.status == 404


@dataclass(frozen=True)
class ObjectRef:
    """Enough of an object to point an Event at it."""

    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str


def scrapejob_ref(body: Mapping[str, Any]) -> ObjectRef:
    """The ObjectRef of a ScrapeJob as kopf or the API server gives it."""
    meta = body.get("metadata", {})
    return ObjectRef(
        f"{GROUP}/{VERSION}", "ScrapeJob", meta.get("namespace", ""), meta["name"], meta["uid"]
    )


@dataclass(frozen=True)
class ConfigMapContent:
    """A ConfigMap's two kinds of values."""

    data: dict[str, str]
    binary_data: dict[str, bytes]

    def keys(self) -> list[str]:
        return sorted({*self.data, *self.binary_data})


@dataclass(frozen=True)
class WorkerDeployment:
    """A Deployment labelled as a worker pool, as the autoscaler needs it."""

    namespace: str
    name: str
    uid: str
    pool: str
    replicas: int
    annotations: dict[str, str]
    selector: str

    @property
    def ref(self) -> ObjectRef:
        return ObjectRef("apps/v1", "Deployment", self.namespace, self.name, self.uid)


def load_api_client() -> Any:
    """An ApiClient from the in-cluster service account, or from KUBECONFIG / ~/.kube/config."""
    configuration = kubernetes.client.Configuration()
    try:
        kubernetes.config.load_incluster_config(client_configuration=configuration)
    except kubernetes.config.ConfigException:
        kubernetes.config.load_kube_config(client_configuration=configuration)
    # One HTTP connection per thread that may call at once.
    configuration.connection_pool_maxsize = API_THREADS
    return kubernetes.client.ApiClient(configuration)


def _selector_text(match_labels: dict[str, str] | None) -> str:
    return ",".join(f"{key}={value}" for key, value in sorted((match_labels or {}).items()))


class Cluster:
    """Async wrappers over the few API calls the operator makes itself."""

    def __init__(self, api_client: Any) -> None:
        self._client = api_client
        self._executor = ThreadPoolExecutor(max_workers=API_THREADS, thread_name_prefix="kube-api")
        self._custom = kubernetes.client.CustomObjectsApi(api_client)
        self._core = kubernetes.client.CoreV1Api(api_client)
        self._apps = kubernetes.client.AppsV1Api(api_client)

    def close(self) -> None:
        self._executor.shutdown(wait=True, cancel_futures=True)
        self._client.close()

    async def _call(self, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a blocking client call on this cluster's threads, bounded by
        API_REQUEST_TIMEOUT. A call the API server did not answer (refused, reset, timed out)
        raises ApiException with status 0 (api_unanswered), so that every caller handles it as
        it handles an error answer instead of letting the client's transport errors through."""
        kwargs.setdefault("_request_timeout", API_REQUEST_TIMEOUT)
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._executor, partial(function, *args, **kwargs))
        except (urllib3.exceptions.HTTPError, OSError) as error:
            reason = f"no answer from the API server: {error}"
            raise ApiException(status=0, reason=reason) from error

    async def patch_scrapejob_status(
        self,
        namespace: str,
        name: str,
        *,
        uid: str,
        resource_version: str | None,
        status: dict[str, Any],
    ) -> str | None:
        """Merge-patch the status subresource of one ScrapeJob; return the resourceVersion
        the patch gave it.

        The uid (and resourceVersion when given) in the body are preconditions: a ScrapeJob
        re-created under the same name, or changed since it was read, gives a 409 Conflict
        instead of being overwritten with stale data.
        """
        metadata: dict[str, Any] = {"uid": uid}
        if resource_version:
            metadata["resourceVersion"] = resource_version
        body = {"metadata": metadata, "status": status}
        patched = await self._call(
            self._custom.patch_namespaced_custom_object_status,
            GROUP,
            VERSION,
            namespace,
            PLURAL,
            name,
            body,
        )
        version = (patched or {}).get("metadata", {}).get("resourceVersion")
        return str(version) if version else None

    async def read_scrapejob(self, namespace: str, name: str) -> dict[str, Any] | None:
        """One ScrapeJob as the API server returns it, or None when it does not exist."""
        try:
            body = await self._call(
                self._custom.get_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL, name
            )
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        return dict(body)

    async def create_scrapejob(self, namespace: str, body: dict[str, Any]) -> bool:
        """Create a ScrapeJob; False when one of that name already exists (409 AlreadyExists)."""
        try:
            await self._call(
                self._custom.create_namespaced_custom_object,
                GROUP,
                VERSION,
                namespace,
                PLURAL,
                body,
            )
        except ApiException as error:
            if error.status == 409:
                return False
            raise
        return True

    async def list_scrapejobs(self, namespace: str, label_selector: str) -> list[dict[str, Any]]:
        """The ScrapeJobs of a namespace that match a label selector, as plain dicts."""
        listed = await self._call(
            self._custom.list_namespaced_custom_object,
            GROUP,
            VERSION,
            namespace,
            PLURAL,
            label_selector=label_selector,
        )
        return [dict(item) for item in listed.get("items", [])]

    async def list_queue_policies(self) -> list[dict[str, Any]] | None:
        """Every QueuePolicy (cluster-scoped), as plain dicts; None when the resource is not
        installed (404). Other API errors (403: the operator may not read them) are raised."""
        try:
            listed = await self._call(
                self._custom.list_cluster_custom_object, GROUP, VERSION, QUEUE_POLICY_PLURAL
            )
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        return [dict(item) for item in listed.get("items", [])]

    async def list_site_policy_names(self) -> list[str]:
        """The names of the cluster's SitePolicies ([] where the CRD is not installed: then the
        cluster has none)."""
        try:
            listed = await self._call(
                self._custom.list_cluster_custom_object, GROUP, VERSION, SITE_POLICY_PLURAL
            )
        except ApiException as error:
            if error.status == 404:
                return []
            raise
        return [str(item["metadata"]["name"]) for item in listed.get("items", [])]

    async def delete_scrapejob(self, namespace: str, name: str, *, uid: str) -> bool:
        """Delete one ScrapeJob if it is still the one with this uid; False when it is gone.

        The uid precondition keeps a stale caller from deleting a newer object of that name.
        """
        try:
            await self._call(
                self._custom.delete_namespaced_custom_object,
                GROUP,
                VERSION,
                namespace,
                PLURAL,
                name,
                body=kubernetes.client.V1DeleteOptions(
                    preconditions=kubernetes.client.V1Preconditions(uid=uid),
                    propagation_policy="Background",
                ),
            )
        except ApiException as error:
            if error.status in (404, 409):
                return False
            raise
        return True

    async def _read_or_none(self, read: Callable[..., Any], namespace: str, name: str) -> Any:
        """A core object read with `read`, or None when it is absent."""
        try:
            return await self._call(read, name, namespace)
        except ApiException as error:
            if error.status == 404:
                return None
            raise

    async def read_configmap(self, namespace: str, name: str) -> ConfigMapContent | None:
        """The ConfigMap's data and binaryData (decoded to bytes), or None when it is absent."""
        configmap = await self._read_or_none(self._core.read_namespaced_config_map, namespace, name)
        if configmap is None:
            return None
        binary = {
            key: base64.b64decode(value) for key, value in (configmap.binary_data or {}).items()
        }
        return ConfigMapContent(data=dict(configmap.data or {}), binary_data=binary)

    async def read_secret_data(self, namespace: str, name: str) -> dict[str, bytes] | None:
        """A Secret's data (decoded bytes), or None when it is absent. The values are never
        logged: callers seal them at once (credentials.py)."""
        secret = await self._read_or_none(self._core.read_namespaced_secret, namespace, name)
        if secret is None:
            return None
        return {key: base64.b64decode(value) for key, value in (secret.data or {}).items()}

    async def list_worker_deployments(
        self, label: str, namespaces: tuple[str, ...]
    ) -> list[WorkerDeployment]:
        """Every Deployment carrying `label`, in the given namespaces (empty: all)."""
        if namespaces:
            items: list[Any] = []
            for namespace in namespaces:
                found = await self._call(
                    self._apps.list_namespaced_deployment, namespace, label_selector=label
                )
                items.extend(found.items)
        else:
            found = await self._call(
                self._apps.list_deployment_for_all_namespaces, label_selector=label
            )
            items = list(found.items)
        deployments = []
        for item in items:
            meta = item.metadata
            deployments.append(
                WorkerDeployment(
                    namespace=meta.namespace,
                    name=meta.name,
                    uid=meta.uid,
                    pool=(meta.labels or {}).get(label, meta.name),
                    replicas=int(item.spec.replicas if item.spec.replicas is not None else 1),
                    annotations=dict(meta.annotations or {}),
                    selector=_selector_text(item.spec.selector.match_labels),
                )
            )
        return deployments

    async def scale_deployment(self, namespace: str, name: str, replicas: int) -> None:
        """Set the Deployment's replicas through its scale subresource."""
        await self._call(
            self._apps.patch_namespaced_deployment_scale,
            name,
            namespace,
            {"spec": {"replicas": replicas}},
        )

    async def annotate_deployment(self, namespace: str, name: str, key: str, value: str) -> None:
        await self._call(
            self._apps.patch_namespaced_deployment,
            name,
            namespace,
            {"metadata": {"annotations": {key: value}}},
        )

    async def list_pod_names(self, namespace: str, selector: str) -> list[str]:
        """Names of the running pods matching a label selector (none without a kubelet)."""
        if not selector:
            return []
        pods = await self._call(self._core.list_namespaced_pod, namespace, label_selector=selector)
        return [pod.metadata.name for pod in pods.items if pod.metadata.deletion_timestamp is None]

    async def annotate_pod(self, namespace: str, name: str, key: str, value: str) -> None:
        await self._call(
            self._core.patch_namespaced_pod,
            name,
            namespace,
            {"metadata": {"annotations": {key: value}}},
        )

    async def post_event(self, target: ObjectRef, *, type_: str, reason: str, message: str) -> None:
        """Create a core/v1 Event about `target` (kubectl describe shows it)."""
        now = datetime.now(UTC)
        event = kubernetes.client.CoreV1Event(
            metadata=kubernetes.client.V1ObjectMeta(
                generate_name=f"{target.name[:200]}.", namespace=target.namespace
            ),
            involved_object=kubernetes.client.V1ObjectReference(
                api_version=target.api_version,
                kind=target.kind,
                namespace=target.namespace,
                name=target.name,
                uid=target.uid,
            ),
            type=type_,
            reason=reason,
            message=message[:1024],
            source=kubernetes.client.V1EventSource(component=EVENT_SOURCE),
            reporting_component=EVENT_SOURCE,
            reporting_instance=EVENT_SOURCE,
            first_timestamp=now,
            last_timestamp=now,
            count=1,
        )
        await self._call(self._core.create_namespaced_event, target.namespace, event)

    async def announce(self, target: ObjectRef, *, type_: str, reason: str, message: str) -> None:
        """post_event for handlers whose real work is done: an Event that cannot be posted is
        logged, never raised (it must not fail or repeat the work it reports)."""
        try:
            await self.post_event(target, type_=type_, reason=reason, message=message)
        except Exception as error:
            logger.warning(
                "could not post the %s event about %s/%s: %s",
                reason,
                target.namespace,
                target.name,
                error,
            )
