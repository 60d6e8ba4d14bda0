"""A run's start-up: where it starts (a resume, --init-from a source, or random weights), what trains, what it
reads (trainer/start/steps.py's `start`, in that order), the checks before anything is written (preflight.py), the
sources --init-from reads (sources.py) and continued pretraining's defaults (defaults.py; its learning rate: rate.py)."""
