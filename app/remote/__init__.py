"""Remote OpenAI-compatible engines as model sources (plain Python, no Qt).

``sources`` (the engines the user added, ``remote-engines.json``), ``keys`` (their API keys:
OS keyring, else a 0600 file), ``client`` (HTTP + SSE over ``httpx2``, offline mode, the
"remote engine" network tag), ``models`` (``/v1/models``), ``reply`` (request body, stop
strings, figures), ``engine`` (``RemoteEngine``, a ``Backend``), ``listing``
(what the model picker and the dialog's "Test connection" ask), ``errors`` (``RemoteError``).
"""
