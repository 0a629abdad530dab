"""Keeping secrets out of the report: every known secret value is replaced by ``***`` in the
*values* of the data each report file is built from, before it is serialised.

Why never in the serialised text, and the scrubber of each format: docs/internals/report.md.
"""

from __future__ import annotations

import html
import json
import logging
import os
import re
import urllib.parse
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from framework.config.effective import EnvConfig

__all__ = ["ID_ATTRS", "ID_KEYS", "Scrub", "Scrubber", "redact_mapping", "scrub_doc", "scrub_file", "scrub_folder",
           "scrub_html", "scrub_tree"]

log = logging.getLogger("camit.report")

#: a text filter every report writer applies to the values it writes
Scrub = Callable[[str], str]

REDACTED = "***"
_SECRET_KEY = re.compile(r"passw|pass$|token|secret|credential", re.I)

#: JSON keys whose string values camit makes itself (names, enums, run-folder paths, hashes): kept as they
#: are, so a password that is a common word never turns a status, a host name or a link into ``***``
ID_KEYS = frozenset({
    "schema", "run_id", "launch_id", "status", "outcome", "kind", "failure_kind", "phase", "host", "hostname",
    "signal", "log", "junit", "local_path", "backtrace_path", "sha256", "iso", "via", "name", "superseded",
    "step", "policy", "core_policy", "state", "backend", "soc",
})
#: XML attributes that are identifiers or numbers (junit-10.xsd types several as decimals and dates)
ID_ATTRS = frozenset({
    "name", "classname", "hostname", "package", "id", "group", "type", "file", "line", "time", "timestamp",
    "tests", "failures", "errors", "skipped", "disabled", "assertions",
})
#: file kinds never rewritten: archives, compressed cores, binaries, static assets (their bytes are not text to
#: edit); any other file is scrubbed as bytes, NULs or not (a rank log with a progress bar), unless it starts
#: with a binary format's magic (:data:`_BINARY_MAGIC`)
_BINARY_SUFFIXES = (".gz", ".tgz", ".xz", ".zst", ".bz2", ".zip", ".tar", ".core", ".pt", ".bin", ".so",
                    ".pyc", ".npy", ".whl", ".run", ".lz4", ".png", ".svg", ".ico", ".js", ".css", ".lock")
#: the files ``finalize`` writes after the sweep (built from scrubbed values anyway)
_WRITTEN_AFTER = ("cluster.xml", "manifest.json", "index.html")
#: the leading bytes of the binary formats never rewritten: ELF (a core dump), gzip, xz, zstd, bzip2, zip
_BINARY_MAGIC = (b"\x7fELF", b"\x1f\x8b", b"\xfd7zXZ\x00", b"\x28\xb5\x2f\xfd", b"BZh", b"PK\x03\x04")
_HTML_TOKEN = re.compile(r"(<!--.*?-->|<[^>]*>)", re.S)
_HTML_RAW = re.compile(r"<(/?)(?:script|style)\b", re.I)


class Scrubber:
    """Replaces known secret values (the env's passwords and secret launch variables) by ``***``."""

    def __init__(self, secrets: Iterable[str]) -> None:
        #: each secret and its escaped forms (:func:`escaped_forms`), longest first
        self.secrets = sorted({f for s in secrets if s for f in escaped_forms(str(s))}, key=len, reverse=True)
        self._raw = [s.encode("utf-8", "surrogateescape") for s in self.secrets]

    @classmethod
    def from_env(cls, env: EnvConfig | object | None) -> Scrubber:
        """The secrets of an ``EnvConfig``; none for anything else (a mapping, a path, None): the
        hosts' passwords and the launch's secret variables."""
        passwords = [getattr(spec, "password", None) for spec in _values(env, "hosts")]
        variables = _values(getattr(env, "launch", None), "env")
        return cls(s.reveal() for s in [*passwords, *variables] if hasattr(s, "reveal"))

    def __bool__(self) -> bool:
        return bool(self.secrets)

    def text(self, text: str) -> str:
        """``text`` (a value, not escaped markup) with every secret replaced by ``***``."""
        for s in self.secrets:
            if s in text:
                text = text.replace(s, REDACTED)
        return text

    __call__ = text

    def data(self, raw: bytes) -> bytes:
        """``raw`` text bytes with every secret's UTF-8 form replaced by ``***``."""
        for s in self._raw:
            if s in raw:
                raw = raw.replace(s, REDACTED.encode())
        return raw


