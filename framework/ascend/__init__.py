"""What camit knows about Ascend hosts, shared by config, preflight, launch and cores.

``parse`` reads what Ascend tools print, ``nic`` the NIC roles and HCCL's host ports, ``timeouts`` the
order of HCCL's and the process group's timeouts, ``tools`` where the tools live and the scripts that run them.
"""
