"""The scheduler: per-source frequencies, the harvest window, blackouts, retries and the
circuit breaker (:mod:`.scheduler`), its book (:mod:`.book`), its read API (:mod:`.status`)
and the process that runs it (:mod:`.service`)."""
