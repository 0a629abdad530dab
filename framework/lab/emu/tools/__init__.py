"""The fake Ascend tools of an emulated host (stdlib only; copied into each host's tree as ``camit_emu``).

:mod:`.npu_smi`, :mod:`.hccn_tool` and :mod:`.msnpureport` each have ``main(argv, emu)``; the tree's
launchers (``sbin/npu-smi``, ``Ascend/driver/tools/{hccn_tool,msnpureport}``) call them with the host's
``.camit-emu`` directory. Nothing in ``framework`` outside ``framework.lab.emu`` imports them.
"""
