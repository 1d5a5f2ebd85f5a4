#!/usr/bin/env bash
# Zen VM agent: the startup script of a GPU instance template (terraform: metadata_startup_script).
#
# GCE runs it as root on every boot. It installs the agent into a virtualenv (once per package
# version), writes its configuration, and runs it as the systemd service zen-agent (or, without
# systemd, as a plain background process). It reads nothing secret: only instance metadata.
#
# The agent runs as the system user zen-agent, not root: a member of the docker group (it runs the jobs'
# containers), owner of /var/lib/zen-agent (its home: its work directory, with the jobs' data, its cache
# and its report journal, and gcloud's and docker's own files), read-only everywhere else (the unit's
# hardening). Docker group membership is root-equivalent on the host (docker runs what it is asked, as
# root): this contains the agent's bugs and makes clear whose files are whose; it does not contain a
# compromised agent. What keeps jobs from their neighbours is their containers' confinement
# (zen.agent.container). What needs root runs as root: this script and the unit's metadata guard ("+").
#
# Assumptions (the instance template provides them):
# - The image has the NVIDIA driver, Docker and the NVIDIA Container Toolkit (`docker run --gpus all`
#   works), iptables, and python3 >= 3.11 with venv; e.g. a Deep Learning VM image. Without
#   python3.11 the script tries apt-get.
# - Instance attributes:
#     zen-cluster        the cluster this MIG belongs to, e.g. 4xa100-40gb (read by the agent itself)
#     zen-tags, zen-max-jobs-per-day, zen-max-gpu-hours-per-day
#                        its execution groups and pull limits (read by the agent itself; see
#                        zen.agent.identity and zen.agent.limits)
#     zen-image-locations  optional: a JSON list of Artifact Registry locations; docker gets credentials
#                        for their hosts, besides the VM's region's and the multi-regions
#     zen-agent-package  what to install: a pip requirement (zen==0.1.0, a wheel URL) or a gs:// URL of
#                        a wheel, copied with `gcloud storage cp`
#     zen-config         optional: the YAML configuration (topic and subscription names, clusters);
#                        absent (404), the default shipped with the package is used
#     zen-agent-env      optional: the agent's tunables, a JSON object of ZEN_AGENT_* name -> value
#                        (terraform's agent_env), set in its unit; see AGENT_ENV below
# - The VM's service account may pull from Artifact Registry, read the wheel's bucket, publish to
#   zen-heartbeats, consume its subscription zen-vm-control-<vm> on zen-vm-control (the tick makes it
#   and grants it; never deleted: it expires after a day unread), consume zen-job-start-<cluster>-<region>, and write log
#   entries (roles/logging.logWriter):
#   the agent ships every job's output to Cloud Logging (log zen-jobs), never only to this disk.
#   The agent uses the metadata server's credentials (Application Default Credentials); no key files.
# - The VM name, zone, project come from the metadata server (the agent asks it directly).
#
# Shutdown: GCE sends ACPI shutdown on preemption or deletion; systemd then sends SIGTERM to the agent
# only (KillMode=mixed), which stops the job (SIGTERM, grace, SIGKILL), reports PREEMPTED and the VM
# STOPPING, and closes its control stream; whatever is left gets SIGKILL after TimeoutStopSec.
# Spot VMs get about 30 s in all, so the stop grace stays well below that.
#
# Metadata reads: only a 404 means "not set". Any other answer (5xx, a timeout, no connection) is
# retried (METADATA_TRIES, pausing longer each time); still unreadable, the script fails (non-zero)
# rather than guess: a zen-config read as unset would run the agent on the default configuration.
# Exception: zen-config unreadable on a boot that already has /etc/zen/config.yaml keeps that file.
# Downloads and pip installs are retried a few times too (INSTALL_TRIES).
#
# Testing hooks (not used on GCE): ZEN_STARTUP_ROOT prefixes every path written, ZEN_STARTUP_DRY_RUN=1
# prints the commands that install and start instead of running them (ZEN_STARTUP_DRY_RUN_EXEC, if
# set, is run with each such command as its arguments and gives its exit status: a test's stand-in),
# ZEN_STARTUP_RETRY_S is the first pause between tries (2 s; 0 in tests), GCE_METADATA_HOST points at
# another metadata server.
set -euo pipefail

