"""Start and stop the app the way the README does, for the browser tests and `python -m bench.load`.

`streamlit run app.py --server.port PORT` from this checkout's virtual environment, on a free loopback
port (.streamlit/config.toml binds 127.0.0.1), waited for through `/_stcore/health`, stopped by its
process id. The server's output goes to a log file so callers can read it (e.g. count model loads).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from model.shipped import shipped_weights

ROOT = Path(__file__).resolve().parents[1]
TRAINED = shipped_weights("text") / "model.safetensors"
LOAD_LINE = "Loading the model:"   # ui.session.load_model logs it once per real load


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def default_weights() -> str | None:
    """None (the app's default: the shipped text model) when it is shipped, else "random"."""
    return None if TRAINED.exists() else "random"


def streamlit_exe() -> str:
    exe = Path(sys.executable).parent / "streamlit"
    return str(exe) if exe.exists() else "streamlit"


@dataclass
class Server:
    port: int
    proc: subprocess.Popen
    log_path: Path
    started_s: float = 0.0
    _log: object = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def model_loads(self) -> int:
        return sum(LOAD_LINE in line for line in self.log().splitlines())

    def model_loads_by_choice(self) -> dict[str, int]:
        """How many times each weights choice (weights, path, device) was loaded."""
        counts: dict[str, int] = {}
        for line in self.log().splitlines():
            if LOAD_LINE in line:
                key = line.split(LOAD_LINE, 1)[1].strip()
                counts[key] = counts.get(key, 0) + 1
        return counts

    def memory_kb(self) -> dict[str, int]:
        """VmRSS and VmHWM (peak resident set) of the server process, in kB."""
        out = {}
        try:
            for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                if line.startswith(("VmRSS:", "VmHWM:")):
                    out[line.split(":")[0]] = int(line.split()[1])
        except OSError:
            pass
        return out

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM to the server's own process id, then SIGKILL if it does not exit."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout)
        if self._log is not None:
            self._log.close()


def start(log_path: Path, port: int | None = None, timeout: float = 300.0, extra: list[str] | None = None,
          env: dict[str, str] | None = None, root: Path = ROOT) -> Server:
    """Start `streamlit run app.py` on a free port and wait until /_stcore/health answers "ok" (`env`: extra
    environment variables for the server, e.g. the batch worker's V41_BATCH_ROWS; `root`: another checkout's
    app.py, e.g. an earlier version extracted for a before/after comparison)."""
    port = port or free_port()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log = open(log_path, "w")
    cmd = [streamlit_exe(), "run", "app.py", "--server.port", str(port), "--server.address", "127.0.0.1",
           "--server.headless", "true", "--browser.gatherUsageStats", "false", *(extra or [])]
    env = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=root, stdout=log, stderr=subprocess.STDOUT, env=env)
    srv = Server(port, proc, log_path, _log=log)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            srv.stop()
            raise RuntimeError(f"streamlit exited with code {proc.returncode}:\n{srv.log()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{srv.url}/_stcore/health", timeout=5) as r:
                if r.read().strip() == b"ok":
                    srv.started_s = time.perf_counter() - t0
                    return srv
        except OSError:
            pass
        time.sleep(0.5)
    srv.stop()
    raise RuntimeError(f"streamlit did not answer /_stcore/health within {timeout:.0f} s:\n{srv.log()[-3000:]}")
