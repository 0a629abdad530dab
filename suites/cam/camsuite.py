"""Shared parameters of the controller-side suite modules."""

import pytest

#: world sizes every case runs at, each skipped with a reason when the env cannot host it
WORLDS = [pytest.param(w, marks=pytest.mark.ranks(w), id=f"{w}ranks") for w in (4, 8, 16)]