ROOT="${ZEN_STARTUP_ROOT:-}"
DRY_RUN="${ZEN_STARTUP_DRY_RUN:-0}"
METADATA="http://${GCE_METADATA_HOST:-metadata.google.internal}/computeMetadata/v1"
PREFIX="$ROOT/opt/zen"
VENV="$PREFIX/venv"
CONFIG_DIR="$ROOT/etc/zen"
UNIT="$ROOT/etc/systemd/system/zen-agent.service"
FENCE_PATH_UNIT="$ROOT/etc/systemd/system/zen-fence.path"
FENCE_UNIT="$ROOT/etc/systemd/system/zen-fence.service"
FENCE_FILE=/run/zen-agent/fence  # ZEN_AGENT_FENCE_FILE: in the agent's RuntimeDirectory
AGENT_USER=zen-agent
AGENT_HOME=/var/lib/zen-agent  # the only folder the agent writes (ReadWritePaths)
WORK_DIR="$AGENT_HOME/work"  # ZEN_AGENT_WORK_DIR: not under /tmp, which is the agent's own (PrivateTmp) and not docker's
STOP_GRACE_S="${ZEN_AGENT_STOP_GRACE_S:-10}"
RETRY_S="${ZEN_STARTUP_RETRY_S:-2}"
METADATA_TRIES=10  # pauses 2, 4, ... 18 s: 90 s in all before the script gives up
INSTALL_TRIES=4
# The unit's removal of leftover job containers (name zen-*), each docker call bounded (a hung daemon never answers).
SWEEP="timeout 20 docker ps -aq --filter name=^zen- | xargs -r timeout 60 docker rm -f -v"

log() { echo "zen-startup: $*" >&2; }

run() {  # run a command, or only show it in a dry run
  if [[ "$DRY_RUN" == "1" ]]; then
    printf 'would run:'; printf ' %q' "$@"; printf '\n'
    [[ -z "${ZEN_STARTUP_DRY_RUN_EXEC:-}" ]] || "$ZEN_STARTUP_DRY_RUN_EXEC" "$@"
  else
    "$@"
  fi
}

retry() {  # retry TRIES COMMAND...: until it succeeds, at most TRIES times, pausing longer each time
  local tries="$1" try
  shift
  for ((try = 1; ; try++)); do
    if "$@"; then return 0; fi
    if ((try >= tries)); then
      log "failed $tries times, giving up: $*"
      return 1
    fi
    log "failed (try $try of $tries), again in $((RETRY_S * try)) s: $*"
    sleep "$((RETRY_S * try))"
  done
}

check() {  # check COMMAND...: whether it succeeds (in a dry run: shown, and false unless the stand-in says)
  if [[ "$DRY_RUN" == "1" ]]; then
    printf 'would check:'; printf ' %q' "$@"; printf '\n'
    [[ -n "${ZEN_STARTUP_DRY_RUN_EXEC:-}" ]] && "$ZEN_STARTUP_DRY_RUN_EXEC" "$@"
  else
    "$@" >/dev/null 2>&1
  fi
}

# metadata PATH: prints its value and returns 0; returns 1 when it is not set (404, the only answer
# that means so) and 2 when it cannot be read (any other answer, a timeout) after METADATA_TRIES tries.
metadata() {
  local body code try
  body="$(mktemp)"
  for ((try = 1; try <= METADATA_TRIES; try++)); do
    # curl's own failure (no connection, a timeout, even one after a 200's headers) is no answer.
    if ! code="$(curl --silent --max-time 5 -H "Metadata-Flavor: Google" -o "$body" -w '%{http_code}' \
        "$METADATA/$1" 2>/dev/null)"; then
      code="no answer"
    fi
    case "$code" in
      200) cat "$body"; rm -f "$body"; return 0 ;;
      404) rm -f "$body"; return 1 ;;
    esac
    log "metadata $1: HTTP $code (try $try of $METADATA_TRIES)"
    ((try == METADATA_TRIES)) || sleep "$((RETRY_S * try))"
  done
  rm -f "$body"
  return 2
}

