"""A server process loads what serving needs, not the simulation and import stack.

Importing the demo seed from an app's ``ready()`` once pulled WNTR, pandas, pyarrow and matplotlib into
every uvicorn worker (RSS 347 MB instead of 166 MB, against the 300 MB per-worker budget of issue 25).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("wntr", "pandas", "pyarrow", "matplotlib", "networkx")


def test_the_asgi_application_does_not_import_the_simulation_stack():
    code = f"import json, sys; import tjwater.asgi; print(json.dumps([m for m in {list(HEAVY)!r} if m in sys.modules]))"
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings"}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
