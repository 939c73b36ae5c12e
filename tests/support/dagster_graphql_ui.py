"""The Dagster UI's GraphQL traffic, for tests: what the browser posts to `/graphql`.

A test of "the UI works" that drives Dagster's Python API proves nothing about the UI: the UI
reaches the instance only through the webserver's GraphQL endpoint, with its own selectors
(repository location and name, the implicit asset job), tags (`dagster/partition`,
`dagster/from_ui`) and backfill parameters. The documents here are the ones the Dagster 1.13
UI sends (taken from the webapp's sources shipped in `dagster_webserver`), trimmed to the fields
a test reads: `LaunchPipelineExecution` as the asset page's "Materialize" builds it
(`executionParamsForAssetJob`: asset and asset-check selection, the partition's tags),
`LaunchPartitionBackfill` as the partition dialog builds it (`partitionNames` or
`allPartitions: true`, `tags` with `dagster/from_ui`), `Terminate` (`terminateRuns`), the
partition health query (`assetPartitionStatuses`), `StopRunningSensor` / `StartSensor`,
`AddDynamicPartitionMutation` (the dialog's "Add partition") and the run page's
`RunLogsQuery`.

Everything goes over HTTP with the standard library, so a failure shows the response as the
UI would have received it. `DagsterGraphQLClient` (dagster_graphql's Python client) covers
launching jobs and terminating runs, but not asset selections with checks, backfills,
partition statuses or sensors, and it sends its own documents, not the UI's.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

ASSET_JOB = "__ASSET_JOB"  # the implicit job the UI launches assets through
FROM_UI = {"key": "dagster/from_ui", "value": "true"}
PARTITION_TAG = "dagster/partition"
TERMINAL_RUN_STATUSES = {"SUCCESS", "FAILURE", "CANCELED"}
TERMINAL_BACKFILL_STATUSES = {
    "COMPLETED",
    "COMPLETED_SUCCESS",
    "COMPLETED_FAILED",
    "FAILED",
    "CANCELED",
}


class GraphQLError(AssertionError):
    """The endpoint answered with `errors`, or a union member the caller did not expect."""


PYTHON_ERROR = """
fragment PythonErrorFragment on PythonError { message stack }
"""

ASSET_GRAPH = """
query AssetGraphQuery {
  assetNodes {
    id
    assetKey { path }
    groupName
    description
    owners {
      ... on TeamAssetOwner { team }
      ... on UserAssetOwner { email }
    }
    kinds
    isPartitioned
    isMaterializable
    jobNames
    dependencyKeys { path }
    dependedByKeys { path }
    partitionDefinition { name type description }
    metadataEntries {
      label
      ... on TableSchemaMetadataEntry {
        schema { columns { name type description constraints { nullable } } }
      }
    }
    assetChecksOrError {
      ... on AssetChecks { checks { name description blocking jobNames } }
      ... on AssetCheckNeedsMigrationError { message }
    }
  }
}
"""

PARTITION_HEALTH = """
query PartitionHealthQuery($assetKey: AssetKeyInput!) {
  assetNodeOrError(assetKey: $assetKey) {
    ... on AssetNode {
      id
      partitionKeysByDimension { name partitionKeys }
      partitionStats { numMaterialized numFailed numMaterializing numPartitions }
      assetPartitionStatuses {
        ... on DefaultPartitionStatuses {
          materializedPartitions
          materializingPartitions
          failedPartitions
          unmaterializedPartitions
        }
      }
    }
    ... on AssetNotFoundError { message }
  }
}
"""

MATERIALIZATIONS = """
query AssetMaterializations($assetKey: AssetKeyInput!, $partitions: [String!]) {
  assetNodeOrError(assetKey: $assetKey) {
    ... on AssetNode {
      assetMaterializations(partitions: $partitions, limit: 100) {
        partition
        runId
        metadataEntries {
          label
          ... on IntMetadataEntry { intValue }
          ... on TextMetadataEntry { text }
        }
      }
    }
  }
}
"""

ASSET_CHECK_EXECUTIONS = """
query AssetCheckExecutions($assetKey: AssetKeyInput!, $checkName: String!) {
  assetCheckExecutions(assetKey: $assetKey, checkName: $checkName, limit: 20) {
    id
    runId
    status
    evaluation { success description }
  }
}
"""

SENSORS = (
    """
