"""The OpenSSH client config (``~/.ssh/config``) as camit reads it: which file, and what it says
about one host."""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: the environment variable naming the ssh_config file (``none``: read none)
SSH_CONFIG_ENV = "CAMIT_SSH_CONFIG"
DEFAULT_SSH_CONFIG = "~/.ssh/config"
NONE = "none"
#: an ssh_config line: keyword, then ``=`` or blanks, then the rest (as OpenSSH and paramiko split it)
_SETTING = re.compile(r"^\s*(\w+)(?:\s*=\s*|\s+)(.*)$")


@dataclass(frozen=True)
class SshHostConfig:
    """What the ssh_config says about one name; ``None``: not set there."""

    hostname: str | None = None
    user: str | None = None
    port: int | None = None
    identity_file: Path | None = None
    proxy_jump: str | None = None


class SshConfigFile:
    """One parsed ssh_config file; :meth:`lookup` answers for a name."""

    def __init__(self, path: Path) -> None:
        import paramiko  # only when a file is read: loading an env without one stays light

        self.path = path
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"cannot read ssh_config {path}: {exc}") from None
        refuse_exec(text, path)
        try:
            self._config = paramiko.SSHConfig.from_text(text)
        except paramiko.SSHException as exc:
            raise ValueError(f"ssh_config {path} is not valid: {exc}") from None
        #: directives paramiko does not follow, for a warning
        self.ignored = _unfollowed(text)

    def lookup(self, name: str) -> SshHostConfig:
        """The honoured keys for ``name``; ValueError (naming the file and the name) when one is unusable."""
        import paramiko

        try:
            found: Mapping[str, Any] = self._config.lookup(name)
        except (paramiko.SSHException, OSError, ValueError) as exc:
            raise ValueError(f"ssh_config {self.path}: looking up {name!r} failed: {exc}") from None
        where = f"ssh_config {self.path} (Host {name})"
        if str(found.get("proxycommand", NONE)).lower() != NONE:
            raise ValueError(f"{where}: ProxyCommand is not supported by camit; use ProxyJump (one hop)")
        port = _port(found, where)
        jump = _jump(found, where)
        hostname = _text(found, "hostname")
        return SshHostConfig(
            hostname=None if hostname == name else hostname,
            user=_text(found, "user"),
            port=port,
            identity_file=_identity_file(found),
            proxy_jump=jump,
        )


def _unfollowed(text: str) -> list[str]:
    """The directives of an ssh_config text paramiko does not follow (``Include``), as spelt."""
    return sorted({line.split()[0] for line in text.splitlines()
                   if line.strip() and line.split()[0].lower() == "include"})


def _text(found: Mapping[str, Any], key: str) -> str | None:
    """A key's value as text; None when it is not set (or empty)."""
    value = found.get(key)
    return str(value) if value else None


def _identity_file(found: Mapping[str, Any]) -> Path | None:
    """The first ``IdentityFile`` (paramiko lists them all)."""
    files = found.get("identityfile")
    return Path(files[0]) if files else None


def _port(found: Mapping[str, Any], where: str) -> int | None:
    """The ``Port`` of a lookup, or None; ValueError when it is not a port number."""
    if "port" not in found:
        return None
    text = str(found["port"])
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise ValueError(f"{where}: Port {text!r} is not a port number (1-65535)")
    return int(text)


def _jump(found: Mapping[str, Any], where: str) -> str | None:
    """The ``ProxyJump`` of a lookup (None for ``none``); ValueError for several hops."""
    jump = _text(found, "proxyjump")
    if jump is None or jump.lower() == NONE:
        return None
    if "," in jump:
        raise ValueError(f"{where}: ProxyJump {jump!r} has several hops; camit supports one jump host")
    return jump


def refuse_exec(text: str, path: Path) -> None:
    """ValueError naming file and line for a ``Match exec`` line: paramiko would run its command on the
    controller while looking a name up (a shell, as root on a CI agent); the file comes from an env file, which
    camit treats as untrusted. Reading an ssh_config never executes anything."""
    for number, line in enumerate(text.splitlines(), 1):
        if any(w.lstrip("!").lower() == "exec" for w in _match_words(line)):
            raise ValueError(f"ssh_config {path}:{number}: 'Match exec' runs a command on the controller; "
                             "camit refuses it (use Host blocks)")


def _match_words(line: str) -> list[str]:
    """A ``Match`` line's criteria, split as a shell would (else on blanks); other lines: none."""
    found = _SETTING.match(line.strip())
    if found is None or found.group(1).lower() != "match":
        return []
    try:
        return shlex.split(found.group(2))
    except ValueError:
        return found.group(2).split()


def find(value: str | None, base: Path, environ: Mapping[str, str]) -> tuple[Path | None, bool]:
    """The ssh_config file to read and whether it was named explicitly (a missing named file is an error).

    ``value`` is ``defaults.ssh_config`` (relative to ``base``, ``~`` expanded with ``environ``'s HOME).
    """
    named = value if value is not None else environ.get(SSH_CONFIG_ENV) or None
    if named is not None:
        if named.strip().lower() == NONE:
            return None, True
        return Path(controller_path(named, base, environ)), True
    default = Path(controller_path(DEFAULT_SSH_CONFIG, base, environ))
    return (default if default.is_file() else None), False


def controller_path(value: str, base: Path, environ: Mapping[str, str]) -> str:
    """A controller path of the env file: ``~`` expanded (HOME from ``environ``), relative -> relative to
    ``base``; globs untouched (also :mod:`framework.config.effective`'s key_file, known_hosts, artifacts)."""
    head, sep, rest = value.partition("/")
    if head == "~":
        value = (environ.get("HOME") or os.path.expanduser("~")) + sep + rest
    elif head.startswith("~"):
        value = os.path.expanduser(value)
    return os.path.normpath(os.path.join(base, value))
