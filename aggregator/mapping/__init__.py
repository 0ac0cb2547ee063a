"""Mappers: one raw record in, DCAT-AP 3 dataset graphs out. Pure: no network, no store."""
