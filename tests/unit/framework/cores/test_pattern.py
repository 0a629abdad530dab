"""framework.cores.pattern: the edges the kernel defines (a lone '%', a bare '|', repeated fields)."""

from __future__ import annotations

from framework.cores.pattern import parse_core_pattern


def test_a_trailing_lone_percent_expands_to_nothing() -> None:
    pat = parse_core_pattern("/c/core.%p%")
    assert pat.fields("/c/core.5") == {"p": "5"} and pat.fields("/c/core.5%") is None


def test_the_first_value_of_a_repeated_specifier_is_kept_and_dots_are_literal() -> None:
    pat = parse_core_pattern("/c/%e/core.%e.%p")
    assert pat.fields("/c/py/core.other.7") == {"e": "py", "p": "7"}
    assert pat.fields("/c/py/coreXother.7") is None


def test_a_pipe_without_a_handler_is_an_unknown_pipe() -> None:
    pat = parse_core_pattern("|")
    assert (pat.kind, pat.handler, pat.delivery, pat.checked) == ("pipe", "", "pipe", False)
    abrt = parse_core_pattern("|/usr/libexec/abrt-hook-ccpp %s %c %p %u %g %t e %P %I %h")
    assert (abrt.kind, abrt.handler) == ("abrt", "/usr/libexec/abrt-hook-ccpp")
