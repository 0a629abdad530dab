"""The emulated Ascend node types (profiles) and the host paths every emulated host shares.

A profile fixes what a node of that type shows: its SoC (the env file's ``npu.soc``), its NPUs and dies,
the ``npu-smi`` capture whose layout and values the fake tools replay, and the CANN install layout.
Facts from the captures named below (``data/``) and ``reference/ascend-hosts.md`` §1, §6.
"""

from __future__ import annotations

from dataclasses import dataclass

from framework.errors import LabError

#: host paths (what a process on the emulated host sees)
ASCEND = "/usr/local/Ascend"
EMU_DIR = f"{ASCEND}/.camit-emu"
NPU_JSON = f"{EMU_DIR}/npu.json"
PYTHON = f"{EMU_DIR}/python/bin/python"
REGISTRY = f"{EMU_DIR}/registry"
TOOLKIT_SET_ENV = f"{ASCEND}/ascend-toolkit/set_env.sh"  # CANN <= 8.3 (ascend-hosts.md §6)
CANN_SET_ENV = f"{ASCEND}/cann/set_env.sh"  # CANN >= 8.5


@dataclass(frozen=True)
class Profile:
    """One emulated node type.

    ``count`` is the number of logical devices (dies): what ``torch.npu.device_count()`` and
    ``ASCEND_RT_VISIBLE_DEVICES`` count. ``capture`` is the ``npu-smi info`` capture replayed
    (its header, column layout and per-chip values); ``npu_smi_layout`` its column widths ("25"
    or the wider "26" of npu-smi 26.x), ``driver_version`` the version it prints (= the driver's).
    """

    name: str
    soc: str
    npus: int
    chips_per_npu: int
    cann_version: str
    cann_layout: str  # "toolkit" (<= 8.3 ascend-toolkit/latest) or "cann" (>= 8.5 cann-<version>)
    capture: str
    driver_version: str
    npu_smi_layout: str = "25"
    #: the chip name of ``npu-smi info -m`` (the info table shows the short name of the capture)
    chip_name: str = "Ascend910"

    @property
    def count(self) -> int:
        return self.npus * self.chips_per_npu

    @property
    def set_env(self) -> str:
        """Host path of CANN's ``set_env.sh`` for this profile's layout."""
        return TOOLKIT_SET_ENV if self.cann_layout == "toolkit" else CANN_SET_ENV

    @property
    def cann_home(self) -> str:
        """Host path of the toolkit home (what ``set_env.sh`` exports as ``ASCEND_TOOLKIT_HOME``)."""
        return f"{ASCEND}/ascend-toolkit/latest" if self.cann_layout == "toolkit" else f"{ASCEND}/cann"

    @property
    def a3(self) -> bool:
        return self.chips_per_npu == 2


PROFILES: dict[str, Profile] = {
    # Atlas 800T A2: 8 x 910B3, npu-smi 25.2.0 (npu-smi-info-910b3-a2-busy.txt), CANN 8.3.RC2 in the
    # ascend-toolkit layout (ascend-toolkit-install-info-8.3rc2.txt)
    "a2": Profile("a2", "ascend910b", 8, 1, "8.3.RC2", "toolkit", "npu-smi-info-910b3-a2-busy.txt", "25.2.0",
                  chip_name="Ascend 910B3"),
    # Atlas 800T A3: 8 NPUs x 2 dies, npu-smi 25.2.3 (npu-smi-info-a3-busy.txt), CANN 8.5.0 in the
    # cann-<version> layout (ascend-toolkit-install-info-8.5.0-cann-layout.txt)
    "a3": Profile("a3", "ascend910_93", 8, 2, "8.5.0", "cann", "npu-smi-info-a3-busy.txt", "25.2.3"),
    # the same A3 node with npu-smi 26.0.rc2's wide layout (npu-smi-info-a3-v26-*-excerpt.txt); the
    # excerpts hold NPU 0 and NPU 7 die 1 only, so the per-chip values are the 25.2.3 capture's
    "a3-26": Profile("a3-26", "ascend910_93", 8, 2, "8.5.0", "cann", "npu-smi-info-a3-busy.txt", "26.0.rc2",
                     npu_smi_layout="26"),
}


def profile(name: str) -> Profile:
    """The profile called ``name``; an unknown name is a :class:`LabError` listing the valid ones."""
    try:
        return PROFILES[name]
    except KeyError:
        raise LabError(f"unknown emulated NPU profile {name!r}: valid profiles are {', '.join(PROFILES)}") from None
