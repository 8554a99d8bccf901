"""Pipeline protocols, the shared request/result types and the staged runtime."""
