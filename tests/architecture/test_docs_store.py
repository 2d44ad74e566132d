"""docs/operations.md describes the store as the code builds it: its migration table lists every
alembic revision that ships in gpuplex/store/migrations, oldest first, and nothing else; its table
of what the store holds names every table of the store's schema, and only those."""

from __future__ import annotations

import re
from pathlib import Path

from gpuplex.store.migrate import HEAD_REVISION, alembic_config
from gpuplex.store.tables import metadata

ROOT = Path(__file__).resolve().parents[2]
OPERATIONS = ROOT / "docs" / "operations.md"
NAME = re.compile(r"`([a-z0-9_]+)`")


def table_with_header(markdown: str, header: str) -> list[tuple[int, list[str]]]:
    """(line number, cells) of each body row of the table whose header row starts with `header`."""
    lines = markdown.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith(header)), None)
    if start is None:
        raise LookupError(f"no table whose header starts with {header!r}")
    rows = []
    for number, line in enumerate(lines[start + 2 :], start=start + 3):
        if not line.startswith("|"):
            break
        rows.append((number, [cell.strip() for cell in line.strip().strip("|").split("|")]))
    return rows


def shipped_revisions() -> list[str]:
    """Every revision of the packaged migrations, oldest first, as alembic walks them."""
    from alembic.script import ScriptDirectory

    scripts = ScriptDirectory.from_config(alembic_config())
    return [script.revision for script in reversed(list(scripts.walk_revisions()))]


def documented_revisions(markdown: str) -> list[tuple[int, str, str]]:
    """(line, revision, what it does) of each row of the migration table."""
    found = []
    for number, (revision, schema, *_) in table_with_header(markdown, "| revision | schema |"):
        names = NAME.findall(revision)
        assert len(names) == 1, f"operations.md:{number}: {revision!r} is not one `revision`"
        found.append((number, names[0], schema))
    return found


def test_the_reader_takes_the_rows_of_the_table_under_its_header() -> None:
    page = "text\n| revision | schema |\n|---|---|\n| `0001` | a |\n| `0002` | b |\n\n| x |\n"
    assert documented_revisions(page) == [(4, "0001", "a"), (5, "0002", "b")]


def test_the_migration_table_lists_every_shipped_revision_in_order() -> None:
    shipped = shipped_revisions()
    assert shipped[0] == "0001"  # the migrations were found
    assert shipped[-1] == HEAD_REVISION
    rows = documented_revisions(OPERATIONS.read_text(encoding="utf-8"))
    documented = [revision for _, revision, _ in rows]
    missing = [r for r in shipped if r not in documented]
    extra = [f"operations.md:{n}: `{r}`" for n, r, _ in rows if r not in shipped]
    assert missing == [], f"docs/operations.md's migration table lacks revisions {missing}"
    assert extra == [], f"docs/operations.md names revisions that do not ship: {extra}"
    assert documented == shipped, "docs/operations.md lists the revisions out of order"
    empty = [f"operations.md:{n}: `{r}`" for n, r, schema in rows if not schema]
    assert empty == [], f"rows that do not say what the revision changes: {empty}"


def test_the_table_of_what_the_store_holds_names_every_table_of_the_schema() -> None:
    rows = table_with_header(OPERATIONS.read_text(encoding="utf-8"), "| table | what |")
    documented = {name: number for number, (tables, *_) in rows for name in NAME.findall(tables)}
    schema = set(metadata.tables)
    assert "jobs" in schema  # the schema was read
    missing = sorted(schema - set(documented))
    extra = sorted(f"operations.md:{documented[n]}: `{n}`" for n in set(documented) - schema)
    assert missing == [], f"docs/operations.md's 'What it holds' table lacks tables {missing}"
    assert extra == [], f"docs/operations.md names tables the store does not have: {extra}"
