#!/usr/bin/env bash
# Installs, starts, waits for and stops the real servers that Sluice's
# integration tests talk to, all on loopback:
#
#   mosquitto   MQTT broker          127.0.0.1:1883  (Debian package)
#   clickhouse  ClickHouse 18.16     127.0.0.1:9000 native, 127.0.0.1:8123 HTTP
#                                                      (Debian package)
#   cassandra   Apache Cassandra 5.0 127.0.0.1:9042 CQL (jars from Maven Central)
#
# Usage: scripts/servers.sh COMMAND [NAME...]   (NAME defaults to all three)
#   install [NAME...]  install what is missing (idempotent)
#   up      [NAME...]  install if needed, start if not running, wait until ready
#   down    [NAME...]  stop (state is kept)
#   start   [NAME...]  same as up
#   stop    [NAME...]  same as down
#   restart NAME...    stop, start, wait until ready (state is kept)
#   status  [NAME...]  print running/stopped; exit 1 if any is not running
#   clean   [NAME...]  stop and delete the state (data, logs) of NAME
#   env                print shell exports with the servers' addresses
#   tools              install the test tools that are not servers: promtool
#                      (Debian's prometheus package; the alert rules test
#                      runs it)
#
# Environment:
#   SLUICE_SERVERS_DIR   state: configs, data, pid files, logs
#                        (default /tmp/sluice-servers; one subdir per server)
#   SLUICE_CACHE_DIR     downloads kept between runs: Cassandra's jars
#                        (default $HOME/.cache/sluice)
#   SLUICE_CASSANDRA_START_TIMEOUT  seconds to wait for CQL (default 240)
#   SLUICE_CASSANDRA_HEAP           JVM heap for Cassandra (default 1G)
#   SLUICE_JAVA          java (11 or 17) to run Cassandra with (default: JDK 17)
#   SLUICE_SERVERS_LOCK_TIMEOUT     seconds to wait for another servers.sh
#                                   (default 600)
#   SLUICE_MQTT_PORT, SLUICE_CLICKHOUSE_PORT, SLUICE_CLICKHOUSE_HTTP_PORT,
#   SLUICE_CQL_PORT, SLUICE_CASSANDRA_STORAGE_PORT
#                        ports (defaults 1883, 9000, 8123, 9042, 7000); with a
#                        separate SLUICE_SERVERS_DIR, a second set can run
#                        beside the first
#
# Needs root (or sudo) only to apt-get install. Starts the servers as
# background daemons of their own (no systemd), each with its pid file and
# log in its state dir, and with none of the caller's open files but stdin,
# stdout and stderr (which point at /dev/null and the server's log): a lock
# or pipe the caller holds is not kept open by a server that outlives it.
# Commands take a lock, so concurrent callers are safe.
#
# Sharing: every caller that uses one SLUICE_SERVERS_DIR (and the same ports)
# shares its servers; two test runs on one machine use the same servers
# unless they set different SLUICE_SERVERS_DIR and ports. scripts/test.sh
# keeps its own output in a temporary directory, and cleans or stops the
# servers only when no other test run holds $SLUICE_SERVERS_DIR/.runs.lock.

set -euo pipefail

SCRIPTS_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
STATE_ROOT=${SLUICE_SERVERS_DIR:-/tmp/sluice-servers}
CACHE_DIR=${SLUICE_CACHE_DIR:-${HOME:-/root}/.cache/sluice}
ALL_SERVERS=(mosquitto clickhouse cassandra)

HOST=127.0.0.1
MQTT_PORT=${SLUICE_MQTT_PORT:-1883}
CH_TCP_PORT=${SLUICE_CLICKHOUSE_PORT:-9000}
CH_HTTP_PORT=${SLUICE_CLICKHOUSE_HTTP_PORT:-8123}
CQL_PORT=${SLUICE_CQL_PORT:-9042}
CASSANDRA_STORAGE_PORT=${SLUICE_CASSANDRA_STORAGE_PORT:-7000}

