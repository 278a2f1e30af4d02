"""The console: a terminal chat on stdin and stdout, for trying botd without a platform."""
