"""AWS API calls as IAM actions, and the comparison of the actions called with the policy.

IAM authorizes actions, not API operations, and the two differ in places: S3's ListObjectsV2 is
`s3:ListBucket`, HeadObject is `s3:GetObject`, a multipart upload is `s3:PutObject`; DynamoDB's
TransactWriteItems is no action at all — each of its items needs the action of its kind
(`dynamodb:PutItem`, `UpdateItem`, `DeleteItem`, `ConditionCheckItem`). So the mapping is a
table, written out: an operation missing from it is reported as unmapped rather than guessed,
and whoever adds a call adds its IAM name here and in the policy.

Pure functions only; `tests/support/aws_action_recorder.py` records the calls.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
POLICY_PATH = ROOT / "docs" / "iam-policy.json"

# (botocore service name, API operation) -> the IAM actions that call needs.
IAM_ACTIONS: dict[tuple[str, str], tuple[str, ...]] = {
    # DynamoDB: the lease table (resources/stores/dynamodb).
    ("dynamodb", "GetItem"): ("dynamodb:GetItem",),
    ("dynamodb", "PutItem"): ("dynamodb:PutItem",),
    ("dynamodb", "UpdateItem"): ("dynamodb:UpdateItem",),
    ("dynamodb", "DeleteItem"): ("dynamodb:DeleteItem",),
    ("dynamodb", "Query"): ("dynamodb:Query",),
    ("dynamodb", "Scan"): ("dynamodb:Scan",),
    ("dynamodb", "BatchGetItem"): ("dynamodb:BatchGetItem",),
    ("dynamodb", "BatchWriteItem"): ("dynamodb:BatchWriteItem",),
    ("dynamodb", "DescribeTable"): ("dynamodb:DescribeTable",),
    ("dynamodb", "DescribeTimeToLive"): ("dynamodb:DescribeTimeToLive",),
    ("dynamodb", "CreateTable"): ("dynamodb:CreateTable",),
    ("dynamodb", "UpdateTimeToLive"): ("dynamodb:UpdateTimeToLive",),
    # TransactWriteItems: per item, see `transact_write_actions`.
    # STS: the store's assumed role (resources/stores/dynamodb/client.py).
    ("sts", "AssumeRole"): ("sts:AssumeRole",),
    # S3: sources, tables, quarantine (resources/objects/s3.py, s3transfer underneath).
    ("s3", "ListObjectsV2"): ("s3:ListBucket",),
    ("s3", "ListObjects"): ("s3:ListBucket",),
    ("s3", "HeadBucket"): ("s3:ListBucket",),
    ("s3", "HeadObject"): ("s3:GetObject",),
    ("s3", "GetObject"): ("s3:GetObject",),
    ("s3", "PutObject"): ("s3:PutObject",),
    ("s3", "CopyObject"): ("s3:GetObject", "s3:PutObject"),
    ("s3", "DeleteObject"): ("s3:DeleteObject",),
    ("s3", "DeleteObjects"): ("s3:DeleteObject",),
    ("s3", "CreateMultipartUpload"): ("s3:PutObject",),
    ("s3", "UploadPart"): ("s3:PutObject",),
    ("s3", "CompleteMultipartUpload"): ("s3:PutObject",),
    ("s3", "UploadPartCopy"): ("s3:GetObject", "s3:PutObject"),
    ("s3", "AbortMultipartUpload"): ("s3:AbortMultipartUpload",),
    # S3: a bucket's event notifications (resources/notifications/bucket_notifications.py).
    ("s3", "GetBucketNotificationConfiguration"): ("s3:GetBucketNotification",),
    ("s3", "PutBucketNotificationConfiguration"): ("s3:PutBucketNotification",),
    # SQS: a stream's event queue (resources/notifications/queue.py); the batch calls are
    # authorized as their single-message actions.
    ("sqs", "ReceiveMessage"): ("sqs:ReceiveMessage",),
    ("sqs", "DeleteMessage"): ("sqs:DeleteMessage",),
    ("sqs", "DeleteMessageBatch"): ("sqs:DeleteMessage",),
    ("sqs", "ChangeMessageVisibility"): ("sqs:ChangeMessageVisibility",),
    ("sqs", "ChangeMessageVisibilityBatch"): ("sqs:ChangeMessageVisibility",),
    ("sqs", "GetQueueAttributes"): ("sqs:GetQueueAttributes",),
    ("sqs", "SetQueueAttributes"): ("sqs:SetQueueAttributes",),
    # Glue: the catalog (resources/catalog/glue.py); IAM names are the API names.
    **{
        ("glue", op): (f"glue:{op}",)
        for op in (
            "CreateDatabase",
            "GetDatabase",
            "GetTable",
            "GetTables",
            "CreateTable",
            "UpdateTable",
            "GetPartition",
            "GetPartitions",
            "CreatePartition",
            "UpdatePartition",
            "BatchCreatePartition",
        )
    },
}

# A TransactWriteItems item's kind -> the action DynamoDB authorizes it as.
TRANSACT_ITEM_ACTIONS = {
    "Put": "dynamodb:PutItem",
    "Update": "dynamodb:UpdateItem",
    "Delete": "dynamodb:DeleteItem",
    "ConditionCheck": "dynamodb:ConditionCheckItem",
}


def transact_write_actions(params: Mapping[str, Any]) -> tuple[str, ...]:
    """The actions of one TransactWriteItems request: one per kind of item it holds."""
    kinds = {kind for item in params.get("TransactItems", []) for kind in item}
    return tuple(sorted(TRANSACT_ITEM_ACTIONS[k] for k in kinds))


def iam_actions(service: str, operation: str, params: Mapping[str, Any]) -> tuple[str, ...]:
    """The IAM actions one API call needs; `unmapped:<service>:<operation>` for a call the
    table does not know, so that the comparison names it instead of guessing an action."""
    if (service, operation) == ("dynamodb", "TransactWriteItems"):
        return transact_write_actions(params)
    return IAM_ACTIONS.get((service, operation), (f"unmapped:{service}:{operation}",))


def policy_actions(policy: Mapping[str, Any]) -> set[str]:
    """Every action an IAM policy document's Allow statements grant, as written (no
    wildcards: least privilege names each one)."""
    granted: set[str] = set()
    for statement in policy["Statement"]:
        if statement.get("Effect") != "Allow":
            continue
        actions = statement["Action"]
        granted.update([actions] if isinstance(actions, str) else actions)
    return granted


def load_policy(path: Path = POLICY_PATH) -> dict[str, Any]:
    return json.loads(path.read_text())


def policy_problems(
    called: Iterable[str], granted: Iterable[str], *, whole_suite: bool
) -> list[str]:
    """What is wrong with a policy granting `granted` for code that called `called`: an action
    called but not granted (always), an operation without an IAM mapping (always), and an
    action granted but never called — only with `whole_suite`, since a partial run calls a
    subset of the actions and would report most of the policy as unused."""
    called, granted = set(called), set(granted)
    problems = [
        f"no IAM action known for {a.removeprefix('unmapped:')}: add it to IAM_ACTIONS in "
        "tests/support/aws_actions.py and to docs/iam-policy.json"
        for a in sorted(called)
        if a.startswith("unmapped:")
    ]
    problems += [
        f"{a} is called by product code but docs/iam-policy.json does not grant it"
        for a in sorted(called - granted)
        if not a.startswith("unmapped:")
    ]
    if whole_suite:
        problems += [
            f"{a} is granted by docs/iam-policy.json but no product code called it in the "
            "whole suite: remove it (least privilege)"
            for a in sorted(granted - called)
        ]
    return problems
