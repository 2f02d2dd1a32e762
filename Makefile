# hetgen's two entry points: `make demo` (the main job) and `make test` (the whole suite).
# Each installs what it needs, idempotently. Builds are cached outside the checkout so repeated
# runs (and CI on a fresh clone) stay fast.

CARGO_TARGET_DIR ?= $(HOME)/.cache/hetgen/target
export CARGO_TARGET_DIR
HETGEN := $(CARGO_TARGET_DIR)/debug/hetgen
DEMO_DIR := build/demo

.PHONY: test demo build schema fmt

build:
	cargo build --locked -p hetgen

## The whole test suite: formatting, lints, Rust tests (deploy against moto's SageMaker
## emulator, started by the tests), and the SageMaker API-model checks.
test: build
	cargo fmt --all -- --check
	cargo clippy --locked --workspace --all-targets -- -D warnings
	VENV="$$(scripts/python-env.sh)" && \
	  HETGEN_MOTO_SERVER="$$VENV/bin/moto_server" cargo test --locked --workspace && \
	  HETGEN_BIN="$(HETGEN)" "$$VENV/bin/python" -m pytest tests/botocore -q -p no:cacheprovider

## The main job: scaffold a project, validate it and render the whole SageMaker job.
demo: build
	rm -rf $(DEMO_DIR) && mkdir -p build
	cd build && $(HETGEN) new demo
	cd $(DEMO_DIR) && $(HETGEN) validate
	cd $(DEMO_DIR) && $(HETGEN) render --out build
	cd $(DEMO_DIR) && $(HETGEN) render --out build --check
	$(HETGEN) render examples/mnist-hetero.toml --out $(DEMO_DIR)/build
	@echo
	@echo "The CreateTrainingJob request of the heterogeneous MNIST example:"
	@cat $(DEMO_DIR)/build/mnist-hetero/create-training-job.json

## Regenerate the committed JSON Schema after changing the raw spec types.
schema:
	HETGEN_UPDATE_SCHEMA=1 cargo test --locked -p hetgen-spec --test spec committed_schema_is_current

fmt:
	cargo fmt --all
