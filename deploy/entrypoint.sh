#!/usr/bin/env bash
# The one entrypoint of the mlqueue image (deploy/Dockerfile); compose.yaml, k8s/ and the test
# suite (tests/e2e/test_deploy_roles.py) start every process through it.
#
#   entrypoint.sh migrate                 apply migrations (once per release; a one-shot job)
#   entrypoint.sh wait-for-migrations     exit 0 once no migration is left to apply (an init step);
#                                         says "cannot connect" with the database's reason apart
#   entrypoint.sh web [daphne args]       the web tier: $MLQ_WEB_WORKERS daphne processes (default: one
#                                         per CPU) sharing 0.0.0.0:$PORT (8000), /healthz
#   entrypoint.sh scheduler [args]        manage.py run_scheduler: any number, one leads
#   entrypoint.sh worker [celery args]    a Celery worker (grace timers, notifications)
#   entrypoint.sh beat [celery args]      Celery beat (schedules' and notifications' fast path)
#   entrypoint.sh agent [agent args]      mlqueue-agent (runs as root for task isolation)
#   entrypoint.sh manage COMMAND [args]   any manage.py command (create_join_token, seed_demo, ...)
#   entrypoint.sh check scheduler|beat|agent   health: exit 1 when the process's file is stale
#
# Configuration comes from the environment only (mlqueue/settings.py): DATABASE_URL, REDIS_URL,
# SECRET_KEY, ALLOWED_HOSTS, ...; the agent's join token from MLQ_AGENT_JOIN_TOKEN or a
# --token-file. Nothing secret is baked into the image or written on a command line.
set -euo pipefail

APP_DIR="${MLQ_APP_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
RUN_DIR="${MLQ_RUN_DIR:-${TMPDIR:-/tmp}}"
SCHEDULER_HEALTH_FILE="$RUN_DIR/mlqueue-scheduler.alive"
BEAT_SCHEDULE_FILE="$RUN_DIR/mlqueue-celerybeat-schedule"
# The scheduler touches its file every loop (at most every second); beat rewrites its schedule
# file every few minutes (Celery syncs it every 180 s); an agent renews its lease every 5 s.
SCHEDULER_STALE_S="${MLQ_SCHEDULER_STALE_S:-30}"
BEAT_STALE_S="${MLQ_BEAT_STALE_S:-600}"
AGENT_STALE_S="${MLQ_AGENT_STALE_S:-60}"
ROLES="migrate wait-for-migrations web scheduler worker beat agent manage check"

usage() {
  echo "usage: entrypoint.sh {${ROLES// /|}} [args...]" >&2
  exit 64
}

# Fail early, naming the variable, rather than deep inside Django's traceback.
require_env() {
  local name
  for name in "$@"; do
    if [ -z "${!name:-}" ]; then
      echo "entrypoint.sh $ROLE: $name is not set (see docs/deploy.md)" >&2
      exit 78
    fi
  done
}

# Exit 0 when the newest of the files given after $1 was modified within the last $1 seconds
# (a pattern that matched nothing arrives as itself, and counts as missing).
fresh() {
  local max_age="$1" newest=0 file modified
  shift
  for file in "$@"; do
    modified="$(stat -c %Y "$file" 2>/dev/null)" || continue
    [ "$modified" -gt "$newest" ] && newest="$modified"
  done
  if [ "$newest" -eq 0 ]; then
    echo "unhealthy: no $1" >&2
    return 1
  fi
  if [ $(($(date +%s) - newest)) -gt "$max_age" ]; then
    echo "unhealthy: $1 not modified for more than $max_age s" >&2
    return 1
  fi
}

