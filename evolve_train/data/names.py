"""Fictional names for the embedded world: syllable-built, so no pretrained model has seen them."""

from __future__ import annotations

import random

_SYLLABLES = (
    "ka lo mi ra ve to sa ne ri du pa ge lin mar tos bel han cor vin dal sor fen qui wal tes orn bri cas lun dor"
).split()
_ORG_KINDS = ("Academy", "Works", "Institute", "Guild", "Bank", "Museum", "Observatory", "Library")
_CITY_SUFFIXES = ("ford", "ville", "burg", "port", "mere", "holm")


class NameFactory:
    """Draws unique names of each kind from a seeded generator."""

    def __init__(self, rng: random.Random):
        self._rng = rng
        self._used: set[str] = set()

    def _unique(self, make) -> str:
        for _ in range(10_000):
            name = make()
            if name not in self._used:
                self._used.add(name)
                return name
        raise RuntimeError("name space exhausted; lower the world size")

    def _word(self, syllables: int) -> str:
        return "".join(self._rng.choice(_SYLLABLES) for _ in range(syllables)).capitalize()

    def organisation(self) -> str:
        return self._unique(lambda: f"{self._word(3)} {self._rng.choice(_ORG_KINDS)}")

    def person(self) -> str:
        return self._unique(lambda: f"{self._word(2)} {self._word(2)}")

    def city(self) -> str:
        return self._unique(lambda: self._word(2) + self._rng.choice(_CITY_SUFFIXES))

    def pool(self, kind: str, size: int) -> list[str]:
        """``size`` unique names of ``kind`` (``person`` or ``city``): the values facts draw from."""
        make = {"person": self.person, "city": self.city}[kind]
        return [make() for _ in range(size)]