# attribute NAME [unreadable-ok]: the instance attribute's value in VALUE, returning 0; 1 when it is not
# set. Unreadable after the retries: the script fails, unless unreadable-ok (then it returns 2).
attribute() {
  local status=0
  VALUE="$(metadata "instance/attributes/$1")" || status=$?
  if ((status == 2)) && [[ "${2:-}" != "unreadable-ok" ]]; then
    log "cannot read instance attribute $1 from the metadata server; giving up"
    exit 1
  fi
  return "$status"
}

python_bin() {
  for candidate in python3.12 python3.11 python3; do
    if command -v "$candidate" >/dev/null 2>&1 &&
       "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
      echo "$candidate"; return 0
    fi
  done
  return 1
}

PACKAGE=""
if attribute zen-agent-package; then PACKAGE="$VALUE"; fi
if [[ -z "$PACKAGE" ]]; then
  log "instance attribute zen-agent-package is not set; nothing to start"
  exit 1
fi
if ! attribute zen-cluster || [[ -z "$VALUE" ]]; then
  log "instance attribute zen-cluster is not set; the agent would not know its cluster"
  exit 1
fi

CLUSTER="$VALUE"

# The VM's first word (zen.core.vm_heartbeat.VmUp): "this VM is up", on the heartbeats topic, before
# anything is installed: while boots race (hedges in several regions) it makes Zen look again at once,
# see this VM RUNNING, and delete the boots it beat before they bill, a guest boot earlier than the
# agent's first heartbeat. In the background (it never delays the install) and best effort: lost, the
# agent's first heartbeat or the next tick does the same later. Standard-library python only (no
# package is installed yet); with the VM's identity token for <audience>:up unless zen-vm-proof is off.
# zen-heartbeats-topic (projects/P/topics/T) unset: no first word (a template older than it).
# Testing hook: ZEN_PUBSUB_ENDPOINT (default https://pubsub.googleapis.com).
first_word() {
  local topic="$1" proof="$2" python
  python="$(command -v python3 || true)"
  [[ -n "$python" ]] || { log "no python3: no first word (the agent's first heartbeat will do)"; return 0; }
  ZEN_METADATA="$METADATA" ZEN_TOPIC="$topic" ZEN_PROOF="$proof" ZEN_CLUSTER_NAME="$CLUSTER" \
    timeout 30 "$python" - <<'PY' || log "first word not sent (the agent's first heartbeat will do)"
import base64, datetime, json, os, urllib.parse, urllib.request

metadata, topic = os.environ["ZEN_METADATA"], os.environ["ZEN_TOPIC"]


def read(path):
    request = urllib.request.Request(f"{metadata}/{path}", headers={"Metadata-Flavor": "Google"})
    with urllib.request.urlopen(request, timeout=5) as answer:
        return answer.read().decode()


project = topic.split("/")[1]
zone = read("instance/zone").rsplit("/", 1)[-1]
body = {"kind": "up", "vm": read("instance/name"), "cluster": os.environ["ZEN_CLUSTER_NAME"],
        "region": zone.rsplit("-", 1)[0], "zone": zone,
        "sent_at": datetime.datetime.now(datetime.timezone.utc).isoformat()}
attributes = {}
if os.environ.get("ZEN_PROOF", "").lower() != "off":  # zen.adapters.message_key: vm_proof, vm_proof_1, ...
    audience = urllib.parse.quote(f"zen-heartbeats:{project}:up", safe="")
    token = read(f"instance/service-accounts/default/identity?audience={audience}&format=full")
    attributes = {("vm_proof" if n == 0 else f"vm_proof_{n}"): token[i:i + 1000]
                  for n, i in enumerate(range(0, len(token), 1000))}
access = json.loads(read("instance/service-accounts/default/token"))["access_token"]
endpoint = os.environ.get("ZEN_PUBSUB_ENDPOINT") or "https://pubsub.googleapis.com"
message = {"data": base64.b64encode(json.dumps(body).encode()).decode(), "attributes": attributes}
request = urllib.request.Request(f"{endpoint}/v1/{topic}:publish", json.dumps({"messages": [message]}).encode(),
                                 {"Content-Type": "application/json", "Authorization": f"Bearer {access}"})
urllib.request.urlopen(request, timeout=10).close()
PY
}
if attribute zen-heartbeats-topic unreadable-ok && [[ -n "$VALUE" ]]; then
  TOPIC="$VALUE"
  PROOF="required"
  if attribute zen-vm-proof unreadable-ok; then PROOF="$VALUE"; fi
  first_word "$TOPIC" "$PROOF" &
