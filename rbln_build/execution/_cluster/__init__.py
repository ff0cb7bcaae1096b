"""What a Ray build needs right across machines, apart from the compile itself (``_ray``).

_auth         token authentication from the cluster joined (never a stray file); a private one's token
_credentials  the remote cache's credentials carried to a task by a channel Ray does not log
_scratch      a task's scratch folder on its node, and those interrupted tasks left there
"""

from __future__ import annotations

from ._auth import auth_hint, prepare_auth, private_token, restore
from ._credentials import Credentials, carried
from ._scratch import scratch_folder, sweep, sweep_every_node

__all__ = [
    "Credentials",
    "auth_hint",
    "carried",
    "prepare_auth",
    "private_token",
    "restore",
    "scratch_folder",
    "sweep",
    "sweep_every_node",
]
