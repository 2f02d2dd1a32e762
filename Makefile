# hetgen's two entry points: `make demo` (the main job) and `make test` (the whole suite).
# Each installs what it needs, idempotently. Builds are cached outside the checkout so repeated
# runs (and CI on a fresh clone) stay fast.

ifndef CARGO_TARGET_DIR
CARGO_TARGET_DIR := $(shell scripts/cache-dir.sh)/target
endif
export CARGO_TARGET_DIR
HETGEN := $(CARGO_TARGET_DIR)/debug/hetgen
# The wheel `make wheel` builds (its name is hetgen-render's `wheel_file_name()`).
WHEEL = $(wildcard $(CARGO_TARGET_DIR)/wheels/hetgen-*.whl)
# Two checkouts sharing that target folder reuse each other's artifacts when the sources match
# (cargo fingerprints workspace-relative paths), and with them the other's compile-time paths.
# So what must be this checkout is said at run time: the runtime source local jobs build their
# launcher against, and the workspace insta's snapshot tests read (the tests themselves read
# CARGO_MANIFEST_DIR at run time).
HETGEN_RUNTIME_PATH ?= $(CURDIR)/runtime/launch
INSTA_WORKSPACE_ROOT ?= $(CURDIR)
export HETGEN_RUNTIME_PATH INSTA_WORKSPACE_ROOT
DEMO_DIR := build/demo

# libtorch for the trainer crate comes from the PyTorch wheel in a venv (scripts/torch-env.sh);
# torch-sys finds it through that venv's python (LIBTORCH_USE_PYTORCH=1), and binaries carry an
# rpath to it, so nothing needs LD_LIBRARY_PATH.
WITH_TORCH = TORCH_VENV="$$(scripts/torch-env.sh)" && export LIBTORCH_USE_PYTORCH=1 PATH="$$TORCH_VENV/bin:$$PATH"

.PHONY: test python-test wheel demo build schema fmt bench-pipeline bench-stream soak

# Every target `cargo test --workspace` builds, in one invocation. Cargo resolves features per
# invocation and the tests' dev-dependencies add some (tokio's `test-util`, regex's defaults…):
# building the commands alone resolved other features, so the test build compiled tokio and
# everything above it (hyper, tonic, the AWS SDKs) a second time. Building the tests here costs
# `make demo` a few minutes once and saves `make test` the whole second dependency build.
build:
	scripts/system-deps.sh
	$(WITH_TORCH) && cargo build --locked --workspace --lib --bins --tests --examples

## The whole test suite: formatting, lints, Rust tests (deploy against moto's SageMaker
## emulator, jobs as local clusters of real processes), the SageMaker API-model checks, and the
## rendered SDK files run through SageMaker Python SDK 3.x and 2.x against moto.
test: build wheel
	cargo fmt --all -- --check
	$(WITH_TORCH) && cargo clippy --locked --workspace --all-targets -- -D warnings
	$(WITH_TORCH) && VENV="$$(scripts/python-env.sh)" && \
	  SDK3="$$(scripts/sdk-env.sh 3)" && SDK2="$$(scripts/sdk-env.sh 2)" && \
	  HETGEN_MOTO_SERVER="$$VENV/bin/moto_server" HETGEN_WHEEL="$(WHEEL)" \
	  cargo test --locked --workspace && \
	  HETGEN_BIN="$(HETGEN)" HETGEN_MOTO_SERVER="$$VENV/bin/moto_server" HETGEN_WHEEL="$(WHEEL)" \
	  HETGEN_SDK3_PYTHON="$$SDK3/bin/python" HETGEN_SDK2_PYTHON="$$SDK2/bin/python" \
	  "$$VENV/bin/python" -m pytest tests/botocore tests/sdk -q -p no:cacheprovider
	$(PYTHON_TESTS)

## The Python package (python/): build its manylinux wheel with maturin and install it into the
## torch venv (real torch, as a user's image has), where `hetgen deploy --local` finds it for
## script-mode jobs; `hetgen deploy` and `hetgen bundle` ship the same file to AWS's image.
wheel:
	$(WITH_TORCH) && scripts/wheel.sh "$$TORCH_VENV"

## The package's tests, against real data-server processes and real `hetgen deploy --local` jobs,
## and the wheel itself in a fresh venv: its `hetgen` command alone, run locally and deployed to
## moto's S3 and SageMaker.
PYTHON_TESTS = $(WITH_TORCH) && VENV="$$(scripts/python-env.sh)" && HETGEN_MOTO_SERVER="$$VENV/bin/moto_server" \
	  HETGEN_BIN="$(HETGEN)" HETGEN_DATA_SERVER="$(CARGO_TARGET_DIR)/debug/hetgen-data-server" \
	  HETGEN_LAUNCHER="$(CARGO_TARGET_DIR)/debug/hetgen-launcher" \
	  HETGEN_WHEEL="$(WHEEL)" "$$TORCH_VENV/bin/python" -m pytest python/tests -q -p no:cacheprovider

python-test: build wheel
	$(PYTHON_TESTS)

## The main job: scaffold the tiny local example, render it, and run it as a simulated
## heterogeneous cluster (two data hosts, one trainer host) on this machine.
demo: build
	rm -rf $(DEMO_DIR) && mkdir -p build
	cd build && $(HETGEN) new demo
	cd $(DEMO_DIR) && $(HETGEN) render
	$(WITH_TORCH) && cd $(DEMO_DIR) && $(HETGEN) deploy --local

## Benchmarks (run on purpose; results go to BENCHMARKS.md by hand).
bench-pipeline:
	bench/pipeline.sh

bench-stream:
	scripts/system-deps.sh
	cargo run --locked --release -p hetgen-data --example stream_bench

## Soak test of the data service (about 10 minutes): trainers and data servers as processes,
## servers killed at random; lost or duplicated samples must be 0. Not part of `make test`.
soak:
	scripts/system-deps.sh
	cargo build --locked --release -p hetgen-data --bins --examples
	$(CARGO_TARGET_DIR)/release/examples/soak --minutes 10

## Regenerate the committed JSON Schema after changing the raw spec types.
schema:
	HETGEN_UPDATE_SCHEMA=1 cargo test --locked -p hetgen-spec --test spec committed_schema_is_current

fmt:
	cargo fmt --all
