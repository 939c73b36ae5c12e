"""The SQS queue a stream's S3 events arrive on: receive, delete, release, describe.

boto3's own retries are off; every call goes through `call_with_retries` (bounded, full jitter),
and one that still fails raises `QueueUnreachableError` (throttled, not reached) or
`QueueError` (refused: no such queue, access denied) naming the queue and the action. The queue
URL says where to send the calls: an AWS URL (`https://sqs.<region>.amazonaws.com/...`) its
region's endpoint, any other host (a local server) that host.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit

from resources.aws_calls import aws_client, call_aws
from resources.errors import ComponentUnreachableError, LeaseholdError
from resources.retry import RetryPolicy

T = TypeVar("T")
log = logging.getLogger(__name__)

MAX_PER_CALL = 10
"""SQS's limit of messages per receive and entries per batch call."""
PARALLEL = 8
"""SQS calls in flight at once, receiving and deleting: each waits ~10-20 ms on AWS, so one at
a time a tick of 20,000 messages would be 4,000 round trips (~60 s); SQS serves many at once."""
RECEIVE_BUDGET_S = 15.0
"""How long one tick receives at most, leaving time to make the units and delete as many
messages within the 60 s Dagster gives a sensor tick."""


class QueueError(LeaseholdError):
    """The queue refused a call in a way no retry changes."""


class QueueUnreachableError(QueueError, ComponentUnreachableError):
    """The queue was not reached, or throttled, within the bounded retry."""


@dataclass(frozen=True)
class QueueMessage:
    """A received message: what to delete or release it by, and its body."""

    message_id: str
    receipt: str
    body: str


def queue_endpoint(queue_url: str) -> tuple[str | None, str | None]:
    """(endpoint URL or None for AWS's own, region or None) the queue URL implies."""
    parts = urlsplit(queue_url)
    host = parts.hostname or ""
    labels = host.split(".")
    if host.endswith(".amazonaws.com") and len(labels) >= 4 and labels[0] == "sqs":
        return None, labels[1]
    return f"{parts.scheme}://{parts.netloc}", None


class EventQueue:
    """One SQS queue, every call retried with bounded backoff."""

    def __init__(
        self,
        queue_url: str,
        *,
        region: str | None = None,
        retry: RetryPolicy | None = None,
        wait_s: int = 1,
    ) -> None:
        self.url = queue_url
        self.retry = retry or RetryPolicy()
        self.wait_s = wait_s
        """Long polling of each receive: with 0, SQS samples some of its servers and may
        answer empty while messages wait; 1 asks them all, waiting at most that long."""
        endpoint, url_region = queue_endpoint(queue_url)
        self.client = aws_client(
            "sqs",
            endpoint_url=endpoint,
            region=url_region or region or "us-east-1",
            max_pool_connections=2 * PARALLEL,
        )

    def _call(self, action: str, fn: Callable[[], T]) -> T:
        from botocore.exceptions import ClientError

        what = f"SQS {action} on {self.url}"

        def give_up(exc: BaseException, attempts: int) -> BaseException:
            return QueueUnreachableError(f"{what} failed after {attempts} attempts: {exc}")

        try:
            return call_aws(what, fn, policy=self.retry, give_up=give_up, logger=log)
        except ClientError as exc:
            raise QueueError(f"{what} refused: {exc}") from exc

    def receive(
        self, limit: int, visibility_s: int, budget_s: float = RECEIVE_BUDGET_S
    ) -> tuple[list[QueueMessage], bool]:
        """Up to `limit` messages, hidden from other receivers for `visibility_s`, received for
        at most about `budget_s` seconds by `PARALLEL` receivers at once, and whether the queue
        was drained (a receive found nothing more). Raises `QueueError`."""
        messages: list[QueueMessage] = []
        asked = [0]  # messages asked for by receives in flight
        drained = threading.Event()
        lock = threading.Lock()
        deadline = time.monotonic() + budget_s

        def receiver() -> None:
            while not drained.is_set() and time.monotonic() < deadline:
                with lock:
                    want = min(MAX_PER_CALL, limit - len(messages) - asked[0])
                    if want <= 0:
                        return
                    asked[0] += want
                got = self._receive_once(visibility_s, want)
                with lock:
                    asked[0] -= want
                    messages.extend(got)
                if not got:
                    drained.set()

        with ThreadPoolExecutor(PARALLEL) as pool:
            for done in [pool.submit(receiver) for _ in range(PARALLEL)]:
                done.result()
        return messages, drained.is_set()

    def _receive_once(self, visibility_s: int, want: int) -> list[QueueMessage]:
        out: Any = self._call(
            "ReceiveMessage",
            lambda: self.client.receive_message(
                QueueUrl=self.url,
                MaxNumberOfMessages=want,
                VisibilityTimeout=visibility_s,
                WaitTimeSeconds=self.wait_s,
            ),
        )
        return [
            QueueMessage(m["MessageId"], m["ReceiptHandle"], m.get("Body", ""))
            for m in out.get("Messages", [])
        ]

    def delete(self, messages: Sequence[QueueMessage]) -> int:
        """Delete `messages`, 10 a call; returns how many SQS refused (a receipt that expired
        because the message became visible again: it is received and dropped again later).
        Raises `QueueError`."""
        return self._batch("DeleteMessageBatch", messages, {})

    def release(self, messages: Sequence[QueueMessage]) -> int:
        """Make `messages` visible again at once (left for a later tick); returns how many SQS
        refused. Raises `QueueError`."""
        return self._batch("ChangeMessageVisibilityBatch", messages, {"VisibilityTimeout": 0})

    def _batch(
        self,
        action: str,
        messages: Sequence[QueueMessage],
        extra: dict[str, Any],
    ) -> int:
        method = {
            "DeleteMessageBatch": self.client.delete_message_batch,
            "ChangeMessageVisibilityBatch": self.client.change_message_visibility_batch,
        }[action]

        def one_batch(batch: Sequence[QueueMessage]) -> int:
            entries = [
                {"Id": str(i), "ReceiptHandle": m.receipt, **extra} for i, m in enumerate(batch)
            ]
            out: Any = self._call(action, lambda: method(QueueUrl=self.url, Entries=entries))
            for failed in out.get("Failed", []):
                log.warning(
                    "SQS %s on %s: message %s: %s (%s)",
                    action,
                    self.url,
                    batch[int(failed["Id"])].message_id,
                    failed.get("Message", ""),
                    failed.get("Code", ""),
                )
            return len(out.get("Failed", []))

        batches = [messages[i : i + MAX_PER_CALL] for i in range(0, len(messages), MAX_PER_CALL)]
        if not batches:
            return 0
        with ThreadPoolExecutor(min(PARALLEL, len(batches))) as pool:
            return sum(pool.map(one_batch, batches))

    def attributes(self) -> dict[str, str]:
        """The queue's attributes (`QueueArn`, `Policy`, `ApproximateNumberOfMessages`, ...).
        Raises `QueueError`."""
        out: Any = self._call(
            "GetQueueAttributes",
            lambda: self.client.get_queue_attributes(QueueUrl=self.url, AttributeNames=["All"]),
        )
        return dict(out.get("Attributes", {}))

    def set_policy(self, policy: str) -> None:
        """Replace the queue's access policy with `policy` (a JSON policy document).
        Raises `QueueError`."""
        self._call(
            "SetQueueAttributes",
            lambda: self.client.set_queue_attributes(
                QueueUrl=self.url, Attributes={"Policy": policy}
            ),
        )
