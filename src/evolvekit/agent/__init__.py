"""The agent side: parsing actions, the context manager, rollouts and evaluation."""
