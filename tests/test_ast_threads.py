"""ast.parse serialized across threads (pjrtkit.ast_threads): on the CPython versions whose AST
conversion shares its recursion counter between threads (3.11 and 3.12), calls from several
threads run one at a time, and each still gets its own tree."""
from __future__ import annotations

import ast
import threading
import time

import pytest

from pjrtkit import ast_threads

SOURCE = "def f(x):\n" + "".join(f"    x = (x + {i}) * ({i} - x)\n" for i in range(50)) \
    + "    return x\n"


@pytest.mark.skipif(not ast_threads.AFFECTED, reason="this CPython keeps the counter per call")
def test_parses_from_several_threads_run_one_at_a_time(monkeypatch):
    ast_threads.serialize_ast_parse()
    assert getattr(ast.parse, "pjrtkit_serialized", False)
    standard = ast_threads._ORIGINAL[0]
    inside, most = [0], [0]
    count = threading.Lock()

    def slow_parse(*args, **kwargs):  # the standard parse, slowed so that calls would overlap
        with count:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        time.sleep(0.002)
        try:
            return standard(*args, **kwargs)
        finally:
            with count:
                inside[0] -= 1

    monkeypatch.setattr(ast_threads, "_ORIGINAL", [slow_parse])
    trees = []

    def parse_many():
        for _ in range(10):
            trees.append(ast.dump(ast.parse(SOURCE)))

    threads = [threading.Thread(target=parse_many) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert most[0] == 1
    assert len(trees) == 40 and len(set(trees)) == 1


def test_serializing_twice_wraps_once():
    ast_threads.serialize_ast_parse()
    first = ast.parse
    ast_threads.serialize_ast_parse()
    assert ast.parse is first
