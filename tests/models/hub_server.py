"""A small Hugging Face Hub stand-in on 127.0.0.1 (random port) for download tests.

It serves the routes huggingface_hub and Hearth's downloader use:

- ``GET /api/models/{repo}/revision/{rev}``: model info with the commit sha;
- ``GET /api/models/{repo}/tree/{rev}[/{path}]``: file tree with sizes, git blob ids and LFS
  sha256 (``?recursive=true`` lists the whole subtree);
- ``HEAD`` / ``GET /{repo}/resolve/{rev}/{path}``: the file, with ``X-Repo-Commit``, ``ETag``,
  ``X-Linked-Etag`` / ``X-Linked-Size`` for LFS files, ``Range`` (206 / 416) and ``If-Range``;
- ``GET /api/models?search=…``: search results.

Fault injection (``hub.faults``): cut the connection at a byte offset, corrupt a byte, answer
500 to the first requests, stall before sending a body, slow every chunk, ignore Range; and a
hostile mirror's tricks: answer any URL with some bytes, send more bytes than listed, answer
429 with Retry-After, redirect in a loop, pad headers or JSON answers, list many files. Every
body byte sent is counted per file (``hub.bytes_served``).
"""

from __future__ import annotations

import collections
import fnmatch
import hashlib
import json
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

from tests.fixtures.http_server import QuietHTTPServer

LFS_PATTERNS = ("*.onnx", "*.onnx_data*", "*.onnx.data", "*.bin", "*.gguf")
CHUNK = 16 * 1024


@dataclass
class FakeRepo:
    """A model repo at one commit: ``files`` maps repo paths to their bytes."""

    repo_id: str
    files: dict[str, bytes]
    commit: str = ""
    license: str = "apache-2.0"
    downloads: int = 0
    tags: tuple[str, ...] = ("onnx", "text-generation", "conversational")
    pipeline_tag: str | None = "text-generation"
    gated_token: str | None = None  # when set, requests without this bearer token get 401

    def __post_init__(self) -> None:
        if not self.commit:
            digest = hashlib.sha1(self.repo_id.encode())
            for path in sorted(self.files):
                digest.update(path.encode() + b"\0" + self.files[path])
            self.commit = digest.hexdigest()

    @classmethod
    def from_folder(
        cls,
        repo_id: str,
        folder: Path,
        *,
        prefix: str = "",
        extra: dict[str, bytes] | None = None,
        **kwargs,
    ) -> FakeRepo:
        """A repo holding every file of ``folder`` (under ``prefix`` when given)."""
        files = {}
        for path in sorted(p for p in Path(folder).rglob("*") if p.is_file()):
            rel = path.relative_to(folder).as_posix()
            files[f"{prefix.rstrip('/')}/{rel}" if prefix else rel] = path.read_bytes()
        files.update(extra or {})
        return cls(repo_id, files, **kwargs)

    def is_lfs(self, path: str) -> bool:
        name = path.rsplit("/", 1)[-1]
        return any(fnmatch.fnmatch(name, pattern) for pattern in LFS_PATTERNS)

    @staticmethod
    def blob_id(data: bytes) -> str:
        return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()

    def etag(self, path: str) -> str:
        data = self.files[path]
        if self.is_lfs(path):
            return f'"{hashlib.sha256(data).hexdigest()}"'
        return f'"{self.blob_id(data)}"'

    def tree_entry(self, path: str) -> dict:
        data = self.files[path]
        entry = {"type": "file", "oid": self.blob_id(data), "size": len(data), "path": path}
        if self.is_lfs(path):
            entry["lfs"] = {
                "oid": hashlib.sha256(data).hexdigest(),
                "size": len(data),
                "pointerSize": 134,
            }
        return entry

    def used_storage(self) -> int:
        return sum(len(d) for d in self.files.values())


