"""Near-duplicate questions by MinHash LSH over character 4-grams of the normalised text.

Character shingles catch the duplicates synthesis makes (one word swapped, a middle initial added)
that word n-grams of short questions miss; LSH keeps each lookup sub-linear in the questions seen.
"""

from __future__ import annotations

from datasketch import MinHash, MinHashLSH

from asearcher_plugin.rewards.reward import normalize_answer

NUM_PERM = 128


def minhash(text: str) -> MinHash:
    norm = normalize_answer(text)
    m = MinHash(num_perm=NUM_PERM)
    for i in range(max(1, len(norm) - 3)):
        m.update(norm[i : i + 4].encode())
    return m


class NearDuplicates:
    def __init__(self, threshold: float):
        self.lsh = MinHashLSH(threshold=threshold, num_perm=NUM_PERM)

    def add(self, key: str, text: str) -> str | None:
        """Inserts `text` and returns None, or returns the key of a near-duplicate already seen."""
        m = minhash(text)
        hits = self.lsh.query(m)
        if hits:
            return sorted(hits)[0]
        if key not in self.lsh:
            self.lsh.insert(key, m)
        return None
