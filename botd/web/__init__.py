"""The web page (``web.enabled``): status, conversations, approvals and chat in a browser.

``page`` serves the page's files and its API on botd's HTTP server, ``guard`` checks every
request (token, host, same origin) and sets the security headers, ``live`` pushes changes as
server-sent events, ``views`` shapes the store's records as JSON. aiohttp is imported here
only when the page is served (``App``): nothing else of botd imports this package.
"""
