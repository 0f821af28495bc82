#!/usr/bin/env bash
# Local Flink and Spark clusters for fleetcast's portable runners (docs/runners.md):
#
#   scripts/engines.sh build            the job servers (engines/pom.xml) and the engines
#   scripts/engines.sh start [SERVICE]  build if needed, start, wait until each is ready
#   scripts/engines.sh stop [SERVICE]   stop what runs
#   scripts/engines.sh status           one line per service
#   scripts/engines.sh options RUNNER   `fleetcast run` options for flink|spark [loopback|external]
#
# SERVICE: flink (a JobManager and a TaskManager with 2 slots), spark (a standalone Master
# and a Worker of 2 cores), pool (fleetcast's Python worker pool, for
# --environment_type=EXTERNAL); all three by default. Everything lives under
# $FLEETCAST_ENGINES_DIR (default .engines in the checkout): the engines, installed from PyPI
# into folders of their own, their configuration, logs and pid files, and engines.json, which
# names the endpoints and job-server jars for the tests. A second call reuses what is built
# and what runs; a missing tool or a service that does not come up fails in one line.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO="$PWD"
ENGINES="${FLEETCAST_ENGINES_DIR:-$REPO/.engines}"
mkdir -p "$ENGINES"
ENGINES="$(cd "$ENGINES" && pwd)"
PYTHON="${PYTHON:-python3}"
VENV_PYTHON="$REPO/.venv/bin/python"

pom_property() {  # the value of <$1> in engines/pom.xml (the one place versions are set)
  sed -n "s:.*<$1>\(.*\)</$1>.*:\1:p" engines/pom.xml | head -1
}
BEAM_VERSION="$(pom_property beam.version)"
FLINK_VERSION="$(pom_property flink.version)"
FLINK_MINOR="$(pom_property flink.minor)"
SPARK_VERSION="$(pom_property spark.version)"
FLINK_HOME="$ENGINES/flink-$FLINK_VERSION/pyflink"
SPARK_HOME="$ENGINES/spark-$SPARK_VERSION/pyspark"
JOB_SERVERS="$ENGINES/job-servers"
FLINK_JAR="$JOB_SERVERS/beam-flink-$FLINK_MINOR-job-server-$BEAM_VERSION.jar"
FLINK_LIB_JAR="$JOB_SERVERS/beam-runners-flink-$FLINK_MINOR-lib-$BEAM_VERSION.jar"
SPARK_JAR="$JOB_SERVERS/beam-spark-3-job-server-$BEAM_VERSION.jar"
LOGS="$ENGINES/logs"
RUN="$ENGINES/run"
FLINK_REST_PORT="${FLEETCAST_FLINK_PORT:-8081}"
SPARK_PORT="${FLEETCAST_SPARK_PORT:-7077}"
SPARK_UI_PORT="${FLEETCAST_SPARK_UI_PORT:-8082}"
POOL_PORT="${FLEETCAST_POOL_PORT:-50000}"
READY_TIMEOUT_S="${FLEETCAST_ENGINES_TIMEOUT_S:-90}"

fail() { echo "engines.sh: $*" >&2; exit 1; }
note() { echo "engines.sh: $*"; }
[ "${FLINK_VERSION%.*}" = "$FLINK_MINOR" ] \
  || fail "engines/pom.xml: flink.version $FLINK_VERSION is not of flink.minor $FLINK_MINOR"

need() {  # need TOOL WHAT: fail in one line when TOOL is not on PATH
  command -v "$1" >/dev/null 2>&1 || fail "$1 not found: $2"
}

check_java() {
  need java "the engines need a Java 17 runtime (Debian: apt-get install openjdk-17-jdk-headless)"
  local version
  version="$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1)"
  [ "${version:-0}" -ge 17 ] || fail "java is version ${version:-unknown}; the engines need Java 17 or newer"
}

# --- build ---------------------------------------------------------------------------------