[ $# -ge 1 ] || usage
ROLE="$1"
shift
cd "$APP_DIR"
# This tree's code first, whatever else the Python environment has installed.
export PYTHONPATH="$APP_DIR${PYTHONPATH:+:$PYTHONPATH}"

case "$ROLE" in
  migrate)
    require_env DATABASE_URL SECRET_KEY
    exec python manage.py migrate --noinput "$@"
    ;;
  wait-for-migrations)
    require_env DATABASE_URL SECRET_KEY
    timeout_s="${MLQ_MIGRATIONS_TIMEOUT_S:-600}"
    deadline=$(($(date +%s) + timeout_s))
    # mlqueue.migrations_ready says which it is, in one line: 1, migrations unapplied (the
    # migrate Job has not run yet); 2, the database cannot be reached at all (psycopg's own
    # reason: no such database, a wrong password). Said once a minute, so that a pod stuck here
    # says why, and again when it gives up.
    last_said=0
    until output="$(python -m mlqueue.migrations_ready 2>&1)"; do
      status=$?
      case "$status" in
        1) what="migrations still unapplied" ;;
        2) what="cannot connect to the database" ;;
        *) what="cannot check the migrations (exit status $status)" ;;
      esac
      now="$(date +%s)"
      if [ "$now" -ge "$deadline" ]; then
        echo "entrypoint.sh: $what after $timeout_s s" >&2
        [ -n "$output" ] && echo "$output" | tail -n 5 >&2
        exit 1
      fi
      if [ $((now - last_said)) -ge 60 ]; then
        echo "entrypoint.sh: waiting: $what: $(echo "$output" | tail -n 1)" >&2
        last_said="$now"
      fi
      sleep 3
    done
    ;;
  web)
    require_env DATABASE_URL REDIS_URL SECRET_KEY
    # One daphne uses one core: mlqueue.webserver runs MLQ_WEB_WORKERS of them on the one port.
    # No daphne --proxy-headers (it believes anyone's X-Forwarded-For): the application takes the
    # client's address and scheme from the proxies in MLQ_TRUSTED_PROXIES only (mlqueue/proxies.py).
    exec python -m mlqueue.webserver -b "${BIND_ADDRESS:-0.0.0.0}" -p "${PORT:-8000}" "$@"
    ;;
  scheduler)
    require_env DATABASE_URL REDIS_URL SECRET_KEY
    exec python manage.py run_scheduler --health-file "$SCHEDULER_HEALTH_FILE" "$@"
    ;;
  worker)
    require_env DATABASE_URL REDIS_URL SECRET_KEY
    exec celery -A mlqueue worker --prefetch-multiplier 1 --loglevel "${LOG_LEVEL:-INFO}" "$@"
    ;;
  beat)
    require_env DATABASE_URL REDIS_URL SECRET_KEY
    # The schedule file in a writable place: the image's user cannot write to the app directory.
    exec celery -A mlqueue beat --schedule "$BEAT_SCHEDULE_FILE" --loglevel "${LOG_LEVEL:-INFO}" "$@"
    ;;
  agent)
    exec mlqueue-agent "$@"
    ;;
  manage)
    [ $# -ge 1 ] || usage
    exec python manage.py "$@"
    ;;
  check)
    case "${1:-}" in
      scheduler) fresh "$SCHEDULER_STALE_S" "$SCHEDULER_HEALTH_FILE" ;;
      # Beat's schedule is a dbm file, which some dbm modules split into .dat/.dir/.bak.
      beat) fresh "$BEAT_STALE_S" "$BEAT_SCHEDULE_FILE"* ;;
      # Each node's lease file, rewritten at every renewed heartbeat. Informational: it also goes
      # stale while the control plane is away, when restarting the agent would help nothing.
      agent) fresh "$AGENT_STALE_S" "${MLQ_AGENT_WORKDIR:-/var/lib/mlqueue-agent}"/*/lease ;;
      *) echo "entrypoint.sh check: scheduler, beat or agent" >&2; exit 64 ;;
    esac
    ;;
  *)
    echo "entrypoint.sh: unknown role '$ROLE'" >&2
    usage
    ;;
esac
