"""The local demo: a JS-rendered shop and the orchestration behind `make demo`."""
