"""The v1 wire messages: conversions between domain objects and protobuf, and
the checks on identifiers either side reads.
"""
