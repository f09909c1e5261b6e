"""The Compare tab (pinned A, B and B − A, the teaching pairs): its view (``view``) with the K/V-cache
table (``kvcache_table``) and its presenter (``presenter``)."""
