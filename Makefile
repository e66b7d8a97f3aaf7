.PHONY: setup demo test test-e2e test-all
setup:
	bash scripts/setup.sh
demo:
	bash scripts/demo.sh
# unit and component tests (tests/unit) on two pytest-xdist workers: about a minute on a 2-core laptop CPU
test:
	bash scripts/test.sh -n 2
# end-to-end runs, multi-process runs and the SLURM cluster tier (what CI runs after `make test`)
test-e2e:
	bash scripts/test.sh tests/e2e -n 2 --dist loadscope
	bash scripts/test.sh tests/distributed tests/cluster
test-all:
	bash scripts/test.sh tests