def _values(obj: object, attr: str) -> list[Any]:
    """The values of the mapping ``obj.<attr>`` (none when it is absent or empty)."""
    return list((getattr(obj, attr, None) or {}).values())


def escaped_forms(secret: str) -> set[str]:
    """``secret`` as a program may print it: raw, inside a JSON string (ASCII-escaped or not), inside a
    Python ``repr`` (of the str and of its UTF-8 bytes), URL-encoded (``%XX`` and form ``+``)."""
    forms = {secret, json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1], repr(secret)[1:-1],
             repr(secret.encode("utf-8", "surrogateescape"))[2:-1], urllib.parse.quote(secret, safe=""),
             urllib.parse.quote_plus(secret, safe="")}
    return {f for f in forms if f}


def scrub_doc(doc: Any, scrub: Scrub, key: str = "") -> Any:
    """A copy of a JSON document with ``scrub`` applied to every string value (and list item) except under
    :data:`ID_KEYS`; keys, numbers, booleans and null stay as they are."""
    if isinstance(doc, Mapping):
        return {k: scrub_doc(v, scrub, str(k)) for k, v in doc.items()}
    if isinstance(doc, list | tuple):
        return [scrub_doc(v, scrub, key) for v in doc]
    if isinstance(doc, str) and key not in ID_KEYS:
        return scrub(doc)
    return doc


def scrub_tree(root: ET.Element, scrub: Scrub) -> bool:
    """Apply ``scrub`` in place to every text, tail and non-identifier attribute value (not :data:`ID_ATTRS`)
    under ``root``; tags and attribute names are never touched. Returns whether anything changed."""
    changed = [_scrub_element(el, scrub) for el in root.iter()]  # a list: every element is scrubbed
    return any(changed)


def _scrub_element(el: ET.Element, scrub: Scrub) -> bool:
    """Scrub one element's text, tail and non-identifier attribute values in place; whether any
    changed."""
    before = (el.text, el.tail, dict(el.attrib))
    el.text, el.tail = _scrubbed(el.text, scrub), _scrubbed(el.tail, scrub)
    for name in [n for n in el.attrib if n not in ID_ATTRS]:
        el.set(name, scrub(el.attrib[name]))
    return (el.text, el.tail, el.attrib) != before


def _scrubbed(value: str | None, scrub: Scrub) -> str | None:
    return scrub(value) if value else value


def scrub_html(page: str, scrub: Scrub) -> str:
    """An HTML page (one camit did not render: a coverage report) with ``scrub`` applied to its text between
    tags, unescaped first and escaped again; tags, attributes, scripts and styles stay as they are."""
    out: list[str] = []
    hidden = False
    for piece in _HTML_TOKEN.split(page):
        if piece.startswith("<"):
            m = _HTML_RAW.match(piece)
            if m:
                hidden = not m.group(1)
            out.append(piece)
        elif piece and not hidden:
            value = html.unescape(piece)
            clean = scrub(value)
            out.append(piece if clean == value else html.escape(clean, quote=False))
        else:
            out.append(piece)
    return "".join(out)


