"""BFCL v3 multi-turn over the offline ``bfcl-eval`` package."""
