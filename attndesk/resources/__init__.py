"""Files attndesk ships: the sample texts, the vocabulary, the trained toy checkpoints."""

from pathlib import Path

CORPUS_SAMPLE = Path(__file__).resolve().parent / "corpus_sample.txt"  # 324 sentences written for attndesk

__all__ = ["CORPUS_SAMPLE"]
