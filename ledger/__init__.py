"""The ledger core: settings, keys, the Lua scripts and their Python callers, the event
table, attempts and the read model. Imports neither Flask nor ``workers``; the web app
(``webhook``) and the RQ workers (``workers``) both stand on it."""
