"""Nothing slow runs on the loop that renews a worker's leases: the model client (``openai``,
over a second of CPU to import) is imported in a thread when a worker that serves a model
starts, not on the event loop at its first model call."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from onebox.config import Settings

PROBE = textwrap.dedent("""
    import asyncio, importlib.abc, sys, threading
    seen = {}

    class Watch(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "openai" and name not in seen:
                seen[name] = threading.current_thread() is threading.main_thread()
            return None

    sys.meta_path.insert(0, Watch())
    assert "openai" not in sys.modules
    from onebox.config import load_settings
    from onebox.runtime.engine.worker import Worker
    from onebox.sandbox.registry import get_backend
    from onebox.store.db import Database

    async def main():
        settings = load_settings()
        db = await Database.open(settings)
        backend = get_backend(settings)
        stop = asyncio.Event()
        serving = asyncio.create_task(Worker(db, backend, settings).serve(stop, drain_s=1))
        for _ in range(200):
            if "openai" in seen:
                break
            await asyncio.sleep(0.05)
        stop.set()
        await serving
        await backend.close()
        await db.close()

    asyncio.run(main())
    print("imported on the loop's thread" if seen.get("openai") else
          "imported in a thread" if "openai" in seen else "never imported")
""")


def test_a_worker_serving_a_model_imports_its_client_off_the_loop(settings: Settings,
                                                                  db_url: str) -> None:
    env = {"ONEBOX_HOME": str(settings.home), "ONEBOX_DATABASE_URL": db_url,
           "ONEBOX_LLM__MODEL": "gpt-test", "ONEBOX_LLM__BASE_URL": "http://127.0.0.1:9/v1",
           "ONEBOX_LLM__API_KEY": "sk-test", "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().endswith("imported in a thread"), done.stdout + done.stderr[-2000:]
