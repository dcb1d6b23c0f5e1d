"""torch on one intra-op thread for the default hybrid tests (FLOP counts, shapes, gradients, tiny measured runs).

torch's default is a thread per core; on a busy 2-core machine its OpenMP workers spin waiting for each other
(test_hybrid_mixers + test_hybrid_layers: 13.8 s and 10.1 s of CPU on 2 threads, 10.6 s and 7.2 s on one, load
~2.5). What these tests check does not depend on the thread count; the slow CPU validation sets its own.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _one_torch_thread(request: pytest.FixtureRequest) -> Iterator[None]:
    torch = sys.modules.get("torch")  # never imports torch itself: a test without it stays without it
    if torch is None or request.node.get_closest_marker("slow") is not None:
        yield
        return
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)
