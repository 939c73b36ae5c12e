"""A minimal S3 + SQS endpoint for benchmarks: the wire protocols boto3 speaks, nothing more.

    python -m bench.fast_aws            (prints its port on the first line of stdout)

The loopback moto server the tests use (`tests/support/aws_server.py`) answers ~100 requests a
second (a LIST of 1,000 keys 0.6 s, an SQS receive 170 ms): discovering 10⁶ objects through it
would measure moto. This server holds keys in a sorted list (bisect) and messages in a deque
with an in-flight dict, so leasehold's own clients (`S3ObjectStore`, `EventQueue`, boto3) run
unchanged against a near-free server, and it counts every request per action: the counts are
exact, the seconds are the client's cost plus this server's small one.

Served: S3 (REST-XML, path style) `ListObjectsV2` (`prefix`, `start-after`, `max-keys`,
`continuation-token`, `encoding-type=url`), `HeadObject`, `PutObject`; SQS (JSON 1.0,
`X-Amz-Target: AmazonSQS.<action>`) `ReceiveMessage` (`MaxNumberOfMessages`,
`VisibilityTimeout`, `WaitTimeSeconds` honoured when the queue is empty), `DeleteMessageBatch`,
`ChangeMessageVisibilityBatch`, `GetQueueAttributes`, `SendMessageBatch`. Control, not counted:
`POST /_bench/populate` and `POST /_bench/land` (objects and their S3 events made in this
process, not over HTTP: `object_key`), `GET /_bench/counts` (requests per action, seconds spent
long-polling an empty queue, this process's CPU seconds).
"""

from __future__ import annotations

import base64
import gc
import hashlib
import heapq
import json
import random
import sys
import threading
import time
from bisect import bisect_left, bisect_right
from collections import Counter, deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, quote, quote_plus, unquote, urlsplit
from xml.sax.saxutils import escape

ACCOUNT = "123456789012"
MODIFIED = "2026-01-01T00:00:00.000Z"
ETAG = '"9b2cf535f27731c974343645a3985328"'
REQUEST_ID_2 = "vlR7PnpV2Ce81l0PRw6jlUpck7Jo5ZsQjryTjKlc5aLWGVHPZLj5NeC6qMa0emYBDXOo6QBU0Wo="


def object_key(i: int, late: bool = False) -> str:
    """The i-th benchmark object's key (relative to the stream's prefix): keys grow with i, 40,000
    a day-folder; `late`: a key sorting just before the i-th, as a late upload would."""
    return f"day-{i // 40_000:03d}/part-{i:07d}{'-late' if late else ''}.jsonl"


def object_size(i: int) -> int:
    """40-160 KB, 100 KB on average: a unit of 1,000 stays under 256 MiB."""
    return 40_000 + (i * 7919) % 120_000


def event_body(bucket: str, key: str, size: int, seq: int) -> str:
    """One message as S3 puts it on a queue: one `ObjectCreated:Put` record, key URL-encoded."""
    record = {
        "eventVersion": "2.1",
        "eventSource": "aws:s3",
        "awsRegion": "us-east-1",
        "eventTime": "2026-01-01T00:00:00.000Z",
        "eventName": "ObjectCreated:Put",
        "userIdentity": {"principalId": "AWS:AIDAJDPLRKLG7UEXAMPLE"},
        "requestParameters": {"sourceIPAddress": "10.0.0.1"},
        "responseElements": {
            "x-amz-request-id": f"{seq:016X}",
            "x-amz-id-2": REQUEST_ID_2,
        },
        "s3": {
            "s3SchemaVersion": "1.0",
            "configurationId": "leasehold-events",
            "bucket": {
                "name": bucket,
                "ownerIdentity": {"principalId": "A3NL1KOZZKExample"},
                "arn": f"arn:aws:s3:::{bucket}",
            },
            "object": {
                "key": quote_plus(key, safe="/"),
                "size": size,
                "eTag": ETAG.strip('"'),
                "sequencer": f"{seq:016X}",
            },
        },
    }
    return json.dumps({"Records": [record]})


