"""The KV-cache lab (Qt-free): what eviction keeps and costs; attention sinks and retrieval heads."""