fi

mkdir -p "$PREFIX" "$CONFIG_DIR" "$(dirname "$UNIT")"

# What the running agent uses changed (its package, configuration or unit): it is restarted at the end.
# Nothing changed (a reboot of the same template): it is only started, a no-op when it runs already.
CHANGED=0
write_if_changed() {  # write_if_changed FILE: stdin into FILE, and CHANGED=1 unless FILE held exactly that
  local new
  new="$(mktemp)"
  cat > "$new"
  if ! cmp -s "$new" "$1"; then
    cat "$new" > "$1"
    CHANGED=1
  fi
  rm -f "$new"
}

# Configuration: not secret (names and limits). Written on every boot, so a new template takes effect.
# Unreadable now (the metadata server failing past the retries): the one an earlier boot wrote, if any.
CONFIG_ENV=""
CONFIG_READ=0
attribute zen-config unreadable-ok || CONFIG_READ=$?
if ((CONFIG_READ == 0)) && [[ -n "$VALUE" ]]; then
  write_if_changed "$CONFIG_DIR/config.yaml" <<< "$VALUE"  # (not in a pipe: a subshell would lose CHANGED)
  CONFIG_ENV="Environment=ZEN_CONFIG=/etc/zen/config.yaml"
elif ((CONFIG_READ == 2)); then
  if [[ ! -s "$CONFIG_DIR/config.yaml" ]]; then
    log "cannot read instance attribute zen-config, and no earlier boot left one; giving up"
    exit 1
  fi
  log "cannot read instance attribute zen-config; keeping the one an earlier boot wrote"
  CONFIG_ENV="Environment=ZEN_CONFIG=/etc/zen/config.yaml"
fi

