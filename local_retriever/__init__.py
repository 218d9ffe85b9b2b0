"""Local knowledge base: corpus ingestion, dense/sparse indexes, retrieval server and client."""