CASSANDRA_START_TIMEOUT=${SLUICE_CASSANDRA_START_TIMEOUT:-240}
CASSANDRA_HEAP=${SLUICE_CASSANDRA_HEAP:-1G}

log() { printf '[servers] %s\n' "$*" >&2; }

die() {
	printf '[servers] ERROR: %s\n' "$*" >&2
	exit 1
}

# Prints the tail of each existing file, for failure reports.
show_tail() {
	local f
	for f in "$@"; do
		if [[ -s $f ]]; then
			printf '[servers] ---- last lines of %s ----\n' "$f" >&2
			tail -n 25 "$f" >&2 || true
		fi
	done
}

# fail NAME MESSAGE: reports a failure of server NAME with its logs.
fail() {
	local name=$1
	shift
	printf '[servers] ERROR (%s): %s\n' "$name" "$*" >&2
	# shellcheck disable=SC2046
	show_tail $(log_files "$name")
	exit 1
}

log_files() {
	local d
	d=$(state_dir "$1")
	case $1 in
	mosquitto) echo "$d/mosquitto.log $d/mosquitto.out" ;;
	clickhouse) echo "$d/log/clickhouse-server.err.log $d/log/clickhouse-server.log $d/clickhouse.out" ;;
	cassandra) echo "$d/logs/system.log $d/cassandra.out" ;;
	esac
}

state_dir() { printf '%s/%s' "$STATE_ROOT" "$1"; }

# close_inherited_fds: closes every open file of this (sub)shell except
# stdin, stdout and stderr. Run it in the subshell that execs a daemon, after
# the redirections, so that the daemon keeps none of the caller's files: a
# flock held by whoever called servers.sh would otherwise stay held by the
# server for as long as it runs.
close_inherited_fds() {
	local fd fds=()
	# List first: the directory being read is an open fd of its own.
	for fd in /proc/"$BASHPID"/fd/*; do
		fds+=("${fd##*/}")
	done
	for fd in "${fds[@]}"; do
		if [[ $fd =~ ^[0-9]+$ ]] && ((fd > 2)); then
			eval "exec $fd>&-" 2>/dev/null || true
		fi
	done
}

# render TEMPLATE STATE_DIR: prints TEMPLATE with its @PLACEHOLDERS@ filled in.
render() {
	sed -e "s#@STATE_DIR@#$2#g" -e "s#@HOST@#$HOST#g" \
		-e "s#@MQTT_PORT@#$MQTT_PORT#g" \
		-e "s#@CH_TCP_PORT@#$CH_TCP_PORT#g" -e "s#@CH_HTTP_PORT@#$CH_HTTP_PORT#g" \
		-e "s#@CQL_PORT@#$CQL_PORT#g" -e "s#@CASSANDRA_STORAGE_PORT@#$CASSANDRA_STORAGE_PORT#g" \
		"$1"
}

now() { date +%s; }

# port_open PORT: true if something accepts TCP connections on HOST:PORT.
port_open() {
	timeout 2 bash -c "exec 3<>/dev/tcp/$HOST/$1" 2>/dev/null
}

# alive PID: true if PID is a live process (not a zombie: this machine's
# init may not reap daemons' exited processes).
alive() {
	local state
	kill -0 "$1" 2>/dev/null || return 1
	state=$(sed -n 's/^State:[[:space:]]*\([A-Z]\).*/\1/p' "/proc/$1/status" 2>/dev/null || true)
	[[ -n $state && $state != Z && $state != X ]]
}

# pid_of NAME: prints the pid from NAME's pid file if that process is alive
# and is the expected program; fails otherwise.
pid_of() {
	local name=$1 pidfile pid pattern
	pidfile="$(state_dir "$name")/$name.pid"
	[[ -s $pidfile ]] || return 1
	pid=$(tr -dc '0-9' <"$pidfile")
	[[ -n $pid ]] || return 1
	alive "$pid" || return 1
	case $name in
	mosquitto) pattern=mosquitto ;;
	clickhouse) pattern=clickhouse ;;
	cassandra) pattern=CassandraDaemon ;;
	esac
	tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "$pattern" || return 1
	printf '%s' "$pid"
}

