"""One module per protocol: a harvester yields RawRecords; it never builds RDF or writes."""
