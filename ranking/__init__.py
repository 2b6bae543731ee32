"""ranking: turns a question into a ranked list, using the indexes and the models."""
