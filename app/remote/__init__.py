"""Remote OpenAI-compatible engines as model sources (plain Python, no Qt).

``sources`` (the engines the user added, ``remote-engines.json``; their API keys and any
login typed in an address in the OS keyring, else a 0600 file), ``urls`` (addresses: no
login kept, plain http:// to another machine told apart), ``client`` (HTTP + SSE over
``httpx2``, offline mode, same-origin redirects, the "remote engine" network tag),
``models`` (``/v1/models``), ``reply`` (request body, stop strings, figures), ``engine``
(``RemoteEngine``, a ``Backend``), ``listing`` (what the model picker and the
dialog's "Test connection" ask), ``errors`` (``RemoteError``).
"""
