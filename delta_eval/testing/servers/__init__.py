"""Fake provider servers: HTTP servers on 127.0.0.1 that speak each provider's real wire format, so the official
SDKs can be tested, unmodified, with no network. ``http`` is the server core, ``provider`` what the fake providers
share, and one module per provider speaks its format."""
