#!/usr/bin/env python3
"""tests/tools/webhook_receiver.py - a webhook receiver for tests/e2e/notify.sh.

usage: webhook_receiver.py PORT SECRET LOG

Listens on 127.0.0.1:PORT. For every POST it checks, independently of ferry's code, that
X-Ferry-Signature is "sha256=" + hex HMAC-SHA256(SECRET, raw body) (Python's hmac module,
RFC 2104), that X-Ferry-Timestamp is within 5 minutes of now and, for JSON bodies that
carry sent_at, equal to it. It appends one JSON line per request to LOG:
{"valid": bool, "why": str, "event": X-Ferry-Event, "delivery": X-Ferry-Delivery,
 "body": the parsed body} and answers 200 when valid, 401 otherwise.
"""
import hashlib
import hmac
import json
import sys
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

PORT, SECRET, LOG = int(sys.argv[1]), sys.argv[2].encode(), sys.argv[3]


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        why = ""
        sig = self.headers.get("X-Ferry-Signature", "")
        want = "sha256=" + hmac.new(SECRET, raw, hashlib.sha256).hexdigest()
        if not hmac.compare_digest(sig, want):
            why = "bad signature"
        ts = self.headers.get("X-Ferry-Timestamp", "")
        try:
            body = json.loads(raw)
        except ValueError:
            body, why = None, why or "body is not JSON"
        if not why:
            if not ts.isdigit() or abs(int(ts) - time.time()) > 300:
                why = "timestamp missing or stale"
            elif isinstance(body, dict) and "sent_at" in body and body["sent_at"] != int(ts):
                why = "timestamp header differs from the signed sent_at"
        with open(LOG, "a") as f:
            f.write(json.dumps({"valid": not why, "why": why,
                                "event": self.headers.get("X-Ferry-Event", ""),
                                "delivery": self.headers.get("X-Ferry-Delivery", ""),
                                "body": body}) + "\n")
        self.send_response(401 if why else 200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


HTTPServer(("127.0.0.1", PORT), Handler).serve_forever()