@dataclass
class Faults:
    """What goes wrong, and how often. Counters go down as faults fire."""

    cut_at: dict[str, int] = field(default_factory=dict)  # path -> absolute byte offset
    cut_times: int = 1
    corrupt_at: dict[str, int] = field(default_factory=dict)  # path -> offset to flip
    corrupt_times: int = 1  # -1 = always
    fail_first: int = 0  # 500 for the first N resolve GETs
    api_fail_first: int = 0  # 500 for the first N /api requests
    stall_first: int = 0  # the first N resolve GETs wait stall_s before the body
    stall_s: float = 0.0
    delay_per_chunk_s: float = 0.0
    ignore_range: bool = False
    # a hostile or broken mirror
    serve_unknown: bytes | None = None  # the body for any GET of a path no repo holds
    oversize: dict[str, int] = field(default_factory=dict)  # path -> junk bytes appended
    oversize_declared: bool = True  # False: no Content-Length, the body ends at the close
    retry_after_first: int = 0  # 429 + Retry-After for the first N resolve GETs
    retry_after: str = "1"
    redirect_loop: bool = False  # resolve GETs redirect to themselves forever
    header_padding: int = 0  # bytes of an extra header on resolve answers
    api_padding: int = 0  # bytes of whitespace added to every /api JSON answer
    extra_tree_entries: int = 0  # small files added to every tree listing


class FakeHub:
    """Context manager: ``with FakeHub() as hub: hub.add(repo); hub.url``."""

    def __init__(self) -> None:
        self.repos: dict[str, FakeRepo] = {}
        self.faults = Faults()
        self.bytes_served: collections.Counter[str] = collections.Counter()
        self.requests: list[tuple[str, str, str | None]] = []
        self.searches: list[dict] = []  # the query of each search request
        self.lock = threading.Lock()
        hub = self

        class Handler(_Handler):
            pass

        Handler.hub = hub
        self.server = QuietHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self._thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def add(self, repo: FakeRepo) -> FakeRepo:
        self.repos[repo.repo_id] = repo
        return repo

    def served(self, suffix: str = "") -> int:
        """Body bytes sent for files whose path ends with ``suffix`` (all when empty)."""
        with self.lock:
            return sum(n for path, n in self.bytes_served.items() if path.endswith(suffix))

    def file_requests(self) -> list[tuple[str, str, str | None]]:
        with self.lock:
            return [r for r in self.requests if "/resolve/" in r[1]]

    def start(self) -> FakeHub:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(5)

    def __enter__(self) -> FakeHub:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


