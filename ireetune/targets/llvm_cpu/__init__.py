"""The llvm-cpu target: facts, hand-written z3 search space, ordering heuristic."""
