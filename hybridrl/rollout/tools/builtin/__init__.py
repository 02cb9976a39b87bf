"""Built-in tools: `calculator` (a function tool) and `Gsm8kTool` (verl's `calc_gsm8k_reward`)."""
