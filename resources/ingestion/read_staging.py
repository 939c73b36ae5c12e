"""A read's objects before Spark sees them: each inspected (an object that cannot be read at
all fails its unit here, not the batch) and staged under a name that maps its rows back to it —
a JSON object linked as it is, a CSV object rewritten as JSON lines (`csv_records`)."""

from __future__ import annotations

from pathlib import Path

from resources.ingestion.batch_results import SourceBatchResult
from resources.ingestion.csv_records import CsvHeaderError, stage_csv
from resources.ingestion.source_files import inspect_source, stage_input
from resources.ingestion.spark_rows import input_name
from resources.streams import StreamConfig


def inspected(
    files: dict[str, Path], groups: dict[str, str]
) -> tuple[dict[str, SourceBatchResult], dict[int, str], dict[int, int]]:
    """(a result per group, source key by batch index, size by batch index) of `files`: an
    object that cannot be read is in its group's `failed` and has no index."""
    results = {groups[key]: SourceBatchResult() for key in files}
    index: dict[int, str] = {}
    sizes: dict[int, int] = {}
    for i, (key, path) in enumerate(files.items()):
        problem, size = inspect_source(path)
        if problem is None:
            index[i], sizes[i] = key, size
        else:
            results[groups[key]].failed[key] = problem
    return results, index, sizes


def stage_read(
    read: list[int],
    inputs: Path,
    files: dict[str, Path],
    index: dict[int, str],
    groups: dict[str, str],
    line_offsets: dict[str, int],
    results: dict[str, SourceBatchResult],
    config: StreamConfig,
) -> tuple[dict[int, Path], dict[int, list[str]]]:
    """Stage one read's objects under `inputs`, named by batch index: (staged path by index,
    CSV header names by index). A CSV object whose header cannot be read is reported in its
    group's `failed` and left out."""
    csv = config.format == "csv"
    inputs.mkdir(parents=True, exist_ok=True)
    staged_inputs: dict[int, Path] = {}
    headers: dict[int, list[str]] = {}
    for i in read:
        key = index[i]
        path = files[key]
        target = inputs / input_name(i, path, csv)
        if csv:
            staged = _stage_csv(path, target, config, line_offsets.get(key, 0))
            if isinstance(staged, str):
                results[groups[key]].failed[key] = staged
                continue
            headers[i] = staged
        else:
            stage_input(path, target)
        staged_inputs[i] = target
    return staged_inputs, headers


def _stage_csv(path: Path, target: Path, config: StreamConfig, shift: int) -> list[str] | str:
    """Stage a CSV object as JSON lines, numbered as its object numbers them (`shift`: a
    chunk's): its header's names, or why it cannot be read."""
    try:
        return stage_csv(path, target, config, first_line=1 + shift).header
    except CsvHeaderError as exc:
        target.unlink(missing_ok=True)
        return str(exc)
    except OSError as exc:
        target.unlink(missing_ok=True)
        return f"cannot read: {exc.strerror or exc}"
