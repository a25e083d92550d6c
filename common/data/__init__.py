"""A site's data: the schema, loading and validation, record parts, the
schema digest, and the bundled datasets.
"""
