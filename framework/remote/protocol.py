"""The line protocol between the controller and the programs camit ships to the hosts.

Every word the shipped scripts print or read; they cannot import this module and keep their own
copies (a unit test keeps them equal). The protocol: docs/internals/remote-and-lab.md.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass

# -- supervisor -> controller ------------------------------------------------------------------
STARTED = "STARTED"
HEARTBEAT = "HB"
RANK = "RANK"
EXIT = "EXIT"
KILLED = "KILLED"
SWEPT = "SWEPT"
#: ranks asked for their stacks (supervisor -> controller: ``STACKS <n>``;
#: controller -> supervisor: ``STACKS``)
STACKS = "STACKS"
#: processes of the run alive after the supervisor's KILL
LEFT = "LEFT"
#: every pid the run's process tree had
TREE = "TREE"
DONE = "DONE"
#: the two outcomes of a RANK line
RANK_EXIT = "exit"
RANK_SIGNAL = "SIG"
#: why a supervisor ended the run (the word after KILLED)
KILLED_REASONS = ("stdin-eof", "stdin-kill", "silence", "deadline", "signal")

# -- controller -> supervisor ------------------------------------------------------------------
KILL = "KILL"
#: the first line to a supervisor started with ``--env-stdin``:
#: ``ENV <base64 of a JSON name -> value map>``
#: (the secret launch variables: never in the command line, where any local user reads them)
ENV = "ENV"
ENV_STDIN_FLAG = "--env-stdin"
#: how long such a supervisor waits for its ENV line before it gives up (``EXIT 2``)
ENV_WAIT = 60.0
#: the environment variable tagging every process of a run (value: the run id)
RUN_TAG = "CAMIT_RUN_ID"

# -- relay -------------------------------------------------------------------------------------
NEXT = "NEXT"
NEXT_NONE = "-"
TOKEN = "TOKEN"
PORT = "PORT"
OK = "OK"
ERR = "ERR"
NEXT_FAILED = "NEXT-FAILED"

# -- rank wrapper files --------------------------------------------------------------------------
RANK_STEM = "rank"
#: ``rank<r>.pyspy``: py-spy's dump of a rank asked for its stacks (framework.remote.supervisor)
PYSPY_SUFFIX = "pyspy"
#: seconds the supervisor's native py-spy dumps get (all at once),
#: then the Python-only ones of those not done
PYSPY_TIMEOUT = 6.0
PLAIN_TIMEOUT = 2.0
TORCHRUN_LOG = "torchrun.log"

# -- the process-group marker every transport's command prints first on stderr -------------------
PGID_MARKER = "__camit_pgid__="


def rank_file(rank: object, suffix: str) -> str:
    """``rank<r>.<suffix>``: a rank's status (json), log (log), pid (pid) or JUnit (xml) file."""
    return f"{RANK_STEM}{rank}.{suffix}"


def heartbeat_line() -> bytes:
    return f"{HEARTBEAT}\n".encode()


def env_line(env: Mapping[str, str]) -> bytes:
    """``ENV <base64(JSON)>``: variables a supervisor started with ``--env-stdin`` adds to its
    command's environment."""
    payload = base64.b64encode(json.dumps(dict(env), ensure_ascii=True).encode()).decode("ascii")
    return f"{ENV} {payload}\n".encode()


def kill_line(stacks: bool = False) -> bytes:
    """``KILL``, or ``STACKS`` (ask the ranks for their Python stacks first: a job timeout)."""
    return f"{STACKS if stacks else KILL}\n".encode()


def next_line(ip: str | None = None, port: int | None = None, token: str | None = None) -> bytes:
    """``NEXT <ip> <port> <token>`` for a relay with a next hop, ``NEXT -`` for the last one."""
    if ip is None:
        return f"{NEXT} {NEXT_NONE}\n".encode()
    return f"{NEXT} {ip} {port} {token}\n".encode()


def token_line(token: str) -> bytes:
    return f"{TOKEN} {token}\n".encode()


