"""E2B's home, /home/user, is the workspace inside the sandbox (code that opens
/home/user/data.csv after files.write finds it), and nothing of the host's /home shows."""

from __future__ import annotations

import os

from sbx_helpers import sh

from onebox.sandbox.linux import BwrapSandbox


async def test_home_user_is_the_workspace_and_host_home_is_absent(linux: BwrapSandbox) -> None:
    os.makedirs("/home/onebox-host-probe", exist_ok=True)
    try:
        result = await sh(linux, (
            "import os\n"
            "open('/home/user/via-home.txt', 'w').write('same')\n"
            "print(open('/workspace/via-home.txt').read(), sorted(os.listdir('/home')))\n"
            "print(os.path.realpath('/home/user'))\n"
            "try:\n"
            "    open('/home/other.txt', 'w')\n"
            "except OSError as exc:\n"
            "    print('refused', exc.errno)\n"), session="home-alias")
    finally:
        os.rmdir("/home/onebox-host-probe")
    assert result.ok, result.stderr
    assert result.stdout.splitlines() == ["same ['user']", "/workspace", "refused 30"]
