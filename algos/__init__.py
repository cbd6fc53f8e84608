"""RL algorithms (RFT, GRPO, DAPO) sharing one core and one learner."""