query SensorsRootQuery($repositorySelector: RepositorySelector!) {
  sensorsOrError(repositorySelector: $repositorySelector) {
    ... on Sensors {
      results {
        id
        name
        description
        minIntervalSeconds
        targets { pipelineName }
        sensorState {
          id
          selectorId
          status
          ticks(limit: 5) { status runIds timestamp skipReason error { message } }
        }
      }
    }
    ... on RepositoryNotFoundError { message }
    ...PythonErrorFragment
  }
}
"""
    + PYTHON_ERROR
)

STOP_SENSOR = (
    """
mutation StopRunningSensor($id: String!) {
  stopSensor(id: $id) {
    ... on StopSensorMutationResult { instigationState { id status } }
    ... on UnauthorizedError { message }
    ...PythonErrorFragment
  }
}
"""
    + PYTHON_ERROR
)

START_SENSOR = (
    """
mutation StartSensor($sensorSelector: SensorSelector!) {
  startSensor(sensorSelector: $sensorSelector) {
    ... on Sensor { id sensorState { id status } }
    ... on SensorNotFoundError { message }
    ... on UnauthorizedError { message }
    ...PythonErrorFragment
  }
}
"""
    + PYTHON_ERROR
)

LAUNCH_PIPELINE_EXECUTION = (
    """
mutation LaunchPipelineExecution($executionParams: ExecutionParams!) {
  launchPipelineExecution(executionParams: $executionParams) {
    __typename
    ... on LaunchRunSuccess { run { id pipelineName } }
    ... on PipelineNotFoundError { message }
    ... on InvalidSubsetError { message }
    ... on RunConfigValidationInvalid { errors { message } }
    ...PythonErrorFragment
  }
}
"""
    + PYTHON_ERROR
)

LAUNCH_PARTITION_BACKFILL = (
    """
mutation LaunchPartitionBackfill($backfillParams: LaunchBackfillParams!) {
  launchPartitionBackfill(backfillParams: $backfillParams) {
    __typename
    ... on LaunchBackfillSuccess { backfillId }
    ... on PartitionSetNotFoundError { message }
    ... on PartitionKeysNotFoundError { message }
    ... on UnauthorizedError { message }
    ... on PipelineNotFoundError { message }
    ... on RunConflict { message }
    ... on ConflictingExecutionParamsError { message }
    ...PythonErrorFragment
  }
}
"""
    + PYTHON_ERROR
)

BACKFILL = (
    """
query BackfillStatus($backfillId: String!) {
  partitionBackfillOrError(backfillId: $backfillId) {
    ... on PartitionBackfill {
      id
      status
      isAssetBackfill
      numPartitions
      partitionNames
      error { message }
      runs(limit: 20) { id status }
      assetBackfillData {
        assetBackfillStatuses {
          ... on AssetPartitionsStatusCounts {
            assetKey { path }
            numPartitionsTargeted
            numPartitionsInProgress
            numPartitionsMaterialized
            numPartitionsFailed
          }
        }
      }
    }
    ... on BackfillNotFoundError { message }
    ...PythonErrorFragment
  }
}
"""
    + PYTHON_ERROR
)

TERMINATE = (
    """
mutation Terminate($runIds: [String!]!, $terminatePolicy: TerminateRunPolicy) {
  terminateRuns(runIds: $runIds, terminatePolicy: $terminatePolicy) {
    ... on TerminateRunsResult {
      terminateRunResults {
        __typename
        ... on TerminateRunSuccess { run { id canTerminate } }
        ... on TerminateRunFailure { message }
        ... on RunNotFoundError { message }
        ... on UnauthorizedError { message }
        ...PythonErrorFragment
      }
    }
    ...PythonErrorFragment
  }
}
"""
    + PYTHON_ERROR
)

RUN = (
    """
