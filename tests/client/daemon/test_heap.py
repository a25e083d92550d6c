"""The site daemon's threads share one malloc arena (client/daemon/heap.py)."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc",
                                reason="malloc arenas are glibc's")

# Threads that each hold a malloc'd block while the others allocate: glibc
# gives them arenas of their own unless told to keep one; malloc_info counts them.
_ARENAS = """
import ctypes, sys, tempfile, threading
from privadapt.client.daemon.heap import use_one_malloc_arena
if sys.argv[1] == "one":
    use_one_malloc_arena()
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
libc.fopen.restype = ctypes.c_void_p
libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
libc.fclose.argtypes = [ctypes.c_void_p]
barrier = threading.Barrier(4)
def allocate():
    blocks = [libc.malloc(4096) for _ in range(64)]
    barrier.wait()
    for block in blocks:
        libc.free(block)
threads = [threading.Thread(target=allocate) for _ in range(4)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
with tempfile.NamedTemporaryFile("r") as report:
    stream = libc.fopen(report.name.encode(), b"w")
    libc.malloc_info(0, stream)
    libc.fclose(stream)
    print(report.read().count("<heap nr="))
"""


def _arenas(mode: str) -> int:
    result = subprocess.run([sys.executable, "-c", _ARENAS, mode], capture_output=True,
                            text=True, timeout=60, check=True)
    return int(result.stdout)


def test_after_the_call_every_thread_allocates_from_the_main_arena():
    assert _arenas("one") == 1
    assert _arenas("default") > 1  # what the call prevents

