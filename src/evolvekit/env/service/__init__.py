"""The environment service: many isolated environment instances behind a Gym-like HTTP API."""