def scrub_file(path: Path, scrubber: Scrubber) -> bool:
    """Scrub one file of a run folder by its kind (JSON, XML, text); binary files are left alone.

    Returns whether the file was rewritten. A JSON or XML file that does not parse is scrubbed as text
    (it is not valid to begin with, and must not keep a secret either).
    """
    from framework.records.folder import write_atomic

    if path.name.endswith(_BINARY_SUFFIXES):
        return False
    with open(path, "rb") as fh:  # a core dump (gigabytes, ELF magic first) is never read further than this
        raw = fh.read(8)
        if raw.startswith(_BINARY_MAGIC):
            return False
        raw += fh.read()
    by_kind = _BY_SUFFIX.get(path.suffix)
    clean = by_kind(raw, scrubber) if by_kind is not None else None
    if clean is None:  # text, or a document that does not parse
        clean = scrubber.data(raw)
    if clean == raw:
        return False
    write_atomic(path, clean)
    return True


# Each kind's scrubber: the file's clean content (``raw`` itself when nothing changed), None when it does not
# parse.
def _scrub_json(raw: bytes, scrubber: Scrubber) -> str | bytes | None:
    try:
        doc = json.loads(raw.decode("utf-8"))
    except ValueError:
        return None
    clean = scrub_doc(doc, scrubber)
    return raw if clean == doc else json.dumps(clean, indent=2, default=str) + "\n"


def _scrub_xml(raw: bytes, scrubber: Scrubber) -> str | bytes | None:
    try:
        top = ET.fromstring(raw)
    except ET.ParseError:
        return None
    if not scrub_tree(top, scrubber):
        return raw
    return ET.tostring(top, encoding="unicode", xml_declaration=True) + "\n"


def _scrub_html_bytes(raw: bytes, scrubber: Scrubber) -> str | bytes | None:
    text = raw.decode("utf-8", "surrogateescape")
    clean = scrub_html(text, scrubber)
    return raw if clean == text else clean.encode("utf-8", "surrogateescape")


_BY_SUFFIX: dict[str, Callable[[bytes, Scrubber], str | bytes | None]] = {
    ".json": _scrub_json, ".xml": _scrub_xml, ".html": _scrub_html_bytes, ".htm": _scrub_html_bytes,
}


def scrub_folder(root: str | os.PathLike[str], scrubber: Scrubber, *,
                 skip: Iterable[str] = _WRITTEN_AFTER) -> list[str]:
    """Put every regular file under the run folder ``root`` through :func:`scrub_file` (symlinks are not
    followed; lock and temporary files are skipped, and the top-level files in ``skip``). Returns the
    run-folder relative paths rewritten. Nothing to do without secrets."""
    base = Path(root)
    done: list[str] = []
    if not scrubber or not base.is_dir():
        return done
    skipped = set(skip)
    for path in _regular_files(base):
        rel = path.relative_to(base).as_posix()
        if rel not in skipped and _scrub_or_warn(path, scrubber):
            done.append(rel)
    return done


def _scrub_or_warn(path: Path, scrubber: Scrubber) -> bool:
    """:func:`scrub_file`; a file that cannot be read or written is a warning, not the run's end."""
    try:
        return scrub_file(path, scrubber)
    except OSError as exc:
        log.warning("report: cannot scrub %s: %s", path, exc)
        return False


def _regular_files(base: Path) -> Iterable[Path]:
    """The regular files under ``base``, no dot file, never through a symlink."""
    for folder, dirs, files in os.walk(base, followlinks=False):
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(folder, d))]
        yield from (p for p in (Path(folder, name) for name in files) if _is_regular(p))


def _is_regular(path: Path) -> bool:
    """A regular file, not a symlink to one, not hidden by a leading dot."""
    return not path.name.startswith(".") and not path.is_symlink() and path.is_file()


def redact_mapping(doc: Any, key: str = "") -> Any:
    """A copy of a plain document (mappings, lists, scalars) with the values of secret-looking keys
    (``passwd``, ``token``, ``secret``, ``credential``…) and every ``Secret`` replaced by ``***``."""
    if isinstance(doc, Mapping):
        return {k: redact_mapping(v, str(k)) for k, v in doc.items()}
    if isinstance(doc, list):
        return [redact_mapping(v, key) for v in doc]
    if _SECRET_KEY.search(key) or type(doc).__name__ == "Secret":
        return REDACTED
    return doc