Message = tuple[str | None, str, int, int]
"""(bucket, full key, size, sequencer) of an S3 event; (None, body, -1, sequencer) of a message
sent as is."""


@dataclass
class Queue:
    visible: deque[Message] = field(default_factory=deque)
    """Bodies are made as messages are received."""
    in_flight: dict[str, tuple[Message, float]] = field(default_factory=dict)
    deadlines: list[tuple[float, str]] = field(default_factory=list)
    received: int = 0

    def expire(self, now: float) -> None:
        while self.deadlines and self.deadlines[0][0] <= now:
            _, receipt = heapq.heappop(self.deadlines)
            held = self.in_flight.get(receipt)
            if held is not None and held[1] <= now:
                del self.in_flight[receipt]
                self.visible.append(held[0])


@dataclass
class Aws:
    """Every bucket's keys and every queue's messages, behind one lock."""

    keys: dict[str, list[str]] = field(default_factory=dict)
    sizes: dict[str, dict[str, int]] = field(default_factory=dict)
    queues: dict[str, Queue] = field(default_factory=dict)
    counts: Counter[str] = field(default_factory=Counter)
    waited_s: float = 0.0
    seq: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, bucket: str, queue: str | None, objects: list[tuple[str, int]]) -> None:
        """Objects (full key, size) put in `bucket` and, with `queue`, their events on it."""
        keys = self.keys.setdefault(bucket, [])
        sizes = self.sizes.setdefault(bucket, {})
        new = [(k, s) for k, s in objects if k not in sizes]
        sizes.update(objects)
        keys.extend(k for k, _ in new)
        keys.sort()
        if queue is not None:
            q = self.queues.setdefault(queue, Queue())
            for key, size in objects:
                self.seq += 1
                q.visible.append((bucket, key, size, self.seq))

    def control(self, path: str, spec: dict[str, Any]) -> dict[str, Any]:
        """populate: {bucket, prefix, queue, start, count, shuffle} (`object_key`s, events in
        random order when shuffle is a seed); land: {bucket, prefix, queue, keys, sizes}."""
        prefix = spec.get("prefix", "")
        full = (lambda k: f"{prefix}/{k}") if prefix else (lambda k: k)
        if path == "/_bench/populate":
            start, count = int(spec.get("start", 0)), int(spec["count"])
            objects = [(full(object_key(i)), object_size(i)) for i in range(start, start + count)]
            if spec.get("shuffle") is not None:
                random.Random(spec["shuffle"]).shuffle(objects)
        else:
            objects = [(full(k), int(s)) for k, s in zip(spec["keys"], spec["sizes"], strict=True)]
        with self.lock:
            self.add(spec["bucket"], spec.get("queue"), objects)
        gc.collect()
        gc.freeze()  # 10⁶ keys and messages: not scanned by every full collection after
        return {"objects": len(objects)}

    def count(self, action: str) -> None:
        with self.lock:
            self.counts[action] += 1

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            return {
                "counts": dict(self.counts),
                "waited_s": self.waited_s,
                "cpu_s": time.process_time(),
            }

    def list_v2(self, bucket: str, query: dict[str, str]) -> tuple[int, bytes]:
        keys = self.keys.get(bucket)
        if keys is None:
            return 404, _s3_error("NoSuchBucket", bucket)
        prefix = query.get("prefix", "")
        after = query.get("start-after", "")
        token = query.get("continuation-token")
        if token:
            after = base64.urlsafe_b64decode(token.encode()).decode()
        limit = min(int(query.get("max-keys", "1000")), 1000)
        encode = query.get("encoding-type") == "url"
        with self.lock:
            at = max(bisect_left(keys, prefix), bisect_right(keys, after) if after else 0)
            page = []
            while at < len(keys) and len(page) < limit and keys[at].startswith(prefix):
                page.append(keys[at])
                at += 1
            truncated = at < len(keys) and keys[at].startswith(prefix)
            sizes = [self.sizes[bucket][k] for k in page]
        name = (lambda k: quote_plus(k, safe="/")) if encode else escape
        parts = [
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            '<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
            f"<Name>{bucket}</Name><Prefix>{name(prefix)}</Prefix><KeyCount>{len(page)}"
            f"</KeyCount><MaxKeys>{limit}</MaxKeys>"
            f"<IsTruncated>{'true' if truncated else 'false'}</IsTruncated>"
        ]
        if encode:
            parts.append("<EncodingType>url</EncodingType>")
        parts += [
            f"<Contents><Key>{name(k)}</Key><LastModified>{MODIFIED}</LastModified>"
            f"<ETag>&quot;{ETAG.strip(chr(34))}&quot;</ETag><Size>{s}</Size>"
            "<StorageClass>STANDARD</StorageClass></Contents>"
            for k, s in zip(page, sizes, strict=True)
        ]
        if truncated:
            next_token = base64.urlsafe_b64encode(page[-1].encode()).decode()
            parts.append(f"<NextContinuationToken>{next_token}</NextContinuationToken>")
        parts.append("</ListBucketResult>")
        return 200, "".join(parts).encode()

    def receive(self, q: Queue, spec: dict[str, Any]) -> dict[str, Any]:
        asked = min(int(spec.get("MaxNumberOfMessages", 1)), 10)
        visibility = float(spec.get("VisibilityTimeout", 30))
        deadline = time.monotonic() + float(spec.get("WaitTimeSeconds", 0))
        while True:
            with self.lock:
                now = time.monotonic()
                q.expire(now)
                taken = [q.visible.popleft() for _ in range(min(asked, len(q.visible)))]
                out = []
                for message in taken:
                    q.received += 1
                    receipt = f"{message[3]:x}-{q.received:x}"
                    q.in_flight[receipt] = (message, now + visibility)
                    heapq.heappush(q.deadlines, (now + visibility, receipt))
                    body = event_body(*message) if message[0] is not None else message[1]
                    out.append(
                        {
                            "MessageId": f"00000000-0000-4000-8000-{message[3]:012x}",
                            "ReceiptHandle": receipt,
                            "MD5OfBody": hashlib.md5(body.encode()).hexdigest(),
                            "Body": body,
                        }
                    )
            if out or now >= deadline:
                return {"Messages": out} if out else {}
            pause = min(0.05, deadline - now)
            time.sleep(pause)
            with self.lock:
                self.waited_s += pause

    def batch(self, q: Queue, action: str, entries: list[dict[str, Any]]) -> dict[str, Any]:
        ok, failed = [], []
        with self.lock:
            now = time.monotonic()
            for entry in entries:
                held = q.in_flight.pop(entry["ReceiptHandle"], None)
                if held is None:
                    failed.append(
                        {
                            "Id": entry["Id"],
                            "SenderFault": True,
                            "Code": "ReceiptHandleIsInvalid",
                            "Message": "The receipt handle is not valid.",
                        }
                    )
                    continue
                ok.append({"Id": entry["Id"]})
                if action == "ChangeMessageVisibilityBatch":
                    timeout = float(entry.get("VisibilityTimeout", 0))
                    if timeout <= 0:
                        q.visible.appendleft(held[0])
                    else:
                        q.in_flight[entry["ReceiptHandle"]] = (held[0], now + timeout)
                        heapq.heappush(q.deadlines, (now + timeout, entry["ReceiptHandle"]))
        return {"Successful": ok, "Failed": failed}

    def sqs(self, action: str, spec: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        name = str(spec.get("QueueUrl", "")).rstrip("/").rsplit("/", 1)[-1]
        q = self.queues.get(name)
        if q is None:
            return 400, {"__type": "com.amazonaws.sqs#QueueDoesNotExist", "message": name}
        if action == "ReceiveMessage":
            return 200, self.receive(q, spec)
        if action in ("DeleteMessageBatch", "ChangeMessageVisibilityBatch"):
            return 200, self.batch(q, action, spec.get("Entries", []))
        if action == "GetQueueAttributes":
            with self.lock:
                q.expire(time.monotonic())
                attributes = {
                    "QueueArn": f"arn:aws:sqs:us-east-1:{ACCOUNT}:{name}",
                    "ApproximateNumberOfMessages": str(len(q.visible)),
                    "ApproximateNumberOfMessagesNotVisible": str(len(q.in_flight)),
                }
            return 200, {"Attributes": attributes}
        if action == "SendMessageBatch":
            with self.lock:
                for entry in spec.get("Entries", []):
                    self.seq += 1
                    q.visible.append((None, entry["MessageBody"], -1, self.seq))
            return 200, {"Successful": [], "Failed": []}
        return 400, {"__type": "com.amazonaws.sqs#InvalidAction", "message": action}


def _s3_error(code: str, resource: str) -> bytes:
    return (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
        f"<Message>{code}</Message><Resource>{escape(resource)}</Resource></Error>"
    ).encode()


AWS = Aws()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    """Headers and body are two writes: with Nagle's algorithm the body waits for the client's
    delayed ACK of the headers (40 ms a request)."""

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

    def _reply(self, status: int, body: bytes, ctype: str, **headers: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", headers.pop("length", str(len(body))))
        for name, value in headers.items():
            self.send_header(name.replace("_", "-"), value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _split(self) -> tuple[str, str, dict[str, str]]:
        parts = urlsplit(self.path)
        bucket, _, key = unquote(parts.path).lstrip("/").partition("/")
        query = {k: v[0] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        return bucket, key, query

    def do_GET(self) -> None:
        if self.path == "/_bench/counts":
            self._reply(200, json.dumps(AWS.snapshot()).encode(), "application/json")
            return
        bucket, key, query = self._split()
        if key or query.get("list-type") != "2":
            self._reply(501, _s3_error("NotImplemented", self.path), "application/xml")
            return
        AWS.count("S3 ListObjectsV2")
        status, body = AWS.list_v2(bucket, query)
        self._reply(status, body, "application/xml")

    def do_HEAD(self) -> None:
        bucket, key, _ = self._split()
        AWS.count("S3 HeadObject")
        size = AWS.sizes.get(bucket, {}).get(key)
        if size is None:
            self._reply(404, b"", "application/xml", length="0")
            return
        modified = "Thu, 01 Jan 2026 00:00:00 GMT"
        self._reply(200, b"", "binary/octet-stream", length=str(size), ETag=ETAG,
                    Last_Modified=modified)  # fmt: skip

    def do_PUT(self) -> None:
        bucket, key, _ = self._split()
        size = len(self._body())
        AWS.count("S3 PutObject")
        with AWS.lock:
            AWS.add(bucket, None, [(key, size)])
        self._reply(200, b"", "application/xml", ETag=ETAG)

    def do_POST(self) -> None:
        body = self._body()
        if self.path.startswith("/_bench/"):
            out = AWS.control(self.path, json.loads(body))
            self._reply(200, json.dumps(out).encode(), "application/json")
            return
        action = self.headers.get("X-Amz-Target", "").rpartition(".")[2]
        AWS.count(f"SQS {action}")
        status, out = AWS.sqs(action, json.loads(body or b"{}"))
        self._reply(status, json.dumps(out).encode(), "application/x-amz-json-1.0")


def queue_url(port: int, name: str) -> str:
    return f"http://127.0.0.1:{port}/{ACCOUNT}/{quote(name)}"


def main() -> int:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    print(server.server_address[1], flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
