"""The one HTTP layer every fetch goes through: the client and a source's session
(``client``), the session's adapter with timeouts, retries, per-host slots and the size cap
(``session``), the SSRF guard (``guard``) and transport failures told in words (``words``)."""
