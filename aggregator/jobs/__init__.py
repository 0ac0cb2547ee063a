"""The run of a harvest job: its wiring, lifecycle decisions, workers, events, journal,
rejected records, retirement and unattended output."""
