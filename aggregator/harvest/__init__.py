"""One module per protocol. A harvester yields RawRecords; it never builds RDF or touches the store."""
