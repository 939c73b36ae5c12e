"""An assumed role's credentials, over real HTTP: STS at the store's endpoint, assumed again
(same role, session name, external id) before they expire, and used by the store afterwards."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

import resources.stores.dynamodb.client as dynamodb_client
from resources.coordination.errors import StoreConfigError
from resources.coordination.items import PartitionStatus
from resources.stores.dynamodb.store import DynamoDbLeaseStore
from tests.stores.test_dynamodb_store import settings
from tests.support.aws_server import LocalAwsServer

ROLE = "arn:aws:iam::123456789012:role/leasehold-coordination"
ASSUMED = {"RoleArn": ROLE, "RoleSessionName": "leasehold-coordination", "ExternalId": "ext-7"}


class AssumeRoleCalls:
    """What the store's STS client asked (AssumeRole parameters) and got (access key ids)."""

    def __init__(self, sts: Any) -> None:
        self.params: list[dict[str, Any]] = []
        self.keys: list[str] = []
        sts.meta.events.register("provide-client-params.sts.AssumeRole", self._asked)
        sts.meta.events.register("after-call.sts.AssumeRole", self._got)

    def _asked(self, params: dict[str, Any], **kwargs: Any) -> None:
        self.params.append(dict(params))

    def _got(self, parsed: dict[str, Any], **kwargs: Any) -> None:
        self.keys.append(parsed["Credentials"]["AccessKeyId"])


def signing_keys(dynamodb: Any) -> list[str]:
    """The access key id each DynamoDB request is signed with, in order."""
    keys: list[str] = []

    def sent(request: Any, **kwargs: Any) -> None:
        auth = request.headers["Authorization"]
        auth = auth.decode() if isinstance(auth, bytes) else auth
        keys.append(re.search(r"Credential=([^/]+)/", auth).group(1))  # type: ignore[union-attr]

    dynamodb.meta.events.register("before-send.dynamodb", sent)
    return keys


def use(store: DynamoDbLeaseStore) -> None:
    """Create, acquire, renew, complete: the store's calls, each signed."""
    sid = store.source_identifier("s")
    store.create_partitions(sid, ["a"])
    token = store.acquire(sid, "a", "w1", 60).token
    store.renew(token, 60)
    store.complete(token)
    assert store.get(sid, "a").status is PartitionStatus.COMPLETED


def role_store(aws_server: LocalAwsServer) -> DynamoDbLeaseStore:
    return DynamoDbLeaseStore(
        settings(aws_server.endpoint_url, sts_role_arn=ROLE, sts_external_id="ext-7")
    )


def test_the_store_signs_with_the_assumed_role(aws_server: LocalAwsServer) -> None:
    store = role_store(aws_server)  # assumed through STS at the store's (local) endpoint
    role = store.dynamodb.assumed_role
    assert role is not None and role.params == ASSUMED
    calls, signed = AssumeRoleCalls(role.sts), signing_keys(store.client)
    use(store)
    assumed_key = role.credentials.get_frozen_credentials().access_key
    assert assumed_key != "testing"  # not the environment's credentials
    assert set(signed) == {assumed_key}
    assert calls.params == []  # fresh for an hour: not assumed again


def test_credentials_about_to_expire_are_refreshed_by_assuming_the_role_again(
    aws_server: LocalAwsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Margins longer than the credentials' hour: they always count as expiring, so botocore
    # assumes the role again before every request (mandatory refresh).
    monkeypatch.setattr(dynamodb_client, "STS_ADVISORY_REFRESH_S", 2 * 3600)
    monkeypatch.setattr(dynamodb_client, "STS_MANDATORY_REFRESH_S", 2 * 3600)
    store = role_store(aws_server)
    role = store.dynamodb.assumed_role
    first_key = role.credentials.get_frozen_credentials().access_key
    calls, signed = AssumeRoleCalls(role.sts), signing_keys(store.client)

    use(store)  # and it still works on the refreshed credentials

    assert len(calls.params) >= 4
    assert all(params == ASSUMED for params in calls.params)  # same role, name, external id
    assert first_key not in signed
    assert set(signed) <= set(calls.keys)  # every request signed with refreshed credentials
    assert signed[-1] == calls.keys[-1]


def test_a_role_that_cannot_be_assumed_is_a_configuration_error(
    aws_server: LocalAwsServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    with pytest.raises(StoreConfigError, match="sts_role_arn: cannot assume") as raised:
        role_store(aws_server)
    assert raised.value.field == "sts_role_arn"