build_job_servers() {
  local stamp="$JOB_SERVERS/.built-from" want
  want="$(cat engines/pom.xml engines/*/pom.xml | sha256sum | cut -c1-16)"
  if [ -f "$FLINK_JAR" ] && [ -f "$FLINK_LIB_JAR" ] && [ -f "$SPARK_JAR" ] \
      && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
    return
  fi
  check_java
  need mvn "the job servers are built with Maven (Debian: apt-get install maven)"
  mkdir -p "$JOB_SERVERS" "$LOGS"
  note "building Beam $BEAM_VERSION's Flink and Spark job servers with Maven (log: $LOGS/maven.log)"
  if ! mvn -B -f engines/pom.xml package >"$LOGS/maven.log" 2>&1; then
    fail "the Maven build of the job servers failed (is Maven Central reachable?): $(grep -m1 '\[ERROR\]' "$LOGS/maven.log" | cut -c1-300); log: $LOGS/maven.log"
  fi
  cp engines/flink-job-server/target/"$(basename "$FLINK_JAR")" "$FLINK_JAR"
  cp engines/spark-job-server/target/"$(basename "$SPARK_JAR")" "$SPARK_JAR"
  cp engines/flink-runner-lib/target/"$(basename "$FLINK_LIB_JAR")" "$FLINK_LIB_JAR"
  echo "$want" >"$stamp"
}

install_from_pypi() {  # install_from_pypi DIR PACKAGE==VERSION ...: into DIR, never a venv
  local dir="$1"; shift
  [ -f "$dir/.installed" ] && return
  need "$PYTHON" "pip installs the engines from PyPI"
  note "installing $* into $dir"
  rm -rf "$dir"
  "$PYTHON" -m pip install --quiet --disable-pip-version-check --no-deps --target "$dir" "$@" \
    >"$LOGS/pip-$(basename "$dir").log" 2>&1 \
    || fail "pip could not install $* (log: $LOGS/pip-$(basename "$dir").log)"
  touch "$dir/.installed"
}

write_flink_conf() {
  # Memory for fleetcast's graphs (docs/runners.md#flink-memory): every task that writes a
  # blocking (sort-shuffle) partition reserves taskmanager.network.sort-shuffle.min-buffers
  # network buffers while it runs, and the demo's 256 tasks (128 steps at parallelism 2) may
  # all run at once: 64 buffers each (2 MB) fit 512 such tasks in 1 GB (Flink's default of
  # 512 each refused the demo now and then). The Python workers' data crosses gRPC in direct
  # (off-heap) buffers; sorting for groupings uses managed memory. No restarts: a lost
  # TaskManager fails the job (fleetcast keeps the earlier results), it is not half re-run.
  # Beam's runner and its dependencies come from Flink's lib/ (parent first): loaded from the
  # job's own jar instead, the runner ends a job's Python workers whenever no task holds
  # them, and every stage of a batch job starts new ones.
  local conf="$ENGINES/conf/flink"
  mkdir -p "$conf" "$RUN" "$ENGINES/tmp/flink"
  cp "$FLINK_HOME"/conf/log4j*.properties "$FLINK_HOME"/conf/logback*.xml "$conf"/
  local opens
  opens="$(sed -n 's/^ *all: *\(--add-.*\)$/\1/p' "$FLINK_HOME/conf/config.yaml" | head -1)"
  cat >"$conf/config.yaml" <<EOF
# Written by scripts/engines.sh: the local Flink session cluster fleetcast's tests use.
env:
  pid:
    dir: $RUN
  java:
    opts:
      all: $opens
io:
  tmp:
    dirs: $ENGINES/tmp/flink
jobmanager:
  bind-host: 127.0.0.1
  rpc:
    address: 127.0.0.1
    port: 6123
  memory:
    process:
      size: 1600m
taskmanager:
  bind-host: 127.0.0.1
  host: 127.0.0.1
  numberOfTaskSlots: 2
  memory:
    process:
      size: 5120m
    network:
      min: 1024m
      max: 1024m
    managed:
      size: 1024m
    task:
      off-heap:
        size: 1024m
  network:
    sort-shuffle:
      min-buffers: 64
parallelism:
  default: 2
classloader:
  resolve-order: parent-first
restart-strategy:
  type: none
heartbeat:
  timeout: 20000
rest:
  address: 127.0.0.1
  bind-address: 127.0.0.1
  port: $FLINK_REST_PORT
EOF
}