# stop_pid NAME TIMEOUT: SIGTERM, wait up to TIMEOUT seconds, then SIGKILL.
stop_pid() {
	local name=$1 timeout=$2 pid deadline
	if ! pid=$(pid_of "$name"); then
		log "$name: not running"
		rm -f "$(state_dir "$name")/$name.pid"
		return 0
	fi
	log "$name: stopping (pid $pid)"
	kill -TERM "$pid" 2>/dev/null || true
	deadline=$(($(now) + timeout))
	while alive "$pid"; do
		if (($(now) >= deadline)); then
			log "$name: still running after ${timeout}s, sending SIGKILL"
			kill -KILL "$pid" 2>/dev/null || true
			sleep 1
			break
		fi
		sleep 0.2
	done
	rm -f "$(state_dir "$name")/$name.pid"
	log "$name: stopped"
}

# port_busy NAME PORT...: fails with a clear message if another process
# already listens on one of the PORTs.
port_busy() {
	local name=$1 p
	shift
	for p in "$@"; do
		if port_open "$p"; then
			die "$name: $HOST:$p is already in use by another process (a system service, or a second state dir?):
$(ss -ltnp "sport = :$p" 2>/dev/null || true)"
		fi
	done
}

# wait_port_closed PORT TIMEOUT
wait_port_closed() {
	local deadline=$(($(now) + $2))
	while port_open "$1"; do
		(($(now) < deadline)) || return 1
		sleep 0.2
	done
}

# ---------------------------------------------------------------------------
# Debian packages

APT_UPDATED=0

as_root() {
	if ((EUID == 0)); then
		"$@"
	elif command -v sudo >/dev/null 2>&1; then
		sudo "$@"
	else
		die "need root (or sudo) to run: $*"
	fi
}

deb_installed() {
	[[ $(dpkg-query -W -f='${Status}' "$1" 2>/dev/null || true) == "install ok installed" ]]
}

