"""The ``recall`` tool (lists the run's memory, or what in it matches a query)."""
