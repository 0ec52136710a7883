# laneway: `make demo` runs the operator against a local control plane with the examples
# applied; `make test` runs every check and test.
SHELL := /bin/bash
export PATH := $(HOME)/.cargo/bin:/usr/local/go/bin:$(PATH)

.PHONY: test lint unit crds demo demo-dubbo bench bench-dubbo bench-gateway bench-chain bench-spring bench-spring-cache bench-kube-proxy bench-rollouts bench-java faults fuzz gateway-types

test: lint
	tests/run.sh

lint:
	cargo fmt --check
	cargo clippy --locked --all-targets --all-features -- -D warnings

unit:
	cargo test --locked

crds:
	cargo run --locked --bin crdgen

demo:
	tests/demo.sh

# The front-end chain gateway -> gateway-bff (HTTP) -> order (Dubbo) -> user (Dubbo), one JVM per pod.
demo-dubbo:
	tests/demo-dubbo.sh

bench:
	cargo bench --locked --bench resolve

bench-dubbo:
	cargo bench --locked --no-run --bench dubbo_latency
	tests/in-cluster.sh cargo bench --locked --offline --bench dubbo_latency

# Relabel -> route effective through Traefik, 100 moves (a pod into a lane and back 50 times), with the
# release build of the operator.
bench-gateway:
	cargo test --locked --release --no-run --features cluster-tests --test traffic
	LANEWAY_TRAFFIC_MOVES=50 tests/in-cluster.sh cargo test --locked --offline --release --features cluster-tests --test traffic relabel -- --nocapture

# Relabel -> the whole gateway -> Dubbo -> Dubbo chain routed by it, 100 moves into a lane and back.
bench-chain:
	cargo test --locked --release --no-run --features cluster-tests --test chain
	LANEWAY_CHAIN_MOVES=100 tests/in-cluster.sh cargo test --locked --offline --release --features cluster-tests --test chain -- --nocapture

# Relabel -> a Spring Cloud Gateway and Spring Boot services over Nacos routed by laneway's marks
# (Spring Cloud LoadBalancer's cache off, as the README recommends), 100 moves, next to 20 moves
# done the way without laneway (restarting the instance with its lane in its own metadata);
# bench-spring-cache: the same relabels with the cache as shipped (35 s), 10 moves.
bench-spring:
	cargo test --locked --release --no-run --features cluster-tests --test spring_cloud
	LANEWAY_SPRING_MOVES=100 LANEWAY_SPRING_RESTARTS=20 tests/in-cluster.sh cargo test --locked --offline --release --features cluster-tests --test spring_cloud -- --nocapture

bench-spring-cache:
	cargo test --locked --release --no-run --features cluster-tests --test spring_cloud
	LANEWAY_SPRING_LB_CACHE=on LANEWAY_SPRING_MOVES=10 tests/in-cluster.sh cargo test --locked --offline --release --features cluster-tests --test spring_cloud -- --nocapture

# setWeight step -> the Argo Rollouts controller paused at the next step with the weight verified
# at the gateway by laneway's plugin, 20 steps (debug build: the controller's pace dominates).
bench-rollouts:
	LANEWAY_ROLLOUT_STEPS=21 tests/in-cluster.sh cargo test --locked --offline --features cluster-tests --test rollouts -- --nocapture

# Relabel -> plain callers of the baseline Service moved through a real kube-proxy (nftables, its default
# 1 s minSyncPeriod; LANEWAY_KUBE_PROXY_MIN_SYNC=100ms for another), 100 moves into a lane and back.
bench-kube-proxy:
	cargo test --locked --no-run --features cluster-tests --test kube_proxy
	LANEWAY_KUBE_PROXY_MOVES=100 tests/in-cluster.sh cargo test --locked --offline --features cluster-tests --test kube_proxy relabel -- --nocapture

# JMH: what laneway's Java filters add per call (ns and bytes allocated).
# Messages keep their lane: relabel -> records handled by the new tier, and the lane filter's
# cost next to a plain consumer, through real Kafka and RocketMQ brokers (tests/messages.rs).
.PHONY: bench-messages
bench-messages:
	cargo test --locked --no-run --features cluster-tests --test messages
	tests/in-cluster.sh cargo test --locked --offline --features cluster-tests --test messages -- --nocapture

bench-java:
	clients/java/bench.sh

# The long fault suite (minutes per fault); its table lands in target/tmp/fault-report.md.
faults:
	cargo test --locked --no-run --features cluster-tests --test fault_suite
	LANEWAY_FAULTS=long tests/in-cluster.sh cargo test --locked --offline --features cluster-tests --test fault_suite -- --nocapture

# 100,000 random event sequences through the core.
fuzz:
	LANEWAY_FUZZ_CASES=100000 cargo test --locked --release --test fuzz

# Regenerates src/gateway from the Gateway API CRDs (needs `cargo install kopium`).
gateway-types:
	crds=$$(tests/traefik/build.sh --crds | tail -n1); \
	for k in httproute:httproutes gateway:gateways gatewayclass:gatewayclasses; do \
	  kopium -f "$$crds/gateway.networking.k8s.io_$${k#*:}.yaml" --api-version v1 --derive Default --derive PartialEq --smart-derive-elision \
	    | sed "s|$$crds/|\$$(tests/traefik/build.sh --crds)/|" > "src/gateway/$${k%%:*}.rs"; \
	done

# laneway and the built-in EndpointSlice controller side by side on a local API server (1k and
# 10k pods; BENCH_50K=1 adds 50k, other knobs in benches/cluster.rs); rewrites its section of
# BENCHMARKS.md and BENCHMARKS-cluster.png.
.PHONY: bench-cluster
bench-cluster:
	cargo bench --locked --bench cluster
