"""Gymnasium environments for software-engineering episodes."""
