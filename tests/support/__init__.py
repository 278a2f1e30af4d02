"""What the tests share across folders: a condition wait (``waiting``), botd's daemon in the
test's own loop (``daemon_inprocess``) or as a child process (``daemon_process``, forked from a
warm interpreter by ``warm_daemons``), a throwaway PostgreSQL server (``pg_server``) and its
databases made ahead (``pg_databases``), the health endpoint read from a test (``health_probe``), a
two-line Telegram DM (``chat``), the shipped configs walked key by key (``config_reference``),
hostile compressed bodies (``compressed``) and the part of an adapter a text-only test
adapter leaves out (``text_only_adapter``). The loopback platform fakes are in ``tests/fakes``;
what one folder's tests share stays in that folder (its ``harness.py``)."""
