"""``hearth serve``: the loaded model over an OpenAI-compatible HTTP API (no Qt).

The server is a Starlette app run by uvicorn on a background thread (``runner.py``). It never
touches the engine itself: every generation is a job handed to an ``EngineExecutor``
(``executor.py``), which runs it on the one thread that owns the engine and its
``ConversationCaches``: a plain thread for the terminal command (``ThreadEngineExecutor``),
the generation worker's QThread inside the desktop app (``app/workers/engine_executor.py``).

| module | one job |
| --- | --- |
| ``config.py`` | the server's settings and the safety checks on them (loopback, API key, CORS) |
| ``guard.py`` | what keeps web pages out: the Host check (DNS rebinding), the JSON content type |
| ``errors.py`` | ``ApiError``: an error in OpenAI's JSON shape with its HTTP status |
| ``schema.py`` | request bodies → checked plain requests (every bad field named) |
| ``executor.py`` | ``EngineExecutor``, ``ModelSource``; the plain-thread one (switches, unloads) |
| ``library.py`` | the installed models as a ``ModelSource`` (``hearth serve`` serves the library) |
| ``gateway.py`` | a remote OpenAI-compatible engine's models as a ``ModelSource`` (``--remote``) |
| ``jobs.py`` | on the engine thread: a chat or completion into a ``Channel`` (``Backend`` only) |
| ``admission.py`` | the bounded FIFO queue's admission, live counts and finished-request records |
| ``responses.py`` | OpenAI response and stream-chunk objects |
| ``app.py`` | the Starlette routes (auth, limits, streaming, disconnect → cancel) |
| ``connections.py`` | uvicorn's h11 protocol with read / write deadlines and a connection cap |
| ``runner.py`` | uvicorn on a background thread: start on a bound socket, graceful stop |
| ``cli.py`` | ``hearth serve [MODEL]``, ``hearth serve --remote BASE_URL`` |
"""
