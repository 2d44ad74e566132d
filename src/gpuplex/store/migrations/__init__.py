"""The store's schema history: alembic migrations, run from code by gpuplex.store.migrate."""
