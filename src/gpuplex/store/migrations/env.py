"""Alembic's environment: gpuplex runs migrations from code (gpuplex.store.migrate), always on a
connection it has opened, locked and begun a transaction on; this file only hands it to alembic."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from gpuplex.store.tables import metadata


def run_migrations() -> None:
    connection = context.config.attributes.get("connection")
    if not isinstance(connection, Connection):
        raise RuntimeError(
            "gpuplex migrations run from code on an open connection: use gpuplex.store.migrate"
        )
    context.configure(
        connection=connection,
        target_metadata=metadata,
        render_as_batch=True,  # SQLite alters a table by copying it
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


run_migrations()