# apt_install PKG...: installs the missing packages, without letting their
# maintainer scripts start system services (there is no systemd; the
# services' default configs would also take our ports).
apt_install() {
	local missing=() p rc=0 policy=/usr/sbin/policy-rc.d made_policy=0
	for p in "$@"; do
		deb_installed "$p" || missing+=("$p")
	done
	((${#missing[@]} > 0)) || return 0
	command -v apt-get >/dev/null 2>&1 || die "apt-get not found: install ${missing[*]} by hand"
	if ((APT_UPDATED == 0)); then
		log "apt-get update"
		as_root apt-get update -qq || die "apt-get update failed"
		APT_UPDATED=1
	fi
	if [[ ! -e $policy ]]; then
		as_root sh -c "printf '#!/bin/sh\nexit 101\n' > $policy && chmod 755 $policy"
		made_policy=1
	fi
	log "apt-get install ${missing[*]}"
	# shellcheck disable=SC2086
	as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ${APT_INSTALL_OPTS:-} \
		-o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
		"${missing[@]}" >&2 || rc=$?
	if ((made_policy)); then
		as_root rm -f "$policy"
	fi
	((rc == 0)) || die "apt-get install ${missing[*]} failed (exit $rc)"
}

# ---------------------------------------------------------------------------
# Tools

# tools_install: promtool, from Debian's prometheus package (the server it
# also ships is not started: apt_install keeps services from starting).
tools_install() {
	if command -v promtool >/dev/null 2>&1; then
		return 0
	fi
	APT_INSTALL_OPTS=--no-install-recommends apt_install prometheus
	command -v promtool >/dev/null 2>&1 || die "promtool not found after installing the prometheus package"
	log "promtool: $(promtool --version 2>&1 | head -n 1)"
}

# ---------------------------------------------------------------------------
# Mosquitto

mosquitto_install() {
	apt_install mosquitto mosquitto-clients
}

mosquitto_start() {
	local d pid deadline
	d=$(state_dir mosquitto)
	if pid=$(pid_of mosquitto) && port_open "$MQTT_PORT"; then
		log "mosquitto: already running (pid $pid) on $HOST:$MQTT_PORT"
		return 0
	fi
	port_busy mosquitto "$MQTT_PORT"
	command -v mosquitto >/dev/null 2>&1 || PATH=$PATH:/usr/sbin
	mkdir -p "$d/data"
	render "$SCRIPTS_DIR/mosquitto/mosquitto.conf" "$d" >"$d/mosquitto.conf"
	log "mosquitto: starting"
	if ! (close_inherited_fds && exec mosquitto -c "$d/mosquitto.conf" -d) >"$d/mosquitto.out" 2>&1 </dev/null; then
		fail mosquitto "mosquitto did not start"
	fi
	deadline=$(($(now) + 30))
	until port_open "$MQTT_PORT"; do
		if (($(now) >= deadline)); then
			fail mosquitto "not accepting connections on $HOST:$MQTT_PORT after 30s"
		fi
		sleep 0.1
	done
	pid=$(pid_of mosquitto) || fail mosquitto "listening, but no live pid in $d/mosquitto.pid"
	log "mosquitto: ready on $HOST:$MQTT_PORT (pid $pid)"
}

mosquitto_stop() {
	stop_pid mosquitto 30
	wait_port_closed "$MQTT_PORT" 10 || fail mosquitto "port $MQTT_PORT still open after stop"
}

# ---------------------------------------------------------------------------
# ClickHouse

clickhouse_install() {
	apt_install clickhouse-server clickhouse-client
}

ch_query() {
	clickhouse-client --host "$HOST" --port "$CH_TCP_PORT" --connect_timeout 2 -q "$1"
}

clickhouse_start() {
	local d pid start
	d=$(state_dir clickhouse)
	if pid=$(pid_of clickhouse) && ch_query 'SELECT 1' >/dev/null 2>&1; then
		log "clickhouse: already running (pid $pid) on $HOST:$CH_TCP_PORT"
		return 0
	fi
	port_busy clickhouse "$CH_TCP_PORT" "$CH_HTTP_PORT"
	command -v clickhouse-server >/dev/null 2>&1 || PATH=$PATH:/usr/sbin
	mkdir -p "$d"/{data,tmp,log,user_files,format_schemas}
	render "$SCRIPTS_DIR/clickhouse/config.xml" "$d" >"$d/config.xml"
	render "$SCRIPTS_DIR/clickhouse/users.xml" "$d" >"$d/users.xml"
	log "clickhouse: starting"
	if ! (cd "$d" && close_inherited_fds && exec clickhouse-server --config-file="$d/config.xml" \
		--pid-file="$d/clickhouse.pid" --daemon) >"$d/clickhouse.out" 2>&1 </dev/null; then
		fail clickhouse "clickhouse-server did not start"
	fi
	start=$(now)
	until ch_query 'SELECT 1' >/dev/null 2>&1; do
		# The daemon writes its pid file right after forking; allow it 30s on a
		# loaded machine.
		if (($(now) - start >= 30)) && ! pid_of clickhouse >/dev/null; then
			fail clickhouse "clickhouse-server exited during start-up"
		fi
		if (($(now) - start >= 60)); then
			fail clickhouse "no answer to SELECT 1 on $HOST:$CH_TCP_PORT after 60s"
		fi
		sleep 0.2
	done
	pid=$(pid_of clickhouse) || fail clickhouse "answering, but no live pid in $d/clickhouse.pid"
	log "clickhouse: ready on $HOST:$CH_TCP_PORT (native), $HOST:$CH_HTTP_PORT (HTTP), version $(ch_query 'SELECT version()'), pid $pid"
}

clickhouse_stop() {
	stop_pid clickhouse 60
	wait_port_closed "$CH_TCP_PORT" 10 || fail clickhouse "port $CH_TCP_PORT still open after stop"
}

# ---------------------------------------------------------------------------
# Cassandra

cassandra_version() {
	sed -n 's:.*<cassandra.version>\(.*\)</cassandra.version>.*:\1:p' "$SCRIPTS_DIR/cassandra/pom.xml"
}

cassandra_lib() { printf '%s/cassandra-%s/lib' "$CACHE_DIR" "$(cassandra_version)"; }

# java_major JAVA: prints the feature version of a java binary (11, 17, ...).
java_major() {
	"$1" -XshowSettings:properties -version 2>&1 |
		sed -n 's/^ *java\.specification\.version = \([0-9.]*\).*/\1/p' | head -n 1
}

# find_java: prints a java that Cassandra 5.0 supports (11 or 17).
find_java() {
	local j m
	for j in "${SLUICE_JAVA:-}" /usr/lib/jvm/java-17-openjdk-*/bin/java \
		"${JAVA_HOME:+$JAVA_HOME/bin/java}" "$(command -v java 2>/dev/null || true)" \
		/usr/lib/jvm/java-11-openjdk-*/bin/java; do
		[[ -n $j && -x $j ]] || continue
		m=$(java_major "$j")
		if [[ $m == 17 || $m == 11 ]]; then
			printf '%s' "$j"
			return 0
		fi
	done
	return 1
}

cassandra_install() {
	local lib tmp d mvn_log start
	if ! find_java >/dev/null; then
		apt_install openjdk-17-jre-headless
		find_java >/dev/null || die "cassandra: no JDK 11 or 17 found (Cassandra 5.0 runs on those only)"
	fi
	lib=$(cassandra_lib)
	if [[ -f $lib/.complete ]]; then
		return 0
	fi
	command -v mvn >/dev/null 2>&1 || apt_install maven
	d=$(state_dir cassandra)
	mkdir -p "$d" "$(dirname "$lib")"
	mvn_log="$d/maven.log"
	tmp="$lib.tmp.$$"
	rm -rf "$tmp"
	log "cassandra: fetching cassandra-all $(cassandra_version) and its dependencies from Maven Central into $lib"
	start=$(now)
	# Run Maven on the same JDK as Cassandra (machines may also carry a newer JDK).
	if ! JAVA_HOME=$(dirname "$(dirname "$(readlink -f "$(find_java)")")") \
		mvn -B -f "$SCRIPTS_DIR/cassandra/pom.xml" \
		-Dsluice.cassandra.lib="$tmp" \
		-Djmc5.path=/tmp -Djmc6.path=/tmp -Dvisualvm.path=/tmp \
		package >"$mvn_log" 2>&1; then
		rm -rf "$tmp"
		show_tail "$mvn_log"
		die "cassandra: Maven could not fetch Cassandra (full log: $mvn_log)"
	fi
	rm -rf "$SCRIPTS_DIR/cassandra/target"
	[[ -f $tmp/cassandra-all-$(cassandra_version).jar ]] || fail cassandra "cassandra-all jar missing from $tmp"
	touch "$tmp/.complete"
	rm -rf "$lib"
	mv "$tmp" "$lib"
	log "cassandra: $(find "$lib" -name '*.jar' | wc -l) jars in $lib ($(($(now) - start))s)"
}

cassandra_java_args() {
	local d=$1 lib=$2 jamm=$3
	local args=(
		-Xms"$CASSANDRA_HEAP" -Xmx"$CASSANDRA_HEAP" -Xss256k
		-XX:+UseG1GC -XX:+ParallelRefProcEnabled -XX:MaxTenuringThreshold=1
		-XX:G1RSetUpdatingPauseTimePercent=5 -XX:MaxGCPauseMillis=300
		-XX:InitiatingHeapOccupancyPercent=70
		-XX:+UseThreadPriorities -XX:+ExitOnOutOfMemoryError -XX:+PerfDisableSharedMem
		-XX:StringTableSize=1000003 -XX:+UseTLAB -XX:+ResizeTLAB
		-XX:CICompilerCount=2
		-ea -da:net.openhft...
		-javaagent:"$jamm"
		-Djdk.attach.allowAttachSelf=true
		-Djava.net.preferIPv4Stack=true
		-Dio.netty.tryReflectionSetAccessible=true
		-Djava.io.tmpdir="$d/tmp" -Djna.tmpdir="$d/tmp"
		-Dcassandra.config="file://$d/conf/cassandra.yaml"
		-Dcassandra.storagedir="$d/data"
		-Dcassandra.triggers_dir="$d/triggers"
		-Dcassandra.logdir="$d/logs"
		-Dlogback.configurationFile="file://$d/conf/logback.xml"
		-Dcassandra-foreground=yes
		-Dcassandra-pidfile="$d/cassandra.pid"
		-Dcassandra.skip_wait_for_gossip_to_settle=0
		-Dcassandra.ring_delay_ms=1000
		-Dcassandra.unsafesystem=true
		-Dcassandra.superuser_setup_delay_ms=0
	)
	local m
	for m in java.base/jdk.internal.misc java.management.rmi/com.sun.jmx.remote.internal.rmi \
		java.management/com.sun.jmx.remote.security java.rmi/sun.rmi.registry \
		java.rmi/sun.rmi.server java.sql/java.sql java.base/java.lang.ref jdk.unsupported/sun.misc; do
		args+=("--add-exports=$m=ALL-UNNAMED")
	done
	for m in java.base/java.lang.module java.base/jdk.internal.loader java.base/jdk.internal.ref \
		java.base/jdk.internal.reflect java.base/jdk.internal.math java.base/jdk.internal.module \
		java.base/jdk.internal.util.jar jdk.management/com.sun.management.internal \
		java.base/sun.nio.ch java.base/java.io java.base/java.lang.reflect java.base/java.lang \
		java.base/java.util java.base/java.nio; do
		args+=("--add-opens=$m=ALL-UNNAMED")
	done
	args+=(-cp "$d/conf:$lib/*" org.apache.cassandra.service.CassandraDaemon)
	printf '%s\0' "${args[@]}"
}

cassandra_ready() {
	local d=$1
	port_open "$CQL_PORT" && grep -q 'Starting listening for CQL clients' "$d/logs/system.log" 2>/dev/null
}

cassandra_start() {
	local d lib java jamm pid deadline start args=()
	d=$(state_dir cassandra)
	if pid=$(pid_of cassandra) && cassandra_ready "$d"; then
		log "cassandra: already running (pid $pid) on $HOST:$CQL_PORT"
		return 0
	fi
	if pid=$(pid_of cassandra); then
		log "cassandra: already starting (pid $pid)"
	else
		port_busy cassandra "$CQL_PORT" "$CASSANDRA_STORAGE_PORT"
		lib=$(cassandra_lib)
		[[ -f $lib/.complete ]] || fail cassandra "not installed: run '$0 install cassandra'"
		java=$(find_java) || fail cassandra "no JDK 11 or 17 found"
		mkdir -p "$d"/{conf,data,logs,tmp,triggers}
		render "$SCRIPTS_DIR/cassandra/cassandra.yaml" "$d" >"$d/conf/cassandra.yaml"
		cp "$SCRIPTS_DIR/cassandra/logback.xml" "$d/conf/"
		# A fresh log per start, so readiness is read from this start only.
		if [[ -f $d/logs/system.log ]]; then
			mv -f "$d/logs/system.log" "$d/logs/system.log.prev"
		fi
		jamm=$(find "$lib" -maxdepth 1 -name 'jamm-*.jar' | head -n 1)
		[[ -n $jamm ]] || fail cassandra "jamm jar missing from $lib: delete that directory and run '$0 install cassandra'"
		mapfile -d '' args < <(cassandra_java_args "$d" "$lib" "$jamm")
		log "cassandra: starting $(cassandra_version) with $java"
		(cd "$d" && exec >"$d/cassandra.out" 2>&1 </dev/null && close_inherited_fds &&
			exec setsid nohup "$java" "${args[@]}") &
		pid=$!
		printf '%s\n' "$pid" >"$d/cassandra.pid"
	fi
	start=$(now)
	deadline=$((start + CASSANDRA_START_TIMEOUT))
	until cassandra_ready "$d"; do
		if ! alive "$pid"; then
			fail cassandra "the JVM exited during start-up"
		fi
		if (($(now) >= deadline)); then
			stop_pid cassandra 30
			fail cassandra "CQL not ready on $HOST:$CQL_PORT after ${CASSANDRA_START_TIMEOUT}s (stopped it)"
		fi
		sleep 1
	done
	log "cassandra: ready on $HOST:$CQL_PORT (pid $pid, $(($(now) - start))s)"
}

cassandra_stop() {
	stop_pid cassandra 60
	wait_port_closed "$CQL_PORT" 10 || fail cassandra "port $CQL_PORT still open after stop"
}

# ---------------------------------------------------------------------------

status_of() {
	local name=$1 pid port
	case $name in
	mosquitto) port=$MQTT_PORT ;;
	clickhouse) port=$CH_TCP_PORT ;;
	cassandra) port=$CQL_PORT ;;
	esac
	if pid=$(pid_of "$name"); then
		if port_open "$port"; then
			printf '%-11s running  pid %-7s %s:%s\n' "$name" "$pid" "$HOST" "$port"
			return 0
		fi
		printf '%-11s starting pid %-7s %s:%s not open yet\n' "$name" "$pid" "$HOST" "$port"
		return 1
	fi
	printf '%-11s stopped\n' "$name"
	return 1
}

