"""Republishing: SPARQL, OAI-PMH, the DCAT catalogue and dataset pages."""
