"""Every interface states its contract: what each public method promises, returns and raises.

The interfaces a contributor implements or calls across a layer (issue 32, the way KCL's
`LeaseRefresher` documents each method): the stores' parts, the object store, the catalog and
the runners. Each must have a class docstring and one per public method; on the abstract
interfaces each method's docstring also says what it raises ("Raises ...", "raises nothing").
And every public class in resources/ says what it is.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

ABSTRACT_INTERFACES = [
    ("resources.coordination.lease_store", "LeaseStore"),
    ("resources.ledger.ledger", "Ledger"),
    ("resources.ledger.rollup_state", "RollupLedger"),
    ("resources.ledger.schema_versions", "SchemaRegistry"),
    ("resources.stores.base", "CoordinationStore"),
    ("resources.objects.base", "ObjectStore"),
    ("resources.catalog.base", "Catalog"),
]
RUNNERS = [
    ("resources.ingestion.runner", "IngestionRunner"),
    ("resources.compaction.merge_runner", "MergeRunner"),
    ("resources.publication.publisher", "Publisher"),
    ("resources.aggregation.runner", "RollupRunner"),
]


RAISES = re.compile(r"\braises?\b", re.IGNORECASE)

IGNORE = re.compile(r"# type: ignore(?P<codes>\[[a-z-]+(, [a-z-]+)*\])?(?P<rest>.*)$")


def public_methods(cls: type) -> dict[str, str]:
    """Name -> docstring (inherited from the method it overrides when it has none of its own)
    of each public method and property `cls` defines itself."""
    out = {}
    for name, member in vars(cls).items():
        if name.startswith("_"):
            continue
        if isinstance(member, property):
            out[name] = member.__doc__ or ""
        elif inspect.isfunction(member) or isinstance(member, (classmethod, staticmethod)):
            out[name] = inspect.getdoc(getattr(cls, name)) or ""
    return out


def contract_problems(cls: type, *, says_raises: bool) -> list[str]:
    """What `cls` lacks of a contract: its docstring, a docstring per public method, and,
    with `says_raises`, what each method raises."""
    problems = [] if inspect.getdoc(cls) else [f"{cls.__name__}: no class docstring"]
    for name, doc in public_methods(cls).items():
        if not doc.strip():
            problems.append(f"{cls.__name__}.{name}: no docstring")
        elif says_raises and not RAISES.search(doc):
            problems.append(f"{cls.__name__}.{name}: does not say what it raises")
    return problems


def load(module: str, name: str) -> type:
    cls = getattr(importlib.import_module(module), name)
    assert isinstance(cls, type)
    return cls


@pytest.mark.parametrize(("module", "name"), ABSTRACT_INTERFACES, ids=lambda v: v)
def test_each_method_of_an_interface_says_what_it_promises_and_raises(
    module: str, name: str
) -> None:
    cls = load(module, name)
    assert public_methods(cls), f"{name} has no public method: the check would pass vacuously"
    assert contract_problems(cls, says_raises=True) == []


@pytest.mark.parametrize(("module", "name"), RUNNERS, ids=lambda v: v)
def test_each_public_method_of_a_runner_is_documented(module: str, name: str) -> None:
    assert contract_problems(load(module, name), says_raises=False) == []


def test_the_check_finds_a_missing_docstring_and_a_missing_raises() -> None:
    class Half:
        """Documented, but not each method."""

        def bare(self) -> None:
            pass

        def silent(self) -> int:
            """Returns one."""
            return 1

        @property
        def plain(self) -> int:
            return 1

        def _private(self) -> None:
            pass

    class Undocumented:
        pass

    assert contract_problems(Half, says_raises=True) == [
        "Half.bare: no docstring",
        "Half.silent: does not say what it raises",
        "Half.plain: no docstring",
    ]
    assert contract_problems(Half, says_raises=False) == [
        "Half.bare: no docstring",
        "Half.plain: no docstring",
    ]
    assert contract_problems(Undocumented, says_raises=False) == [
        "Undocumented: no class docstring"
    ]


def undocumented_classes(root: Path, base: Path = ROOT) -> list[str]:
    """`path:Class` (path relative to `base`) of each public class under `root` — its name
    and its module's not starting with `_` — that has no docstring."""
    found = []
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(base)
        if any(p.startswith("_") and p != "__init__.py" for p in relative.parts):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.ClassDef)
                and not node.name.startswith("_")
                and ast.get_docstring(node) is None
            ):
                found.append(f"{relative.as_posix()}:{node.name}")
    return found


def test_every_public_class_in_resources_says_what_it_is() -> None:
    assert undocumented_classes(ROOT / "resources") == []


def test_the_class_scan_finds_an_undocumented_class(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "sample.py").write_text(
        'class Told:\n    """Says."""\n\n\nclass Silent:\n    x = 1\n\n\nclass _Own:\n    pass\n'
    )
    (tmp_path / "pkg" / "_private.py").write_text("class Hidden:\n    pass\n")
    assert undocumented_classes(tmp_path, tmp_path) == ["pkg/sample.py:Silent"]


def unexplained_ignores(lines: list[str]) -> list[int]:
    """Line numbers of the `# type: ignore`s in `lines` without an error code, or without a
    reason: a comment after it on its line, or a comment line right above."""
    found = []
    for n, line in enumerate(lines, 1):
        match = IGNORE.search(line)
        if match is None:
            continue
        reason = match["rest"].strip().startswith("#") or (
            n > 1 and lines[n - 2].lstrip().startswith("#")
        )
        if match["codes"] is None or not reason:
            found.append(n)
    return found


def test_each_type_ignore_names_its_error_and_says_why() -> None:
    found = []
    for top in ("resources", "coordination_assets"):
        for path in sorted((ROOT / top).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            lines = path.read_text(encoding="utf-8").splitlines()
            found += [f"{relative}:{n}" for n in unexplained_ignores(lines)]
    assert found == []


def test_the_ignore_scan_finds_a_bare_and_an_unexplained_ignore() -> None:
    lines = [
        "x = f()  # type: ignore",
        "y = g()  # type: ignore[arg-type]",
        "z = h()  # type: ignore[arg-type]  # h is typed too narrowly",
        "# h is typed too narrowly",
        "w = h()  # type: ignore[arg-type]",
    ]
    assert unexplained_ignores(lines) == [1, 2]
