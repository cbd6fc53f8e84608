"""The training loops and their run state: the RL loop of GRPO and DAPO, metrics, checkpoints
and interrupts, validation, the warm start and RFT's format probe."""
