"""What turns the policy into learner samples: the task pool, episode runners (threads, Ray,
agent programs), one iteration's collection (synchronous or ahead with bounded staleness) and
scoring (rewards, failure masking, advantages, filters)."""
