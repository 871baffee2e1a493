#!/usr/bin/env python3
"""A stand-in OpenTelemetry collector for benchmarks: accepts OTLP/HTTP on POST /v1/traces,
counts the spans (JSON bodies) and answers 200. Usage: otlp-sink.py PORT COUNT_FILE.
The count is written to COUNT_FILE after every request (spans received so far)."""
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

port, count_file = int(sys.argv[1]), sys.argv[2]
spans = 0


class Sink(BaseHTTPRequestHandler):
    def do_POST(self):
        global spans
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        try:
            doc = json.loads(body)
            for rs in doc.get("resourceSpans", []):
                for ss in rs.get("scopeSpans", []):
                    spans += len(ss.get("spans", []))
        except ValueError:
            pass
        with open(count_file, "w") as f:
            f.write(str(spans))
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args):
        pass


ThreadingHTTPServer(("127.0.0.1", port), Sink).serve_forever()
