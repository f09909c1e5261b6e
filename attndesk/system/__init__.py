"""The machine and the process (no Qt): what every layer may ask of the computer it runs on.

Modules: ``devices`` (cpu, cuda, mps; the dtypes), ``free_memory`` (``format_bytes``, the free
memory, the guard before a large allocation), ``timing`` (stage timers), ``threads`` (torch's thread
count chosen by the work and how busy the machine is), ``process`` (process-wide tuning:
``tune_process``, ``trim_heap``, ``freeze_long_lived``) and ``machine`` (the machine's fingerprint).
"""
