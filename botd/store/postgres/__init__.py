"""The PostgreSQL backend of the store (``store.backend: postgres``)."""
