"""The IAM policy check itself (tests/support/iam_policy_plugin.py runs it over the whole suite):
the API-to-IAM mapping, both directions of the comparison, the policy document and its docs,
and the recorder's split between product calls and test setup, in and out of process."""

from __future__ import annotations

import os
import re
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest

from resources.objects.s3 import S3ObjectStore
from tests.support.aws_action_recorder import RECORD_DIR_ENV, ActionRecorder, recorded_command
from tests.support.aws_actions import (
    ROOT,
    iam_actions,
    load_policy,
    policy_actions,
    policy_problems,
)
from tests.support.aws_server import AWS_TEST_ENV, LocalAwsServer

DOCS = ROOT / "docs" / "iam.md"


@pytest.mark.parametrize(
    ("service", "operation", "expected"),
    [
        ("s3", "ListObjectsV2", ("s3:ListBucket",)),
        ("s3", "HeadObject", ("s3:GetObject",)),
        ("s3", "DeleteObjects", ("s3:DeleteObject",)),
        ("s3", "CopyObject", ("s3:GetObject", "s3:PutObject")),
        ("s3", "CreateMultipartUpload", ("s3:PutObject",)),
        ("s3", "UploadPart", ("s3:PutObject",)),
        ("s3", "CompleteMultipartUpload", ("s3:PutObject",)),
        ("s3", "AbortMultipartUpload", ("s3:AbortMultipartUpload",)),
        ("glue", "BatchCreatePartition", ("glue:BatchCreatePartition",)),
        ("dynamodb", "BatchGetItem", ("dynamodb:BatchGetItem",)),
        ("sts", "AssumeRole", ("sts:AssumeRole",)),
        ("s3", "PutBucketPolicy", ("unmapped:s3:PutBucketPolicy",)),
    ],
)
def test_api_operations_map_to_their_iam_actions(
    service: str, operation: str, expected: tuple[str, ...]
) -> None:
    assert iam_actions(service, operation, {}) == expected


def test_a_transaction_needs_the_action_of_each_kind_of_item_it_holds() -> None:
    """TransactWriteItems is no IAM action: DynamoDB authorizes each item as its own kind."""
    params = {"TransactItems": [{"Put": {}}, {"Update": {}}, {"Update": {}}]}
    assert iam_actions("dynamodb", "TransactWriteItems", params) == (
        "dynamodb:PutItem",
        "dynamodb:UpdateItem",
    )
    check = {"TransactItems": [{"ConditionCheck": {}}, {"Delete": {}}]}
    assert iam_actions("dynamodb", "TransactWriteItems", check) == (
        "dynamodb:ConditionCheckItem",
        "dynamodb:DeleteItem",
    )


def test_the_check_names_an_action_called_but_not_granted() -> None:
    granted = policy_actions(load_policy())
    problems = policy_problems(granted, granted - {"s3:DeleteObject"}, whole_suite=False)
    assert problems == [
        "s3:DeleteObject is called by product code but docs/iam-policy.json does not grant it"
    ]


def test_the_check_names_an_action_granted_but_never_called_only_after_the_whole_suite() -> None:
    granted = policy_actions(load_policy())
    wider = granted | {"dynamodb:DeleteTable"}
    (problem,) = policy_problems(granted, wider, whole_suite=True)
    assert problem.startswith("dynamodb:DeleteTable is granted by docs/iam-policy.json but no")
    assert policy_problems(granted, wider, whole_suite=False) == []
    assert policy_problems(granted, granted, whole_suite=True) == []


def test_the_check_names_a_call_without_an_iam_mapping() -> None:
    (problem,) = policy_problems({"unmapped:s3:PutBucketPolicy"}, set(), whole_suite=False)
    assert problem.startswith("no IAM action known for s3:PutBucketPolicy: add it to IAM_ACTIONS")


def test_the_policy_is_resource_scoped_and_every_statement_and_placeholder_is_documented() -> None:
    policy = load_policy()
    assert policy["Version"] == "2012-10-17"
    docs = DOCS.read_text()
    for statement in policy["Statement"]:
        assert statement["Effect"] == "Allow"
        actions = statement["Action"]
        assert all("*" not in a for a in ([actions] if isinstance(actions, str) else actions))
        resources = statement["Resource"]
        resources = [resources] if isinstance(resources, str) else resources
        assert "*" not in resources, f"{statement['Sid']} is not scoped to resources"
        assert f"`{statement['Sid']}`" in docs, f"docs/iam.md does not explain {statement['Sid']}"
    placeholders = set(re.findall(r"\$\{\w+\}", (ROOT / "docs" / "iam-policy.json").read_text()))
    undocumented = {p for p in placeholders if f"`{p}`" not in docs}
    assert not undocumented, f"docs/iam.md does not explain {sorted(undocumented)}"
    assert "docs/iam.md" in (ROOT / "README.md").read_text()


@pytest.fixture
def recorder() -> Iterator[ActionRecorder]:
    recorder = ActionRecorder()
    recorder.install()
    yield recorder
    recorder.uninstall()


def test_only_product_clients_called_by_product_code_are_recorded(
    aws_server: LocalAwsServer, recorder: ActionRecorder, tmp_path: Path
) -> None:
    """Test setup (a test's own client) and a test calling a product client directly are
    not recorded; product calls are, s3transfer's worker threads included."""
    bucket = f"iam-{uuid.uuid4().hex[:12]}"
    setup = boto3.client("s3", endpoint_url=aws_server.endpoint_url, region_name="us-east-1")
    setup.create_bucket(Bucket=bucket)
    setup.put_object(Bucket=bucket, Key="t/a", Body=b"a")
    store = S3ObjectStore(bucket, "t", endpoint_url=aws_server.endpoint_url)
    assert [o.key for o in store.list_after(None, 10)] == ["a"]
    assert store.size("a") == 1
    local = tmp_path / "b"
    local.write_bytes(b"b")
    store.move_file(local, "b")  # upload_file: PutObject from a transfer thread
    store.client.delete_object(Bucket=bucket, Key="t/a")  # the test's own call
    assert recorder.actions == {
        "s3:ListBucket": {"s3:ListObjectsV2"},
        "s3:GetObject": {"s3:HeadObject"},
        "s3:PutObject": {"s3:PutObject"},
    }


def test_a_child_process_records_its_actions_in_the_directory_it_is_given(
    aws_server: LocalAwsServer, tmp_path: Path
) -> None:
    """`leasehold status` on a DynamoDB table that does not exist: one DescribeTable, written
    by the child to its own file, which the plugin reads at the end."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEASEHOLD_")}
    env.update(
        AWS_TEST_ENV,
        PYTHONPATH=str(ROOT),
        LEASEHOLD_DATA_DIR=str(tmp_path / "data"),
        LEASEHOLD_STORE_BACKEND="dynamodb",
        LEASEHOLD_DYNAMODB_ENDPOINT_URL=aws_server.endpoint_url,
        LEASEHOLD_DYNAMODB_TABLE=f"absent-{uuid.uuid4().hex[:12]}",
        **{RECORD_DIR_ENV: str(tmp_path / "actions")},
    )
    (tmp_path / "actions").mkdir()
    done = subprocess.run(
        recorded_command("resources.cli.main", "status"),
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stderr
    merged = ActionRecorder()
    assert merged.merge_children(tmp_path / "actions") == 1
    assert merged.actions == {"dynamodb:DescribeTable": {"dynamodb:DescribeTable"}}
