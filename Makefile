# Entry points for humans and CI (.ci/run runs `make test`). Each target installs what it needs.
#
#   make server   run the example RakNet echo server (live Bedrock MOTD, echoes messages) on udp 19132/19133
#   make test     every check CI runs: rustfmt, clippy, cargo test, each fuzz target for a few
#                 seconds (FUZZ_SMOKE_SECONDS), mix format, mix test
#   make lint     the formatting and clippy checks alone
#   make build    build the NIF and the Elixir app (mix compile; MIX_ENV defaults to dev)
#   make bench    benchmarks: codec, engine over the simulator, raw loopback UDP, and RakNet.Server
#                 end to end (throughput, official RakNet side by side, latency, scale); bench/results/
#   make attack   attacks on a RakNet server (floods, slowloris, forged NAKs, ...) against the example
#                 server on a free loopback port: one table of traffic, amplification, what legitimate
#                 clients saw, server CPU and RSS (ATTACK_ARGS passes options to raknet-attack)
#   make fuzz     run every cargo-fuzz target for FUZZ_SECONDS each (default 60)
#   make venv     Python venv with official RakNet (PyPI `raknet`) and aiortc, for interop tests
#   make npm      third-party RakNet clients from npm (jsp-raknet) in _build/npm, for interop tests
#   make rust-peers  third-party RakNet clients from crates.io (rust-raknet, rak-rs) built in
#                 _build/rust-peers, for interop tests
#   make clean    remove build output (Mix and cargo)

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := build

# rustup installs cargo in ~/.cargo/bin, which a non-login shell may not have on its PATH.
CARGO_BIN := $(or $(CARGO_HOME),$(HOME)/.cargo)/bin
export PATH := $(CARGO_BIN):$(PATH)

# mix runs without prompts: raknet has no dependencies, so Mix never offers to install Hex or
# rebar3, and stdin is closed anyway so that any prompt would fail instead of hanging.
MIX := mix
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)

PY_RAKNET := raknet==0.3.0
# An independent WebRTC stack playing the Minecraft client over NetherNet (interop tests).
PY_AIORTC := aiortc==1.16.0
VENV := .venv
NPM_PEERS := jsp-raknet@2.2.0
NPM_DIR := _build/npm
RUST_PEERS := test/interop/peers/rust

.PHONY: deps build test lint server bench attack fuzz venv npm rust-peers clean

deps:
	@if ! command -v $(MIX) >/dev/null 2>&1; then \
		echo "==> mix not found; installing Elixir and Erlang from apt"; \
		$(SUDO) apt-get update && \
			DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y elixir erlang-dev erlang-nox; \
	fi
	@if ! command -v cc >/dev/null 2>&1; then \
		echo "==> no C compiler (Rust links with it; the NIF's allocator, mimalloc, is C); installing build-essential from apt"; \
		$(SUDO) apt-get update && \
			DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y build-essential; \
	fi
	@if ! command -v cargo >/dev/null 2>&1; then \
		echo "error: cargo not found. Install Rust with rustup (https://rustup.rs):" >&2; \
		echo "    curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y" >&2; \
		echo "then run make again." >&2; \
		exit 1; \
	fi
	@for component in rustfmt clippy; do \
		if ! cargo "$${component/rustfmt/fmt}" --version >/dev/null 2>&1; then \
			echo "==> installing the $$component component"; \
			rustup component add "$$component"; \
		fi; \
	done

build: deps
	$(MIX) compile </dev/null

test: deps venv npm rust-peers
	$(MAKE) lint
	cargo test --workspace
	$(MAKE) fuzz FUZZ_SECONDS=$(FUZZ_SMOKE_SECONDS)
	$(MIX) test </dev/null

lint: deps
	cargo fmt --all -- --check
	cargo fmt --manifest-path $(RUST_PEERS)/Cargo.toml -- --check
	cargo clippy --workspace --all-targets -- -D warnings
	CARGO_TARGET_DIR=_build/rust-peers cargo clippy --release --locked --manifest-path $(RUST_PEERS)/Cargo.toml -- -D warnings
	$(MIX) format --check-formatted </dev/null

server: deps
	$(MIX) run examples/echo_server.exs $(or $(PORT),19132) </dev/null

# make soak: 1,000 connections for 10 minutes through a lossy, duplicating, reordering relay to an
# echoing RakNet.Server: reliable messages never lost, duplicated or reordered, unreliable-sequenced
# never out of sequence, server memory flat. SOAK_CONNECTIONS, SOAK_SECONDS, SOAK_RATE, SOAK_SEED
# (bench/soak.exs). Not in CI: make test runs its 30 s, 100-connection variant (soak_test.exs).
.PHONY: soak
soak: deps
	cargo build --release -p raknet-bench --bin raknet-load --bin raknet-relay
	$(MIX) run bench/soak.exs </dev/null

