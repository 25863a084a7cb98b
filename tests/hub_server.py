"""A Hugging Face hub on 127.0.0.1 for the tests: the subset of the hub's HTTP API that huggingface_hub's
``repo_info`` / ``snapshot_download`` / ``hf_hub_download`` use (repository info, the recursive tree, ``resolve``
with the commit and ETag headers), with gated repositories that answer 401 ``GatedRepo`` without an accepted token.
A :class:`Repo` can also play a hostile hub (issue 60): a stated commit or ETag that is a path, a body longer than
its stated size (or endless), headers stated on ``HEAD`` only (what ``huggingface_hub.hf_hub_download`` asks).

Point ``HF_ENDPOINT`` (or ``HfApi(endpoint=...)``) at :attr:`HubServer.url`.
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit


@dataclass
class Repo:
    """``commit``: the sha stated instead of the real one (repository info and ``X-Repo-Commit``); ``head``: headers
    stated on ``HEAD`` of a file only (a commit or ETag for ``hf_hub_download``); ``etags``: the ETag stated per
    file; ``bodies``: the body served per file instead of its bytes, without ``Content-Length`` (``None``:
    endless)."""

    files: dict[str, bytes]
    gated: bool = False
    commit: str | None = None
    head: dict[str, str] = field(default_factory=dict)
    etags: dict[str, str] = field(default_factory=dict)
    bodies: dict[str, bytes | None] = field(default_factory=dict)
    #: files served as the real hub serves LFS/Xet files: ``resolve`` answers 302 with the hub's ``X-Linked-Etag``
    #: (the content's sha256), ``X-Linked-Size`` and ``X-Repo-Commit``, and the bytes come from a CDN path whose own
    #: ``ETag`` is the storage's (an MD5, as S3's) and which states no commit
    lfs: set[str] = field(default_factory=set)

    def tree(self, prefix: str, recursive: bool) -> list[dict]:
        """The hub's tree listing under ``prefix``: every file below it, or (not recursive) its direct children."""
        base = f"{prefix}/" if prefix else ""
        entries: dict[str, dict] = {}
        for name, data in sorted(self.files.items()):
            if not name.startswith(base):
                continue
            head, _, tail = name[len(base):].partition("/")
            if tail and not recursive:
                entries.setdefault(base + head, {"type": "directory", "path": base + head, "oid": "0" * 40})
            else:
                entries[name] = {"type": "file", "path": name, "size": len(data), "oid": hashlib.sha1(data).hexdigest()}
        return list(entries.values())

    @property
    def sha(self) -> str:
        if self.commit is not None:
            return self.commit
        digest = hashlib.sha1()
        for name in sorted(self.files):
            digest.update(name.encode() + b"\0" + hashlib.sha1(self.files[name]).digest())
        return digest.hexdigest()


@dataclass
class HubServer:
    """``repos``: ``(repo_type, repo_id) -> Repo``; ``tokens``: bearer tokens that may read gated repositories."""

    repos: dict[tuple[str, str], Repo]
    tokens: set[str] = field(default_factory=set)
    requests: list[str] = field(default_factory=list)
    cdn: dict[str, bytes] = field(default_factory=dict)

    def __enter__(self) -> HubServer:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def _send(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
                self.send_response(status)
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def _stream(self, headers: dict[str, str], body: bytes | None) -> None:
                """``body`` with no ``Content-Length`` (the connection's end ends it); ``None``: never ends."""
                self.send_response(200)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.end_headers()
                try:
                    if body is not None:
                        self.wfile.write(body)
                        return
                    while True:  # until the client hangs up
                        self.wfile.write(b"\0" * 65536)
                except (BrokenPipeError, ConnectionResetError):
                    pass
                finally:
                    self.close_connection = True

            def _json(self, payload, status: int = 200) -> None:
                self._send(status, json.dumps(payload).encode(), {"Content-Type": "application/json"})

            def _repo(self, repo_type: str, repo_id: str):
                return hub.repos.get((repo_type, repo_id))

            def _allowed(self, repo: Repo) -> bool:
                auth = self.headers.get("Authorization", "")
                return not repo.gated or auth.removeprefix("Bearer ") in hub.tokens

            def _denied(self, repo_id: str) -> None:
                self._send(401, json.dumps({"error": f"Access to model {repo_id} is restricted."}).encode(),
                           {"X-Error-Code": "GatedRepo", "X-Error-Message": "gated",
                            "Content-Type": "application/json"})

            def do_GET(self):
                self._route()

            def do_HEAD(self):
                self._route()

            def _route(self) -> None:
                path = unquote(urlsplit(self.path).path)
                hub.requests.append(f"{self.command} {path}")
                parts = path.strip("/").split("/")
                if parts[0] == "api" and parts[1] in ("models", "datasets"):
                    repo_type = parts[1][:-1]
                    repo_id, rest = "/".join(parts[2:4]), parts[4:]
                    repo = self._repo(repo_type, repo_id)
                    if repo is None:
                        return self._send(404, b"{}", {"X-Error-Code": "RepoNotFound"})
                    if not rest or rest[0] == "revision":
                        return self._json({"id": repo_id, "sha": repo.sha, "gated": "manual" if repo.gated else False,
                                           "private": False, "siblings": [{"rfilename": n} for n in repo.files]})
                    if rest[0] == "tree":
                        if not self._allowed(repo):
                            return self._denied(repo_id)
                        recursive = "recursive=true" in urlsplit(self.path).query.lower()
                        return self._json(repo.tree("/".join(rest[2:]), recursive))
                    return self._send(404)
                if parts[0] == "cdn" and len(parts) == 2 and parts[1] in hub.cdn:  # an LFS file's storage
                    data = hub.cdn[parts[1]]
                    return self._send(200, data, {"ETag": f'"{hashlib.md5(data).hexdigest()}"'})
                repo_type = "dataset" if parts[0] == "datasets" else "model"
                parts = parts[1:] if repo_type == "dataset" else parts
                if len(parts) >= 5 and parts[2] == "resolve":
                    repo_id, name = "/".join(parts[:2]), "/".join(parts[4:])
                    repo = self._repo(repo_type, repo_id)
                    if repo is None or name not in repo.files:
                        return self._send(404, b"{}", {"X-Error-Code": "EntryNotFound"})
                    if not self._allowed(repo):
                        return self._denied(repo_id)
                    data = repo.files[name]
                    if name in repo.lfs:
                        sha256 = hashlib.sha256(data).hexdigest()
                        hub.cdn[sha256] = data
                        return self._send(302, b"", {"X-Repo-Commit": repo.sha, "X-Linked-Size": str(len(data)),
                                                     "X-Linked-Etag": repo.etags.get(name, f'"{sha256}"'),
                                                     "ETag": f'"{hashlib.sha1(data).hexdigest()}"',
                                                     "Location": f"{hub.url}/cdn/{sha256}"})
                    headers = {"X-Repo-Commit": repo.sha,
                               "ETag": repo.etags.get(name, f'"{hashlib.sha1(data).hexdigest()}"')}
                    headers |= repo.head if self.command == "HEAD" else {}
                    if name in repo.bodies and self.command == "GET":
                        return self._stream(headers, repo.bodies[name])
                    return self._send(200, data, headers)
                return self._send(404)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()
