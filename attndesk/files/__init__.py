"""Files (no Qt, no torch): ``atomic`` (every write all or nothing: ``atomic_write``,
``StagedFolder``) and ``textfile`` (a text file read with a size limit and one-line refusals).
"""
