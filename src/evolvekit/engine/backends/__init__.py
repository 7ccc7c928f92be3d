"""The built-in rollout engines, one module each; ``engine/registry.py`` registers every ``BACKEND`` here."""
