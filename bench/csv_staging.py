"""What reading CSV costs now that it is parsed in Python and staged as JSON lines (issue 31).

    .venv/bin/python bench/csv_staging.py [--objects 40] [--records 5000] [--repeat 3]

The same records (an id, a name that sometimes holds a quoted delimiter or line break, a long,
a double, a boolean, a time) as CSV written by Python's csv module and as JSON lines; times, in
one Spark session, best of `--repeat`, wall seconds and CPU core-seconds (this process and the
JVM: on a shared machine CPU says more than wall time):
  stage_csv     `csv_records.stage_csv` alone, per record (Python, one core);
  read jsonl    `SourceReader.read` of the JSON-lines objects;
  read csv      `SourceReader.read` of the CSV objects (staging included);
  spark, typed  Spark's read of the staged CSV as staged (numbers and booleans as JSON literals);
  spark, text   the same with every field a JSON string: each record takes the text parse.
"""

import argparse
import csv
import io
import json
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from ingest import measured, process_cpu  # noqa: E402

from resources.ingestion.csv_records import stage_csv  # noqa: E402
from resources.ingestion.read_plan import read_plan  # noqa: E402
from resources.ingestion.source_reader import SourceReader  # noqa: E402
from resources.ingestion.spark_rows import source_rows  # noqa: E402
from resources.spark.session import build_spark_session  # noqa: E402
from resources.streams import load_streams  # noqa: E402

STREAMS = """
streams:
  {name}:
    source: file://{base}/{name}
    format: {format}
    schema: {{id: string, name: string, n: long, amount: double, ok: boolean, at: timestamp}}
    event_time: at
    record_id: id
    table: file://{base}/lake/{name}
"""
HEADER = ["id", "name", "n", "amount", "ok", "at"]


def record(rnd: random.Random, o: int, i: int) -> list[str]:
    name = f"user {i % 997}"
    if i % 10 == 0:
        name = f"Smith, {name}"
    elif i % 25 == 0:
        name = f'{name} said "hi"\r\nand left'
    at = f"2026-01-{1 + i % 3:02d}T{i % 24:02d}:{i % 60:02d}:00Z"
    return [f"r{o}-{i}", name, str(i), f"{rnd.random() * 100:.2f}", str(i % 2 == 0).lower(), at]


def write_sources(base: Path, objects: int, records: int) -> tuple[dict, dict]:
    rnd = random.Random(31)
    csv_files, json_files = {}, {}
    for name in ("csv", "jsonl"):
        (base / name).mkdir(parents=True)
    for o in range(objects):
        rows = [record(rnd, o, i) for i in range(records)]
        out = io.StringIO(newline="")
        csv.writer(out).writerows([HEADER, *rows])
        path = base / "csv" / f"o{o:04d}.csv"
        path.write_text(out.getvalue(), newline="")
        csv_files[path.name] = path
        path = base / "jsonl" / f"o{o:04d}.jsonl"
        lines = []
        for r in rows:
            values = dict(zip(HEADER, r, strict=True))
            values.update(n=int(r[2]), amount=float(r[3]), ok=r[4] == "true")
            lines.append(json.dumps(values))
        path.write_text("\n".join(lines) + "\n")
        json_files[path.name] = path
    return csv_files, json_files


def best(runs: list[tuple[float, float]]) -> tuple[float, float]:
    return min(r[0] for r in runs), min(r[1] for r in runs)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--objects", type=int, default=40)
    parser.add_argument("--records", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    total = args.objects * args.records
    with tempfile.TemporaryDirectory(prefix="leasehold-csv-bench-") as scratch:
        base = Path(scratch)
        csv_files, json_files = write_sources(base, args.objects, args.records)
        configs = {}
        for name in ("csv", "jsonl"):
            text = STREAMS.format(name=name, base=base, format=name)
            (base / f"{name}.yaml").write_text(text)
            configs[name] = load_streams(base / f"{name}.yaml")[name]

        staged = base / "staged"
        staged.mkdir()
        cpu_runs = []
        for _ in range(args.repeat):
            started = time.process_time()
            for i, path in enumerate(csv_files.values()):
                stage_csv(path, staged / f"{i:07d}.txt", configs["csv"])
            cpu_runs.append(time.process_time() - started)
        text_staged = base / "text-staged"
        text_staged.mkdir()
        for path in staged.iterdir():  # every field a JSON string, as before the literals
            lines = []
            for line in path.read_text().splitlines():
                values = json.loads(line)
                for key in ("n", "amount", "ok"):
                    if values.get(key) is not None:
                        values[key] = json.dumps(values[key])
                lines.append(json.dumps(values))
            (text_staged / path.name).write_text("\n".join(lines) + "\n")

        spark = build_spark_session(master="local[2]")
        cpu = process_cpu(spark)
        readers = {name: SourceReader(spark, config) for name, config in configs.items()}
        files = {"csv": csv_files, "jsonl": json_files}
        plan = read_plan(configs["csv"])
        results: dict[str, list[tuple[float, float]]] = {}
        for n in range(args.repeat):
            for name in ("jsonl", "csv"):
                wall, used, _ = measured(
                    cpu, readers[name].read, files[name], base / f"st-{name}-{n}", f"a{n}"
                )
                results.setdefault(f"read {name}", []).append((wall, used))
            for name, directory in (("typed", staged), ("text", text_staged)):
                wall, used, _ = measured(
                    cpu, lambda d: source_rows(spark, configs["csv"], plan, d).toArrow(), directory
                )
                results.setdefault(f"spark, {name}", []).append((wall, used))
        print(f"{args.objects} objects x {args.records} records ({total:,} records)")
        print(f"stage_csv: {min(cpu_runs) / total * 1e6:.2f} us CPU per record")
        print("| path | seconds | CPU, core-seconds |")
        print("| --- | --- | --- |")
        for name, runs in results.items():
            wall, used = best(runs)
            print(f"| {name} | {wall:.2f} | {used:.1f} |")


if __name__ == "__main__":
    main()
