"""Neural rerankers and the training machinery they share."""
