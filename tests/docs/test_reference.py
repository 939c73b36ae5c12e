"""The documentation against what it documents.

`docs/reference.md` lists every `leasehold` command and option, and every setting: it is checked
here against the command's own parser (`build_parser`, the object `--help` prints) and against
what `leasehold config` prints, both ways, so a command, option or setting added, renamed or
removed on one side fails until the other says the same. And README.md and every page under
`docs/` link only to files of this repository: a clone has nothing outside it.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from resources.cli.config import configuration_text, effective_configuration
from resources.cli.parser import build_parser

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "reference.md"
PAGES = [ROOT / "README.md", ROOT / "BENCHMARKS.md", *sorted((ROOT / "docs").rglob("*.md"))]
NOT_YET_WRITTEN = {ROOT / "docs" / "dagster-internals.md"}
"""Linked from the docs index; written in the same issue by another change. Remove once it is
in the tree."""

COMMON = {"-h", "--help", "--debug", "--verbose"}
"""Accepted by every command (`build_parser`'s `common` parent): documented once, at the top of
the reference's Commands section."""


def reference_text() -> str:
    return REFERENCE.read_text(encoding="utf-8")


def section(text: str, heading: str) -> str:
    """The body of the `## heading` section, up to the next `## `."""
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


# --- commands and options --------------------------------------------------------------------


def commands(
    parser: argparse.ArgumentParser, words: tuple[str, ...] = ()
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Every command that runs something (`table ls`, not `table`), with its parser."""
    groups = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not groups:
        yield " ".join(words), parser
    for group in groups:
        for name, sub in group.choices.items():
            yield from commands(sub, (*words, name))


def options(parser: argparse.ArgumentParser) -> set[str]:
    """The long options a command takes besides the common ones."""
    return {
        s
        for a in parser._actions
        for s in a.option_strings
        if s.startswith("--") and s not in COMMON
    }


def positionals(parser: argparse.ArgumentParser) -> list[str]:
    """The positional arguments as the reference names them: the metavar, else the dest in
    capitals (`STREAM`, `DATE`, `PARTITION_KEY`)."""
    return [
        str(a.metavar or a.dest).upper()
        for a in parser._actions
        if not a.option_strings and not isinstance(a, argparse._SubParsersAction)
    ]


def documented_commands() -> dict[str, tuple[str, str]]:
    """The `### leasehold ...` headings: command -> (the heading's arguments, the body)."""
    text = section(reference_text(), "Commands")
    found: dict[str, tuple[str, str]] = {}
    parts = re.split(r"^### `leasehold ([^`]*)`\n", text, flags=re.M)
    for heading, body in zip(parts[1::2], parts[2::2], strict=True):
        words = heading.split()
        name = [w for w in words if re.fullmatch(r"[a-z][a-z-]*", w)]
        rest = words[len(name) :]
        assert words[: len(name)] == name, f"reference.md: heading `leasehold {heading}`"
        found[" ".join(name)] = (" ".join(rest), body)
    return found


def documented_options(body: str) -> set[str]:
    """The options of a command's section: the first cell of each row of its options table."""
    return {m for m in re.findall(r"^\| `(--[a-z][a-z-]*)", body, flags=re.M)}


def test_every_command_has_its_section_and_no_section_is_of_no_command() -> None:
    parsed = {name for name, _ in commands(build_parser())}
    documented = set(documented_commands())
    assert parsed - documented == set(), "commands docs/reference.md does not describe"
    assert documented - parsed == set(), "docs/reference.md describes commands that do not exist"


@pytest.mark.parametrize("name", sorted(name for name, _ in commands(build_parser())))
def test_a_commands_options_are_the_ones_its_section_lists(name: str) -> None:
    parser = dict(commands(build_parser()))[name]
    arguments, body = documented_commands()[name]
    listed = documented_options(body)
    assert options(parser) - listed == set(), f"`leasehold {name}` options missing from its section"
    assert listed - options(parser) == set(), f"`leasehold {name}`: documented options it lacks"
    for positional in positionals(parser):
        assert positional in arguments.split() or f"[{positional}" in arguments, (
            f"`leasehold {name}`: its heading does not name {positional}"
        )
    named = re.findall(r"\b[A-Z][A-Z_]+\b", arguments)
    assert set(named) <= set(positionals(parser)), f"`leasehold {name}`: heading names {named}"


def test_the_common_options_are_documented_once_at_the_top() -> None:
    top = section(reference_text(), "Commands").split("\n### ")[0]
    parser = build_parser()
    top_level = {s for a in parser._actions for s in a.option_strings if s.startswith("--")}
    assert top_level - {"--help"} == documented_options(top)
    for name, sub in commands(parser):
        given = {s for a in sub._actions for s in a.option_strings}
        assert {"--debug", "--verbose"} <= given, f"`leasehold {name}` lacks a common option"


# --- configuration ---------------------------------------------------------------------------


def config_output() -> str:
    """What `leasehold config` prints on the embedded default (the project's streams file)."""
    environ = {"LEASEHOLD_STREAMS": str(ROOT / "streams.yaml")}
    return configuration_text(effective_configuration(environ))


def printed_settings() -> list[tuple[str, str | None]]:
    """(field, variable) of every setting `leasehold config` prints."""
    rows = []
    for line in config_output().splitlines()[1:]:
        cells = line.split()
        if not cells or "." not in cells[0] or not cells[0][0].isupper():
            continue
        field = cells[0].split(".", 1)[1]
        rows.append((field, None if cells[1] == "—" else cells[1]))
    return rows


def configuration_rows() -> list[str]:
    lines = section(reference_text(), "Configuration").splitlines()
    return [line for line in lines if line.startswith("| ")]


def test_every_setting_leasehold_config_prints_has_its_row() -> None:
    rows = configuration_rows()
    settings = printed_settings()
    assert len(settings) > 30, "the config output was not parsed"
    for field, variable in settings:
        shown = f"`{variable}`" if variable else "—"
        assert [r for r in rows if r.startswith(f"| {shown} | `{field}` |")], (
            f"docs/reference.md, Configuration: no row for {variable or field}"
        )


def test_the_configuration_tables_name_no_setting_leasehold_config_lacks() -> None:
    printed = {v for _, v in printed_settings() if v}
    variable = re.compile(r"^\| `(LEASEHOLD_[A-Z0-9_]+)`")
    named = {m.group(1) for r in configuration_rows() if (m := variable.match(r))}
    assert named - printed == set()
    for extra in re.findall(r"\((LEASEHOLD_[A-Z_]+)\)", config_output()):  # the data directory
        assert f"`{extra}`" in section(reference_text(), "Configuration")


# --- links -----------------------------------------------------------------------------------

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
OUTSIDE = re.compile(
    r"(?<![\w.:/~$])(/(?:work|home|root|tmp|Users|srv|opt|var|etc|mnt)/)"  # absolute paths
    r"|(\.\./(?:shared|seeds)\b)"  # the places beside a checkout
)


def anchors(page: Path) -> set[str]:
    """The anchors GitHub gives a page's headings: lower case, punctuation dropped, spaces as
    hyphens, a repeated one suffixed -1, -2, ..."""
    slugs: set[str] = set()
    counts: dict[str, int] = {}
    fenced = False
    for line in page.read_text(encoding="utf-8").splitlines():
        fenced = fenced != line.startswith("```")
        if fenced or not line.startswith("#"):
            continue
        slug = re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
        n = counts.get(slug, 0)
        counts[slug] = n + 1
        slugs.add(f"{slug}-{n}" if n else slug)
    return slugs


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_resolves_to_a_file_of_the_repository(page: Path) -> None:
    for target in LINK.findall(page.read_text(encoding="utf-8")):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):
            continue  # a URL
        name, _, anchor = target.partition("#")
        path = (page.parent / name).resolve() if name else page
        assert path.is_relative_to(ROOT), f"{page.name} links outside the repository: {target}"
        if path in NOT_YET_WRITTEN and not path.exists():
            continue
        assert path.exists(), f"{page.name}: {target} does not exist"
        if anchor and path.suffix == ".md":
            assert anchor in anchors(path), f"{page.name}: {target}: no such heading"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_page_names_a_path_outside_the_repository(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    found = [m.group(0) for m in OUTSIDE.finditer(text)]
    assert not found, f"{page.name} names paths outside the repository: {found}"
    if page.parent == ROOT:
        assert "../" not in text, f"{page.name}: a path above the repository"


def test_the_docs_index_links_every_page() -> None:
    index = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    linked = {(ROOT / "docs" / t.split("#")[0]).resolve() for t in LINK.findall(index)}
    pages = {p for p in (ROOT / "docs").rglob("*") if p.suffix in (".md", ".json")}
    assert pages - {ROOT / "docs" / "index.md"} - linked == set()
    assert "docs/index.md" in (ROOT / "README.md").read_text(encoding="utf-8")


def test_readme_starts_with_the_two_commands_and_stays_a_guide() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert readme.startswith(
        "# leasehold\n\n```bash\nbash bin/setup && .venv/bin/leasehold run\n```\n\n"
        "```bash\nbash bin/setup && .venv/bin/python -m pytest\n```\n"
    )
    assert len(readme.splitlines()) < 250