query RunRootQuery($runId: ID!) {
  runOrError(runId: $runId) {
    ... on Run {
      id
      status
      tags { key value }
      assetSelection { path }
      assetCheckSelection { name assetKey { path } }
      startTime
      endTime
    }
    ... on RunNotFoundError { message }
    ...PythonErrorFragment
  }
}
"""
    + PYTHON_ERROR
)

ADD_DYNAMIC_PARTITION = (
    """
mutation AddDynamicPartitionMutation(
  $partitionsDefName: String!
  $partitionKey: String!
  $repositorySelector: RepositorySelector!
) {
  addDynamicPartition(
    partitionsDefName: $partitionsDefName
    partitionKey: $partitionKey
    repositorySelector: $repositorySelector
  ) {
    __typename
    ... on AddDynamicPartitionSuccess { partitionsDefName partitionKey }
    ... on UnauthorizedError { message }
    ...PythonErrorFragment
  }
}
"""
    + PYTHON_ERROR
)

RUN_LOGS = (
    """
query RunLogsQuery($runId: ID!, $cursor: String, $limit: Int) {
  logsForRun(runId: $runId, afterCursor: $cursor, limit: $limit) {
    ... on EventConnection {
      events {
        __typename
        ... on MessageEvent { message level eventType stepKey }
      }
      cursor
      hasMore
    }
    ...PythonErrorFragment
  }
}
"""
    + PYTHON_ERROR
)

RUNS = (
    """
