"""The accept board: which serving processes accept new connections (all but one standby),
decided from heartbeats in shared memory."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

import pytest

from aggregator.serve.accepting import BEAT, STALE, AcceptBoard, AcceptSwitch, acceptors_for

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
    # the child beats at a given instant, so the check does not depend on how long the
    # child takes to start and exit (on a loaded machine, longer than the staleness window)
    now = 100 * NS
    script = (
        "import sys; from aggregator.serve.accepting import AcceptBoard;"
        "b = AcceptBoard(int(sys.argv[1]), 3); b.beat(1, accepting=True, now_ns=int(sys.argv[2]))"
    )
    subprocess.run(
        [sys.executable, "-c", script, str(board.fd), str(now)], check=True, pass_fds=[board.fd]
    )
    assert board.live(now) == [False, True, False]
    assert board.accepting(now) == [False, True, False]
    assert os.fstat(board.fd).st_size >= 3 * 16


def _listener() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock


def test_a_switch_retries_and_closes_the_socket_of_a_failed_attempt(board: AcceptBoard) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        attempts: list[socket.socket] = []

        def open_server(sock: socket.socket) -> asyncio.Task[asyncio.Server]:
            attempts.append(sock)

            async def start() -> asyncio.Server:
                if len(attempts) == 1:
                    raise OSError("the first attempt fails")
                return await loop.create_server(asyncio.Protocol, sock=sock)

            return loop.create_task(start())

        servers: list[asyncio.Server] = []
        with _listener() as listener:
            switch = AcceptSwitch(board, 0, 1, listener.fileno(), open_server, servers)
            switch.start()
            await _until(lambda: switch.accepting)
            assert len(attempts) == 2
            assert attempts[0].fileno() == -1  # the failed attempt's duplicate is closed
            assert servers == [switch.server]
            assert board.accepting() == [True, False, False]
            switch.stop()
            assert servers == [] and not switch.accepting
            assert board.live() == [False, False, False]

    asyncio.run(main())


def test_the_standby_switch_accepts_only_while_the_first_slot_is_stale(
    board: AcceptBoard,
) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()

        def open_server(sock: socket.socket) -> asyncio.Task[asyncio.Server]:
            return loop.create_task(loop.create_server(asyncio.Protocol, sock=sock))

        servers: list[asyncio.Server] = []
        with _listener() as listener:
            standby = AcceptSwitch(board, 1, 1, listener.fileno(), open_server, servers)
            first_beats = True

            async def first() -> None:  # slot 0's heartbeat, while it is healthy
                while True:
                    if first_beats:
                        board.beat(0, accepting=True)
                    await asyncio.sleep(BEAT)

            beating = loop.create_task(first())
            await asyncio.sleep(BEAT)
            standby.start()
            await asyncio.sleep(5 * BEAT)
            assert not standby.accepting
            first_beats = False  # slot 0 is stuck
            await _until(lambda: standby.accepting)
            first_beats = True  # and back
            await _until(lambda: not standby.accepting)
            assert standby.switches == 2
            standby.stop()
            beating.cancel()

    asyncio.run(main())


async def _until(predicate: Callable[[], bool], seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "not in time"
        await asyncio.sleep(0.005)
