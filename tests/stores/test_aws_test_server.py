"""The loopback AWS server the tests use keeps DynamoDB's atomicity under concurrent clients
(`tests.support.aws_server` says what moto's own threaded server gets wrong)."""

from __future__ import annotations

import threading
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from tests.support.aws_server import LocalAwsServer

pytestmark = pytest.mark.slow

PUTS = 200
PADS = 1000


def test_a_cancelled_transaction_never_undoes_another_clients_writes(
    aws_server: LocalAwsServer,
) -> None:
    """One client's transactions are cancelled over and over (a condition that never holds)
    while another puts items one by one: every acknowledged put must stay, and no request may
    fail. moto's threaded server, where a cancelled transaction restores the tables as they
    were when it began, loses some of 200 puts and answers some transactions with a 500."""

    def client() -> Any:
        return boto3.client("dynamodb", endpoint_url=aws_server.endpoint_url)

    table = "concurrent-writes"
    writer = client()
    writer.create_table(
        TableName=table,
        KeySchema=[{"AttributeName": "k", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "k", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    writer.put_item(TableName=table, Item={"k": {"S": "guard"}})
    for start in range(0, PADS, 25):  # a table worth copying: the copy is the window
        pads = [
            {"PutRequest": {"Item": {"k": {"S": f"pad-{i}"}, "v": {"S": "x" * 200}}}}
            for i in range(start, start + 25)
        ]
        writer.batch_write_item(RequestItems={table: pads})
    stop = threading.Event()
    cancelled, failed = [0], []

    def cancel_forever() -> None:
        own = client()
        while not stop.is_set():
            try:
                own.transact_write_items(
                    TransactItems=[
                        {
                            "Put": {
                                "TableName": table,
                                "Item": {"k": {"S": "guard"}},
                                "ConditionExpression": "attribute_not_exists(k)",
                            }
                        }
                    ]
                )
            except own.exceptions.TransactionCanceledException:
                cancelled[0] += 1
            except ClientError as exc:
                failed.append(str(exc))

    canceller = threading.Thread(target=cancel_forever)
    canceller.start()
    try:
        for i in range(PUTS):
            writer.put_item(TableName=table, Item={"k": {"S": f"w-{i}"}})
    finally:
        stop.set()
        canceller.join()
    lost = [
        i
        for i in range(PUTS)
        if "Item" not in writer.get_item(TableName=table, Key={"k": {"S": f"w-{i}"}})
    ]
    assert cancelled[0] > 0  # the race was run
    assert lost == [] and failed == []