usage() {
	sed -n '2,/^$/s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" >&2
	exit 2
}

check_names() {
	local n
	for n in "$@"; do
		case $n in
		mosquitto | clickhouse | cassandra) ;;
		*) die "unknown server '$n' (want: ${ALL_SERVERS[*]})" ;;
		esac
	done
}

main() {
	(($# >= 1)) || usage
	local cmd=$1 n rc=0
	shift
	if [[ $cmd == tools ]]; then
		(($# == 0)) || die "tools takes no server names"
		tools_install
		return 0
	fi
	local names=("$@")
	((${#names[@]} > 0)) || names=("${ALL_SERVERS[@]}")
	check_names "${names[@]}"

	mkdir -p "$STATE_ROOT"
	# One command at a time (parallel test packages may all call 'up'). The
	# servers are started with every fd but 0-2 closed, so they do not hold
	# this lock (nor any the caller holds).
	exec 9>"$STATE_ROOT/.servers.lock"
	if ! flock -w "${SLUICE_SERVERS_LOCK_TIMEOUT:-600}" 9; then
		die "another servers.sh holds $STATE_ROOT/.servers.lock (waited ${SLUICE_SERVERS_LOCK_TIMEOUT:-600}s); holders: $(fuser "$STATE_ROOT/.servers.lock" 2>&1 || true)"
	fi

	case $cmd in
	install)
		for n in "${names[@]}"; do "${n}_install"; done
		;;
	up | start)
		for n in "${names[@]}"; do "${n}_install"; done
		for n in "${names[@]}"; do "${n}_start"; done
		;;
	down | stop)
		for n in "${names[@]}"; do "${n}_stop"; done
		;;
	restart)
		(($# >= 1)) || die "restart needs a server name (${ALL_SERVERS[*]})"
		for n in "${names[@]}"; do
			"${n}_stop"
			"${n}_install"
			"${n}_start"
		done
		;;
	status)
		for n in "${names[@]}"; do status_of "$n" || rc=1; done
		return "$rc"
		;;
	clean)
		for n in "${names[@]}"; do
			"${n}_stop"
			rm -rf "$(state_dir "$n")"
			log "$n: state removed"
		done
		;;
	env)
		printf 'export SLUICE_TEST_MQTT_ADDR=%s:%s\n' "$HOST" "$MQTT_PORT"
		printf 'export SLUICE_TEST_CLICKHOUSE_ADDR=%s:%s\n' "$HOST" "$CH_TCP_PORT"
		printf 'export SLUICE_TEST_CLICKHOUSE_HTTP_ADDR=%s:%s\n' "$HOST" "$CH_HTTP_PORT"
		printf 'export SLUICE_TEST_CASSANDRA_ADDR=%s:%s\n' "$HOST" "$CQL_PORT"
		;;
	-h | --help | help) usage ;;
	*) die "unknown command '$cmd' (want: install up down start stop restart status clean env tools)" ;;
	esac
}

main "$@"
