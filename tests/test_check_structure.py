"""bin/check_structure.py, the CI check beside import-linter, fails on what it is there for."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "bin" / "check_structure.py"


def _check(root: Path, *packages: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--root", str(root), *packages],
        capture_output=True,
        text=True,
        timeout=60,
    )


def _package(root: Path, name: str, modules: dict[str, str]) -> None:
    (root / name).mkdir()
    (root / name / "__init__.py").write_text("")
    for module, text in modules.items():
        (root / name / f"{module}.py").write_text(text)


def test_a_cycle_inside_a_package_a_long_function_and_a_long_module_each_fail(
    tmp_path: Path,
) -> None:
    long_body = "".join(f"    x{i} = {i}\n" for i in range(61))
    _package(
        tmp_path,
        "roomy",
        {
            # The circle objects/base.py had: a factory importing, inside a function, a module
            # that imports the factory's module.
            "base": "def make():\n    from roomy import local\n    return local\n",
            "local": "from roomy.base import make\n",
            "tables": f"def long():\n{long_body}    return 0\n",
            "big": "x = 0\n" * 501,
            # Under TYPE_CHECKING nothing is imported at run time: no circle.
            "typed": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import roomy.hint\n",
            "hint": "import roomy.typed\n",
        },
    )
    result = _check(tmp_path, "roomy")
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert "import cycle: roomy.base -> roomy.local -> roomy.base" in lines
    assert "function over 60 lines: roomy/tables.py:1 long (63)" in lines
    assert "module over 500 lines: roomy/big.py (501)" in lines
    assert len(lines) == 4, lines
    assert lines[-1] == "check-structure: 3 problem(s)"


def test_a_package_in_shape_passes(tmp_path: Path) -> None:
    _package(tmp_path, "tidy", {"a": "import tidy.b\n", "b": "def f():\n    return 1\n"})
    result = _check(tmp_path, "tidy")
    assert result.returncode == 0, result.stdout + result.stderr
