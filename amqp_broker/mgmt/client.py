"""A small synchronous client of the management HTTP API, used by `amqp-brokerctl` and
`amqp-broker-queues` (and usable against RabbitMQ's management plugin too).

Paths are given as segments and each one is percent-encoded on its own, so the vhost "/" goes
out as "%2F" as RabbitMQ expects. A node that is not listening raises `NodeDown`; an HTTP error
raises `ApiError` with RabbitMQ's "reason" text.
"""

from __future__ import annotations

import urllib.parse
from typing import Any

import httpx

__all__ = ["ApiClient", "ApiError", "NodeDown"]


class NodeDown(Exception):
    """The node's management listener could not be reached."""


class ApiError(Exception):
    def __init__(self, status: int, reason: str, body: Any = None) -> None:
        super().__init__(f"{status}: {reason}")
        self.status = status
        self.reason = reason
        self.body = body  # the decoded JSON body, when there was one


class ApiClient:
    def __init__(self, url: str = "http://localhost:15672", user: str = "guest",
                 password: str = "guest", timeout: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self._http = httpx.Client(base_url=self.url, auth=(user, password), timeout=timeout)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "ApiClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @staticmethod
    def path(*segs: str) -> str:
        return "/api/" + "/".join(urllib.parse.quote(s, safe="") for s in segs)

    def request(self, method: str, *segs: str, json: Any = None, params: dict | None = None,
                headers: dict | None = None) -> Any:
        try:
            r = self._http.request(method, self.path(*segs), json=json, params=params,
                                   headers=headers)
        except httpx.ConnectError as e:
            raise NodeDown(f"connection refused ({e})") from None
        except httpx.TransportError as e:
            raise NodeDown(str(e) or type(e).__name__) from None
        if r.status_code >= 400:
            raise ApiError(r.status_code, _reason(r), _body(r))
        if r.status_code == 204 or not r.content:
            return None
        return r.json()

    def health_check(self, *segs: str) -> tuple[bool, Any]:
        """GET /api/health/checks/...: (passed, body); a failed check (503) is an answer with
        its body, not an error."""
        try:
            return True, self.get("health", "checks", *segs)
        except ApiError as err:
            if err.status != 503:
                raise
            return False, err.body

    def get(self, *segs: str, params: dict | None = None) -> Any:
        return self.request("GET", *segs, params=params)

    def put(self, *segs: str, json: Any = None) -> Any:
        return self.request("PUT", *segs, json=json if json is not None else {})

    def post(self, *segs: str, json: Any = None) -> Any:
        return self.request("POST", *segs, json=json if json is not None else {})

    def delete(self, *segs: str, params: dict | None = None, headers: dict | None = None) -> Any:
        return self.request("DELETE", *segs, params=params, headers=headers)


def _body(r: httpx.Response) -> Any:
    try:
        return r.json()
    except ValueError:
        return None


def _reason(r: httpx.Response) -> str:
    if r.status_code == 401 and not r.content:
        return "authentication failed (check --username/--password)"
    try:
        body = r.json()
    except ValueError:
        return r.text.strip() or r.reason_phrase
    if isinstance(body, dict):
        return str(body.get("reason") or body.get("error") or body)
    return str(body)
