"""Qt-free: what the heatmap panel draws, built in the worker thread (numpy and the core only; an
import-linter contract keeps Qt out). ``heatmap_source`` for a map holding its weights,
``long_source`` for a memory-bounded run and ``source_for_map`` for any map."""
