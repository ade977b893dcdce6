"""``bide`` as if run on another host: ``socket.gethostname()`` answers $PROOF_HOST.

A lease names its owner ``host:pid:...``; a watcher takes over a dead process's run at
once only when that process was on its own host. Workers started through this
script stand in for separate hosts, so a killed one's runs wait out their leases.
usage: python as_host.py <bide arguments>  (with PROOF_HOST set)
"""

from __future__ import annotations

import os
import socket

socket.gethostname = lambda: os.environ["PROOF_HOST"]

from bide.cli import main  # noqa: E402  (after the host is set)

main()