# The bench Mix environment consolidates protocols, as a release does (dev does not, so that
# scripts can implement RakNet.Client at run time), and compiles bench/support.
# The bench VM's schedulers do not busy-wait for work: CPU time is then the work done, which
# the CPU goals compare with raw UDP (a default VM spins ~0.16 core more at 1,000 x 20 Hz).
BENCH_ERL_FLAGS := +sbwt none +sbwtdcpu none +sbwtdio none

bench: deps venv
	cargo build --release -p raknet-bench
	ERL_FLAGS="$(BENCH_ERL_FLAGS)" MIX_ENV=bench $(MIX) run bench/run.exs </dev/null
	ERL_FLAGS="$(BENCH_ERL_FLAGS)" MIX_ENV=bench $(MIX) run bench/packet.exs </dev/null

# The example server runs in the background on a free port (and port + 1 for IPv6) and is stopped
# on exit, also on failure or Ctrl-C. Its log goes to a temporary file, shown if the tool fails.
ATTACK_ARGS ?=
attack: build
	cargo build --release -p raknet-bench --bin raknet-attack
	@port=$$(target/release/raknet-attack --free-port); \
	log=$$(mktemp); \
	$(MIX) run examples/echo_server.exs $$port </dev/null >$$log 2>&1 & server=$$!; \
	trap 'kill $$server 2>/dev/null; wait $$server 2>/dev/null; rm -f $$log' EXIT; \
	ulimit -n 8192 2>/dev/null || true; \
	echo "==> example server (pid $$server) on udp 127.0.0.1:$$port"; \
	target/release/raknet-attack --port $$port $(ATTACK_ARGS) || \
		{ status=$$?; echo "raknet-attack failed; server log:" >&2; tail -n 30 $$log >&2; exit $$status; }

FUZZ_SECONDS ?= 60
# `make test` builds every fuzz target (with the sanitizers) and runs each this long.
FUZZ_SMOKE_SECONDS ?= 3
FUZZ_TARGETS := datagram frame ack offline connected_message address proxy_header endpoint nethernet_signaling nethernet_framing

# cargo-fuzz needs nightly-only sanitizer flags; RUSTC_BOOTSTRAP lets the stable toolchain
# (the only one this machine can have) accept them.
fuzz: deps
	@command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --locked
	@for t in $(FUZZ_TARGETS); do \
		mkdir -p native/fuzz/corpus/$$t; \
		echo "==> fuzzing $$t for $(FUZZ_SECONDS) s"; \
		set -o pipefail; RUSTC_BOOTSTRAP=1 cargo fuzz run -O --fuzz-dir native/fuzz $$t \
			native/fuzz/corpus/$$t native/fuzz/seeds/$$t -- \
			-max_total_time=$(FUZZ_SECONDS) -rss_limit_mb=2048 2>&1 | grep -E '^(#[0-9]+[[:space:]]+DONE|==[0-9]+==|thread)' || exit 1; \
	done

venv:
	@if ! $(VENV)/bin/python -c 'import raknet, aiortc' >/dev/null 2>&1; then \
		if ! python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then \
			echo "==> installing python3-venv from apt"; \
			$(SUDO) apt-get update && \
				DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y python3-venv; \
		fi; \
		rm -rf $(VENV); \
		python3 -m venv $(VENV); \
		$(VENV)/bin/pip install --quiet $(PY_RAKNET) $(PY_AIORTC); \
		$(VENV)/bin/python -c 'import raknet, aiortc'; \
	fi

npm:
	@if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then \
		echo "==> installing nodejs and npm from apt"; \
		$(SUDO) apt-get update && \
			DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y nodejs npm; \
	fi
	@if [ ! -f $(NPM_DIR)/node_modules/jsp-raknet/package.json ]; then \
		mkdir -p $(NPM_DIR); \
		npm install --prefix $(NPM_DIR) --no-audit --no-fund --loglevel=error $(NPM_PEERS); \
	fi

# Not a member of our workspace (their dependencies are not ours): its own lock file and target.
rust-peers: deps
	CARGO_TARGET_DIR=_build/rust-peers cargo build --release --locked --manifest-path $(RUST_PEERS)/Cargo.toml

clean:
	rm -rf _build priv/native test/fixtures/*/_build
	cargo clean
