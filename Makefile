# flower.py -- make test runs everything CI runs (the real-SDK tier skips itself without the SDK).
PYTHON ?= python3

.PHONY: test quick core e2e bench chaos chaos-trusting chaos-delegate fixtures lint

test:
	$(PYTHON) -m tests.run

# the pure tier (logic and the fake SDK: no real CLI, no PostgreSQL server): under a minute
quick:
	$(PYTHON) -m tests.run --quick

core:
	$(PYTHON) -m tests.run tests.test_util tests.test_resilience tests.test_transcript tests.test_notes \
		tests.test_store tests.test_handoff tests.test_runtime tests.test_workflow tests.test_cli \
		tests.test_redaction tests.test_redaction_rules tests.test_texts tests.test_prune_economy tests.test_driver tests.test_salvage tests.test_cli_contract

e2e:
	$(PYTHON) -m tests.run tests.test_e2e

bench:
	$(PYTHON) bench/coldstart.py
	$(PYTHON) bench/store.py
	$(PYTHON) bench/prune.py
	$(PYTHON) bench/carry.py
	$(PYTHON) bench/manifest.py
	$(PYTHON) bench/wake.py
	$(PYTHON) bench/postgres.py
	$(PYTHON) bench/redact.py
	$(PYTHON) bench/report.py
	$(PYTHON) bench/snapshot.py

chaos:
	$(PYTHON) bench/chaos.py --seeds 10

# a model that trusts its transcript (it redoes what its history does not show done); 10 seeds of a 40-step job, local then PostgreSQL (root: tmpfs disks)
TRUSTING = --trusting --seeds 10 --turns 40 --faults 12 --handoffs 2 --outage 3 8 --dblock 3 8 --timeout 600
chaos-trusting:
	$(PYTHON) bench/chaos.py $(TRUSTING)
	$(PYTHON) bench/chaos.py $(TRUSTING) --state pg

# the same job done by a coordinator and its workers (go's default), kills waiting for a worker's phase; local then PostgreSQL
chaos-delegate:
	$(PYTHON) bench/chaos.py $(TRUSTING) --delegate
	$(PYTHON) bench/chaos.py $(TRUSTING) --delegate --state pg

fixtures:
	$(PYTHON) -m tests.capture_fixtures

lint:
	$(PYTHON) -m py_compile flower.py