class _Handler(BaseHTTPRequestHandler):
    hub: FakeHub
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args) -> None:  # keep test output quiet
        pass

    # -- helpers ---------------------------------------------------------------------

    def _json(self, data, status: int = 200) -> None:
        body = json.dumps(data).encode() + b" " * self.hub.faults.api_padding
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _error(self, status: int, code: str | None = None, message: str = "error") -> None:
        body = json.dumps({"error": message}).encode()
        self.send_response(status)
        if code:
            self.send_header("X-Error-Code", code)
        self.send_header("X-Error-Message", message)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _repo(self, owner: str, name: str, rev: str) -> FakeRepo | None:
        repo = self.hub.repos.get(f"{owner}/{name}")
        if repo is None:
            self._error(404, "RepoNotFound", "Repository not found")
            return None
        if repo.gated_token and self.headers.get("Authorization") != f"Bearer {repo.gated_token}":
            self._error(401, "GatedRepo", "Access to this model is restricted")
            return None
        if rev not in ("main", repo.commit):
            self._error(404, "RevisionNotFound", "Invalid rev id")
            return None
        return repo

    def _take(self, attr: str) -> bool:
        """Consume one unit of a counting fault; True when it fires."""
        with self.hub.lock:
            left = getattr(self.hub.faults, attr)
            if left > 0:
                setattr(self.hub.faults, attr, left - 1)
                return True
            return False

    # -- routes ----------------------------------------------------------------------

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        split = urlsplit(self.path)
        parts = [unquote(p) for p in split.path.split("/") if p]
        with self.hub.lock:
            self.hub.requests.append((self.command, split.path, self.headers.get("Range")))
        if parts[:2] == ["api", "models"]:
            if self._take("api_fail_first"):
                return self._error(500, None, "Internal Error")
            return self._api(parts[2:], parse_qs(split.query))
        if len(parts) >= 5 and parts[2] == "resolve":
            return self._resolve(parts[0], parts[1], parts[3], "/".join(parts[4:]))
        if self.hub.faults.serve_unknown is not None:
            return self._raw(split.path, self.hub.faults.serve_unknown)
        self._error(404, None, "Not found")

    def _raw(self, path: str, data: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
            self._count(path, len(data))

    def _api(self, parts: list[str], query: dict) -> None:
        if not parts:
            return self._search(query)
        if len(parts) >= 4 and parts[2] == "revision":
            repo = self._repo(parts[0], parts[1], parts[3])
            if repo is None:
                return None
            return self._json(
                {
                    "id": repo.repo_id,
                    "modelId": repo.repo_id,
                    "sha": repo.commit,
                    "private": False,
                    "tags": [*repo.tags, f"license:{repo.license}"],
                    "downloads": repo.downloads,
                    "siblings": [{"rfilename": p} for p in sorted(repo.files)],
                }
            )
        if len(parts) >= 4 and parts[2] == "tree":
            repo = self._repo(parts[0], parts[1], parts[3])
            if repo is None:
                return None
            base = "/".join(parts[4:])
            recursive = query.get("recursive", ["false"])[0].lower() == "true"
            return self._json(self._tree(repo, base, recursive))
        return self._error(404, None, "Not found")

    def _tree(self, repo: FakeRepo, base: str, recursive: bool) -> list[dict]:
        prefix = f"{base}/" if base else ""
        entries, folders = [], set()
        for path in sorted(repo.files):
            if not path.startswith(prefix):
                continue
            rest = path[len(prefix) :]
            segments = rest.split("/")
            for i in range(1, len(segments)):
                if recursive or i == 1:
                    folders.add(prefix + "/".join(segments[:i]))
            if recursive or len(segments) == 1:
                entries.append(repo.tree_entry(path))
        dirs = [
            {"type": "directory", "oid": "0" * 40, "size": 0, "path": f} for f in sorted(folders)
        ]
        padding = [
            {"type": "file", "oid": FakeRepo.blob_id(b"x"), "size": 1, "path": f"pad/{i:06d}.txt"}
            for i in range(self.hub.faults.extra_tree_entries)
        ]
        return dirs + entries + padding

    def _search(self, query: dict) -> None:
        text = query.get("search", [""])[0].lower()
        limit = int(query.get("limit", ["100"])[0])
        tag = query.get("pipeline_tag", [None])[0]
        wanted_tags = set(query.get("filter", []))
        self.hub.searches.append({k: v if len(v) > 1 else v[0] for k, v in query.items()})
        results = []
        for repo in sorted(self.hub.repos.values(), key=lambda r: -r.downloads):
            if text and text not in repo.repo_id.lower():
                continue
            if tag is not None and repo.pipeline_tag != tag:
                continue
            if not wanted_tags <= set(repo.tags):
                continue
            results.append(
                {
                    "id": repo.repo_id,
                    "modelId": repo.repo_id,
                    "downloads": repo.downloads,
                    "likes": 1,
                    "tags": [*repo.tags, f"license:{repo.license}"],
                    "usedStorage": repo.used_storage(),
                    "pipeline_tag": repo.pipeline_tag,
                    "lastModified": "2025-01-02T03:04:05.000Z",
                    "gated": "manual" if repo.gated_token else False,
                    "siblings": [{"rfilename": p} for p in sorted(repo.files)],
                }
            )
        self._json(results[:limit])

    def _resolve(self, owner: str, name: str, rev: str, path: str) -> None:
        repo = self._repo(owner, name, rev)
        if repo is None:
            return
        faults = self.hub.faults
        if path not in repo.files:
            if faults.serve_unknown is not None:
                return self._raw(path, faults.serve_unknown)
            return self._error(404, "EntryNotFound", "Entry not found")
        if self.command == "GET" and self._take("fail_first"):
            return self._error(500, None, "Internal Error")
        if self.command == "GET" and self._take("retry_after_first"):
            self.send_response(429)
            self.send_header("Retry-After", faults.retry_after)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return None
        if faults.redirect_loop:
            self.send_response(302)
            self.send_header("Location", self.path)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return None
        data = repo.files[path]
        offset = faults.corrupt_at.get(path)
        if offset is not None and self.command == "GET" and faults.corrupt_times != 0:
            with self.hub.lock:
                if faults.corrupt_times > 0:
                    faults.corrupt_times -= 1
            data = data[:offset] + bytes([data[offset] ^ 0xFF]) + data[offset + 1 :]
        size, etag = len(data), repo.etag(path)
        start, end = 0, size - 1
        ranged = self.headers.get("Range")
        if_range = self.headers.get("If-Range")
        if ranged and not faults.ignore_range and (if_range is None or if_range == etag):
            spec = ranged.split("=", 1)[1]
            first, _, last = spec.partition("-")
            start = int(first)
            end = int(last) if last else size - 1
            if start >= size:
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{size}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        else:
            self.send_response(200)
        junk = faults.oversize.get(path, 0)
        if junk:
            data, end = data + random_bytes(junk, 99), end + junk
        if junk and not faults.oversize_declared:
            self.send_header("Connection", "close")
            self.close_connection = True  # the body ends when the connection does
        else:
            self.send_header("Content-Length", str(end - start + 1))
        if faults.header_padding:
            self.send_header("X-Padding", "p" * faults.header_padding)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("ETag", etag)
        self.send_header("X-Repo-Commit", repo.commit)
        if repo.is_lfs(path):
            self.send_header("X-Linked-Etag", etag)
            self.send_header("X-Linked-Size", str(size))
        self.end_headers()
        if self.command == "HEAD":
            return
        if self._take("stall_first"):
            time.sleep(faults.stall_s)
        self._send_body(path, data, start, end)

    def _send_body(self, path: str, data: bytes, start: int, end: int) -> None:
        faults = self.hub.faults
        cut = faults.cut_at.get(path)
        pos = start
        try:
            while pos <= end:
                stop = min(pos + CHUNK, end + 1)
                if cut is not None and pos < cut <= stop and faults.cut_times > 0:
                    with self.hub.lock:
                        faults.cut_times -= 1
                    self.wfile.write(data[pos:cut])
                    self._count(path, cut - pos)
                    self.wfile.flush()
                    self.connection.shutdown(socket.SHUT_WR)
                    self.close_connection = True
                    return
                self.wfile.write(data[pos:stop])
                self._count(path, stop - pos)
                pos = stop
                if faults.delay_per_chunk_s:
                    time.sleep(faults.delay_per_chunk_s)
        except (BrokenPipeError, ConnectionResetError, OSError):
            self.close_connection = True

    def _count(self, path: str, n: int) -> None:
        with self.hub.lock:
            self.hub.bytes_served[path] += n


def allow_hub_requests(monkeypatch) -> None:
    """tests/conftest.py sets HF_HUB_OFFLINE=1 so nothing reaches the real Hub; tests that
    talk to this loopback stand-in turn huggingface_hub's offline switch off for themselves
    (the variable too: Hearth's offline switch recomputes the constant from it)."""
    from huggingface_hub import constants

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)


def random_bytes(n: int, seed: int = 0) -> bytes:
    """Deterministic incompressible bytes."""
    import random

    return random.Random(seed).randbytes(n)
