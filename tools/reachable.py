"""Print URL if it answers within a few seconds, else print nothing (used by `make setup`).

`make setup` passes PyTorch's CPU index to pip only when this machine reaches it: pip retries an
unreachable index for every package it resolves and waits out its own timeout at each try (a
machine with PyPI only, or a local wheel, would wait minutes for nothing).

    python tools/reachable.py URL [SECONDS]
"""

import sys
import threading
import urllib.request


def reachable(url: str, seconds: float) -> bool:
    answered, done = [], threading.Event()

    def probe():
        try:  # urllib honours https_proxy, as pip does; the body is not read
            with urllib.request.urlopen(url, timeout=seconds):
                answered.append(True)
        except Exception:  # refused, unknown host, timed out, an HTTP error: not reached
            pass
        finally:
            done.set()

    # a thread, so that the name lookup (which no socket timeout bounds) is bounded too
    threading.Thread(target=probe, daemon=True).start()
    done.wait(seconds)
    return bool(answered)


if __name__ == "__main__":
    url = sys.argv[1]
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 3.0
    if reachable(url, seconds):
        print(url)
    else:
        print(f"{url} not reached within {seconds:g} s: installing without it", file=sys.stderr)
