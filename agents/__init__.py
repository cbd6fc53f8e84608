"""Agents: the ReAct loop, model backends, token-exact trajectories and batched rollouts."""