query RunsRootQuery($filter: RunsFilter) {
  runsOrError(filter: $filter, limit: 50) {
    ... on Runs { results { id status tags { key value } creationTime startTime endTime } }
    ...PythonErrorFragment
  }
}
"""
    + PYTHON_ERROR
)


@dataclass(frozen=True)
class PartitionStatuses:
    """One asset's partitions as the UI's partition health bar shows them."""

    keys: tuple[str, ...]
    materialized: frozenset[str]
    materializing: frozenset[str]
    failed: frozenset[str]
    unmaterialized: frozenset[str]
    stats: dict[str, int]


class DagsterUi:
    """The webserver at `http://127.0.0.1:<port>` as the UI talks to it."""

    def __init__(
        self, port: int, location: str = "leasehold", repository: str = "__repository__"
    ) -> None:
        self.url = f"http://127.0.0.1:{port}/graphql"
        # Loopback only, whatever proxy the environment names.
        self.opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        self.location = location
        self.repository = repository

    def query(self, document: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
        """POST `document` as the UI's Apollo client does; the `data`, or GraphQLError with
        the whole response."""
        body = json.dumps({"query": document, "variables": variables or {}}).encode()
        request = urllib.request.Request(
            self.url, data=body, headers={"Content-Type": "application/json"}, method="POST"
        )
        try:
            with self.opener.open(request, timeout=60) as response:
                payload = json.loads(response.read())
        except urllib.error.HTTPError as exc:
            raise GraphQLError(f"HTTP {exc.code}: {exc.read()[:2000]!r}") from exc
        if payload.get("errors"):
            raise GraphQLError(json.dumps(payload["errors"], indent=1)[:4000])
        return payload["data"]

    @property
    def repository_selector(self) -> dict[str, str]:
        return {"repositoryLocationName": self.location, "repositoryName": self.repository}

    # -- the asset graph --------------------------------------------------------------------

    def asset_nodes(self) -> dict[str, dict[str, Any]]:
        """Every asset node, by its key as the UI writes it (`events/ingested`)."""
        nodes = self.query(ASSET_GRAPH)["assetNodes"]
        return {"/".join(n["assetKey"]["path"]): n for n in nodes}

    def partition_statuses(self, asset_key: list[str]) -> PartitionStatuses:
        node = self.query(PARTITION_HEALTH, {"assetKey": {"path": asset_key}})["assetNodeOrError"]
        if "assetPartitionStatuses" not in node:
            raise GraphQLError(f"{asset_key}: {node}")
        statuses = node["assetPartitionStatuses"]
        (dimension,) = node["partitionKeysByDimension"]
        return PartitionStatuses(
            keys=tuple(dimension["partitionKeys"]),
            materialized=frozenset(statuses["materializedPartitions"]),
            materializing=frozenset(statuses["materializingPartitions"]),
            failed=frozenset(statuses["failedPartitions"]),
            unmaterialized=frozenset(statuses["unmaterializedPartitions"]),
            stats=node["partitionStats"],
        )

    def materializations(
        self, asset_key: list[str], partitions: list[str] | None = None
    ) -> list[dict[str, Any]]:
        """Newest first: partition, run id and metadata (`{label: int or text value, or
        None for the other kinds}`)."""
        node = self.query(
            MATERIALIZATIONS, {"assetKey": {"path": asset_key}, "partitions": partitions}
        )["assetNodeOrError"]
        return [
            {
                "partition": m["partition"],
                "runId": m["runId"],
                "metadata": {
                    e["label"]: e.get("intValue", e.get("text")) for e in m["metadataEntries"]
                },
            }
            for m in node["assetMaterializations"]
        ]

    def check_executions(self, asset_key: list[str], check_name: str) -> list[dict[str, Any]]:
        return self.query(
            ASSET_CHECK_EXECUTIONS, {"assetKey": {"path": asset_key}, "checkName": check_name}
        )["assetCheckExecutions"]

    # -- sensors ----------------------------------------------------------------------------

    def sensors(self) -> dict[str, dict[str, Any]]:
        result = self.query(SENSORS, {"repositorySelector": self.repository_selector})
        sensors = result["sensorsOrError"]
        if "results" not in sensors:
            raise GraphQLError(str(sensors))
        return {s["name"]: s for s in sensors["results"]}

    def stop_sensor(self, name: str) -> str:
        """The sensor's toggle switched off; its new status. A sensor running by default has
        no stored state until the daemon's first tick stores one; a stop that races that tick
        fails in Dagster ("InstigatorState ... is already present in storage", seen in CI) and
        is clicked again, as a user would: the state exists then."""
        state_id = self.sensors()[name]["sensorState"]["id"]
        try:
            result = self.query(STOP_SENSOR, {"id": state_id})["stopSensor"]
        except GraphQLError as exc:
            if "already present in storage" not in str(exc):
                raise
            result = self.query(STOP_SENSOR, {"id": state_id})["stopSensor"]
        if "instigationState" not in result:
            raise GraphQLError(f"stopSensor {name}: {result}")
        return result["instigationState"]["status"]

    def start_sensor(self, name: str) -> str:
        selector = {**self.repository_selector, "sensorName": name}
        result = self.query(START_SENSOR, {"sensorSelector": selector})["startSensor"]
        if "sensorState" not in result:
            raise GraphQLError(f"startSensor {name}: {result}")
        return result["sensorState"]["status"]

    # -- launching and terminating ----------------------------------------------------------

    def materialize(
        self,
        asset_key: list[str],
        partition: str,
        checks: list[str],
        job_name: str = ASSET_JOB,
    ) -> str:
        """The asset page's "Materialize" of one partition: the implicit asset job, the asset
        and its checks selected (`getAssetCheckHandleInputs`), the partition's tag. The run's
        id."""
        params = {
            "mode": "default",
            "executionMetadata": {
                "tags": [{"key": PARTITION_TAG, "value": partition}, FROM_UI],
            },
            "runConfigData": "{}",
            "selector": {
                **self.repository_selector,
                "pipelineName": job_name,
                "assetSelection": [{"path": asset_key}],
                "assetCheckSelection": [
                    {"name": name, "assetKey": {"path": asset_key}} for name in checks
                ],
            },
        }
        result = self.query(LAUNCH_PIPELINE_EXECUTION, {"executionParams": params})
        launched = result["launchPipelineExecution"]
        if launched["__typename"] != "LaunchRunSuccess":
            raise GraphQLError(f"launchPipelineExecution: {launched}")
        return launched["run"]["id"]

    def backfill(
        self,
        asset_keys: list[list[str]],
        partitions: list[str] | None = None,
        all_partitions: bool = False,
    ) -> str:
        """The partition dialog's "Launch backfill": of `partitions`, or of all partitions
        (`allPartitions: true`, the dialog's "pureAll" target). The backfill's id."""
        params: dict[str, Any] = {
            "tags": [FROM_UI],
            "assetSelection": [{"path": k} for k in asset_keys],
        }
        if all_partitions:
            params["allPartitions"] = True
        else:
            params.update(partitionNames=partitions, fromFailure=False)
        result = self.query(LAUNCH_PARTITION_BACKFILL, {"backfillParams": params})
        launched = result["launchPartitionBackfill"]
        if launched["__typename"] != "LaunchBackfillSuccess":
            raise GraphQLError(f"launchPartitionBackfill: {launched}")
        return launched["backfillId"]

    def backfill_status(self, backfill_id: str) -> dict[str, Any]:
        result = self.query(BACKFILL, {"backfillId": backfill_id})["partitionBackfillOrError"]
        if "status" not in result:
            raise GraphQLError(f"partitionBackfillOrError {backfill_id}: {result}")
        return result

    def terminate(self, run_ids: list[str]) -> list[dict[str, Any]]:
        """The run page's "Terminate" (graceful: `SAFE_TERMINATE`)."""
        result = self.query(TERMINATE, {"runIds": run_ids, "terminatePolicy": "SAFE_TERMINATE"})[
            "terminateRuns"
        ]
        if "terminateRunResults" not in result:
            raise GraphQLError(f"terminateRuns: {result}")
        return result["terminateRunResults"]

    def run(self, run_id: str) -> dict[str, Any]:
        result = self.query(RUN, {"runId": run_id})["runOrError"]
        if "status" not in result:
            raise GraphQLError(f"runOrError {run_id}: {result}")
        return result

    def add_dynamic_partition(self, partitions_def: str, key: str) -> None:
        """The launch dialog's "Add partition" of a dynamic partitions definition."""
        result = self.query(
            ADD_DYNAMIC_PARTITION,
            {
                "partitionsDefName": partitions_def,
                "partitionKey": key,
                "repositorySelector": self.repository_selector,
            },
        )["addDynamicPartition"]
        if result["__typename"] != "AddDynamicPartitionSuccess":
            raise GraphQLError(f"addDynamicPartition: {result}")

    def run_logs(self, run_id: str) -> list[dict[str, Any]]:
        """The run page's event log: each event's type, level, step and message."""
        events: list[dict[str, Any]] = []
        cursor = None
        while True:
            result = self.query(RUN_LOGS, {"runId": run_id, "cursor": cursor, "limit": 1000})
            connection = result["logsForRun"]
            if "events" not in connection:
                raise GraphQLError(f"logsForRun {run_id}: {connection}")
            events.extend(connection["events"])
            if not connection["hasMore"]:
                return events
            cursor = connection["cursor"]

    def runs(self, tags: dict[str, str]) -> list[dict[str, Any]]:
        """Runs carrying every tag of `tags`, newest first."""
        runs_filter = {"tags": [{"key": k, "value": v} for k, v in tags.items()]}
        result = self.query(RUNS, {"filter": runs_filter})["runsOrError"]
        if "results" not in result:
            raise GraphQLError(f"runsOrError: {result}")
        return result["results"]


def tags_of(run: dict[str, Any]) -> dict[str, str]:
    return {t["key"]: t["value"] for t in run["tags"]}
