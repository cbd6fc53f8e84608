"""The learner: samples and their packing, token log-probs, attention over packed and tree rows,
precision, checkpoints, and the one optimiser step shared by RFT, GRPO and DAPO."""
