.PHONY: setup demo test test-all
setup:
	bash scripts/setup.sh
demo:
	bash scripts/demo.sh
test:
	bash scripts/test.sh
test-all:
	bash scripts/test.sh -m "slow or not slow"
