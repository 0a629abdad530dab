"""Where the Ascend tools live on a host and the shell scripts camit runs them with.

Paths from ascend-hosts.md §3, §5 (the driver's ``tools/`` folder); every tool call is bounded and a
missing tool is noted, never an error.
"""

from __future__ import annotations

from framework import commands
from framework.commands import ShellScript

#: seconds each diagnostic tool of :func:`state_script` may take (coreutils ``timeout``)
TOOL_TIMEOUT = 20
#: the folder of a node's run folder the failure snapshot goes to
STATE_DIR = "npu-state"
#: where the tools are when they are not on PATH (ascend-hosts.md §3, §5)
NPU_SMI_DIRS = ("/usr/local/sbin/npu-smi", "/usr/local/bin/npu-smi")
HCCN_TOOL = "/usr/local/Ascend/driver/tools/hccn_tool"
MSNPUREPORT = "/usr/local/Ascend/driver/tools/msnpureport"
#: the core-size limit (KiB, ``ulimit -c``) of ranks on NPU hosts: their cores hold the device
#: runtime's mappings (see ``framework.cores.caps``)
NPU_CORE_LIMIT = str(4 * 1024 * 1024)


def npu_smi_script() -> ShellScript:
    """sh: ``npu-smi info`` wherever the driver put it (exit 127 when there is none)."""
    dirs = " ".join(NPU_SMI_DIRS)
    return ShellScript("S=$(command -v npu-smi 2>/dev/null); "
                       f"for c in {dirs}; do [ -z \"$S\" ] && [ -x $c ] && S=$c; done; "
                       "[ -n \"$S\" ] || exit 127; exec \"$S\" info")


def state_script(run_dir: str, devices: int, *, tool_timeout: int = TOOL_TIMEOUT) -> ShellScript:
    """sh saving the NPU state of a failed launch into ``<run_dir>/npu-state/`` (never failing).

    ``npu-smi-info.txt``; ``hccn.txt`` (``hccn_tool -i N -link -g`` and ``-net_health -g`` for each of the
    host's ``devices``, one call at a time: parallel calls answer "busy"); ``msnpureport.txt`` and the
    export it writes into its working directory, ``msnpureport/``; ``notes.txt`` names a tool that is not
    installed or did not finish within ``tool_timeout`` seconds.
    """
    q = commands.quote
    d = f"{run_dir}/{STATE_DIR}"
    to = f"timeout {int(tool_timeout)}"
    dirs = " ".join(NPU_SMI_DIRS)
    lines = [
        f"D={q(d)}; mkdir -p \"$D/msnpureport\" || exit 0",
        "note() { echo \"$*\" >> \"$D/notes.txt\"; }",
        "ran() { rc=$?; [ $rc -eq 124 ] && note \"$1: no answer within " + str(int(tool_timeout)) + "s\"; }",
        "S=$(command -v npu-smi 2>/dev/null)",
        f"for c in {dirs}; do [ -z \"$S\" ] && [ -x $c ] && S=$c; done",
        f"if [ -n \"$S\" ]; then {to} \"$S\" info > \"$D/npu-smi-info.txt\" 2>&1; ran npu-smi; "
        "else note 'npu-smi: not installed'; fi",
        "H=$(command -v hccn_tool 2>/dev/null); [ -n \"$H\" ] || H=" + q(HCCN_TOOL),
        f"if [ -x \"$H\" ]; then for i in $(seq 0 {max(0, int(devices) - 1)}); do "
        "for a in -link -net_health; do echo \"== hccn_tool -i $i $a -g\"; "
        f"{to} \"$H\" -i $i $a -g 2>&1; ran \"hccn_tool -i $i $a -g\"; done; done > \"$D/hccn.txt\"; "
        "else note 'hccn_tool: not installed'; fi",
        "M=$(command -v msnpureport 2>/dev/null); [ -n \"$M\" ] || M=" + q(MSNPUREPORT),
        f"if [ -x \"$M\" ]; then (cd \"$D/msnpureport\" && {to} \"$M\" > \"$D/msnpureport.txt\" 2>&1); "
        "ran msnpureport; else note 'msnpureport: not installed'; rmdir \"$D/msnpureport\"; fi",
        "exit 0",
    ]
    return ShellScript("\n".join(lines) + "\n")
