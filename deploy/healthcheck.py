"""The container image's HEALTHCHECK: GET /healthz of the bot in this container (exit 0: healthy).

The address is the one the bot listens on: `[metrics] listen` from the same config and
environment the bot reads (LIGHTGREP_METRICS_LISTEN or ./config.toml), so the check can never
ask a port the bot does not serve. A URL given as the argument is asked instead (a nats-server's
monitoring port). Prints the answer's body, which `docker inspect` keeps with the state.
"""

from __future__ import annotations

import sys
import urllib.error
import urllib.request

TIMEOUT_S = 5.0
ANY_ADDRESS = {"", "0.0.0.0", "::", "[::]"}  # listening everywhere: ask over loopback


def healthz_url() -> str | None:
    from bot.config import load_config

    listen = load_config(None, writer=False).metrics.listen  # a ConfigError: its one line
    if not listen:
        return None
    host, _, port = listen.rpartition(":")
    return f"http://{'127.0.0.1' if host in ANY_ADDRESS else host}:{port}/healthz"


def main(argv: list[str]) -> int:
    try:
        url = argv[0] if argv else healthz_url()
    except Exception as exc:  # the config's mistake, which the bot reports in its log too
        print(f"unhealthy: {exc}")
        return 1
    if url is None:
        print("unhealthy: no [metrics] listen to ask /healthz at (LIGHTGREP_METRICS_LISTEN)")
        return 1
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as answer:
            print(answer.read(2000).decode(errors="replace"))
            return 0
    except urllib.error.HTTPError as exc:  # 503: a platform, the model or NATS is away
        print(f"unhealthy: {exc.code} {exc.read(2000).decode(errors='replace')}")
    except (OSError, ValueError) as exc:
        print(f"unhealthy: {url}: {exc}")
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
