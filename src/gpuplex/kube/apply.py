"""The connection to a Kubernetes API, through the official client: credentials from a kubeconfig
(or the pod's service account inside a cluster), one HTTP request at a time.

The only module that imports `kubernetes`, and only inside functions: the client takes most of a
second to import, which `gpuplex validate` and `gpuplex kube render` should not pay. What the
requests mean lives in `gpuplex.kube.api` (one object or kind) and `gpuplex.kube.sync` (a whole
set); this module only sends them and turns "no answer" into KubeUnreachable with the address
tried and what to check.
"""

from __future__ import annotations

import json
import os
import re
from decimal import Decimal
from pathlib import Path
from types import TracebackType
from typing import Any

from gpuplex.errors import KubeUnreachable
from gpuplex.kube.api import Reply

#: Seconds to wait for a TCP connection and then for an answer; a server-side apply of one object
#: answers in well under a second on a healthy cluster.
CONNECT_TIMEOUT_S = 10.0
READ_TIMEOUT_S = 60.0
CONNECT_RETRIES = 1

_ERRNO_TEXT = re.compile(r"\[Errno -?\d+\] ([^'\")]+)")


class ClientTransport:
    """Requests through one `kubernetes.client.ApiClient`; close it (or use `with`) to release
    its connection pool."""

    def __init__(self, api_client: Any, source: str) -> None:
        self._api = api_client
        #: Where the credentials came from, for messages: `kubeconfig ~/.kube/config (context x)`.
        self.source = source

    @property
    def address(self) -> str:
        return str(self._api.configuration.host)

    def send(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, str]] | None = None,
        body: str | None = None,
        content_type: str | None = None,
    ) -> Reply:
        """One request. A YAML body (server-side apply) goes as the string given. A JSON body goes
        parsed: the client serialises JSON itself, and given a string it would send it quoted, a
        JSON patch even as a strategic merge patch (it checks for a list)."""
        import urllib3
        from kubernetes.client.exceptions import ApiException
        from kubernetes.config import ConfigException

        headers = {"Accept": "application/json"}
        if content_type is not None:
            headers["Content-Type"] = content_type
        try:
            payload: Any = body
            if body is not None and content_type is not None and "json" in content_type:
                payload = json.loads(body)
            method, url, headers, _, _ = self._api.param_serialize(
                method=method,
                resource_path=path,
                query_params=list(query or []),
                header_params=headers,
                auth_settings=["BearerToken"],
            )
            response = self._api.call_api(
                method,
                url,
                header_params=headers,
                body=payload,
                _request_timeout=(CONNECT_TIMEOUT_S, READ_TIMEOUT_S),
            )
            data = response.read()
        except ApiException as error:  # the client's own wrapping of TLS failures (status 0)
            raise self._unreachable(str(error.reason or error)) from None
        except urllib3.exceptions.MaxRetryError as error:
            raise self._unreachable(_reason(error.reason)) from None
        except urllib3.exceptions.HTTPError as error:
            raise self._unreachable(_reason(error)) from None
        except ConfigException as error:  # refreshing an exec or in-cluster token
            raise KubeUnreachable(
                f"cannot get credentials for the Kubernetes API at {self.address} "
                f"({self.source}): {error}"
            ) from None
        return Reply(response.status, _json_body(data), data.decode("utf-8", "replace"))

    def _unreachable(self, reason: str) -> KubeUnreachable:
        if "CERTIFICATE" in reason.upper() or "SSL" in reason.upper():
            check = (
                "check that the kubeconfig's certificate-authority matches the cluster and that "
                "the address is a name its certificate carries"
            )
            return KubeUnreachable(
                f"TLS with the Kubernetes API at {self.address} failed ({self.source}): {reason}; "
                + check
            )
        return KubeUnreachable(
            f"cannot reach the Kubernetes API at {self.address} ({self.source}): {reason}; check "
            "that the cluster is up and the address is right, or pick another cluster with "
            "--context / --kubeconfig"
        )

    def close(self) -> None:
        self._api.close()

    def __enter__(self) -> ClientTransport:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


def _reason(error: object) -> str:
    text = str(error)
    found = _ERRNO_TEXT.search(text)
    return found.group(1).strip() if found else text


def _json_body(data: bytes) -> dict[str, Any]:
    try:
        parsed = json.loads(data) if data else {}
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def parse_quantity(text: str) -> Decimal:
    """A Kubernetes quantity (`500m`, `2`, `16Gi`) as a number, read by the official client's
    parser; ValueError for anything the API would not accept as one."""
    from kubernetes.utils.quantity import parse_quantity as parse

    return Decimal(parse(text))  # type: ignore[no-untyped-call]


def connect(kubeconfig: Path | None = None, context: str | None = None) -> ClientTransport:
    """A connection to the cluster: `kubeconfig` (or $KUBECONFIG, else ~/.kube/config) and its
    `context` (else its current context), or, where there is no kubeconfig, the service account of
    the pod gpuplex runs in. Nothing is sent yet; the first request finds out whether the API
    answers."""
    from kubernetes.config import kube_config

    if kubeconfig is not None:
        if not kubeconfig.is_file():
            raise KubeUnreachable(
                f"kubeconfig {kubeconfig} does not exist; pass the file kubectl uses "
                "(--kubeconfig) or leave it out to use $KUBECONFIG or ~/.kube/config"
            )
        return _from_kubeconfig(str(kubeconfig), context)
    default = str(kube_config.KUBE_CONFIG_DEFAULT_LOCATION)
    paths = [Path(part).expanduser() for part in default.split(os.pathsep) if part]
    if any(path.is_file() for path in paths):
        return _from_kubeconfig(default, context)
    if context is not None:
        raise KubeUnreachable(
            f"--context {context}: no kubeconfig at {default}; pass --kubeconfig or set KUBECONFIG"
        )
    return _in_cluster(default)


def _from_kubeconfig(files: str, context: str | None) -> ClientTransport:
    import yaml
    from kubernetes.client import Configuration
    from kubernetes.config import ConfigException, load_kube_config

    source = f"kubeconfig {files}" + (f", context {context}" if context else "")
    configuration = Configuration()
    try:
        load_kube_config(  # type: ignore[no-untyped-call]
            config_file=files,
            context=context,
            client_configuration=configuration,
            persist_config=False,
        )
    except (ConfigException, OSError, ValueError, KeyError, TypeError, yaml.YAMLError) as error:
        raise KubeUnreachable(
            f"cannot use {source}: {error}; check the file with `kubectl config view`"
        ) from None
    return ClientTransport(_client(configuration), source)


def _client(configuration: Any) -> Any:
    """One retry of a failed connection (urllib3 would make three, each waiting out the connect
    timeout on an address that drops packets)."""
    from kubernetes.client import ApiClient

    configuration.retries = CONNECT_RETRIES
    return ApiClient(configuration)


def _in_cluster(default: str) -> ClientTransport:
    from kubernetes.client import Configuration
    from kubernetes.config import ConfigException, load_incluster_config

    configuration = Configuration()
    try:
        load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    except ConfigException as error:
        raise KubeUnreachable(
            f"no kubeconfig (looked for {default}) and not running inside a cluster ({error}); "
            "pass --kubeconfig or set KUBECONFIG to the file kubectl uses"
        ) from None
    return ClientTransport(_client(configuration), "the pod's service account")
