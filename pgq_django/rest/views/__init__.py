"""The REST API's views, one module per resource; each is a thin translator to ``pgq_django``."""
