"""The management web UI: a static front end (`mgmt/static/`: one HTML page, its CSS and
JavaScript; no build step, no library) served by the management app at `/` and `/ui/<file>`.

The pages call the management API (/api) with the logged-in user's credentials, so every
permission rule is the API's (`http.py`); this module only hands out the files. They are read
once, at app build, from the installed package (`importlib.resources`).
"""

from __future__ import annotations

from importlib import resources

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

__all__ = ["ui_routes"]

_TYPES = {"index.html": "text/html; charset=utf-8", "app.js": "text/javascript; charset=utf-8",
          "app.css": "text/css; charset=utf-8"}
# Pages change with the broker's version: let the browser revalidate rather than guess.
_HEADERS = {"cache-control": "no-cache", "x-content-type-options": "nosniff"}


def _load() -> dict[str, bytes]:
    base = resources.files("amqp_broker.mgmt") / "static"
    return {name: (base / name).read_bytes() for name in _TYPES}


def ui_routes() -> list[Route]:
    files = _load()

    async def index(request: Request) -> Response:
        return Response(files["index.html"], media_type=_TYPES["index.html"], headers=_HEADERS)

    async def asset(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in files or name == "index.html":
            return Response("not found\n", status_code=404, media_type="text/plain")
        return Response(files[name], media_type=_TYPES[name], headers=_HEADERS)

    return [Route("/", index), Route("/ui/{name}", asset)]
