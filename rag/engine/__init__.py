"""The retrieval engine: plain Python, no Django imports.

Stages follow the spec: ingest -> chunk -> index (build a version) -> plan -> retrieve -> fuse -> adopt.
`rag/pipeline.py` wires these components from Django settings; nothing here reads settings.
"""
