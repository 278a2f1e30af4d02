"""botd's HTTP server: the parts that answer HTTP register routes on it.

``routes`` holds ``HttpServers``: one aiohttp server per address (host and port) that some
part serves on, started when the first route is added there and stopped when its last one
is removed or botd stops. Health and metrics (``health.host``/``health.port``) and
Telegram's webhook (its ``listen`` address) register their routes on it; when they name the
same address one server serves both, otherwise each address has its own. ``server`` is the
aiohttp server itself, imported only when something is served: a botd serving nothing loads
no aiohttp.

Routes can come and go while a server runs (a channel restarted by a reload takes its
route away and adds it again); a request for a path nobody serves is answered 404.
"""
