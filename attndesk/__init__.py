"""attndesk: a desktop application for seeing inside transformer attention."""

import os

# Large fresh tensors page-fault slowly; transparent huge pages make the [H, L, L] buffers of
# long sequences about 10x cheaper to first touch. Read by torch's CPU allocator at import.
os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")

__version__ = "0.1.0"
