"""What Hearth asks the Hugging Face Hub: revisions, file listings with hashes, URLs, search.

huggingface_hub does the metadata (it knows the API, pagination, tokens and endpoints);
the bytes themselves are fetched by ``app.models.downloader`` with resumable Range requests.
Every failure becomes a ``DownloadError`` that names the URL and what to try.

A mirror is not trusted: its address must be an http(s) URL (:func:`validate_endpoint`),
every listed path must stay inside the model's folder (:func:`repo_path_problem`), and what it
sends is bounded (:data:`MAX_METADATA_BYTES` per answer, :data:`MAX_LISTED_FILES` per listing,
:data:`MAX_REDIRECTS` per request, :data:`MAX_RETRY_AFTER_S` for a ``Retry-After`` wait).
"""

from __future__ import annotations

import email.utils
import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar
from urllib.parse import urlsplit

import httpx2
from huggingface_hub import HfApi, constants, hf_hub_url
from huggingface_hub.errors import (
    EntryNotFoundError,
    GatedRepoError,
    HfHubHTTPError,
    OfflineModeIsEnabled,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.hf_api import ModelInfo, RepoFile
from huggingface_hub.utils import set_client_factory
from huggingface_hub.utils._http import default_client_factory  # the client it would build

from app.errors import DownloadError, GatedError
from app.memory import total_ram_bytes
from app.models.hub_site import HUB_SITE
from app.models.runnable import (
    MAX_LISTED_FILES as MAX_SEARCH_FILES,
)
from app.models.runnable import (
    carries_decoder,
    parameters_from_name,
    why_not_runnable,
)
from app.network import OfflineBlockedError, feature, is_offline, record_refusal

# Licences of gated models are accepted on the Hub itself, whichever mirror serves the files.
_SHA1 = re.compile(r"^[0-9a-f]{40}$")
_SHA256 = re.compile(r"^[0-9a-fA-F]{64}$")
_DRIVE = re.compile(r"^[A-Za-z]:")
_WINDOWS_DEVICES = frozenset(
    ["CON", "PRN", "AUX", "NUL"] + [f"{d}{n}" for d in ("COM", "LPT") for n in range(1, 10)]
)
T = TypeVar("T")

# What a server may send before Hearth gives up on it.
MAX_METADATA_BYTES = 32 << 20  # one JSON answer (a model info, one page of a listing)
MAX_LISTED_FILES = 20_000  # files in one repo listing
MAX_FILE_BYTES = 1 << 40  # one listed file (1 TiB)
MAX_PATH_CHARS = 1024  # one listed path
MAX_REDIRECTS = 5  # per request (the Hub redirects a file once, to its CDN)
MAX_RETRY_AFTER_S = 60.0  # the longest wait a Retry-After header gets


@dataclass(frozen=True)
class RemoteFile:
    """One file of a repo at a commit. ``sha256`` is set for LFS files; ``blob_id`` is the
    git blob sha1 of the content (the Hub's ETag for non-LFS files)."""

    path: str
    size: int
    sha256: str | None
    blob_id: str | None


@dataclass(frozen=True)
class HubModel:
    """A Hub search result, with what the panel shows before a download."""

    id: str
    downloads: int | None
    likes: int | None
    license: str | None
    size_bytes: int | None  # storage used by the repo, when the Hub reports it
    pipeline_tag: str | None
    last_modified: str | None
    parameters: int | None = None  # from the repo's safetensors metadata or its name
    gated: bool = False
    reason: str | None = None  # why Hearth cannot run it here; None when it can

    @property
    def runnable(self) -> bool:
        return self.reason is None

    def as_dict(self) -> dict:
        return {
            "runnable": self.runnable,
            "reason": self.reason,
            "parameters": self.parameters,
            "gated": self.gated,
            "id": self.id,
            "downloads": self.downloads,
            "likes": self.likes,
            "license": self.license,
            "size_bytes": self.size_bytes,
            "pipeline_tag": self.pipeline_tag,
            "last_modified": self.last_modified,
        }


# The pipeline tags of chat models on the Hub (vision-language chat models are tagged
# image-text-to-text or any-to-any; their text decoder may still be runnable).
CHAT_PIPELINE_TAGS = ("text-generation", "image-text-to-text", "any-to-any")
MAX_SEARCH_RESULTS = 50
_SEARCH_FIELDS = (
    "downloads",
    "likes",
    "tags",
    "usedStorage",
    "pipeline_tag",
    "lastModified",
    "siblings",
    "safetensors",
    "gated",
)


#: the hint for an answer no Hub or mirror gives (the setting's name as the window shows it)
CHECK_SERVER_SETTING = ("Check the “Model download server” setting (Settings ▸ Models): it must "
                        "point to a Hugging Face Hub or mirror.")

def _names(info: ModelInfo) -> list[str]:
    return [s.rfilename for s in (info.siblings or [])[:MAX_SEARCH_FILES]]


def _hub_model(info: ModelInfo, ram_bytes: int | None) -> HubModel:
    license_tag = next(
        (t.split(":", 1)[1] for t in (info.tags or []) if t.startswith("license:")), None
    )
    safetensors = getattr(info, "safetensors", None)
    parameters = getattr(safetensors, "total", None) or parameters_from_name(info.id)
    names = _names(info)
    reason = (
        "the Hub did not list its files"
        if info.siblings is None
        else why_not_runnable(names, parameters=parameters, ram_bytes=ram_bytes)
    )
    return HubModel(
        id=info.id,
        downloads=info.downloads,
        likes=info.likes,
        license=license_tag,
        size_bytes=info.used_storage,
        pipeline_tag=info.pipeline_tag,
        last_modified=info.last_modified.isoformat() if info.last_modified else None,
        parameters=parameters,
        gated=bool(info.gated),
        reason=reason,
    )


def default_endpoint() -> str:
    """HF_ENDPOINT when set (a mirror), else https://huggingface.co."""
    return constants.ENDPOINT.rstrip("/")


def is_commit(revision: str) -> bool:
    return bool(_SHA1.match(revision))


def validate_endpoint(value: str, origin: str = "The Hub address") -> str:
    """``value`` without a trailing slash when it is an http(s) URL of a server, else a
    DownloadError saying what is wrong (``origin`` names where the value came from)."""
    text = value.strip() if isinstance(value, str) else ""
    problem = None
    parts = urlsplit(text)
    if not text:
        problem = "is empty"
    elif any(c.isspace() or ord(c) < 32 for c in text):
        problem = "contains spaces or control characters"
    elif "://" not in text:
        problem = "has no http:// or https:// in front"
    elif parts.scheme.lower() not in ("http", "https"):
        problem = f"uses {parts.scheme}://, not http:// or https://"
    elif not parts.hostname:
        problem = "names no server"
    elif parts.query or parts.fragment or parts.username or parts.password:
        problem = "has a query, a fragment or a user name in it"
    else:
        try:
            parts.port  # noqa: B018 (raises for a port that is not a number)
        except ValueError:
            problem = "has a port that is not a number"
    if problem:
        raise DownloadError(
            f"{origin} '{value}' is not usable: it {problem}.",
            hint="Use a URL like https://huggingface.co or https://hf-mirror.com.",
        )
    return text.rstrip("/")


def repo_path_problem(path: object) -> str | None:
    """Why ``path`` (a file path from a listing) could leave its model's folder, or None.

    A safe path is relative, uses "/" only, and has no empty, "." or ".." segment, no NUL or
    other control character, no ":" (drive letters, Windows streams) and no Windows device
    name, so it names the same file inside the model folder on every system."""
    if not isinstance(path, str) or not path:
        return "is empty"
    if len(path) > MAX_PATH_CHARS:
        return f"is longer than {MAX_PATH_CHARS} characters"
    if any(ord(c) < 32 or c == "\x7f" for c in path):
        return "contains a NUL or control character"
    if "\\" in path:
        return "contains a backslash"
    if path.startswith("/"):
        return "is absolute"
    if _DRIVE.match(path) or ":" in path:
        return "contains ':' (a drive letter or stream name on Windows)"
    for segment in path.split("/"):
        if segment == "":
            return "has an empty segment ('//' or a trailing '/')"
        if segment in (".", ".."):
            return f"has a '{segment}' segment"
        if segment.split(".", 1)[0].upper() in _WINDOWS_DEVICES or segment[-1] in ". ":
            return "has a segment Windows cannot store (a device name or a trailing dot or space)"
    return None


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds a ``Retry-After`` header asks for (delta seconds or an HTTP date), or None."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when is None:
        return None
    return max(when.timestamp() - (time.time() if now is None else now), 0.0)


class ResponseTooLarge(Exception):
    """A server sent more than Hearth reads from it (not a transport failure: never retried)."""

    def __init__(self, url: str, limit: int) -> None:
        super().__init__(f"{url} sent more than {limit} bytes")
        self.url = url
        self.limit = limit


class HubUnreachable(httpx2.TransportError):
    """No connection could be made (refused, no such host, no answer to the connect): this
    machine is offline or the server is down. Deliberately neither a ``NetworkError`` nor a
    ``TimeoutException``, the two huggingface_hub's ``http_backoff`` retries five times
    (20 to 30 s of "Searching…" for an answer known after the first try)."""

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(f"{url}: {reason}")
        self.url = url
        self.reason = reason


class _NoRetryOnConnect(httpx2.BaseTransport):
    """A transport that turns connect-phase failures into :class:`HubUnreachable`; timeouts
    and cuts once connected (and every HTTP status) pass through, for the retries."""

    def __init__(self, inner: httpx2.BaseTransport) -> None:
        self.inner = inner

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        try:
            return self.inner.handle_request(request)
        except (httpx2.ConnectError, httpx2.ConnectTimeout) as exc:
            raise HubUnreachable(str(request.url), unreachable_reason(exc)) from exc

    def close(self) -> None:
        self.inner.close()


def unreachable_reason(exc: BaseException) -> str:
    """A short reason for a failed connect: "connection refused", "the name … could not be
    resolved", "no answer to the connection within …"."""
    if isinstance(exc, httpx2.ConnectTimeout):
        return "the server did not answer the connection in time"
    text = str(exc) or type(exc).__name__
    lowered = text.lower()
    if "refused" in lowered:
        return "the connection was refused"
    if any(w in lowered for w in ("name or service", "nodename", "getaddrinfo", "resolve",
                                  "temporary failure in name")):
        return f"the server's name could not be resolved ({text})"
    return text


def unreachable_error(url: str, reason: str) -> DownloadError:
    """The sentence for a Hub that cannot be reached at all (said at once, never retried)."""
    return DownloadError(
        f"You're offline (or the Hub is unreachable): {reason} ({url}).",
        hint="Check your internet connection, proxy or the Model download server setting, "
        "then try again.",
    )


class _BoundedStream(httpx2.SyncByteStream):
    def __init__(self, inner: httpx2.SyncByteStream, url: str, limit: int) -> None:
        self.inner, self.url, self.limit = inner, url, limit

    def __iter__(self) -> Iterator[bytes]:
        seen = 0
        for chunk in self.inner:
            seen += len(chunk)
            if seen > self.limit:
                raise ResponseTooLarge(self.url, self.limit)
            yield chunk

    def close(self) -> None:
        self.inner.close()


def _bound_response(response: httpx2.Response) -> None:
    """A response hook: the body of a metadata answer is read up to MAX_METADATA_BYTES."""
    url = str(response.request.url)
    length = response.headers.get("content-length", "")
    if length.isdigit() and int(length) > MAX_METADATA_BYTES:
        raise ResponseTooLarge(url, MAX_METADATA_BYTES)
    response.stream = _BoundedStream(response.stream, url, MAX_METADATA_BYTES)


def _metadata_client() -> httpx2.Client:
    """huggingface_hub's own client (proxies, its headers), with Hearth's bounds."""
    client = default_client_factory()
    client.max_redirects = MAX_REDIRECTS
    client._transport = _NoRetryOnConnect(client._transport)  # proxies: mounted transports
    client._mounts = {
        pattern: None if inner is None else _NoRetryOnConnect(inner)
        for pattern, inner in client._mounts.items()
    }
    hooks = client.event_hooks
    client.event_hooks = {**hooks, "response": [*hooks.get("response", []), _bound_response]}
    return client


_bounds_lock = threading.Lock()
_bounds_installed = False


def _install_bounds() -> None:
    """Make huggingface_hub's shared client bounded (once per process)."""
    global _bounds_installed
    with _bounds_lock:
        if not _bounds_installed:
            set_client_factory(_metadata_client)
            _bounds_installed = True


class HubClient:
    """Metadata calls against one endpoint with one (optional) token."""

    def __init__(
        self,
        endpoint: str | None = None,
        token: str | None = None,
        *,
        retries: int = 4,
        backoff_s: float = 1.0,
    ) -> None:
        self.endpoint = validate_endpoint(endpoint) if endpoint else default_endpoint()
        self.token = token
        self.retries = retries
        self.backoff_s = backoff_s
        _install_bounds()
        self._api = HfApi(endpoint=self.endpoint, token=token)

    # -- URLs ------------------------------------------------------------------------

    def file_url(self, repo: str, path: str, revision: str) -> str:
        return hf_hub_url(repo, path, revision=revision, endpoint=self.endpoint)

    def auth_headers(self) -> dict[str, str]:
        """Headers for file transfers: the user agent and, when given, the token."""
        headers = {"User-Agent": "Hearth (huggingface_hub compatible)"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        return headers

    # -- metadata --------------------------------------------------------------------

    def resolve_revision(self, repo: str, revision: str) -> str:
        """The commit sha that ``revision`` (branch, tag or sha) points to."""
        url = f"{self.endpoint}/api/models/{repo}/revision/{revision}"
        info = self._call(url, lambda: self._api.model_info(repo, revision=revision))
        if not info.sha:
            raise DownloadError(
                f"The Hub at {url} did not say which commit '{revision}' is.",
                hint=CHECK_SERVER_SETTING,
            )
        return info.sha

    def list_files(self, repo: str, commit: str, subfolder: str | None = None) -> list[RemoteFile]:
        """Every file of ``repo`` at ``commit`` (under ``subfolder`` when given).

        Refuses (DownloadError) a listing with a path that could leave the model's folder
        (:func:`repo_path_problem`), a path listed twice, a size that is not a whole number of
        bytes up to :data:`MAX_FILE_BYTES`, a file with neither a sha256 nor a git hash to
        check it by, or more than :data:`MAX_LISTED_FILES` files."""
        url = f"{self.endpoint}/api/models/{repo}/tree/{commit}" + (
            f"/{subfolder}" if subfolder else ""
        )

        def listing() -> list[RemoteFile]:
            entries = self._api.list_repo_tree(
                repo, path_in_repo=subfolder, recursive=True, expand=False, revision=commit
            )
            files: dict[str, RemoteFile] = {}
            for entry in entries:
                if not isinstance(entry, RepoFile):
                    continue
                if len(files) >= MAX_LISTED_FILES:
                    raise _hostile_listing(url, f"lists more than {MAX_LISTED_FILES} files")
                remote = _remote_file(url, entry)
                if remote.path in files:
                    raise _hostile_listing(url, f"lists '{remote.path}' twice")
                files[remote.path] = remote
            return list(files.values())

        return self._call(url, listing)

    def read_json(
        self, repo: str, commit: str, path: str, *, max_bytes: int = 1 << 20
    ) -> dict | None:
        """A small JSON file of ``repo`` at ``commit`` (a package descriptor), None when the
        file is not there. Refuses files over ``max_bytes`` and bodies that are not objects."""
        url = self.file_url(repo, path, commit)

        def fetch() -> dict | None:
            with httpx2.Client(
                trust_env=True, follow_redirects=True, timeout=30.0, headers=self.auth_headers()
            ) as client, client.stream("GET", url) as response:
                if response.status_code == 404:
                    return None
                if response.status_code in (401, 403):
                    raise gated_error(url, repo, response.status_code)
                if response.status_code != 200:
                    raise _transient(
                        DownloadError(f"{url} answered HTTP {response.status_code}.",
                                      hint="Try again later, or check the “Model download server” "
                                           "setting."),
                        response.status_code >= 500 or response.status_code == 429,
                    )
                body = b""
                for chunk in response.iter_bytes():
                    body += chunk
                    if len(body) > max_bytes:
                        raise DownloadError(
                            f"{url} is larger than {max_bytes} bytes; Hearth expected a small "
                            "JSON description.",
                            hint="The repository may not be a model package.",
                        )
            try:
                data = json.loads(body)
            except ValueError as exc:
                raise DownloadError(f"{url} is not valid JSON ({exc}).",
                                    hint="The repository may be damaged.") from exc
            return data if isinstance(data, dict) else None

        return self._call(url, fetch)

    def search(
        self, query: str, *, limit: int = 20, ram_bytes: int | None = None
    ) -> list[HubModel]:
        """ONNX chat models matching ``query``, most downloaded first, each saying whether
        Hearth can run it here and why not (:func:`app.models.runnable.why_not_runnable`).

        Chat models are those tagged ``text-generation``, ``image-text-to-text`` or
        ``any-to-any``, and untagged ONNX repos whose files carry a decoder. At most
        ``limit`` results (capped at :data:`MAX_SEARCH_RESULTS`), one bounded listing per
        kind, file names looked at up to :data:`app.models.runnable.MAX_LISTED_FILES`.
        ``ram_bytes``: this machine's memory for the "too big" reason (default: detected).
        """
        limit = max(1, min(limit, MAX_SEARCH_RESULTS))
        ram = ram_bytes if ram_bytes is not None else total_ram_bytes()
        url = f"{self.endpoint}/api/models?search={query}&filter=onnx"

        def run() -> list[HubModel]:
            found: dict[str, ModelInfo] = {}
            for tag in (*CHAT_PIPELINE_TAGS, None):
                listing = self._api.list_models(
                    search=query or None,
                    filter="onnx",
                    pipeline_tag=tag,
                    sort="downloads",
                    limit=limit,
                    expand=list(_SEARCH_FIELDS),
                )
                for info in listing:
                    if tag is None and (info.pipeline_tag or not carries_decoder(_names(info))):
                        continue  # another task, or no decoder: not a chat model
                    found.setdefault(info.id, info)
            ranked = sorted(found.values(), key=lambda info: -(info.downloads or 0))
            return [_hub_model(info, ram) for info in ranked[:limit]]

        return self._call(url, run, "Hub search")

    # -- errors ----------------------------------------------------------------------

    def check_connection(self, timeout_s: float = 10.0) -> str:
        """One request, no retries: a sentence saying the endpoint answers and, with a token,
        whom it belongs to. Raises DownloadError saying exactly what failed (the address could
        not be resolved or refused the connection, no answer in time, an HTTP status, a
        refused token)."""
        path = "/api/whoami-v2" if self.token else "/api/models?limit=1"
        url = self.endpoint + path
        with feature("Hub connection test", keep_outer=True):
            if is_offline():
                raise offline_error(url) from record_refusal(url)
            try:
                response = httpx2.get(url, headers=self.auth_headers(), timeout=timeout_s,
                                      follow_redirects=True)
            except httpx2.ConnectError as exc:
                if _blocked_by_offline_mode(exc):
                    raise offline_error(url) from exc
                raise unreachable_error(url, unreachable_reason(exc)) from exc
            except httpx2.TimeoutException as exc:
                raise DownloadError(f"{self.endpoint} did not answer within {timeout_s:.0f} s.",
                                    hint="Check the address and your connection.") from exc
            except httpx2.TransportError as exc:
                if _blocked_by_offline_mode(exc):
                    raise offline_error(url) from exc
                raise DownloadError(f"Cannot connect to {self.endpoint}: {exc}.",
                                    hint="Check the address, your connection or proxy.") from exc
        if response.status_code == 401:
            raise DownloadError(f"{self.endpoint} refused the token (HTTP 401).",
                                hint="Create a new token at huggingface.co/settings/tokens.")
        if response.status_code == 404:
            raise DownloadError(f"{self.endpoint} has no Hugging Face API at {path} (HTTP 404).",
                                hint="Check the endpoint: it must be a Hub or a Hub mirror.")
        if response.status_code >= 400:
            raise DownloadError(f"{url} answered HTTP {response.status_code}.")
        if self.token:
            try:
                name = response.json().get("name")
            except (ValueError, AttributeError):
                name = None
            return f"Connected to {self.endpoint}; the token belongs to {name or 'an account'}."
        return f"Connected to {self.endpoint} (no token set: gated models need one)."

    def _call(self, url: str, fn: Callable[[], T], tag: str = "Hub metadata") -> T:
        """Run ``fn``, retrying server errors and network cuts with exponential backoff."""
        for attempt in range(self.retries + 1):
            if is_offline():
                with feature(tag, keep_outer=True):
                    refused = record_refusal(url)
                raise offline_error(url) from refused
            try:
                with feature(tag, keep_outer=True):
                    return self._translate(url, fn)
            except DownloadError as exc:
                if _blocked_by_offline_mode(exc):
                    raise offline_error(url) from exc
                if not getattr(exc, "transient", False) or attempt == self.retries:
                    raise
                asked = getattr(exc, "retry_after", None)
                if asked is not None:
                    time.sleep(min(asked, MAX_RETRY_AFTER_S))
                else:
                    time.sleep(min(self.backoff_s * 2**attempt, 30.0))
        raise AssertionError("unreachable")

    def _translate(self, url: str, fn: Callable[[], T]) -> T:
        try:
            return fn()
        except ResponseTooLarge as exc:
            raise DownloadError(
                f"{exc.url} sent more than {exc.limit // (1 << 20)} MiB of metadata, more than "
                "any Hub answer holds.",
                hint=CHECK_SERVER_SETTING,
            ) from exc
        except httpx2.TooManyRedirects as exc:
            raise DownloadError(
                f"{url} redirected more than {MAX_REDIRECTS} times.",
                hint=CHECK_SERVER_SETTING,
            ) from exc
        except OfflineModeIsEnabled as exc:
            raise DownloadError(
                f"Cannot reach {url}: Hugging Face offline mode is on.",
                hint="Unset the HF_HUB_OFFLINE environment variable to download models.",
            ) from exc
        except GatedRepoError as exc:
            status = exc.response.status_code if exc.response is not None else 403
            raise gated_error(url, _repo_of(url, self.endpoint), status) from exc
        except RepositoryNotFoundError as exc:
            raise DownloadError(
                f"{url}: the repository was not found (or is private).",
                hint="Check the model id, or set an access token for private models.",
            ) from exc
        except (RevisionNotFoundError, EntryNotFoundError) as exc:
            raise DownloadError(
                f"{url}: the revision or file was not found.",
                hint="The catalog may be out of date; update Hearth.",
            ) from exc
        except HfHubHTTPError as exc:
            status = exc.response.status_code if exc.response is not None else 0
            error = _transient(
                DownloadError(
                    f"{url} answered HTTP {status or '?'}.",
                    hint="Try again later, or check the “Model download server” and token "
                    "settings.",
                ),
                status >= 500 or status == 429,
            )
            if exc.response is not None:
                error.retry_after = parse_retry_after(  # type: ignore[attr-defined]
                    exc.response.headers.get("retry-after")
                )
            raise error from exc
        except HubUnreachable as exc:
            if _blocked_by_offline_mode(exc):
                raise offline_error(url) from exc
            raise _transient(unreachable_error(url, exc.reason), False) from exc
        except httpx2.ConnectError as exc:  # a client of Hearth's own (read_json)
            if _blocked_by_offline_mode(exc):
                raise offline_error(url) from exc
            raise _transient(unreachable_error(url, unreachable_reason(exc)), False) from exc
        except httpx2.TimeoutException as exc:
            raise _transient(
                DownloadError(
                    f"{url} did not answer in time.",
                    hint="Check your internet connection or proxy settings and try again.",
                ),
                True,
            ) from exc
        except httpx2.TransportError as exc:
            raise _transient(
                DownloadError(
                    f"Cannot reach {url} ({type(exc).__name__}).",
                    hint="Check your internet connection, proxy settings or the “Model download "
                    "server” setting.",
                ),
                not isinstance(exc, httpx2.ConnectError),
            ) from exc


def gated_error(url: str, repo: str | None, status: int) -> GatedError:
    """The sentence for a 401 / 403 from the Hub: the model is gated (or private), where to
    accept its licence, and where the token goes."""
    page = f"{HUB_SITE}/{repo}" if repo else "the model's Hugging Face page"
    return GatedError(
        f"This model is gated: accept its licence at {page} while signed in, then add your "
        f"token in Settings ▸ Models (HTTP {status} from {url}).",
        repo=repo,
        status=status,
        hint="Private repositories need a token with read access, too.",
    )


def _repo_of(url: str, endpoint: str) -> str | None:
    """``owner/name`` from a Hub API or file URL of ``endpoint``."""
    rest = url.removeprefix(endpoint).lstrip("/").removeprefix("api/models/")
    parts = rest.split("/")
    return "/".join(parts[:2]) if len(parts) >= 2 and parts[0] and parts[1] else None


def offline_error(url: str) -> DownloadError:
    """The refusal every Hub call gives while Hearth's offline mode is on."""
    return DownloadError(
        f"Cannot reach {url}: offline mode is on, so Hearth makes no network connections.",
        hint="Turn off offline mode in Settings (or drop --offline / HEARTH_OFFLINE=1) "
        "to search or download models.",
    )


def _blocked_by_offline_mode(exc: BaseException) -> bool:
    """Whether the socket guard's refusal is somewhere in ``exc``'s chain of causes."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, OfflineBlockedError):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


def _hostile_listing(url: str, problem: str) -> DownloadError:
    return DownloadError(
        f"The file listing from {url} {problem}; Hearth does not download from it.",
        hint="The server or mirror is broken or hostile; check the “Model download server” "
        "setting.",
    )


def _remote_file(url: str, entry: RepoFile) -> RemoteFile:
    """One listing entry, checked: a confined path, a sane size, a hash to verify by."""
    problem = repo_path_problem(entry.path)
    if problem:
        raise _hostile_listing(url, f"names the file {entry.path!r}, which {problem}")
    size = entry.lfs.size if entry.lfs is not None else entry.size
    if not isinstance(size, int) or isinstance(size, bool) or not 0 <= size <= MAX_FILE_BYTES:
        raise _hostile_listing(url, f"gives '{entry.path}' the size {size!r}")
    sha256 = entry.lfs.sha256 if entry.lfs is not None else None
    if sha256 is not None and not _SHA256.match(str(sha256)):
        raise _hostile_listing(url, f"gives '{entry.path}' a sha256 that is not one")
    blob_id = entry.blob_id if isinstance(entry.blob_id, str) else None
    if sha256 is None and not (blob_id and _SHA1.match(blob_id.lower())):
        raise _hostile_listing(url, f"gives '{entry.path}' no hash to verify it by")
    return RemoteFile(entry.path, size, sha256, blob_id)


def _transient(error: DownloadError, transient: bool) -> DownloadError:
    """Mark an error as worth retrying (a 5xx, a timeout, a dropped connection)."""
    error.transient = transient  # type: ignore[attr-defined]
    return error
