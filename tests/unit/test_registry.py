from __future__ import annotations

import pytest

from sago_fast.registry import Registry, UnknownNameError


def test_register_get_and_suggest():
    reg: Registry[int] = Registry("metric")
    reg.add("cosine", 1)
    reg.register("euclidean")(2)
    assert reg.get("cosine") == 1
    assert reg.names() == ["cosine", "euclidean"]
    with pytest.raises(UnknownNameError, match="did you mean 'cosine'"):
        reg.get("cosin")
    with pytest.raises(ValueError, match="already registered"):
        reg.add("cosine", 3)
