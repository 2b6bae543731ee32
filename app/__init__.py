"""app: the HTTP service and the command line over indexing and ranking."""
