"""One module per schema revision, `rNNNN_<what>.py`, oldest first, each revising the one before.
docs/operations.md's migration table says what each adds (tests/architecture/test_docs_store.py
checks that it lists every revision here)."""
