"""Static assets (issue 15 item 8): compressed responses, fingerprinted URLs and
long-lived cache headers, with no build step.

Every `url_for('static', filename=...)` gets `?v=<hash of the file's bytes>`, so a page
always names the current version of each file and a browser may keep it for a year
(`immutable`). A request with an old or missing `v` is answered too, but must be
revalidated. The hash is recomputed when the file's size or mtime changes, so an edited
file gets a new URL without a restart (`make run` serves the tree as it is).

Compression is Flask-Compress (br, then gzip) for HTML, JSON, CSS and JS. Streamed bodies
are never compressed: a compressor buffers, and an event stream must reach the browser
frame by frame. Static files are read whole (they are small) so they still compress.
"""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path

from flask import Flask, Response, request
from flask_compress import Compress
from werkzeug.security import safe_join

YEAR = 365 * 24 * 3600
IMMUTABLE = f"public, max-age={YEAR}, immutable"
REVALIDATE = "no-cache"
VERSION_ARG = "v"

compress = Compress()


class Fingerprints:
    """Content hashes of static files, cached by (size, mtime)."""

    def __init__(self, folder: str) -> None:
        self.folder = folder
        self._known: dict[str, tuple[tuple[int, int], str]] = {}
        self._lock = threading.Lock()

    def of(self, filename: str) -> str | None:
        path = safe_join(self.folder, filename)
        if path is None:
            return None
        try:
            stat = os.stat(path)
        except OSError:
            return None
        stamp = (stat.st_size, stat.st_mtime_ns)
        with self._lock:
            known = self._known.get(filename)
        if known and known[0] == stamp:
            return known[1]
        digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()[:12]
        with self._lock:
            self._known[filename] = (stamp, digest)
        return digest


def init_app(app: Flask) -> None:
    app.config.setdefault("COMPRESS_ALGORITHM", ["br", "gzip"])
    app.config.setdefault("COMPRESS_STREAMS", False)  # SSE must stream, frame by frame
    compress.init_app(app)
    prints = Fingerprints(app.static_folder or "")
    app.extensions["sandlot_fingerprints"] = prints

    @app.url_defaults
    def fingerprint(endpoint: str, values: dict) -> None:
        if endpoint == "static" and "filename" in values and VERSION_ARG not in values:
            digest = prints.of(values["filename"])
            if digest:
                values[VERSION_ARG] = digest

    # Registered after Flask-Compress, so it runs before it (after_request runs in
    # reverse): the file is read whole here and can then be compressed.
    @app.after_request
    def static_headers(response: Response) -> Response:
        if request.endpoint != "static":
            return response
        if response.status_code == 200 and response.is_streamed:
            response.direct_passthrough = False
            response.get_data()  # small files: buffered, so they are compressed too
        wanted = request.args.get(VERSION_ARG)
        current = prints.of((request.view_args or {}).get("filename", ""))
        fresh = wanted is not None and wanted == current
        response.headers["Cache-Control"] = IMMUTABLE if fresh else REVALIDATE
        return response
