"""Running botd as a service: logging, the health endpoint and metrics, outages, the state
lock, systemd notifications, ports, and ``botd doctor``."""
