# VoiceCat build, test and demo entry points. `make test` and `make demo` install
# what a fresh Debian machine is missing (scripts/deps.sh) before they build.
SWIFT   ?= swift
SHELL   := /bin/bash
.SHELLFLAGS := -eo pipefail -c
export PATH := /opt/swift/usr/bin:$(PATH)

FUZZ_SECONDS ?= 30

.PHONY: all deps build test swift-test fuzz-replay fuzz fuzz-build server clean

all: build

deps:
	@bash scripts/deps.sh

build: deps
	$(SWIFT) build

server: deps
	$(SWIFT) build -c release --product voicecat-server

## test: the whole suite CI runs (.ci/run calls this).
test: deps swift-test fuzz-replay fuzz
	@echo "make test: all stages passed"

swift-test:
	$(SWIFT) build --build-tests
	$(SWIFT) test --skip-build

## fuzz-replay: every corpus input through the parsers, in a normal build.
fuzz-replay:
	$(SWIFT) build --product voicecat-fuzz
	.build/debug/voicecat-fuzz Tests/fuzz-corpus/*

## fuzz: libFuzzer over the network parsers for FUZZ_SECONDS (lld: gold cannot link it).
fuzz-build:
	$(SWIFT) build -c release --product voicecat-fuzz --build-path .build/fuzz --toolset tools/fuzz-toolset.json 2>&1 | { grep -v "Cannot export local symbol" || true; }

fuzz: fuzz-build
	mkdir -p .build/fuzz-corpus
	.build/fuzz/release/voicecat-fuzz -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 .build/fuzz-corpus Tests/fuzz-corpus 2>&1 | tail -12

clean:
	rm -rf .build
