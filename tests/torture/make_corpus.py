"""Write the hostile inbox corpus into tests/torture/corpus/ (regression seeds, committed).

usage: python tests/torture/make_corpus.py
Special files (symlinks, FIFOs, hard links, directories, world-writable files)
cannot live in git: tests/torture/harness/corpus.special_files makes them at test time.
"""

from pathlib import Path

from bide.tests.torture.harness.corpus import write_corpus

if __name__ == "__main__":
    folder = Path(__file__).parent / "corpus"
    print(f"{write_corpus(folder)} files written to {folder}")