# Install once per package spec: a reboot of the same template reuses the virtualenv.
if [[ "$(cat "$PREFIX/installed" 2>/dev/null || true)" != "$PACKAGE" ]]; then
  CHANGED=1
  PYTHON="$(python_bin || true)"
  if [[ -z "$PYTHON" ]]; then
    log "no python >= 3.11; installing python3.11 with apt-get"
    # Retried, and waiting for a dpkg lock another boot-time job holds: one failure here left a VM
    # without its agent, billed until Zen deleted it as never booted.
    retry "$INSTALL_TRIES" run apt-get -o DPkg::Lock::Timeout=120 update -q
    retry "$INSTALL_TRIES" run apt-get -o DPkg::Lock::Timeout=120 install -y -q python3.11 python3.11-venv
    PYTHON=python3.11
  fi
  SPEC="$PACKAGE"
  if [[ "$PACKAGE" == gs://* ]]; then
    SPEC="$PREFIX/$(basename "$PACKAGE")"
    retry "$INSTALL_TRIES" run gcloud storage cp "$PACKAGE" "$SPEC"
  fi
  run "$PYTHON" -m venv "$VENV"
  retry "$INSTALL_TRIES" run "$VENV/bin/pip" install --quiet --upgrade pip
  retry "$INSTALL_TRIES" run "$VENV/bin/pip" install --quiet "$SPEC"
  [[ "$DRY_RUN" == "1" ]] || echo "$PACKAGE" > "$PREFIX/installed"
fi
# The stop grace: the VM's own ZEN_AGENT_STOP_GRACE_S (passed on to the agent), else the configuration's
# deadlines.stop_grace_s, which the agent reads itself; STOP_GRACE_S is it in whole seconds, up, for
# systemd's stop timeout only (rounded, it could leave the agent's periods no room: zen.core.lease), else 10 s.
GRACE_ENV=""
[[ -z "${ZEN_AGENT_STOP_GRACE_S:-}" ]] || GRACE_ENV="Environment=ZEN_AGENT_STOP_GRACE_S=$STOP_GRACE_S"
if [[ -z "${ZEN_AGENT_STOP_GRACE_S:-}" && -n "$CONFIG_ENV" && -x "$VENV/bin/python" ]]; then
  STOP_GRACE_S="$("$VENV/bin/python" -c 'import math, sys; from zen.core.config import load_config
print(math.ceil(load_config(sys.argv[1]).deadlines.stop_grace_s))' "$CONFIG_DIR/config.yaml" 2>/dev/null)" ||
    STOP_GRACE_S=10
  [[ "$STOP_GRACE_S" =~ ^[0-9]+$ ]] || STOP_GRACE_S=10
fi

# The agent's tunables (docs/reference/agent.md, "Tunables") from zen-agent-env: a JSON object of names ZEN_AGENT_*
# to values, each an Environment= line of the unit. Not these, which the script sets itself (the work directory,
# the fence file, the stop grace, which systemd's stop timeout follows) or which would run jobs unconfined
# (ZEN_AGENT_LOCAL), nor a value with a control character (a newline would add a line to the unit): each such is
# left out, with a message, and the agent runs without it. Not JSON: none, with a message. Unreadable now (the
# metadata server failing past the retries): the ones an earlier boot wrote into the unit, as zen-config's file is
# kept (else a reboot's unit would change, and the agent be restarted, ending the job it may have claimed already).
AGENT_ENV=""
AGENT_ENV_VALUES=()
AGENT_ENV_PYTHON="$(python_bin || true)"
AGENT_ENV_READ=0
attribute zen-agent-env unreadable-ok || AGENT_ENV_READ=$?
if ((AGENT_ENV_READ == 2)); then
  while IFS= read -r line; do AGENT_ENV="$AGENT_ENV"$'\n'"$line"; done \
    < <(grep -s '^Environment="ZEN_AGENT_' "$UNIT" || true)
  log "cannot read instance attribute zen-agent-env; the agent keeps the tunables an earlier boot wrote (if any)"
elif ((AGENT_ENV_READ == 0)) && [[ -n "$VALUE" && "$VALUE" != "{}" ]]; then
  if [[ -z "$AGENT_ENV_PYTHON" ]]; then
    log "no python >= 3.11 to read instance attribute zen-agent-env; the agent runs without it"
  else
    while IFS= read -r -d '' pair; do
      AGENT_ENV_VALUES+=("$pair")
      quoted="${pair//\\/\\\\}"; quoted="${quoted//\"/\\\"}"; quoted="${quoted//%/%%}"  # systemd's quoting, its specifiers
      AGENT_ENV="$AGENT_ENV"$'\n'"Environment=\"$quoted\""
    done < <("$AGENT_ENV_PYTHON" -c '
import json, re, sys
OWN = {"ZEN_AGENT_WORK_DIR", "ZEN_AGENT_FENCE_FILE", "ZEN_AGENT_STOP_GRACE_S", "ZEN_AGENT_LOCAL"}
try:
    pairs = json.loads(sys.argv[1])
    assert isinstance(pairs, dict)
except (ValueError, AssertionError):
    sys.exit("zen-startup: instance attribute zen-agent-env is not a JSON object; the agent runs without it")
for name, value in sorted(pairs.items()):
    if not re.fullmatch(r"ZEN_AGENT_[A-Z0-9_]+", name) or name in OWN:
        print(f"zen-startup: zen-agent-env: {name!r} left out: not a ZEN_AGENT_* name this attribute may set",
              file=sys.stderr)
    elif not isinstance(value, str) or any(ord(c) < 32 or ord(c) == 127 for c in value):
        print(f"zen-startup: zen-agent-env: {name} left out: its value is not one line of text", file=sys.stderr)
    else:
        sys.stdout.write(f"{name}={value}\0")
' "$VALUE" || true)
  fi
fi

# The agent's user: a system user in the docker group, owning its home (and nothing else). Idempotent.
check getent group docker || run groupadd --system docker
if ! check id -u "$AGENT_USER"; then
  run useradd --system --user-group --home-dir "$AGENT_HOME" --shell /usr/sbin/nologin --groups docker "$AGENT_USER"
fi
run usermod --append --groups docker "$AGENT_USER"  # (a user an older script made, or a group made since)
run install -d -o "$AGENT_USER" -g "$AGENT_USER" -m 0750 "$ROOT$AGENT_HOME" "$ROOT$WORK_DIR"

# Docker may pull job images from Artifact Registry with the VM's service account: credentials set up for
# the agent's user (its ~/.docker/config.json names gcloud as the helper), whose docker CLI pulls.
if command -v gcloud >/dev/null 2>&1; then
  ZONE_READ=0
  ZONE="$(metadata instance/zone)" || ZONE_READ=$?
  if ((ZONE_READ == 2)); then
    log "cannot read the instance's zone from the metadata server; giving up"
    exit 1
  fi
  REGION="${ZONE##*/}"; REGION="${REGION%-*}"
  if [[ -n "$REGION" ]]; then
    HOSTS="$REGION-docker.pkg.dev,us-docker.pkg.dev,europe-docker.pkg.dev,asia-docker.pkg.dev"
    # And the hosts of the repositories jobs may pull from (terraform's agent_image_repositories, their
    # locations as a JSON list of names): a regional repository is reached only through its own
    # region's host, from VMs of any region.
    if attribute zen-image-locations unreadable-ok; then
      for location in $(tr -d '[]" ' <<< "$VALUE" | tr ',' ' '); do
        if [[ "$location" =~ ^[a-z0-9-]+$ ]]; then HOSTS="$HOSTS,$location-docker.pkg.dev"; fi
      done
    fi
    run runuser -u "$AGENT_USER" -- gcloud auth configure-docker --quiet "$HOSTS"
  fi
fi

# Job containers must not reach the metadata server: it gives any caller the VM's service-account
# token, with which job code could publish forged heartbeats, pull other clusters' start messages, etc.
# Docker sends a container's traffic through the FORWARD chain, which jumps first to DOCKER-USER (the
# chain docker leaves to the host's own rules and never flushes); the agent, on the host (OUTPUT),
# keeps its access. Before the agent starts (it runs no job before), and idempotent: this script runs
# on every boot, and rules do not survive one. DOCKER-USER exists once docker has started; if it does
# not yet, it is created here and docker adopts it (adding FORWARD's jump) when it starts. Docker's
# default bridge has no IPv6 (the metadata server's fd20:ce::254), so IPv4 is all there is to block.
# No iptables: the script fails, and the agent does not start: jobs would get the VM's credentials.
if [[ "$DRY_RUN" != "1" ]] && ! command -v iptables >/dev/null 2>&1; then
  log "no iptables: job containers could reach the metadata server (the VM's credentials); not starting the agent"
  exit 1
fi
# 169.254.169.254 is also the VPC's name server, which every VM (and so every container, inheriting
# the host's resolver) must use: DNS to it (port 53) returns to docker's rules before the REJECT;
# each RETURN is inserted above it, so the order holds on a VM whose REJECT came from an older script.
METADATA_REJECT=(DOCKER-USER -d 169.254.169.254/32 -j REJECT)
DNS_UDP=(DOCKER-USER -d 169.254.169.254/32 -p udp --dport 53 -j RETURN)
DNS_TCP=(DOCKER-USER -d 169.254.169.254/32 -p tcp --dport 53 -j RETURN)
# A gang's node shares the VM's network (zen.agent.container): its traffic leaves through OUTPUT, not
# FORWARD. It runs as a uid of 1000 or more (the agent refuses a gang's node otherwise), as every job's
# container does by default (nobody, 65534), and no system service (root, the agent, chrony: below 1000)
# does: those uids are kept from the metadata server there, DNS excepted.
JOBS=(-m owner --uid-owner 1000-4294967294)
HOST_REJECT=(OUTPUT -d 169.254.169.254/32 "${JOBS[@]}" -j REJECT)
HOST_DNS_UDP=(OUTPUT -d 169.254.169.254/32 -p udp --dport 53 "${JOBS[@]}" -j ACCEPT)
HOST_DNS_TCP=(OUTPUT -d 169.254.169.254/32 -p tcp --dport 53 "${JOBS[@]}" -j ACCEPT)
RULES=(METADATA_REJECT DNS_UDP DNS_TCP HOST_REJECT HOST_DNS_UDP HOST_DNS_TCP)  # in this order, each at the top
check iptables -w -n -L DOCKER-USER || run iptables -w -N DOCKER-USER
for rule in "${RULES[@]}"; do
  declare -n parts="$rule"
  check iptables -w -C "${parts[@]}" || run iptables -w -I "${parts[@]}"
  unset -n parts
done
# The same, as the unit's ExecStartPre: after a reboot (an on-demand VM restarted by host maintenance
# boots on the same disk) the enabled unit starts the agent, which may claim a job, before this script
# has run again (and this script leaves it running unless what it runs changed: see the end), and
# rules do not survive a reboot.
GUARD="$PREFIX/guard-metadata.sh"
{
  echo '#!/bin/bash'
  echo '# Written by the Zen startup script: keep job containers from the metadata server, DNS excepted.'
  echo 'set -eu'
  echo 'iptables -w -n -L DOCKER-USER >/dev/null 2>&1 || iptables -w -N DOCKER-USER'
  for rule in "${RULES[@]}"; do
    declare -n parts="$rule"
    printf 'iptables -w -C %s 2>/dev/null || iptables -w -I %s\n' "${parts[*]}" "${parts[*]}"
    unset -n parts
  done
} > "$GUARD"
chmod 0755 "$GUARD"

# Every job's container runs as the same user (nobody, 65534), and Linux counts some limits per user across all of
# them, whatever container: inotify's instances (128 by default) and watches, so one job's file watchers (TensorBoard,
# a reloader) left another job on the VM none ("Too many open files"). Raised for the VM, each boot (a sysctl setting
# does not survive one), as Kubernetes nodes do; each a few KB of kernel memory in use at most.
SYSCTL="$ROOT/etc/sysctl.d/60-zen-jobs.conf"
mkdir -p "$(dirname "$SYSCTL")"
printf '%s\n' '# Written by the Zen startup script: per-user limits every job container shares (uid 65534).' \
  'fs.inotify.max_user_instances = 8192' 'fs.inotify.max_user_watches = 1048576' > "$SYSCTL"
run sysctl -q -p "$SYSCTL" || log "the jobs' inotify limits could not be raised (kept as they are)"

if [[ -d /run/systemd/system || "$DRY_RUN" == "1" ]]; then
  # The VM's power-off, which the agent (unprivileged) asks for by writing FENCE_FILE when a job whose lease ran
  # out keeps running in a container docker cannot kill (zen.agent.leftover.fence_vm): Zen runs that job again
  # elsewhere, and the container would run it on beside. /run is emptied by a reboot: no loop of power-offs.
  write_if_changed "$FENCE_PATH_UNIT" <<EOF
[Unit]
Description=Zen: power this VM off when its agent asks (a job's container docker could not kill)

[Path]
PathExists=$FENCE_FILE

[Install]
WantedBy=multi-user.target
EOF
  write_if_changed "$FENCE_UNIT" <<EOF
[Unit]
Description=Zen: power this VM off (a fenced job's container docker could not kill)

[Service]
Type=oneshot
# Why, into the journal, then off at once, no unit stopped (docker's stop may hang as its kill did); the MIG
# recreates the VM.
ExecStart=/bin/sh -c 'cat $FENCE_FILE >&2; exec systemctl poweroff --force --force'
EOF
  write_if_changed "$UNIT" <<EOF
[Unit]
Description=Zen VM agent (pulls, runs and reports GPU jobs)
Wants=network-online.target docker.service
After=network-online.target docker.service
# An agent that fails at every start (a crash after each claim) restarted for ever, each start taking a job that
# was then lost, job after job, on a VM heard every start and so never removed. More than 5 starts in 10 minutes:
# systemd starts it no more; the VM falls silent and Zen deletes it (the job it holds run again elsewhere first).
# A start that fails only after the control subscription's 120 s (Pub/Sub unreachable) never reaches 5 in 600 s.
StartLimitIntervalSec=600
StartLimitBurst=5

[Service]
# As zen-agent (see the top of the startup script): docker through its group, its home its only writable
# folder. "+": the guard alone runs as root, unconfined (iptables needs it).
User=$AGENT_USER
Group=$AGENT_USER
SupplementaryGroups=docker
ExecStartPre=+/opt/zen/guard-metadata.sh
# Job containers an agent before this one left (it crashed, or the VM rebooted): removed before it starts
# (the agent does it too, first thing). "-": a failure here does not keep the agent from starting; each docker
# call bounded: a hung daemon made this wait out the start's timeout, restart, and never run the agent (whose
# own removal retires the VM, or powers it off: zen.agent.__main__).
ExecStartPre=-/bin/sh -c '$SWEEP'
ExecStart=/opt/zen/venv/bin/python -m zen.agent
# And as soon as the agent is gone, however it went (a crash, one systemd no longer restarts, an exit it did
# not mean, a stop by hand): a job's container docker runs on without it is no longer fenced nor reported,
# and Zen runs the job again elsewhere once its lease lapses. After the agent's own stop it finds none.
ExecStopPost=-/bin/sh -c '$SWEEP'
$CONFIG_ENV
$GRACE_ENV$AGENT_ENV
Environment=PYTHONUNBUFFERED=1
Environment=ZEN_AGENT_WORK_DIR=$WORK_DIR
# Its runtime folder (/run/zen-agent, emptied at each boot): the file it writes to have zen-fence.path power
# the VM off (zen.agent.leftover.fence_vm).
RuntimeDirectory=zen-agent
Environment=ZEN_AGENT_FENCE_FILE=$FENCE_FILE
# Hardening that leaves what the agent does working: the metadata server and Google's APIs (network,
# untouched), docker (its socket, /run/docker.sock, may be connected to on a read-only /run; containers'
# GPUs are docker's --gpus), its work disk (below), the disk-share measurement (a walk of its own
# directories), signals to its jobs' process groups (its own user's) and the GPUs' check after a job's
# failure (zen.agent.gpucheck: nvidia-smi opens NVIDIA's devices, the only ones it may open beside /dev/null
# and the like; PrivateDevices=yes hid them, and every job's own failure read as the VM's GPUs failing).
NoNewPrivileges=yes
ProtectSystem=strict
ReadWritePaths=$AGENT_HOME
ProtectHome=yes
PrivateTmp=yes
DevicePolicy=closed
DeviceAllow=char-nvidia* rw
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectControlGroups=yes
RestrictSUIDSGID=yes
# A job's container writes its outputs and checkpoints as nobody, in folders of its own making: the agent
# reads, uploads and removes them (and measures them) with CAP_DAC_OVERRIDE, in its home alone (the rest is
# read-only); CAP_SYS_PTRACE lets it read which files its jobs' processes hold open once deleted (the disk
# share: /proc/<pid>/fd of another user's process), and no other (the bounding set).
AmbientCapabilities=CAP_DAC_OVERRIDE CAP_SYS_PTRACE
CapabilityBoundingSet=CAP_DAC_OVERRIDE CAP_SYS_PTRACE
# SIGTERM to the agent alone: it stops the job itself and reports it; the rest is killed after the timeout.
# The agent sends its final reports by STOP_GRACE_S + 10 s (zen.agent.attempt.SHUTDOWN_S), then its VM's.
KillMode=mixed
TimeoutStopSec=$((STOP_GRACE_S + 15))
# A crash restarts the agent; a clean exit (SIGTERM, preemption) does not.
Restart=on-failure
RestartSec=5

[Install]
WantedBy=multi-user.target
EOF
  run systemctl daemon-reload
  run systemctl enable --now zen-fence.path
  run systemctl enable zen-agent.service
  # On a reboot the enabled unit has started the agent already, and it may have claimed a job: a
  # restart would end that job PREEMPTED (spending one of its free preemptions). Only a new package,
  # configuration or unit needs one; else start is a no-op when it runs (and starts it when it does not).
  if ((CHANGED)); then
    run systemctl restart zen-agent.service
    log "zen-agent service restarted (its package, configuration or unit changed)"
  else
    run systemctl start zen-agent.service
    log "zen-agent service started (unchanged since the last boot)"
  fi
else
  log "no systemd: starting the agent as $AGENT_USER, a background process (log: /var/log/zen-agent.log)"
  [[ -z "$GRACE_ENV" ]] || export ZEN_AGENT_STOP_GRACE_S="$STOP_GRACE_S"
  [[ -z "$CONFIG_ENV" ]] || export ZEN_CONFIG=/etc/zen/config.yaml
  for pair in "${AGENT_ENV_VALUES[@]}"; do export "${pair?}"; done
  export ZEN_AGENT_WORK_DIR="$WORK_DIR"
  # (without the unit's hardening; and the guard has run above, as root)
  nohup runuser -u "$AGENT_USER" -- "$VENV/bin/python" -m zen.agent >> "$ROOT/var/log/zen-agent.log" 2>&1 &
fi
