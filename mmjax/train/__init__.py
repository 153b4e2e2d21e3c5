"""Training: sharding rules, optimisers, state, Orbax checkpoints, tasks and the loop (`train_and_evaluate`)."""
