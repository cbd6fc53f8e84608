"""RL algorithms (RFT, GRPO, DAPO) sharing one set of objectives and one learner."""
