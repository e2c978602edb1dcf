"""Refusing a request body that is too large without the refusal getting lost.

When the server answers 413 before it has read the body and closes the connection, the client
is usually still sending. The kernel answers the bytes nobody reads with a TCP reset, and that
reset can throw away the reply still waiting, unread, in the client's receive buffer. The client
then reports "peer closed connection" instead of the server's sentence. uvicorn does not
prevent this: once a reply marked ``Connection: close`` is complete it closes the transport at
once and reads nothing more (``RequestResponseCycle.send`` in ``uvicorn/protocols/http/
h11_impl.py``, 0.54). On a kept-alive connection it does skip what is left of the body after the
reply (``h11.Data`` events are dropped once our side is ``DONE``), but with no limit on how much.

So the app does what HTTP servers call a *lingering close*: before it refuses (413, 415 for
a body that is not JSON, or the Host check's 403 in ``guard.py``), it reads the rest of the
body and throws each piece away, up to ``DRAIN_FACTOR`` times the limit in all and for at most
``DRAIN_SECONDS``. Then it answers and closes. Memory stays bounded because nothing is kept,
and a client that trickles its body (slow loris) is cut off when the time runs out. A body
declared larger than that bound, or one that passes it, is refused at once, as before. A
client that sent ``Expect: 100-continue`` has not sent its body yet, so nothing is read.

The 408 in ``connections.py`` does not read out: it goes to a client too slow to send its
request in time, and waiting longer for that body would only extend the deadline it has just
missed. The 503 to a connection beyond the cap does read out, but more briefly and without
parsing anything (``connections.py``): it holds a file handle the cap guards, so it lingers at
most a second and only a few such connections linger at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from starlette.requests import ClientDisconnect, Request

DRAIN_FACTOR = 8  # a body up to this many times the limit is read (and thrown away) first
DRAIN_SECONDS = 5.0  # ... for at most this long


async def read_out(request: Request, limit: int) -> None:
    """Before a refusal decided on the headers alone: read and drop the body (see
    ``discard_rest``) unless its declared length is past the bound or the client sent
    ``Expect: 100-continue`` (it waits for our answer first: reading would invite it to send)."""
    if "100-continue" in request.headers.get("expect", "").lower():
        return
    length = request.headers.get("content-length", "")
    if not length.isdigit() or int(length) <= limit * DRAIN_FACTOR:
        await discard_rest(request.stream(), 0, limit)


async def discard_rest(parts: AsyncIterator[bytes], received: int, limit: int) -> None:
    """Read and drop ``parts`` (the rest of a body of which ``received`` bytes came already)
    until it ends, ``limit * DRAIN_FACTOR`` bytes are passed, the client leaves, or
    ``DRAIN_SECONDS`` have gone by."""
    bound = limit * DRAIN_FACTOR
    try:
        async with asyncio.timeout(DRAIN_SECONDS):
            async for part in parts:
                received += len(part)
                if received > bound:
                    return
    except (TimeoutError, ClientDisconnect):
        return
