"""What writing one small table object costs, with Parquet's default encodings and with
leasehold's (`StreamConfig.dictionary_columns`: dictionary pages for repeated strings only).

    .venv/bin/python bench/parquet_writes.py [--records 5000] [--objects 300] [--repeat 5]

The object is one sample source object (`leasehold run`'s sample data: a unique record id, a
user id out of 997, an amount, an event time), read with pyarrow and written again and again,
alternating the two settings; best of `--repeat`, in CPU milliseconds per object.
"""

import argparse
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.json as pj
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from resources.ingestion.sample_data import write_sample_sources  # noqa: E402
from resources.streams import load_streams  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=5000)
    parser.add_argument("--objects", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    config = load_streams(ROOT / "streams.yaml")["events"]
    work = Path(tempfile.mkdtemp(prefix="leasehold-bench-parquet-"))
    (source,) = write_sample_sources(work / "src", objects=1, records_per_object=args.records)
    schema = pa.schema(
        [
            ("event_id", pa.string()),
            ("user_id", pa.string()),
            ("amount", pa.float64()),
            ("event_time", pa.timestamp("us", tz="UTC")),
        ]
    )
    table = pj.read_json(source, parse_options=pj.ParseOptions(explicit_schema=schema))
    settings = {"Parquet defaults": True, "leasehold": config.dictionary_columns or False}
    cpu_ms: dict[str, list[float]] = {name: [] for name in settings}
    sizes: dict[str, int] = {}
    for _ in range(args.repeat):
        for name, use_dictionary in settings.items():
            started = time.process_time()
            for i in range(args.objects):
                target = work / f"{i}.parquet"
                pq.write_table(table, target, use_dictionary=use_dictionary)
            cpu_ms[name].append((time.process_time() - started) / args.objects * 1000)
            sizes[name] = target.stat().st_size
    base = min(cpu_ms["Parquet defaults"])
    print(f"\none object of {args.records} records, {args.objects} writes, best of {args.repeat}\n")
    print("| encoding | CPU ms per object | vs defaults | bytes |")
    print("| --- | --- | --- | --- |")
    for name in settings:
        best = min(cpu_ms[name])
        print(f"| {name} | {best:.2f} | {best / base:.2f}x | {sizes[name]:,} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