build() {
  mkdir -p "$LOGS" "$RUN"
  build_job_servers
  install_from_pypi "$ENGINES/flink-$FLINK_VERSION" "apache-flink==$FLINK_VERSION" \
    "apache-flink-libraries==$FLINK_VERSION"
  install_from_pypi "$ENGINES/spark-$SPARK_VERSION" "pyspark==$SPARK_VERSION"
  chmod +x "$FLINK_HOME"/bin/* "$SPARK_HOME"/bin/* "$SPARK_HOME"/sbin/*
  # Beam's runner on Flink's own class path (see write_flink_conf).
  cmp -s "$FLINK_LIB_JAR" "$FLINK_HOME/lib/$(basename "$FLINK_LIB_JAR")" \
    || cp "$FLINK_LIB_JAR" "$FLINK_HOME/lib/"
  write_flink_conf
  write_engines_json
}

write_engines_json() {
  cat >"$ENGINES/engines.json" <<EOF
{
  "beam_job_server_version": "$BEAM_VERSION",
  "flink": {"version": "$FLINK_VERSION", "master": "127.0.0.1:$FLINK_REST_PORT",
            "job_server_jar": "$FLINK_JAR"},
  "spark": {"version": "$SPARK_VERSION", "master_url": "spark://127.0.0.1:$SPARK_PORT",
            "rest_ui": "http://127.0.0.1:$SPARK_UI_PORT", "job_server_jar": "$SPARK_JAR"},
  "pool": {"address": "localhost:$POOL_PORT", "python": "$VENV_PYTHON"},
  "logs": "$LOGS"
}
EOF
}

# --- services ------------------------------------------------------------------------------

flink_env() {
  export FLINK_HOME FLINK_CONF_DIR="$ENGINES/conf/flink" FLINK_LOG_DIR="$LOGS"
}

spark_env() {
  export SPARK_HOME SPARK_LOG_DIR="$LOGS" SPARK_PID_DIR="$RUN" SPARK_LOCAL_IP=127.0.0.1 \
    SPARK_WORKER_DIR="$ENGINES/tmp/spark-work"
}

flink_up() {  # the JobManager answers
  curl -sf --max-time 2 "http://127.0.0.1:$FLINK_REST_PORT/overview" >/dev/null 2>&1
}

alive() {  # alive PIDFILE: its process runs (a killed one's slots stay listed a while)
  local pid
  pid="$(tail -1 "$1" 2>/dev/null || true)"
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null
}

flink_ready() {  # our TaskManager runs and has registered its slots
  alive "$RUN/flink--taskexecutor.pid" \
    && curl -sf --max-time 2 "http://127.0.0.1:$FLINK_REST_PORT/overview" 2>/dev/null \
    | grep -q '"slots-total":[1-9]'
}

spark_up() {  # the Master answers
  curl -sf --max-time 2 "http://127.0.0.1:$SPARK_UI_PORT/json/" >/dev/null 2>&1
}

spark_ready() {  # a Worker is ALIVE at the master
  curl -sf --max-time 2 "http://127.0.0.1:$SPARK_UI_PORT/json/" 2>/dev/null \
    | grep -q '"aliveworkers" : [1-9]'
}

pool_ready() {
  "$PYTHON" - "$POOL_PORT" <<'EOF' 2>/dev/null
import socket, sys
socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=2).close()
EOF
}

wait_ready() {  # wait_ready NAME CHECK LOG
  local waited=0
  until "$2"; do
    sleep 1
    waited=$((waited + 1))
    [ "$waited" -lt "$READY_TIMEOUT_S" ] || fail "$1 did not come up within ${READY_TIMEOUT_S} s; its log: $3"
  done
  note "$1 is up"
}

port_free() {  # port_free PORT NAME: fail when something else listens there
  if "$PYTHON" - "$1" <<'EOF' 2>/dev/null; then
import socket, sys
socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=1).close()
EOF
    fail "port $1, which $2 needs, is taken by another program (set FLEETCAST_${3}_PORT)"
  fi
}

start_flink() {  # what is not up of a JobManager and a TaskManager
  flink_ready && { note "Flink is up (http://127.0.0.1:$FLINK_REST_PORT)"; return; }
  flink_env
  if ! flink_up; then
    port_free "$FLINK_REST_PORT" "Flink's REST endpoint" FLINK
    "$FLINK_HOME/bin/jobmanager.sh" start >>"$LOGS/flink-start.log" 2>&1
    wait_ready "Flink's JobManager" flink_up "$LOGS/flink-*-standalonesession-*.log"
  fi
  "$FLINK_HOME/bin/taskmanager.sh" start >>"$LOGS/flink-start.log" 2>&1
  wait_ready "Flink (http://127.0.0.1:$FLINK_REST_PORT)" flink_ready "$LOGS/flink-*-taskexecutor-*.log"
}

start_spark() {  # what is not up of a Master and a Worker
  spark_ready && { note "Spark is up (spark://127.0.0.1:$SPARK_PORT)"; return; }
  spark_env
  if ! spark_up; then
    port_free "$SPARK_PORT" "the Spark master" SPARK
    "$SPARK_HOME/sbin/spark-daemon.sh" start org.apache.spark.deploy.master.Master 1 \
      --host 127.0.0.1 --port "$SPARK_PORT" --webui-port "$SPARK_UI_PORT" >>"$LOGS/spark-start.log" 2>&1
    wait_ready "Spark's Master" spark_up "$LOGS/spark-*Master*.out"
  fi
  "$SPARK_HOME/sbin/spark-daemon.sh" start org.apache.spark.deploy.worker.Worker 1 \
    "spark://127.0.0.1:$SPARK_PORT" --cores 2 --memory 8g --webui-port 0 \
    >>"$LOGS/spark-start.log" 2>&1
  wait_ready "Spark (spark://127.0.0.1:$SPARK_PORT)" spark_ready "$LOGS/spark-*Worker*.out"
}

start_pool() {
  pool_ready && { note "the worker pool is up (localhost:$POOL_PORT)"; return; }
  [ -x "$VENV_PYTHON" ] || fail "$VENV_PYTHON not found: the worker pool runs fleetcast from the project's venv (scripts/setup_venv.sh)"
  # Started from its own folder: a worker must never depend on the submitter's directory.
  mkdir -p "$ENGINES/tmp/pool"
  (cd "$ENGINES/tmp/pool" && exec setsid "$REPO/.venv/bin/fleetcast" worker-pool --port "$POOL_PORT" \
    >>"$LOGS/worker-pool.log" 2>&1 </dev/null) &
  echo $! >"$RUN/worker-pool.pid"
  wait_ready "the worker pool (localhost:$POOL_PORT)" pool_ready "$LOGS/worker-pool.log"
}

stop_flink() {
  flink_env
  "$FLINK_HOME/bin/taskmanager.sh" stop-all >/dev/null 2>&1 || true
  "$FLINK_HOME/bin/jobmanager.sh" stop-all >/dev/null 2>&1 || true
}

stop_spark() {
  spark_env
  "$SPARK_HOME/sbin/spark-daemon.sh" stop org.apache.spark.deploy.worker.Worker 1 >/dev/null 2>&1 || true
  "$SPARK_HOME/sbin/spark-daemon.sh" stop org.apache.spark.deploy.master.Master 1 >/dev/null 2>&1 || true
}

stop_pool() {
  local pid
  pid="$(cat "$RUN/worker-pool.pid" 2>/dev/null || true)"
  [ -n "$pid" ] && kill "$pid" 2>/dev/null || true
  rm -f "$RUN/worker-pool.pid"
}

services() {  # the services named, or all three
  if [ "$#" -eq 0 ]; then echo flink spark pool; else echo "$@"; fi
}

check_service() {
  case "$1" in flink|spark|pool) ;; *) fail "unknown service $1 (flink, spark or pool)";; esac
}

options() {  # options flink|spark [loopback|external]
  # EXTERNAL: a Python worker per task slot (--sdk_worker_parallelism), each kept for the
  # whole job (Spark would start new ones for every stage: --environment_cache_millis).
  local runner="${1:-}" environment="${2:-loopback}" env_options
  case "$environment" in
    loopback) env_options="--environment_type=LOOPBACK" ;;
    external) env_options="--environment_type=EXTERNAL --environment_config=localhost:$POOL_PORT --sdk_worker_parallelism=2 --environment_cache_millis=60000" ;;
    *) fail "unknown environment $environment (loopback or external)" ;;
  esac
  case "$runner" in
    flink) echo "--runner=FlinkRunner --flink_master=127.0.0.1:$FLINK_REST_PORT --flink_job_server_jar=$FLINK_JAR --parallelism=2 $env_options" ;;
    spark) echo "--runner=SparkRunner --spark_master_url=spark://127.0.0.1:$SPARK_PORT --spark_job_server_jar=$SPARK_JAR $env_options" ;;
    *) fail "options flink|spark [loopback|external]" ;;
  esac
}

command="${1:-}"
[ "$#" -gt 0 ] && shift
case "$command" in
  build) build ;;
  start)
    for service in $(services "$@"); do check_service "$service"; done
    build
    for service in $(services "$@"); do "start_$service"; done ;;
  stop)
    for service in $(services "$@"); do check_service "$service"; "stop_$service"; done ;;
  status)
    flink_ready && note "flink: up, http://127.0.0.1:$FLINK_REST_PORT" || note "flink: down"
    spark_ready && note "spark: up, spark://127.0.0.1:$SPARK_PORT" || note "spark: down"
    pool_ready && note "pool: up, localhost:$POOL_PORT" || note "pool: down" ;;
  options) options "$@" ;;
  *) fail "usage: scripts/engines.sh build | start [flink|spark|pool ...] | stop [...] | status | options flink|spark [loopback|external]" ;;
esac
