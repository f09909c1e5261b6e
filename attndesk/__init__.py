"""attndesk: a desktop application for seeing inside transformer attention.

Its packages and modules, from the bottom of the stack up (docs/architecture.md draws it): ``jobs``
(the job model), ``errors`` (the exceptions raised on purpose), ``checks`` (the checks at every
door), ``system`` (devices, free memory, threads, timing, process tuning), ``files`` (atomic writes,
text files), ``attention`` (the exact kernel and its variants), ``runs`` (settings, plans, the toy
model's run and its result), ``models`` (local checkpoints) and ``teaching`` (the teaching
comparisons), ``interp`` (interpretability), ``corpus`` (the corpus pass) and ``train`` (the
trainer), ``kvcache`` (KV-cache eviction), ``session`` (the window's model without widgets),
``render`` (figures and pages), and at the top ``cli`` (the ``attndesk`` command), ``app`` (the
window) and ``core`` (the public Python API: its names and the older paths of moved modules);
``resources`` holds the files it ships.

Importing attndesk changes nothing in the process: the entry points (the ``attndesk`` command,
``python -m attndesk``, main.py) call ``set_torch_environment()`` before torch loads.
"""

import os

__version__ = "0.1.0"


def set_torch_environment() -> None:
    """Set the variables torch reads when it loads (only where the user has not set them); call it
    before the first ``import torch``, as the entry points do. See docs/benchmarks.md."""
    # Large fresh tensors page-fault slowly; transparent huge pages make the [H, L, L] buffers of
    # long sequences much cheaper to first touch. Read by torch's CPU allocator at import.
    os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")
    # libgomp spins 300,000 rounds before an idle thread sleeps: on shared cores the spinning
    # threads take the cores from the ones with work, and every torch call slows several times.
    # Read when libgomp loads.
    os.environ.setdefault("GOMP_SPINCOUNT", "2000")
