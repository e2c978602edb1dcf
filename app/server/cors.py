"""CORS for the allowed origins: Starlette's middleware, plus the openai JS SDK's headers.

The SDK sends a family of ``x-stainless-*`` headers (os, arch, runtime, retry count, …) whose
members change between releases, so they are allowed by prefix rather than listed. Any
origin scheme may be allowed (an editor's ``app://…`` or ``vscode-webview://…``): Starlette
compares origins as strings.
"""

from __future__ import annotations

from starlette.datastructures import Headers, MutableHeaders
from starlette.middleware.cors import CORSMiddleware
from starlette.responses import Response

ALLOWED_HEADERS = ("Authorization", "Content-Type", "OpenAI-Organization", "OpenAI-Project",
                   "OpenAI-Beta")
PREFIX = "x-stainless-"


class ApiCors(CORSMiddleware):
    def preflight_response(self, request_headers: Headers) -> Response:
        requested = request_headers.get("access-control-request-headers")
        if requested is None:
            return super().preflight_response(request_headers)
        names = [h.strip().lower() for h in requested.split(",") if h.strip()]
        sdk = [h for h in names if h.startswith(PREFIX)]
        rest = [h for h in names if not h.startswith(PREFIX)]
        headers = MutableHeaders(raw=list(request_headers.raw))
        if rest:
            headers["access-control-request-headers"] = ", ".join(rest)
        else:
            del headers["access-control-request-headers"]
        response = super().preflight_response(Headers(raw=headers.raw))
        if response.status_code == 200 and sdk:
            allowed = response.headers.get("access-control-allow-headers", "")
            response.headers["access-control-allow-headers"] = ", ".join(
                [a for a in (allowed,) if a] + sdk)
        return response
