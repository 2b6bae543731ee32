"""indexing: turns thread files into a store and the store into index generations."""
