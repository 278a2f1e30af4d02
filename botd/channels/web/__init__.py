"""The web chat: the page's chat box and the OpenAI-compatible endpoint, as the ``web``
channel (``web.enabled``)."""