@dataclass(frozen=True)
class SupervisorLine:
    """One parsed supervisor line. ``kind`` is the tag; the other fields are set per kind.

    ``RANK``: ``rank`` (-1 when not a number), ``signal`` or ``exit_code`` (None when unreadable);
    ``EXIT``: ``exit_code``; ``KILLED``: ``reason``; ``SWEPT`` and ``STACKS``: ``count``;
    ``STARTED``: ``pid``;
    ``LEFT`` and ``TREE``: ``pids`` (words that are not pids are dropped).
    Unknown or empty lines have ``kind == ""``.
    """

    kind: str
    rank: int | None = None
    exit_code: int | None = None
    signal: str | None = None
    reason: str | None = None
    count: int = 0
    pid: int | None = None
    pids: tuple[int, ...] = ()


def _int(word: str) -> int | None:
    return int(word) if word.lstrip("-").isdigit() else None


def _word(rest: list[str], index: int, missing: str) -> str:
    """The word at index, ``missing`` past the end."""
    return rest[index] if len(rest) > index else missing


def _rank_line(tag: str, rest: list[str]) -> SupervisorLine:
    """``RANK <r> exit <rc> pid <p>`` or ``RANK <r> SIG <name> pid <p>``."""
    rank = int(rest[0]) if rest[0].isdigit() else -1
    value = _word(rest, 2, "?")
    if rest[1] == RANK_SIGNAL:
        return SupervisorLine(RANK, rank=rank, signal=value)
    return SupervisorLine(RANK, rank=rank, exit_code=_int(value))


def _exit_line(tag: str, rest: list[str]) -> SupervisorLine:
    return SupervisorLine(EXIT, exit_code=_int(rest[0]))


def _killed_line(tag: str, rest: list[str]) -> SupervisorLine:
    return SupervisorLine(KILLED, reason=_word(rest, 0, "?"))


def _count_line(tag: str, rest: list[str]) -> SupervisorLine:
    return SupervisorLine(tag, count=_int(rest[0]) or 0)


def _pids_line(tag: str, rest: list[str]) -> SupervisorLine:
    """Only the words that are positive pids."""
    return SupervisorLine(tag, pids=tuple(int(w) for w in rest if w.isdigit() and int(w) > 0))


def _started_line(tag: str, rest: list[str]) -> SupervisorLine:
    return SupervisorLine(STARTED, pid=_int(rest[0]))


def _bare_line(tag: str, rest: list[str]) -> SupervisorLine:
    return SupervisorLine(tag)


#: tag -> (the fewest words after it, its parser); a line with fewer words is unknown
_PARSERS: dict[str, tuple[int, Callable[[str, list[str]], SupervisorLine]]] = {
    RANK: (2, _rank_line),
    EXIT: (1, _exit_line),
    KILLED: (0, _killed_line),
    SWEPT: (1, _count_line),
    STACKS: (1, _count_line),
    LEFT: (0, _pids_line),
    TREE: (0, _pids_line),
    STARTED: (1, _started_line),
    DONE: (0, _bare_line),
    HEARTBEAT: (0, _bare_line),
}


def parse_supervisor_line(line: str) -> SupervisorLine:
    """What the controller reads from one line of a supervisor's stdout."""
    words = line.split()
    if not words or words[0] not in _PARSERS:
        return SupervisorLine("")
    least, parse = _PARSERS[words[0]]
    if len(words) - 1 < least:
        return SupervisorLine("")
    return parse(words[0], words[1:])


def relay_verdict(output: str, sha256: str) -> tuple[bool, list[str], str | None]:
    """(received and verified, NEXT-FAILED lines, first ERR line) from one relay's stdout."""
    lines = output.splitlines()
    ok = any(line == f"{OK} {sha256}" for line in lines)
    next_failed = [line for line in lines if line.startswith(NEXT_FAILED)]
    err = next((line for line in lines if line.startswith(ERR)), None)
    return ok, next_failed, err


def parse_port(line: str | None) -> int | None:
    """The port of a listening relay's first line (``PORT <n>``), None otherwise."""
    words = (line or "").split()
    if len(words) == 2 and words[0] == PORT and words[1].isdigit():
        return int(words[1])
    return None
