"""A file server that runs inside a test container (standard library only; started with python).

    python fileserver.py ROOT PORT

GET /good/<file>   the file at once
GET /stall/<file>  the first request for that exact path (query included) gets the headers and the
                   first MiB, then nothing more until the client goes away (a download cut by a
                   restart); later requests for it get the whole file at once
A `Range: bytes=N-` header is honoured (206, the rest from byte N): resumed downloads.
Each request is logged on stdout as `GET <path> <how many times this path was asked> <Range or ->`.
"""

from __future__ import annotations

import http.server
import sys
import threading
import time
from pathlib import Path

STALL_BYTES = 1 << 20


def main() -> None:
    root, port = Path(sys.argv[1]), int(sys.argv[2])
    counts: dict[str, int] = {}
    lock = threading.Lock()

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            with lock:
                counts[self.path] = seen = counts.get(self.path, 0) + 1
            asked = self.headers.get("Range", "")
            print(f"GET {self.path} {seen} {asked or '-'}", flush=True)
            kind, _, name = self.path.lstrip("/").partition("/")
            path = root / name.partition("?")[0]
            if kind not in ("good", "stall") or not path.is_file():
                self.send_error(404)
                return
            data = path.read_bytes()
            start = int(asked[len("bytes=") :].partition("-")[0] or 0) if asked.startswith("bytes=") else 0
            if 0 < start < len(data):
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                data = data[start:]
            else:
                self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if kind == "stall" and seen == 1:
                self.wfile.write(data[:STALL_BYTES])
                self.wfile.flush()
                time.sleep(600)  # the client is cut off (its container restarted) long before
                return
            self.wfile.write(data)

    server = http.server.ThreadingHTTPServer(("0.0.0.0", port), Handler)
    server.daemon_threads = True
    print(f"serving {root} on {port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
