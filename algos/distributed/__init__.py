"""Scale-out: FSDP2 + (dp, cp) mesh (fsdp), ring context parallelism (context_parallel),
DistributedLearner (learner), long-context settings (long_context), Ray rollouts (ray_rollout).

Importing this package imports nothing heavy; import the submodules.
"""
