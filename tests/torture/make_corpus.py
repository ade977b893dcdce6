"""Write the hostile inbox corpus into tests/torture/corpus/ (regression seeds, committed).

usage: python tests/torture/make_corpus.py
Special files (symlinks, FIFOs, hard links, directories, world-writable files)
cannot live in git: bench/torture_corpus.special_files makes them at test time.
"""

from pathlib import Path

from bide.bench.torture_corpus import write_corpus

if __name__ == "__main__":
    folder = Path(__file__).parent / "corpus"
    print(f"{write_corpus(folder)} files written to {folder}")
