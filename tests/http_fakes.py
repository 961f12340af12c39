"""The base of the small HTTP servers tests start on 127.0.0.1 (never any other address): quiet, with one way to
answer a request."""
import json
from http.server import BaseHTTPRequestHandler


class FakeHandler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        """Keep the test output quiet (no per-request access log)."""

    def read_json(self):
        return json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))

    def reply(self, body, status=200, content_type="application/json"):
        """Send `body`: bytes as they are, a str encoded, anything else as JSON."""
        data = body if isinstance(body, bytes) else body.encode() if isinstance(body, str) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
