"""The project's code zip and how it is added to a session (resources/spark/code_shipping.py);
tests/chaos/test_cluster_hosts.py runs it on a real cluster and Connect server on hosts of their
own."""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

import pytest

from resources.spark import code_shipping
from resources.spark.code_shipping import code_zip, needs_shipping, ship_code


@pytest.mark.parametrize(
    ("master", "remote", "ships"),
    [
        (None, None, False),
        ("local[*]", None, False),
        ("local[2]", None, False),
        (None, "local[2]", False),
        ("spark://127.0.0.1:7077", None, True),
        (None, "sc://127.0.0.1:15002", True),
        ("local[2]", "sc://127.0.0.1:15002", True),
    ],
)
def test_only_executors_outside_this_interpreter_get_the_code(
    master: str | None, remote: str | None, ships: bool
) -> None:
    assert needs_shipping(master, remote) is ships


def write_package(root: Path) -> None:
    (root / "resources" / "sub").mkdir(parents=True)
    (root / "resources" / "__init__.py").write_text("")
    (root / "resources" / "sub" / "__init__.py").write_text("X = 1\n")
    (root / "resources" / "sub" / "__pycache__").mkdir()
    (root / "resources" / "sub" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"\0")


def test_the_zip_is_named_by_its_content_and_built_once(tmp_path: Path) -> None:
    write_package(tmp_path / "src")
    first = code_zip(tmp_path / "cache", tmp_path / "src")
    assert sorted(zipfile.ZipFile(first).namelist()) == [
        "resources/__init__.py",
        "resources/sub/__init__.py",
    ]
    built = first.stat().st_mtime_ns
    assert code_zip(tmp_path / "cache", tmp_path / "src") == first
    assert first.stat().st_mtime_ns == built
    (tmp_path / "src" / "resources" / "sub" / "__init__.py").write_text("X = 2\n")
    second = code_zip(tmp_path / "cache", tmp_path / "src")
    assert second != first
    assert zipfile.ZipFile(second).read("resources/sub/__init__.py") == b"X = 2\n"
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == sorted(
        [first.name, second.name]
    )


class FakeContext:
    def __init__(self) -> None:
        self._python_includes: list[str] = []

    def addPyFile(self, path: str) -> None:  # noqa: N802 - Spark's name
        self._python_includes.append(Path(path).name)


class FakeClassic:
    def __init__(self) -> None:
        self.sparkContext = FakeContext()


class FakeConnect:
    def __init__(self) -> None:
        self.added: list[tuple[tuple[str, ...], dict[str, Any]]] = []

    def addArtifacts(self, *paths: str, **kinds: Any) -> None:  # noqa: N802 - Spark's name
        self.added.append((paths, kinds))


def test_a_classic_session_gets_a_py_file_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LEASEHOLD_DATA_DIR", str(tmp_path))
    spark = FakeClassic()
    assert ship_code(spark, "local[2]", None) is None
    shipped = ship_code(spark, "spark://127.0.0.1:7077", None)
    assert shipped is not None and shipped.parent == tmp_path / "spark-code"
    assert ship_code(spark, "spark://127.0.0.1:7077", None) == shipped
    assert spark.sparkContext._python_includes == [shipped.name]
    assert "resources/spark/code_shipping.py" in zipfile.ZipFile(shipped).namelist()
    assert code_shipping.project_root() == Path(code_shipping.__file__).resolve().parents[2]


def test_a_connect_session_gets_a_python_artifact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LEASEHOLD_DATA_DIR", str(tmp_path))
    spark = FakeConnect()
    assert ship_code(spark, None, "local[2]") is None
    shipped = ship_code(spark, None, "sc://127.0.0.1:15002")
    assert spark.added == [((str(shipped),), {"pyfile": True})]
