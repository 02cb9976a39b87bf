"""Stand-in for verl-recipe's fapo/reward_fn_reasoning.py (the file the fapo scripts name): the same function
names and signatures; `print-config --validate` checks that the file exists and does not import it."""


async def compute_score_baseline(solution_str, ground_truth, **kwargs):
    return 1.0 if solution_str.strip() == str(ground_truth).strip() else -1.0


async def compute_score_fapo(data_source, solution_str, ground_truth, extra_info, reward_router_address,
                             reward_model_tokenizer):
    return await compute_score_baseline(solution_str, ground_truth)
