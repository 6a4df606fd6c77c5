#!/usr/bin/env bash
# Development and CI services: a real single-node Apache Kafka broker (KRaft)
# on 127.0.0.1:9092, assembled from Maven Central and run on the machine's
# Java 17 (docs/adr/0004-real-kafka-broker.md), and a real S3-compatible
# server (moto, from PyPI, in its own virtualenv) on 127.0.0.1:9000 for
# checkpoint storage, and a real Confluent-compatible schema registry
# (Apicurio Registry 2.6, from Maven Central, in memory, Java 17) on
# 127.0.0.1:8081 (API base http://127.0.0.1:8081/apis/ccompat/v7), and
# Apache Iceberg's REST catalog server (the reference implementation behind
# the iceberg-rest-fixture image, from Maven Central, Java 17)
# on 127.0.0.1:8181 with its warehouse in /tmp/sluice-rest-catalog, and
# PostgreSQL (Debian's package, a throwaway cluster in /tmp/sluice-postgres)
# on 127.0.0.1:55432 (postgres://postgres@127.0.0.1:55432/postgres).
#
#   scripts/dev-services.sh up       install if missing, start, wait until they answer
#   scripts/dev-services.sh down     stop what this script started
#   scripts/dev-services.sh status   say whether it runs
#   scripts/dev-services.sh restart  stop and start again, keeping the data
#   scripts/dev-services.sh stop-postgres / start-postgres   PostgreSQL alone,
#                                    keeping its data (a database that goes away)
#
# Every `up` of a stopped broker starts from empty storage.
set -euo pipefail
cd "$(dirname "$0")/.."

KAFKA_VERSION=4.4.0
CACHE=${SLUICE_CACHE:-$HOME/.cache/sluice}
# The folder name carries a digest of the pom, so a changed pom resolves afresh.
POM_DIGEST=$(sha256sum scripts/kafka/pom.xml | cut -c1-12)
LIBS="$CACHE/kafka-$KAFKA_VERSION-$POM_DIGEST/libs"
DATA=${SLUICE_KAFKA_DATA:-/tmp/sluice-kafka}
PORT=${SLUICE_KAFKA_PORT:-9092}
CONTROLLER_PORT=$((PORT + 1))
PIDFILE="$DATA/broker.pid"
S3_PORT=${SLUICE_S3_PORT:-9000}
S3_DATA=${SLUICE_S3_DATA:-/tmp/sluice-s3}
S3_PIDFILE="$S3_DATA/moto.pid"
MOTO_VERSION=5.2.5
VENV="$CACHE/venv-moto-$MOTO_VERSION"
REGISTRY_VERSION=2.6.13.Final
REGISTRY_HOME="$CACHE/apicurio-registry-$REGISTRY_VERSION"
REGISTRY_PORT=${SLUICE_REGISTRY_PORT:-8081}
REGISTRY_DATA=${SLUICE_REGISTRY_DATA:-/tmp/sluice-registry}
REGISTRY_PIDFILE="$REGISTRY_DATA/registry.pid"
REST_VERSION=1.10.0
REST_JAR="$CACHE/iceberg-rest-$REST_VERSION/iceberg-open-api-$REST_VERSION.jar"
REST_PORT=${SLUICE_REST_CATALOG_PORT:-8181}
REST_DATA=${SLUICE_REST_CATALOG_DATA:-/tmp/sluice-rest-catalog}
REST_PIDFILE="$REST_DATA/rest.pid"
POSTGRES_PORT=${SLUICE_POSTGRES_PORT:-55432}
POSTGRES_DATA=${SLUICE_POSTGRES_DATA:-/tmp/sluice-postgres}

java_cmd() {
  java -Xms256m -Xmx768m -XX:+UseG1GC \
    -Dlog4j2.configurationFile="$DATA/log4j2.properties" \
    -cp "$LIBS/*" "$@"
}

