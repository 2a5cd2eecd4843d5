"""rsiframe view: a read-only Textual viewer for runs, lineage and evidence."""
