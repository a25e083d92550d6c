"""Generated Python code for the wire contract ``proto/privadapt/v1/*.proto``.

Do not edit the ``*_pb2*`` modules here: change the .proto and run
``python proto/generate.py`` (``--check`` verifies they are current; a test
runs it). Domain objects convert to and from these messages in
:mod:`privadapt.common.wire.messages`.
"""
