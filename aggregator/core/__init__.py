"""The shared vocabulary of the data flow, imported by every part and importing none of them:
records and findings (:mod:`.models`), typed errors (:mod:`.errors`), safe XML parsing
(:mod:`.xml`), the size and content limits of payloads (:mod:`.input_limits`), RDF namespaces
(:mod:`.vocab`), the generic plugin registry (:mod:`.registry`), where the bundled data
directories are (:mod:`.resources`) and the JSON log format (:mod:`.logjson`)."""
