"""The accept board: which serving processes accept new connections (all but one standby),
decided from heartbeats in shared memory."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from aggregator.serve.accepting import STALE, AcceptBoard, acceptors_for

NS = 1_000_000_000


@pytest.fixture
def board() -> Iterator[AcceptBoard]:
    b = AcceptBoard.create(3)
    yield b
    b.close()


def test_acceptors_are_all_processes_but_one_standby() -> None:
    assert [acceptors_for(n) for n in (1, 2, 3, 4)] == [1, 1, 2, 3]


def test_the_first_live_slots_accept(board: AcceptBoard) -> None:
    now = 100 * NS
    for slot in range(3):
        board.beat(slot, accepting=False, now_ns=now)
    assert board.live(now) == [True, True, True]
    assert [board.should_accept(s, 2, now) for s in range(3)] == [True, True, False]
    assert [board.should_accept(s, 1, now) for s in range(3)] == [True, False, False]


def test_a_stale_or_cleared_slot_is_replaced_by_the_next(board: AcceptBoard) -> None:
    now = 100 * NS
    board.beat(0, accepting=True, now_ns=now - int(STALE * NS) - 1)  # stuck
    board.beat(1, accepting=False, now_ns=now)
    board.beat(2, accepting=False, now_ns=now)
    assert board.live(now) == [False, True, True]
    # slot 0 is stuck, so it does not ask: the live slots decide without it
    assert [board.should_accept(s, 1, now) for s in (1, 2)] == [True, False]
    assert board.accepting(now) == [False, False, False]  # stale: whatever it last said
    board.beat(0, accepting=True, now_ns=now)
    board.clear(1)
    assert [board.should_accept(s, 2, now) for s in (0, 2)] == [True, True]
    assert board.accepting(now) == [True, False, False]


def test_a_slot_that_asks_counts_itself_live(board: AcceptBoard) -> None:
    """A process deciding at its heartbeat is live even before its first beat is written,
    and accepts when every other slot is gone."""
    assert board.live(5 * NS) == [False, False, False]
    assert board.should_accept(2, 1, 5 * NS)


def test_the_board_is_shared_with_a_child_process(board: AcceptBoard) -> None:
    script = (
        "import sys; from aggregator.serve.accepting import AcceptBoard;"
        "b = AcceptBoard(int(sys.argv[1]), 3); b.beat(1, accepting=True)"
    )
    subprocess.run([sys.executable, "-c", script, str(board.fd)], check=True, pass_fds=[board.fd])
    assert board.live() == [False, True, False]
    assert board.accepting() == [False, True, False]
    assert os.fstat(board.fd).st_size >= 3 * 16