install() {
  if [ -f "$LIBS/kafka_2.13-$KAFKA_VERSION.jar" ]; then
    return
  fi
  command -v java >/dev/null || { echo "dev-services: java not found (needs Java 17)"; exit 1; }
  command -v mvn >/dev/null || { echo "dev-services: mvn not found"; exit 1; }
  echo "dev-services: fetching Apache Kafka $KAFKA_VERSION and its dependencies from Maven Central"
  mvn -q -B -f scripts/kafka/pom.xml dependency:copy-dependencies \
    -DoutputDirectory="$LIBS" -DincludeScope=runtime -Dkafka.version="$KAFKA_VERSION"
}

# Whether the process in pid file $1 runs.
pid_running() {
  [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null
}

# Waits until `$3` (a function) succeeds for the service $1 started with
# pid file $2 and log $4; fails if it exits or does not answer within $5
# seconds.
wait_until_up() {
  local name=$1 pidfile=$2 answers_fn=$3 log=$4 seconds=$5
  for _ in $(seq 1 $((seconds * 4))); do
    if "$answers_fn"; then
      return
    fi
    if ! pid_running "$pidfile"; then
      echo "dev-services: $name exited during start-up:"; tail -n 40 "$log"; exit 1
    fi
    sleep 0.25
  done
  echo "dev-services: $name did not answer within $seconds s:"; tail -n 40 "$log"; exit 1
}

# Stops the service $1 in pid file $2 (if it runs).
stop_pid() {
  if pid_running "$2"; then
    kill "$(cat "$2")" 2>/dev/null || true
    echo "dev-services: $1 stopped"
  fi
  rm -f "$2"
}

running() {
  pid_running "$PIDFILE"
}

answers() {
  (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && grep -q "Kafka Server started" "$DATA/broker.log" 2>/dev/null
}

s3_answers() {
  (exec 3<>"/dev/tcp/127.0.0.1/$S3_PORT") 2>/dev/null
}

# The S3 server: moto's standalone server (in memory; every `up` starts empty).
s3_up() {
  if [ ! -x "$VENV/bin/moto_server" ]; then
    echo "dev-services: installing moto[server]==$MOTO_VERSION into $VENV"
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install --quiet --disable-pip-version-check "moto[server]==$MOTO_VERSION"
  fi
  if pid_running "$S3_PIDFILE"; then
    echo "dev-services: S3 already running (pid $(cat "$S3_PIDFILE")) on 127.0.0.1:$S3_PORT"
    return
  fi
  rm -rf "$S3_DATA"
  mkdir -p "$S3_DATA"
  nohup "$VENV/bin/moto_server" -H 127.0.0.1 -p "$S3_PORT" >"$S3_DATA/moto.log" 2>&1 &
  echo $! >"$S3_PIDFILE"
  wait_until_up "moto" "$S3_PIDFILE" s3_answers "$S3_DATA/moto.log" 30
  echo "dev-services: S3 (moto $MOTO_VERSION) up on 127.0.0.1:$S3_PORT (pid $(cat "$S3_PIDFILE"))"
}

s3_down() {
  stop_pid S3 "$S3_PIDFILE"
}

registry_answers() {
  curl -sf "http://127.0.0.1:$REGISTRY_PORT/apis/ccompat/v7/subjects" >/dev/null 2>&1
}

# The schema registry: Apicurio Registry's Confluent-compatible API, in
# memory (every `up` starts empty), BACKWARD compatibility as Confluent's
# default.
registry_up() {
  if [ ! -f "$REGISTRY_HOME/apicurio-registry-app-$REGISTRY_VERSION-runner.jar" ]; then
    echo "dev-services: fetching Apicurio Registry $REGISTRY_VERSION from Maven Central"
    mkdir -p "$REGISTRY_HOME"
    mvn -q -B org.apache.maven.plugins:maven-dependency-plugin:3.6.1:copy \
      -Dartifact="io.apicurio:apicurio-registry-app:$REGISTRY_VERSION:tar.gz:all" \
      -DoutputDirectory="$REGISTRY_HOME.download"
    tar xzf "$REGISTRY_HOME.download/apicurio-registry-app-$REGISTRY_VERSION-all.tar.gz" -C "$REGISTRY_HOME"
    rm -rf "$REGISTRY_HOME.download"
  fi
  if pid_running "$REGISTRY_PIDFILE"; then
    echo "dev-services: schema registry already running (pid $(cat "$REGISTRY_PIDFILE")) on 127.0.0.1:$REGISTRY_PORT"
    return
  fi
  rm -rf "$REGISTRY_DATA"
  mkdir -p "$REGISTRY_DATA"
  nohup java -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
    -Dquarkus.http.host=127.0.0.1 -Dquarkus.http.port="$REGISTRY_PORT" \
    -Dregistry.rules.global.compatibility=BACKWARD \
    -jar "$REGISTRY_HOME/apicurio-registry-app-$REGISTRY_VERSION-runner.jar" \
    >"$REGISTRY_DATA/registry.log" 2>&1 &
  echo $! >"$REGISTRY_PIDFILE"
  wait_until_up "the schema registry" "$REGISTRY_PIDFILE" registry_answers "$REGISTRY_DATA/registry.log" 60
  echo "dev-services: schema registry (Apicurio $REGISTRY_VERSION) up on 127.0.0.1:$REGISTRY_PORT (pid $(cat "$REGISTRY_PIDFILE"))"
}

registry_down() {
  stop_pid "schema registry" "$REGISTRY_PIDFILE"
}

rest_answers() {
  curl -sf "http://127.0.0.1:$REST_PORT/v1/config" >/dev/null 2>&1
}

# The Iceberg REST catalog: Apache Iceberg's RESTCatalogServer (a JDBC
# catalog on a SQLite file behind the REST protocol; every `up` starts
# empty).
rest_up() {
  if [ ! -f "$REST_JAR" ]; then
    echo "dev-services: fetching Apache Iceberg's REST catalog server $REST_VERSION from Maven Central"
    mvn -q -B org.apache.maven.plugins:maven-dependency-plugin:3.6.1:copy \
      -Dartifact="org.apache.iceberg:iceberg-open-api:$REST_VERSION" \
      -DoutputDirectory="$(dirname "$REST_JAR")"
  fi
  if pid_running "$REST_PIDFILE"; then
    echo "dev-services: REST catalog already running (pid $(cat "$REST_PIDFILE")) on 127.0.0.1:$REST_PORT"
    return
  fi
  rm -rf "$REST_DATA"
  mkdir -p "$REST_DATA/warehouse"
  # A file, not SQLite's :memory: (one empty database per pooled
  # connection: concurrent commits would not find the tables).
  REST_PORT="$REST_PORT" CATALOG_WAREHOUSE="file://$REST_DATA/warehouse" \
    CATALOG_URI="jdbc:sqlite:file:$REST_DATA/catalog.db" \
    nohup java -Xmx384m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -jar "$REST_JAR" \
    >"$REST_DATA/rest.log" 2>&1 &
  echo $! >"$REST_PIDFILE"
  wait_until_up "the REST catalog" "$REST_PIDFILE" rest_answers "$REST_DATA/rest.log" 60
  echo "dev-services: Iceberg REST catalog $REST_VERSION up on 127.0.0.1:$REST_PORT (pid $(cat "$REST_PIDFILE"))"
}

rest_down() {
  stop_pid "REST catalog" "$REST_PIDFILE"
}

# PostgreSQL's programs (Debian's postgresql package, any version).
postgres_bin() {
  local dir
  dir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
  if [ -z "$dir" ]; then
    echo "dev-services: installing Debian's postgresql package" >&2
    apt-get install -y -q postgresql >/dev/null
    dir=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
  fi
  echo "$dir"
}

# Runs `$@` as the user that owns the cluster (PostgreSQL refuses root).
as_postgres() {
  if [ "$(id -u)" = 0 ]; then
    su postgres -s /bin/bash -c "$(printf '%q ' "$@")"
  else
    "$@"
  fi
}

postgres_running() {
  [ -f "$POSTGRES_DATA/data/postmaster.pid" ] && as_postgres "$(postgres_bin)/pg_ctl" -D "$POSTGRES_DATA/data" status >/dev/null 2>&1
}

# Starts the cluster in $POSTGRES_DATA (made afresh by `up`), waiting until
# it accepts connections.
postgres_start() {
  as_postgres "$(postgres_bin)/pg_ctl" -D "$POSTGRES_DATA/data" \
    -o "-p $POSTGRES_PORT -k $POSTGRES_DATA -c listen_addresses=127.0.0.1 -c fsync=off" \
    -l "$POSTGRES_DATA/postgres.log" -w -t 60 start >/dev/null
  echo "dev-services: PostgreSQL up on 127.0.0.1:$POSTGRES_PORT (log $POSTGRES_DATA/postgres.log)"
}

# A throwaway cluster: every `up` of a stopped one starts empty.
postgres_up() {
  if postgres_running; then
    echo "dev-services: PostgreSQL already running on 127.0.0.1:$POSTGRES_PORT"
    return
  fi
  local bin
  bin=$(postgres_bin)
  rm -rf "$POSTGRES_DATA"
  mkdir -p "$POSTGRES_DATA"
  [ "$(id -u)" = 0 ] && chown postgres "$POSTGRES_DATA"
  as_postgres "$bin/initdb" -D "$POSTGRES_DATA/data" -A trust -U postgres >"$POSTGRES_DATA/initdb.log" 2>&1 \
    || { cat "$POSTGRES_DATA/initdb.log"; exit 1; }
  postgres_start
}

postgres_down() {
  if postgres_running; then
    as_postgres "$(postgres_bin)/pg_ctl" -D "$POSTGRES_DATA/data" -m fast -w stop >/dev/null
    echo "dev-services: PostgreSQL stopped"
  fi
}


up() {
  postgres_up
  s3_up
  registry_up
  rest_up
  install
  if running; then
    echo "dev-services: Kafka already running (pid $(cat "$PIDFILE")) on 127.0.0.1:$PORT"
    return
  fi
  rm -rf "$DATA"
  mkdir -p "$DATA/logs"
  cat >"$DATA/server.properties" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$CONTROLLER_PORT
listeners=PLAINTEXT://127.0.0.1:$PORT,CONTROLLER://127.0.0.1:$CONTROLLER_PORT
advertised.listeners=PLAINTEXT://127.0.0.1:$PORT
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
log.dirs=$DATA/logs
num.partitions=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=4
group.initial.rebalance.delay.ms=0
# KIP-848 groups (scaled-out pipelines, ADR 0020): a member that dies is
# noticed in 6 s instead of 45 s, so kill tests move tasks quickly.
group.consumer.min.session.timeout.ms=2000
group.consumer.session.timeout.ms=6000
group.consumer.min.heartbeat.interval.ms=500
group.consumer.heartbeat.interval.ms=1000
auto.create.topics.enable=true
# Test and example records carry event times from the past as their Kafka
# timestamps (window results carry their window's end): with time-based
# retention the broker deletes a topic's segments at its next retention
# check, so a test reading its output a few seconds later could find
# nothing (a bronze_to_silver CI failure). Topics keep what they get.
log.retention.ms=-1
PROPS
  cat >"$DATA/log4j2.properties" <<'PROPS'
rootLogger.level = WARN
rootLogger.appenderRef.stdout.ref = STDOUT
appender.stdout.type = Console
appender.stdout.name = STDOUT
appender.stdout.layout.type = PatternLayout
appender.stdout.layout.pattern = [%d] %p %m (%c)%n
logger.kafka.name = kafka.server.KafkaRaftServer
logger.kafka.level = INFO
logger.broker.name = kafka.server.BrokerServer
logger.broker.level = INFO
# Transactions begun, ended, fenced or timed out: what a test that finds
# records missing from a read_committed read needs to tell why.
logger.txn.name = kafka.coordinator.transaction
logger.txn.level = INFO
logger.txnstate.name = org.apache.kafka.coordinator.transaction
logger.txnstate.level = INFO
PROPS
  cluster_id=$(java_cmd kafka.tools.StorageTool random-uuid | tail -n 1)
  java_cmd kafka.tools.StorageTool format -t "$cluster_id" -c "$DATA/server.properties" >"$DATA/format.log" 2>&1 \
    || { cat "$DATA/format.log"; exit 1; }
  start_broker
}

# Starts the broker on the formatted storage in $DATA and waits for it.
start_broker() {
  nohup bash -c "exec java -Xms256m -Xmx768m -XX:+UseG1GC -Dlog4j2.configurationFile='$DATA/log4j2.properties' -cp '$LIBS/*' kafka.Kafka '$DATA/server.properties'" \
    >"$DATA/broker.log" 2>&1 &
  echo $! >"$PIDFILE"
  wait_until_up Kafka "$PIDFILE" answers "$DATA/broker.log" 60
  echo "dev-services: Kafka $KAFKA_VERSION up on 127.0.0.1:$PORT (pid $(cat "$PIDFILE"), log $DATA/broker.log)"
}

restart() {
  if ! running; then
    echo "dev-services: Kafka not running; use up"; exit 1
  fi
  kafka_down
  start_broker
}

down() {
  postgres_down
  s3_down
  registry_down
  rest_down
  kafka_down
}

kafka_down() {
  if ! running; then
    echo "dev-services: Kafka not running"
    rm -f "$PIDFILE"
    return
  fi
  pid=$(cat "$PIDFILE")
  kill "$pid"
  for _ in $(seq 1 120); do
    kill -0 "$pid" 2>/dev/null || { rm -f "$PIDFILE"; echo "dev-services: Kafka stopped"; return; }
    sleep 0.25
  done
  kill -9 "$pid" 2>/dev/null || true
  rm -f "$PIDFILE"
  echo "dev-services: Kafka killed after 30 s"
}

status() {
  if postgres_running; then
    echo "dev-services: PostgreSQL up on 127.0.0.1:$POSTGRES_PORT"
  else
    echo "dev-services: PostgreSQL down"
  fi
  if pid_running "$S3_PIDFILE" && s3_answers; then
    echo "dev-services: S3 up on 127.0.0.1:$S3_PORT (pid $(cat "$S3_PIDFILE"))"
  else
    echo "dev-services: S3 down"
  fi
  if pid_running "$REGISTRY_PIDFILE" && registry_answers; then
    echo "dev-services: schema registry up on 127.0.0.1:$REGISTRY_PORT (pid $(cat "$REGISTRY_PIDFILE"))"
  else
    echo "dev-services: schema registry down"
  fi
  if pid_running "$REST_PIDFILE" && rest_answers; then
    echo "dev-services: Iceberg REST catalog up on 127.0.0.1:$REST_PORT (pid $(cat "$REST_PIDFILE"))"
  else
    echo "dev-services: Iceberg REST catalog down"
  fi
  if running && answers; then
    echo "dev-services: Kafka up on 127.0.0.1:$PORT (pid $(cat "$PIDFILE"))"
  elif running; then
    echo "dev-services: Kafka starting (pid $(cat "$PIDFILE"))"; exit 1
  else
    echo "dev-services: Kafka down"; exit 1
  fi
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  status) status ;;
  restart) restart ;;
  # Fast: its sessions are cut, as when a database goes away.
  stop-postgres) postgres_down ;;
  start-postgres) postgres_running || postgres_start ;;
  *) echo "usage: $0 up|down|status|restart|stop-postgres|start-postgres"; exit 2 ;;
esac
