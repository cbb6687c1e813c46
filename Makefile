# moonflow — the two commands of the README, plus bench.
#
#   make run    install what is missing, build the moonflow binary (only it),
#               serve scripts/site on :8080
#   make build  install, build everything (tests, sanitizer twins, fuzzers)
#   make test   install, build everything, run every test (ctest)
#   make bench  release build, run the benchmarks in bench/, write bench/results/
#               (engine, HTTP servers side by side, Redis; about 14 minutes)
#   make fuzz   run the fuzz targets (HTTP parser, Redis replies, serve config)
#               for FUZZ_SECONDS each
#   make soak   SOAK_SECONDS (default 600) of mixed traffic against moonflow
#               serve with its RSS and fds sampled every second; asserts
#               bounds on both and no error beyond the injected ones
#               (spec/soak/soak.py; not part of make test)
#
# Dependencies are Debian packages, installed with apt-get when missing.

BUILD       ?= build
BENCH_BUILD ?= build-release
JOBS        ?= $(shell nproc)
CMAKE_FLAGS ?=
FUZZ_SECONDS ?= 60
SOAK_SECONDS ?= 600

# Build tools and the libraries the engine links (the list grows with each
# protocol).
PACKAGES = build-essential cmake ninja-build pkg-config util-linux \
           libssl-dev libc-ares-dev python3 curl wrk nginx-light openssl \
           clang libclang-rt-14-dev libluajit2-5.1-dev lua-cjson lua-busted \
           libhiredis-dev redis-server redis-tools strace \
           libmariadb-dev mariadb-server mariadb-client librdkafka-dev kcat \
           libpcre2-dev prometheus memcached lua-nginx-redis \
           lua-nginx-memcached lua-nginx-websocket lua-nginx-dns \
           lua-nginx-cookie lua-resty-lrucache lua-resty-core \
           lua-nginx-string lua-nginx-kafka python3-websockets \
           libnghttp2-dev nghttp2-client python3-h2 zlib1g-dev \
           libbrotli-dev media-types
# Tests drive curl, wrk and nginx (a client peer) and redis-server (started
# on a loopback port in a temporary directory; redis-cli's output is what the
# redis_cli example is checked against), count a server's stat() calls with
# strace, and build the fuzzers with clang; make bench uses strace for
# syscall counts too, and adds the nginx Lua module (a peer;
# our nginx.conf loads it, the system nginx is never started) and
# lua-resty-redis for that peer's Redis handler (lua-nginx-redis);
# redis-benchmark comes with redis-tools (bench/redis/ starts its own
# redis-server the same way). MySQL: the tests start mariadbd (mariadb-server)
# in a temporary datadir and check the mysql_cli example against the mariadb
# client; make bench compares with sysbench on the same server. Kafka: the
# tests run librdkafka's mock cluster (librdkafka-dev) and check the
# kafka_cli example against kcat; make bench compares with kcat -P and with
# nginx + lua-resty-kafka (lua-nginx-kafka). mf.re's regular expressions
# are PCRE2's (libpcre2-dev: 8-bit, with its JIT). The metrics text is
# checked by Prometheus's own parser (promtool, from prometheus; its
# service is never started). OpenResty's libraries as Debian packages them
# (lua-nginx-redis, -memcached, -websocket, -dns, -cookie,
# lua-resty-lrucache, lua-resty-core, -string, -kafka) run unchanged in the
# specs on the ngx compatibility module, against redis-server, memcached
# (started on a loopback port by the specs' harness), librdkafka's mock
# cluster and Python peers (python3-websockets: a real WebSocket client for
# the WebSocket server of lua-nginx-websocket); make bench uses lua-nginx-redis and
# lua-nginx-memcached in nginx's Lua handlers too. The http client's HTTP/2
# is libnghttp2's (libnghttp2-dev: frames and HPACK); its tests misbehave
# as an HTTP/2 server with python3-h2 (resets, refusals, GOAWAY).
# Response compression links zlib (zlib1g-dev) and libbrotli
# (libbrotli-dev); its tests decode with both and with curl --compressed.
# WebSocket: permessage-deflate is zlib's too.
BENCH_PACKAGES = libnginx-mod-http-lua sysbench

.PHONY: all deps bench-deps build binary run test bench fuzz soak clean \
        format

all: build

# $(call apt_install_missing,PACKAGE...): apt-get install those not installed.
define apt_install_missing
	@missing=""; \
	for p in $(1); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" \
	    || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  if [ "$$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi; \
	  $$SUDO apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	fi
endef

deps:
	$(call apt_install_missing,$(PACKAGES))

bench-deps:
	$(call apt_install_missing,$(PACKAGES) $(BENCH_PACKAGES))

$(BUILD)/build.ninja: CMakeLists.txt | deps
	cmake -S . -B $(BUILD) -G Ninja $(CMAKE_FLAGS)

build: deps $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS)

# The moonflow binary and what it links, nothing else: the first request of
# make run does not wait for the tests, their sanitizer twins and the
# fuzzers.
binary: deps $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS) --target moonflow

# Serves the bundled site (scripts/site) on http://127.0.0.1:8080 with an
# access log on stdout; Ctrl-C stops it gracefully.
run: binary
	./$(BUILD)/moonflow serve scripts/site --listen 127.0.0.1:8080 \
	  --access-log -

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

fuzz: build
	cd $(BUILD) && MF_FUZZ_SECONDS=$(FUZZ_SECONDS) \
	  ctest -R '^fuzz\.' --output-on-failure -j $(JOBS)

# The normal build's binary (the soak measures leaks, not speed), wrk and
# redis-server from PACKAGES.
soak: binary
	python3 spec/soak/soak.py --moonflow $(BUILD)/moonflow \
	  --seconds $(SOAK_SECONDS)

# Examples too: the HTTP benchmark runs examples/http_hello. ON is spelled
# out because a build dir configured earlier keeps OFF in its cache.
bench: bench-deps
	cmake -S . -B $(BENCH_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release \
	  -DMF_BUILD_TESTS=OFF -DMF_BUILD_EXAMPLES=ON
	cmake --build $(BENCH_BUILD) -j $(JOBS)
	./bench/run $(BENCH_BUILD)

format:
	clang-format -i core/*/*.c core/*/*.h core/include/moonflow/*.h \
	  spec/c/*/*.c spec/c/*/*.h spec/c/*.h spec/fixture/*.c lua/*/*.c lua/*/*.h \
	  lua/include/moonflow/*.h bench/*.c bench/http/*.c bench/mysql/*.c bench/kafka/*.c \
	  examples/*/*.c \
	  examples/*/*.h

clean:
	rm -rf $(BUILD) $(BENCH_BUILD)
