"""attndesk: a desktop application for seeing inside transformer attention."""

import os

# Large fresh tensors page-fault slowly; transparent huge pages make the [H, L, L] buffers of
# long sequences about 10x cheaper to first touch. Read by torch's CPU allocator at import.
os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")
# libgomp spins 300,000 rounds before an idle thread sleeps; on a shared 2-core machine that made
# every torch call several times slower (measured: L=512 attention 6 ms -> 264 ms). Read at load.
os.environ.setdefault("GOMP_SPINCOUNT", "2000")

__version__ = "0.1.0"
