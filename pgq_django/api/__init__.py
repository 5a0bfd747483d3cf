"""The functional API, one module per concern; ``pgq_django`` re-exports it."""
